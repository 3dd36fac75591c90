"""Constraining updates: keeping parameters non-negative, replacing NaNs by zeros."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .._base import EmptyState, GradientTransformation
from .._checks import check_needs
from .._maps import map_n

NonNegativeParamsState = EmptyState


class ZeroNansState(NamedTuple):
    """State of :func:`zero_nans`."""

    found_nan: Any  # like params, each leaf a bool scalar: whether that leaf's last update held a NaN


def keep_params_nonnegative() -> GradientTransformation:
    r"""Changes the updates so that the parameters stay non-negative after :func:`apply_updates`.

    .. math::
      u \leftarrow \begin{cases} -\theta & \text{if } \theta + u < 0 \\ u & \text{otherwise.} \end{cases}

    Put it last in a chain. Parameters that are already negative are moved to 0.

    Returns:
      A :class:`GradientTransformation` with state :class:`NonNegativeParamsState` (empty).

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> tx = gradax.keep_params_nonnegative()
      >>> params = jnp.array([1.0, 2.0])
      >>> tx.update(jnp.array([-3.0, -1.0]), tx.init(params), params)[0]
      Array([-1., -1.], dtype=float32)
    """

    def init(params):
        del params
        return NonNegativeParamsState()

    def update(updates, state, params=None):
        check_needs("keep_params_nonnegative", "params", params)

        def leaf(u, p):
            return jnp.where(p + u < 0, -p, u).astype(u.dtype)

        return jax.tree.map(leaf, updates, params), state

    return GradientTransformation(init, update)


def zero_nans() -> GradientTransformation:
    r"""Replaces NaN entries of the updates by zeros and records, per leaf, whether any was found.

    .. math::
      u_i \leftarrow \begin{cases} 0 & \text{if } u_i \text{ is NaN} \\ u_i & \text{otherwise.} \end{cases}

    Returns:
      A :class:`GradientTransformation` with state :class:`ZeroNansState`, whose ``found_nan`` holds one boolean
      scalar per leaf (for the last update).

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> tx = gradax.zero_nans()
      >>> u, state = tx.update(jnp.array([1.0, jnp.nan]), tx.init(jnp.zeros(2)))
      >>> u, state.found_nan
      (Array([1., 0.], dtype=float32), Array(True, dtype=bool))
    """

    def init(params):
        return ZeroNansState(found_nan=jax.tree.map(lambda p: jnp.zeros([], jnp.bool_), params))

    def update(updates, state, params=None):
        del params, state

        def leaf(u):
            nan = jnp.isnan(u)
            return jnp.where(nan, jnp.zeros([], u.dtype), u), jnp.any(nan)

        new_updates, found = map_n(2, leaf, updates)
        return new_updates, ZeroNansState(found_nan=found)

    return GradientTransformation(init, update)
