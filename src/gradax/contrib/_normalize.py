"""Normalization of the whole update tree to unit global L2 norm."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .._base import EmptyState, GradientTransformation, init_empty_state
from .._numerics import compute_dtype, global_norm

NormalizeState = EmptyState
"""The (empty) state of :func:`normalize`."""


def normalize() -> GradientTransformation:
    r"""Divides the updates by their global L2 norm.

    .. math::
      u_t = \frac{g_t}{\lVert g_t \rVert_2}, \qquad \lVert g_t \rVert_2 = \sqrt{\textstyle\sum_i |g_{t,i}|^2}

    the norm taken over every leaf of the tree together. A tree of zeros stays zeros (Optax 0.2.8 returns NaN
    there; see ``docs/differences.md``).

    Returns:
      A stateless :class:`GradientTransformation` (state :class:`NormalizeState`, i.e. ``EmptyState()``).

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> tx = gradax.contrib.normalize()
      >>> tx.update({"a": jnp.array([3.0]), "b": jnp.array([4.0])}, tx.init(None))[0]["a"]
      Array([0.6], dtype=float32)

    References:
      Normalized gradient descent: Nesterov, 1984, "Minimization methods for nonsmooth convex and quasiconvex
      functions" (Matekon); Hazan, Levy and Shalev-Shwartz, 2015, "Beyond Convexity: Stochastic Quasi-Convex
      Optimization" (NeurIPS).
    """

    def update(updates, state, params=None):
        del params
        norm = global_norm(updates)
        safe = jnp.where(norm > 0, norm, 1.0)

        def leaf(g):
            return (g.astype(compute_dtype(g.dtype)) / safe.astype(compute_dtype(g.dtype))).astype(g.dtype)

        return jax.tree.map(leaf, updates), state

    return GradientTransformation(init_empty_state, update)
