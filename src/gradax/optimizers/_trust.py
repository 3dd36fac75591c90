"""Layer-wise trust ratios: scale_by_trust_ratio and the optimizers built on it (fromage, lars)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from .._base import EmptyState, GradientTransformation
from .._checks import check_needs, check_non_negative
from .._hyperparams import as_value
from .._numerics import compute_dtype, safe_norm

ScaleByTrustRatioState = EmptyState


def trust_ratio_leaf(update: jax.Array, param: jax.Array, min_norm, trust_coefficient, eps) -> jax.Array:
    """``update`` scaled by ``trust_coefficient * ||param|| / (||update|| + eps)`` (1 where a norm is zero)."""
    dtype = compute_dtype(update.dtype)
    u = update.astype(dtype)
    p = param.astype(compute_dtype(param.dtype))
    param_norm = safe_norm(p, min_norm)
    update_norm = safe_norm(u, min_norm)
    ratio = trust_coefficient * param_norm / (update_norm + eps)
    degenerate = jnp.logical_or(param_norm == 0.0, update_norm == 0.0)
    ratio = jnp.where(degenerate, jnp.ones_like(ratio), ratio)
    return (u * ratio).astype(update.dtype)


def scale_by_trust_ratio(
    min_norm: ArrayLike = 0.0,
    trust_coefficient: ArrayLike = 1.0,
    eps: ArrayLike = 0.0,
) -> GradientTransformation:
    r"""Scales each array of updates by its trust ratio, the ratio of the parameter norm to the update norm.

    For every array (layer) :math:`u` with parameters :math:`\theta`:

    .. math::
      u \leftarrow u \cdot \frac{c\, \max(\|\theta\|, m)}{\max(\|u\|, m) + \epsilon},

    and :math:`u` is left unchanged when either norm is zero (a layer that would otherwise never move).

    Args:
      min_norm: :math:`m \ge 0`, the smallest norm used (0 disables the clipping of norms).
      trust_coefficient: :math:`c`, multiplies the ratio.
      eps: :math:`\epsilon \ge 0`, added to the update norm.

    Returns:
      A :class:`GradientTransformation` with an empty state; ``update`` needs ``params``.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> tx = gradax.scale_by_trust_ratio()
      >>> params = jnp.array([3.0, 4.0])
      >>> tx.update(jnp.array([0.0, 0.5]), tx.init(params), params)[0]
      Array([0., 5.], dtype=float32)

    References:
      You et al., 2017, "Large Batch Training of Convolutional Networks" (LARS);
      You et al., 2020, "Large Batch Optimization for Deep Learning: Training BERT in 76 minutes" (LAMB).
    """
    check_non_negative("scale_by_trust_ratio", "min_norm", min_norm)
    check_non_negative("scale_by_trust_ratio", "eps", eps)

    def init(params):
        del params
        return ScaleByTrustRatioState()

    def update(updates, state, params=None):
        check_needs("scale_by_trust_ratio", "params", params)
        m, c, e = as_value(min_norm), as_value(trust_coefficient), as_value(eps)
        new_updates = jax.tree.map(lambda u, p: trust_ratio_leaf(u, p, m, c, e), updates, params)
        return new_updates, state

    return GradientTransformation(init, update)
