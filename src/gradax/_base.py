"""The contract every gradient transformation keeps.

A gradient transformation is a pair of pure functions::

    init(params) -> state
    update(updates, state, params=None, **extra_args) -> (updates, state)

Both are functions of arrays only: they are safe under ``jit``, ``vmap``, ``grad``, ``scan`` and ``lax.cond``; they
keep no Python state and make no host syncs. ``update`` never changes the state's tree structure, shapes or dtypes,
and returns updates with the structure and dtypes of the incoming ones. A transformation whose ``update`` accepts
extra keyword arguments (a loss value, a loss function, ...) is a :class:`GradientTransformationExtraArgs`; every
transformation of this library ignores extra keyword arguments it does not use.

Python numbers as leaves: every :class:`GradientTransformation` (the library's and the user's own) accepts params
and updates whose leaves include Python ``int``/``float``/``complex`` values, as Optax does. Its ``init`` and
``update`` see them as JAX arrays (:func:`scalars_as_arrays`: Python ints of the updates become floats, so that
their updates are floats as in Optax), so per-leaf code can rely on ``.dtype`` and ``.astype``. Trees without
Python numbers are passed through untouched.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol, TypeAlias

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

Params: TypeAlias = Any
"""A pytree of arrays: the parameters of a model."""
Updates: TypeAlias = Params
"""A pytree of arrays with the structure of the parameters: gradients, or updates derived from them."""
OptState: TypeAlias = Any
"""A pytree of arrays: the state of a gradient transformation."""
Schedule: TypeAlias = Callable[[ArrayLike], ArrayLike]
"""A function of the step count (an int32 scalar) that returns a hyperparameter's value at that step."""
ScalarOrSchedule: TypeAlias = float | jax.Array | Schedule
"""A hyperparameter: a number, an array, or a :data:`Schedule`."""
MaskOrFn: TypeAlias = Any | Callable[[Params], Any] | None
"""A mask: a pytree of booleans shaped like the parameters (or a prefix of them), or a function of the parameters
that returns one."""


class StatefulSchedule(Protocol):
    """A schedule that keeps a state: ``init(params) -> state``, ``update(state, **extra_args) -> state`` and
    ``__call__(state, **extra_args) -> value``."""

    def init(self, params: Params | None) -> Any: ...

    def update(self, state: Any, **extra_args: Any) -> Any: ...

    def __call__(self, state: Any, **extra_args: Any) -> ArrayLike: ...


class TransformInitFn(Protocol):
    """``init(params) -> state``: builds the state of a transformation from the parameters (or their shapes)."""

    def __call__(self, params: Params) -> OptState: ...


class TransformUpdateFn(Protocol):
    """``update(updates, state, params=None) -> (updates, state)``; ``updates`` and ``state`` are passed by position
    (an implementation may name them as it likes, e.g. ``per_elt_updates``)."""

    def __call__(
        self, updates: Updates, state: OptState, /, params: Params | None = None
    ) -> tuple[Updates, OptState]: ...


class TransformUpdateExtraArgsFn(Protocol):
    """``update(updates, state, params=None, **extra_args) -> (updates, state)``; ``updates`` and ``state`` are passed
    by position."""

    def __call__(
        self, updates: Updates, state: OptState, /, params: Params | None = None, **extra_args: Any
    ) -> tuple[Updates, OptState]: ...


_PYTHON_NUMBERS = (int, float, complex)  # exact types: bool and NumPy scalars are not Python numbers here


def scalars_as_arrays(tree: Any, ints_as_floats: bool = False) -> Any:
    """``tree`` with its Python ``int``/``float``/``complex`` leaves as JAX arrays (``tree`` itself when it has none).

    With ``ints_as_floats``, Python ints become float arrays (for gradients: Optax returns float updates for them).

    Example:
      >>> import gradax
      >>> gradax._base.scalars_as_arrays({"a": 1.5, "b": 2}, ints_as_floats=True)["b"]
      Array(2., dtype=float32, weak_type=True)
    """
    if not any(type(x) in _PYTHON_NUMBERS for x in jax.tree.leaves(tree)):
        return tree

    def leaf(x):
        if type(x) is int and ints_as_floats:
            return jnp.asarray(float(x))
        return jnp.asarray(x) if type(x) in _PYTHON_NUMBERS else x

    return jax.tree.map(leaf, tree)


def _numbers_ok_init(init: Callable) -> Callable:
    # not callable: a tree library rebuilding the pair with placeholders (eqx.partition's None), kept as given
    if not callable(init) or getattr(init, "__gradax_numbers_ok__", False):
        return init

    @functools.wraps(init)
    def wrapped(params):
        return init(scalars_as_arrays(params))

    wrapped.__gradax_numbers_ok__ = True  # pyrefly: ignore[missing-attribute] - a marker set on the function object
    return wrapped


def _numbers_ok_update(update: Callable) -> Callable:
    if not callable(update) or getattr(update, "__gradax_numbers_ok__", False):
        return update

    @functools.wraps(update)
    def wrapped(updates, state, *args, **extra_args):
        # params are passed on only the way they came (an update(updates, state, **kw) takes none positionally)
        updates = scalars_as_arrays(updates, ints_as_floats=True)
        if args:
            args = (scalars_as_arrays(args[0]), *args[1:])
        elif "params" in extra_args:
            extra_args["params"] = scalars_as_arrays(extra_args["params"])
        return update(updates, state, *args, **extra_args)

    wrapped.__gradax_numbers_ok__ = True  # pyrefly: ignore[missing-attribute] - a marker set on the function object
    return wrapped


