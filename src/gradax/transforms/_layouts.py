"""Changing the layout the inner transformation sees: ``flatten``."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .._base import (
    GradientTransformation,
    GradientTransformationExtraArgs,
    check_transformation,
    with_extra_args_support,
)
from .._fused_step import FlatStep, FusedGradientTransformation, Step, flat_step_of
from .._update import reference_step


def _ravel(tree):
    """``tree`` as one 1-D array (in the promoted dtype of its leaves) and the function that undoes it."""
    leaves, treedef = jax.tree.flatten(tree)
    shapes = [np.shape(x) for x in leaves]
    dtypes = [jnp.result_type(x) for x in leaves]
    sizes = [int(np.prod(s)) for s in shapes]
    dtype = jnp.result_type(*dtypes) if dtypes else jnp.float32
    if any(isinstance(x, jax.ShapeDtypeStruct) for x in leaves):
        flat = jax.ShapeDtypeStruct((sum(sizes),), dtype)
    else:
        flat = jnp.concatenate([jnp.ravel(x).astype(dtype) for x in leaves]) if leaves else jnp.zeros([0], dtype)

    def unravel(vector):
        parts = jnp.split(vector, np.cumsum(sizes)[:-1]) if leaves else []
        return treedef.unflatten([p.reshape(s).astype(d) for p, s, d in zip(parts, shapes, dtypes)])

    return flat, unravel


def flatten(inner: GradientTransformation) -> GradientTransformationExtraArgs:
    r"""Runs ``inner`` on one flat vector holding all the parameters, then restores the tree.

    Per-leaf state (moments) becomes one vector, which can speed up trees with many small leaves. Element-wise
    transformations give the same numbers; transformations that look at array shapes (factored moments, per-layer
    norms) see a single vector instead.

    ``flatten(gradax.fused.adamw(...))`` and ``flatten(gradax.fused.lion(...))`` are
    :class:`gradax.fused.FusedGradientTransformation` whose ``step`` (``inner.flat_step``) updates the leaves in place
    with the moments as slices of the flat vectors, without concatenating params or grads: on a tree of thousands of
    small leaves,
    a jitted step then takes and returns far fewer arrays (one flat vector per moment instead of one per leaf),
    which is what such a step's time and compile time are made of. So do
    ``flatten(inject_hyperparams(gradax.fused.adamw)(...))`` and the same for lion.

    Args:
      inner: the transformation to run on the flat vector.

    Returns:
      A :class:`GradientTransformationExtraArgs` whose state is ``inner``'s state for the flat vector.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> tx = gradax.flatten(gradax.sgd(0.1))
      >>> params = {"w": jnp.ones((2, 2)), "b": jnp.ones(2)}
      >>> tx.update(params, tx.init(params))[0]["w"]
      Array([[-0.1, -0.1],
             [-0.1, -0.1]], dtype=float32)
    """
    check_transformation("flatten", "inner", inner)
    # a fused step for this layout (gradax._fused_step): flat_step(params, state, grads, flat_reference), where
    # flat_reference(tx) is flatten(tx)'s update + apply_updates (the fallback, and what vmap and autodiff follow)
    flat_step = flat_step_of(inner)

    def init(params):
        return inner.init(_ravel(params)[0])

    update = _flat_update(inner)
    if flat_step is None:
        return GradientTransformationExtraArgs(init, update)

    return FusedGradientTransformation(init, update, _flat_fused_step(flat_step))


def _flat_fused_step(flat_step: FlatStep) -> Step:
    """``flatten(inner)``'s step from ``inner.flat_step``: the fallback is flatten's update + apply_updates."""

    def flat_reference(tx: GradientTransformation) -> Step:
        return reference_step(_flat_update(tx))

    def step(params, state, grads):
        return flat_step(params, state, grads, flat_reference)

    return step


def _flat_update(inner: GradientTransformation):
    """``flatten(inner)``'s ``update``: ``inner.update`` on the flat vectors, its updates restored to the tree."""
    inner = with_extra_args_support(inner)

    def update(updates, state, params=None, **extra_args):
        flat_updates, unravel = _ravel(updates)
        flat_params = None if params is None else _ravel(params)[0]
        new_flat, state = inner.update(flat_updates, state, flat_params, **extra_args)
        return unravel(new_flat), state

    return update
