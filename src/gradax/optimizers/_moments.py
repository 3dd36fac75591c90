"""Moment estimates shared by the Adam family: exponential moving averages and their bias correction.

Each quantity is written once for a single array (the ``*_leaf`` helpers, with the step's scalars computed once,
used inside the optimizers' one pass over the tree); :func:`moment_transformation` holds the rest of an Adam-style
``scale_by_*``. The tree-level functions with Optax's signatures (``update_moment``, ``update_moment_per_elem_norm``,
``update_infinity_moment``, ``bias_correction``) live in :mod:`gradax.tree` and are the same objects as the
top-level ``gradax.update_moment`` etc.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from .._base import GradientTransformation
from .._maps import map_n
from .._numerics import abs_sq, compute_dtype, safe_int32_increment
from .._state import zeros_state_like

# --- one array ------------------------------------------------------------------------------------------------------


def ema_leaf(g: jax.Array, moment: jax.Array, decay: jax.Array, one_minus_decay: jax.Array) -> jax.Array:
    r"""One step of an exponential moving average: :math:`(1-\beta)\, g + \beta\, m`."""
    return one_minus_decay * g + decay * moment


def ema_sq_leaf(g: jax.Array, moment: jax.Array, decay: jax.Array, one_minus_decay: jax.Array) -> jax.Array:
    r"""One step of the moving average of the squared magnitude: :math:`(1-\beta)\, |g|^2 + \beta\, m`."""
    return one_minus_decay * abs_sq(g) + decay * moment


def debias_factor(decay: jax.Array, count: jax.Array) -> jax.Array:
    r"""The bias-correction denominator :math:`1 - \beta^t` (a scalar in the hyperparameters' dtype)."""
    return 1 - decay**count


# --- transformations ------------------------------------------------------------------------------------------------


def zero_moments(*dtypes: Any) -> Callable[[Any], tuple[Any, ...]]:
    """An ``init_moments`` for :func:`moment_transformation`: one tree of zeros shaped like the params per entry of
    ``dtypes`` (a requested moment dtype, or None for the state dtype rule)."""
    return lambda params: tuple(zeros_state_like(params, dtype) for dtype in dtypes)


def moment_transformation(
    state_cls: Callable[..., Any],
    init_moments: Callable[[Any], tuple[Any, ...]],
    make_leaf: Callable[[jax.Array], Callable[..., tuple[jax.Array, ...]]],
) -> GradientTransformation:
    """A transformation with state ``state_cls(count, *moments)``, updated in one pass over the tree.

    It holds what the Adam-family ``scale_by_*`` transformations share (the int32 step counter, the single pass over
    the tree and the dtype rules), so that each of them writes only its math:

    * ``init_moments(params)`` returns the initial moment trees, in the order of the state's fields after ``count``;
    * ``make_leaf(count_inc)`` is called once per step with the incremented count, computes that step's scalars
      (hyperparameter values, bias corrections) and returns ``leaf(g, *moments) -> (update, *new_moments)``, the
      math for one array; ``g`` arrives in its compute dtype (at least float32), the moments in their state dtypes.

    The update goes back to the dtype of the incoming update, and each new moment to the dtype of its state leaf.
    """

    def init(params):
        return state_cls(jnp.zeros([], jnp.int32), *init_moments(params))

    def update(updates, state, params=None):
        del params
        count_inc = safe_int32_increment(state.count)
        leaf = make_leaf(count_inc)
        moments = tuple(state)[1:]

        def cast_leaf(g, *old):
            u, *new = leaf(g.astype(compute_dtype(g.dtype)), *old)
            # a moment stored as a pytree (gradax.BlockQuantized 8-bit codes) keeps the dtypes it was encoded in
            return (u.astype(g.dtype), *(n.astype(o.dtype) if hasattr(o, "dtype") else n for n, o in zip(new, old)))

        new_updates, *new_moments = map_n(1 + len(moments), cast_leaf, updates, *moments)
        return new_updates, state_cls(count_inc, *new_moments)

    return GradientTransformation(init, update)
