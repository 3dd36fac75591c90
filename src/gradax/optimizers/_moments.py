"""Moment estimates shared by the Adam family: exponential moving averages and their bias correction.

Each quantity is written once for a single array (the ``*_leaf`` helpers, used inside the optimizers' one pass over
the tree) and once for whole trees (the public ``update_moment``, ``update_moment_per_elem_norm``,
``update_infinity_moment`` and ``bias_correction``, with Optax's signatures).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from .._base import GradientTransformation
from .._hyperparams import as_value
from .._maps import map_n
from .._numerics import abs_sq, compute_dtype, safe_int32_increment
from ..transforms._accumulation import zeros_state_like

# --- one array ------------------------------------------------------------------------------------------------------


def ema_leaf(g: jax.Array, moment: jax.Array, decay: jax.Array, one_minus_decay: jax.Array) -> jax.Array:
    r"""One step of an exponential moving average: :math:`(1-\beta)\, g + \beta\, m`."""
    return one_minus_decay * g + decay * moment


def ema_sq_leaf(g: jax.Array, moment: jax.Array, decay: jax.Array, one_minus_decay: jax.Array) -> jax.Array:
    r"""One step of the moving average of the squared magnitude: :math:`(1-\beta)\, |g|^2 + \beta\, m`."""
    return one_minus_decay * abs_sq(g) + decay * moment


def hyper_values(*values: Any) -> tuple[jax.Array, ...]:
    """The hyperparameters as arrays (:func:`as_value`), behind an optimization barrier.

    The barrier keeps XLA from specializing the arithmetic on constant hyperparameters (reassociating or folding
    them), so a step compiled with Python numbers is bit-identical to one with traced values, as under
    ``inject_hyperparams``.
    """
    return jax.lax.optimization_barrier(tuple(as_value(v) for v in values))


def debias_factor(decay: jax.Array, count: jax.Array) -> jax.Array:
    r"""The bias-correction denominator :math:`1 - \beta^t` (a scalar in the hyperparameters' dtype)."""
    return 1 - decay**count


def _order_power(g: jax.Array, order: Any, per_elem_norm: bool) -> jax.Array:
    if per_elem_norm and jnp.iscomplexobj(g):
        half = order / 2
        if float(half).is_integer():
            half = int(half)
        return abs_sq(g) ** half
    return g**order


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


# --- trees (public) -------------------------------------------------------------------------------------------------


def update_moment(updates: Any, moments: Any, decay: ArrayLike, order: int) -> Any:
    r"""The exponential moving average of the ``order``-th power of the updates, for every array of a tree.

    .. math::
      m \leftarrow (1 - \beta)\, g^{k} + \beta\, m.

    Args:
      updates: a tree of arrays :math:`g`.
      moments: a tree with the structure of ``updates``: the previous averages :math:`m`.
      decay: :math:`\beta`, the weight of the previous average.
      order: :math:`k`, the power of the updates that is averaged.

    Returns:
      The tree of new averages.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> gradax.update_moment({"w": jnp.array([2.0])}, {"w": jnp.array([0.0])}, 0.5, 2)["w"]
      Array([2.], dtype=float32)
    """
    return jax.tree.map(lambda g, m: (1 - decay) * _order_power(g, order, False) + decay * m, updates, moments)


def update_moment_per_elem_norm(updates: Any, moments: Any, decay: ArrayLike, order: int) -> Any:
    r"""Like :func:`update_moment` on the magnitude of each element: :math:`m \leftarrow (1-\beta)|g|^k + \beta m`.

    For real arrays this equals :func:`update_moment`; for complex arrays the average is of :math:`|g|^k`, a real
    quantity.

    Args:
      updates: a tree of arrays :math:`g` (real or complex).
      moments: a tree with the structure of ``updates``: the previous averages.
      decay: :math:`\beta`, the weight of the previous average.
      order: :math:`k`.

    Returns:
      The tree of new averages.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> gradax.update_moment_per_elem_norm(jnp.array([3.0 + 4.0j]), jnp.array([0.0]), 0.0, 2)
      Array([25.], dtype=float32)
    """
    return jax.tree.map(lambda g, m: (1 - decay) * _order_power(g, order, True) + decay * m, updates, moments)


def update_infinity_moment(updates: Any, moments: Any, decay: ArrayLike, eps: ArrayLike) -> Any:
    r"""The exponentially weighted infinity norm of the updates (Adamax): :math:`u \leftarrow \max(|g| + \epsilon,
    \beta u)`.

    Args:
      updates: a tree of arrays :math:`g`.
      moments: a tree with the structure of ``updates``: the previous values :math:`u`.
      decay: :math:`\beta`, the decay of the previous value.
      eps: :math:`\epsilon`, added to :math:`|g|`.

    Returns:
      The tree of new values.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> gradax.update_infinity_moment(jnp.array([-1.0, 0.0]), jnp.array([0.0, 4.0]), 0.5, 0.0)
      Array([1., 2.], dtype=float32)
    """
    return jax.tree.map(lambda g, m: jnp.maximum(jnp.abs(g) + eps, decay * m), updates, moments)


def bias_correction(moment: Any, decay: ArrayLike, count: ArrayLike) -> Any:
    r"""Divides every array of a moving-average tree by :math:`1 - \beta^t`, undoing the bias of a zero start.

    The factor is computed in float32 (float64 under x64), then cast to each array's dtype for the division, so
    bfloat16 moments stay bfloat16 without :math:`\beta^t` rounding to 1.

    Args:
      moment: a tree of moving averages.
      decay: :math:`\beta`, the decay of the average.
      count: :math:`t \ge 1`, the number of steps averaged so far.

    Returns:
      The bias-corrected tree.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> gradax.bias_correction(jnp.array([0.1]), 0.9, 1)
      Array([1.], dtype=float32)
    """
    factor = debias_factor(as_value(decay), jnp.asarray(count))
    return jax.tree.map(lambda m: m / factor.astype(m.dtype), moment)