class _InitUpdate(NamedTuple):
    init: TransformInitFn
    update: TransformUpdateFn


class GradientTransformation(_InitUpdate):
    """A pair of pure functions ``(init, update)`` that transform gradients into updates.

    Attributes:
      init: ``init(params) -> state``.
      update: ``update(updates, state, params=None) -> (updates, state)``.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> tx = gradax.scale(-0.1)
      >>> state = tx.init({"w": jnp.ones(2)})
      >>> updates, state = tx.update({"w": jnp.ones(2)}, state)
      >>> updates["w"]
      Array([-0.1, -0.1], dtype=float32)
    """

    __slots__ = ()

    def __new__(cls, init: TransformInitFn, update: TransformUpdateFn):
        # the one place Python numbers as leaves are made arrays (see the module docstring)
        return super().__new__(cls, _numbers_ok_init(init), _numbers_ok_update(update))


class GradientTransformationExtraArgs(GradientTransformation):
    """A :class:`GradientTransformation` whose ``update`` also takes keyword arguments (``value``, ``loss``, ...).

    ``update(updates, state, params=None, **extra_args) -> (updates, state)``; extra arguments a transformation does
    not use are ignored.
    """

    update: TransformUpdateExtraArgsFn  # pyrefly: ignore[bad-override] - narrows the field's type: takes extra args


class EmptyState(NamedTuple):
    """The state of a transformation that keeps none."""


def init_empty_state(params: Params) -> EmptyState:
    """An ``init`` function for stateless transformations: returns :class:`EmptyState` whatever ``params`` is."""
    del params
    return EmptyState()


def is_transformation(x: Any) -> bool:
    """Whether ``x`` can be used as a gradient transformation: it has callable ``init`` and ``update`` attributes.

    A :class:`GradientTransformation` has them, and so has any object that keeps the same two-function contract (an
    Optax transformation, a user's own class). The one test every wrapper and combinator applies to its inputs.
    """
    return callable(getattr(x, "init", None)) and callable(getattr(x, "update", None))


def check_transformation(
    api: str,
    arg: str,
    value: Any,
    fix: str = "Pass a transformation such as gradax.adam(1e-3)",
    constraint: str = "a GradientTransformation",
) -> None:
    """Raises ``TypeError("<api>(<arg>=...) must be <constraint>; got <type>. <fix>.")`` unless
    :func:`is_transformation` holds for ``value``."""
    if not is_transformation(value):
        raise TypeError(f"{api}({arg}=...) must be {constraint}; got {type(value).__name__}. {fix.rstrip('.')}.")


def with_extra_args_support(tx: GradientTransformation) -> GradientTransformationExtraArgs:
    """Wraps ``tx`` so that its ``update`` accepts (and ignores) extra keyword arguments.

    A :class:`GradientTransformationExtraArgs` is returned unchanged.
    """
    if isinstance(tx, GradientTransformationExtraArgs):
        return tx
    check_transformation(
        "with_extra_args_support",
        "tx",
        tx,
        "Build one with a gradax transformation or GradientTransformation(init, update)",
    )
    inner_update = tx.update

    def update(updates, state, params=None, **extra_args):
        del extra_args
        return inner_update(updates, state, params)

    return GradientTransformationExtraArgs(tx.init, update)


def identity() -> GradientTransformation:
    """The transformation that returns the updates unchanged and keeps no state.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> gradax.identity().update(jnp.ones(2), gradax.EmptyState())[0]
      Array([1., 1.], dtype=float32)
    """

    def update(updates, state, params=None):
        del params
        return updates, state

    return GradientTransformation(init_empty_state, update)


def set_to_zero() -> GradientTransformation:
    """The transformation that replaces every update by zeros (of the same shape and dtype); keeps no state.

    Used to freeze parameters, for example with :func:`gradax.partition`.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> gradax.set_to_zero().update(jnp.ones(2), gradax.EmptyState())[0]
      Array([0., 0.], dtype=float32)
    """

    def update(updates, state, params=None):
        del params
        return jax.tree.map(jnp.zeros_like, updates), state

    return GradientTransformation(init_empty_state, update)


def stateless(f: Callable[[Updates, Params | None], Updates]) -> GradientTransformation:
    """A transformation from a function ``f(updates, params) -> updates`` of whole trees; keeps no state.

    Example:
      >>> import gradax, jax, jax.numpy as jnp
      >>> tx = gradax.stateless(lambda g, p: jax.tree.map(lambda x: 2 * x, g))
      >>> tx.update(jnp.ones(2), tx.init(None))[0]
      Array([2., 2.], dtype=float32)
    """

    def update(updates, state, params=None):
        return f(updates, params), state

    return GradientTransformation(init_empty_state, update)


def stateless_with_tree_map(f: Callable[[jax.Array, jax.Array | None], jax.Array]) -> GradientTransformation:
    """A transformation from a per-array function ``f(update, param) -> update``, mapped over the tree.

    When ``update`` is called without params, ``f`` receives ``None`` as its second argument.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> tx = gradax.stateless_with_tree_map(lambda g, p: -g)
      >>> tx.update({"w": jnp.ones(2)}, tx.init(None))[0]["w"]
      Array([-1., -1.], dtype=float32)
    """

    def tree_f(updates, params):
        if params is None:
            return jax.tree.map(lambda g: f(g, None), updates)
        return jax.tree.map(f, updates, params)

    return stateless(tree_f)
