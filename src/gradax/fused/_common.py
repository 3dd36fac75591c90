"""What every fused optimizer shares: the skeleton of its ``step`` (:func:`fused_transformation`; the class and the
capability are ``gradax._fused_step``'s), when a kernel applies, the wrapper that gives a kernel step the vmap and
autodiff of its reference (``update`` followed by ``apply_updates``), and the decay and learning rate as kernel
scalars."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .. import _kernels
from .._base import GradientTransformation, Params, Updates, with_extra_args_support
from .._fused_step import FusedGradientTransformation, Step
from .._fused_step import fused_factory as fused_factory
from .._kernels import kernel_applies as kernel_applies
from .._kernels import one_device_view as one_device_view
from .._kernels import with_reference as with_reference
from .._update import reference_step as reference_step
from ..transforms._adding import add_decayed_weights, skips_decay
from ..transforms._masking import MaskedState, broadcast_prefix, resolve_mask
from ..transforms._scaling import scale_by_learning_rate

KernelFor = Callable[[Params, Any, Updates], Step | None]


def fused_transformation(
    tx: GradientTransformation, kernel_for: KernelFor, flat_kernel_for: KernelFor | None = None
) -> FusedGradientTransformation:
    """The skeleton of every fused optimizer: ``tx``'s ``init`` and ``update``, and a ``step`` that runs
    ``kernel_for(params, state, grads)`` (a kernel step for these arguments, or None when no kernel takes them) where
    a CPU kernel can run, with the ``vmap`` and autodiff of ``update`` + ``apply_updates`` (:func:`with_reference`),
    and that is ``update`` + ``apply_updates`` otherwise. ``flat_kernel_for`` likewise gives the kernel step of
    ``gradax.flatten(this)`` (its state: ``tx``'s for one flat vector), whose reference is flatten's own."""
    tx = with_extra_args_support(tx)
    reference = reference_step(tx.update)

    def step(params: Params, state: Any, grads: Updates) -> tuple[Params, Any]:
        kernel = kernel_for(params, state, grads) if kernel_applies() else None
        return (reference if kernel is None else with_reference(kernel, reference))(params, state, grads)

    if flat_kernel_for is None:
        return FusedGradientTransformation(tx.init, tx.update, step)

    def flat_step(params: Params, state: Any, grads: Updates, flat_reference: Callable) -> tuple[Params, Any]:
        flat = flat_reference(tx)
        kernel = flat_kernel_for(params, state, grads) if kernel_applies() else None
        return (flat if kernel is None else with_reference(kernel, flat))(params, state, grads)

    return FusedGradientTransformation(tx.init, tx.update, step, flat_step)


def leaves_like(params: Params, *trees: Any) -> tuple[list, Any, list[list]]:
    """``(param leaves, treedef, [leaves of each tree])``, each tree flattened up to the params' structure (a tree
    that does not match it raises ``ValueError`` or ``TypeError``)."""
    p_leaves, treedef = jax.tree.flatten(params)
    return p_leaves, treedef, [treedef.flatten_up_to(t) for t in trees]


def matching_leaves(params: Params, *trees: Any) -> tuple[list, Any, list[list]] | None:
    """:func:`leaves_like`, or None when some tree does not match the params (the step is then ``update``, which
    raises its usual, explicit error)."""
    try:
        return leaves_like(params, *trees)
    except (ValueError, TypeError):
        return None


def kernel_status() -> _kernels.KernelStatus:
    """Whether the fused CPU kernels are built and registered in this process (``.available``), and why not
    (``.reason``); builds them on first call.

    Example:
      >>> import gradax
      >>> status = gradax.fused.kernel_status()
      >>> isinstance(status.available, bool)
      True
    """
    return _kernels.load()


class DecayAndRate:
    """The end of adamw's and lion's chains, ``add_decayed_weights(weight_decay, mask)`` then
    ``scale_by_learning_rate(learning_rate)``, as the scalars a kernel takes.

    Both transformations run on float32 scalar probes, so schedules and counters advance by their own code, exactly as
    in ``update``: ``scale_by_learning_rate`` turns 1 into :math:`-\\eta_t`, ``add_decayed_weights`` turns 0 into
    :math:`\\lambda_t`. The mask becomes one 0/1 flag per leaf.
    """

    def __init__(self, api: str, learning_rate: Any, weight_decay: Any, mask: Any):
        self.api, self.mask = api, mask
        self.skips = skips_decay(weight_decay)
        self.lr_tx = scale_by_learning_rate(learning_rate)
        self.decay_tx = add_decayed_weights(weight_decay)

    def _decay_inner(self, decay_state: Any) -> Any:
        return decay_state if self.mask is None else decay_state.inner_state

    def scalar(self, decay_state: Any, lr_state: Any) -> bool:
        """Whether the learning rate and the decay rate of this step are scalars (what the kernels take)."""
        one = jnp.ones([], jnp.float32)
        inner = self._decay_inner(decay_state)
        probes = [jax.eval_shape(lambda: self.lr_tx.update(one, lr_state)[0])]
        probes.append(jax.eval_shape(lambda: self.decay_tx.update(one, inner, one)[0]))
        return all(x.shape == () for x in probes)

    def at(self, decay_state: Any, lr_state: Any, params: Any, treedef: Any) -> tuple:
        """``(neg_lr, rate, decayed, new_decay_state, new_lr_state)``: :math:`-\\eta_t`, :math:`\\lambda_t` (float32
        scalars), ``decayed`` a float32 NumPy 0/1 flag per leaf of ``treedef`` (0 where the mask leaves a leaf alone,
        and everywhere when ``add_decayed_weights`` skips a weight decay of the number 0), and the next states."""
        one, zero = jnp.ones([], jnp.float32), jnp.zeros([], jnp.float32)
        neg_lr, new_lr = self.lr_tx.update(one, lr_state)
        rate, new_decay = self.decay_tx.update(zero, self._decay_inner(decay_state), one)
        decayed = np.full(treedef.num_leaves, 0.0 if self.skips else 1.0, np.float32)
        if self.mask is not None:
            resolved = broadcast_prefix(resolve_mask(self.api, self.mask, params), params)
            decayed = decayed * np.asarray(treedef.flatten_up_to(resolved), np.float32)
            new_decay = MaskedState(inner_state=new_decay)
        return neg_lr, rate, decayed, new_decay, new_lr


def flat_dtype(params: Any, grads: Any, flat_state: list) -> Any:
    """For the step of ``gradax.flatten(fused optimizer)``: the one dtype of the params and grads when they are
    leaves of the same shapes (and at least one) and each array of ``flat_state`` is a vector of their total size;
    None otherwise (grads that do not match the params included: ``update`` then raises its usual error)."""
    p_leaves, treedef = jax.tree.flatten(params)
    try:
        g_leaves = treedef.flatten_up_to(grads)
    except (ValueError, TypeError):
        return None
    dtypes = {getattr(x, "dtype", None) for x in p_leaves + g_leaves}
    if not p_leaves or len(dtypes) != 1:
        return None
    if not all(np.shape(p) == np.shape(g) for p, g in zip(p_leaves, g_leaves, strict=True)):
        return None
    total = sum(int(np.prod(np.shape(p))) for p in p_leaves)
    if not all(isinstance(x, jax.Array | jax.core.Tracer) and x.shape == (total,) for x in flat_state):
        return None
    return dtypes.pop()


def take(items: list, index: list[int]) -> list:
    """``items`` at the leaf indices ``index``."""
    return [items[i] for i in index]


def put(items: list, index: list[int], values: list) -> None:
    """``items[i] = value`` for each leaf index ``i`` of ``index`` and its value, in place."""
    for i, value in zip(index, values, strict=True):
        items[i] = value
