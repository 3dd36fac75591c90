"""The fused-step capability: a gradient transformation that can also update and apply its updates in one call.

A :class:`FusedGradientTransformation` is a :class:`gradax.GradientTransformationExtraArgs` (same ``init``, same
``update``, same state) with two more functions:

* ``step(params, state, grads) -> (new_params, new_state)``: ``update`` followed by ``apply_updates``, computed in one
  pass where a kernel can (``gradax.fused``), and as those two calls otherwise (:func:`gradax._update.reference_step`).
* ``flat_step(params, state, grads, flat_reference) -> (new_params, new_state)`` (optional): the step of
  ``gradax.flatten(this)``, whose state is this transformation's state for one flat vector. ``flat_reference(tx)``
  is ``flatten(tx)``'s own ``update`` + ``apply_updates`` as a :class:`Step`: the fallback, and what ``vmap`` and
  autodiff follow.

Wrappers keep the capability by name, the way ``with_extra_args_support`` keeps extra arguments:

* ``gradax.flatten(inner)`` returns a :class:`FusedGradientTransformation` whose ``step`` is
  ``inner.flat_step`` when :func:`flat_step_of` finds one.
* ``gradax.inject_hyperparams(factory)`` returns one when :func:`is_fused_factory` says that ``factory`` (declared
  with :func:`fused_factory`) builds one; its ``step`` rebuilds the inner optimizer with this step's
  hyperparameters and calls the inner ``step`` (and ``flat_step``) on the inner state.

Everything here is data and functions of arrays: ``step`` and ``flat_step`` are pure, like ``init`` and ``update``.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from ._base import (
    GradientTransformationExtraArgs,
    OptState,
    Params,
    TransformInitFn,
    TransformUpdateExtraArgsFn,
    Updates,
)
from ._update import reference_step


class Step(Protocol):
    """``step(params, state, grads) -> (new_params, new_state)``: ``update`` and ``apply_updates`` in one call (the
    arguments are passed by position)."""

    def __call__(self, params: Params, state: OptState, grads: Updates, /) -> tuple[Params, OptState]: ...


class FlatStep(Protocol):
    """The step of ``gradax.flatten(tx)``, given ``flat_reference(tx) -> Step`` (flatten's ``update`` +
    ``apply_updates`` for a transformation ``tx``, the fallback)."""

    def __call__(
        self,
        params: Params,
        state: OptState,
        grads: Updates,
        flat_reference: Callable[[GradientTransformationExtraArgs], Step],
        /,
    ) -> tuple[Params, OptState]: ...


class FusedGradientTransformation(GradientTransformationExtraArgs):
    """A :class:`gradax.GradientTransformationExtraArgs` with a fused ``step``.

    Attributes:
      init: ``init(params) -> state``.
      update: ``update(updates, state, params=None, **extra_args) -> (updates, state)``.
      step: ``step(params, state, grads) -> (new_params, new_state)``: ``update`` and ``apply_updates`` in one
        pass where a fused kernel applies, the two calls otherwise. Its arguments come in the order of its results,
        so that ``jax.jit(opt.step, donate_argnums=(0, 1))`` pairs each donated buffer with the result it becomes
        (JAX pairs donated arguments and results of one shape in order; pairing the params' buffers with the
        moments would make XLA copy every leaf).
      flat_step: the step of ``gradax.flatten(self)`` (see the module ``gradax._fused_step``), or None.
    """

    # init and update stay the only tuple fields (``init, update = tx`` unpacks as for every transformation);
    # step and flat_step live beside them in the instance's __dict__, set once here
    def __new__(
        cls,
        init: TransformInitFn,
        update: TransformUpdateExtraArgsFn,
        step: Step | None = None,
        flat_step: FlatStep | None = None,
    ):
        self = super().__new__(cls, init, update)
        self.__dict__["_step"] = step
        self.__dict__["_flat_step"] = flat_step
        return self

    def __getnewargs__(self):
        return (self.init, self.update, self.__dict__.get("_step"), self.flat_step)

    @property
    def step(self) -> Step:
        """``step(params, state, grads) -> (new_params, new_state)``. A copy made with ``_replace`` (whose
        ``update`` may differ) steps with its own ``update`` and ``apply_updates``."""
        fused = self.__dict__.get("_step")
        return fused if fused is not None else reference_step(self.update)

    @property
    def flat_step(self) -> FlatStep | None:
        """The step of ``gradax.flatten(self)``, or None (a copy made with ``_replace`` has none)."""
        return self.__dict__.get("_flat_step")


def flat_step_of(tx: Any) -> FlatStep | None:
    """``tx.flat_step`` when ``tx`` is a :class:`FusedGradientTransformation` that has one, else None."""
    return tx.flat_step if isinstance(tx, FusedGradientTransformation) else None


_FUSED_FACTORIES: weakref.WeakSet = weakref.WeakSet()

Factory = TypeVar("Factory", bound=Callable[..., FusedGradientTransformation])


def fused_factory(factory: Factory) -> Factory:
    """Declares that ``factory(...)`` returns a :class:`FusedGradientTransformation` (so that
    ``inject_hyperparams(factory)`` keeps its step); returns ``factory`` itself, so it decorates."""
    _FUSED_FACTORIES.add(factory)
    return factory


def is_fused_factory(factory: Any) -> bool:
    """Whether ``factory`` was declared with :func:`fused_factory`."""
    try:
        return factory in _FUSED_FACTORIES
    except TypeError:  # not weakly referenceable: not declared
        return False
