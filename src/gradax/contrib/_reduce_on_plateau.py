"""Reduce the step size by a factor when a monitored value stops improving."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from .._base import GradientTransformationExtraArgs
from .._checks import check_interval, check_needs, check_non_negative
from .._numerics import safe_int32_increment, state_dtype


class ReduceLROnPlateauState(NamedTuple):
    """State of :func:`reduce_on_plateau`."""

    scale: jax.Array  # current multiplier of the updates
    best_value: jax.Array  # best (lowest) accumulated value seen
    plateau_count: jax.Array  # accumulation windows without improvement
    cooldown_count: jax.Array  # windows left before plateaus are counted again
    count: jax.Array  # values accumulated in the current window
    avg_value: jax.Array  # running mean of the values in the current window


def _params_dtype(params: Any, handler: str) -> Any:
    """The lowest/highest dtype of the params (works on ``ShapeDtypeStruct`` leaves), never below float32."""
    dtypes = [jnp.dtype(getattr(p, "dtype", None) or jnp.result_type(p)) for p in jax.tree.leaves(params)]
    if not dtypes:
        return jnp.dtype(jnp.float32)
    pick = min if handler == "lowest" else max
    return state_dtype(pick(dtypes, key=lambda d: d.itemsize))


def reduce_on_plateau(
    factor: float = 0.1,
    patience: ArrayLike = 10,
    rtol: float = 1e-4,
    atol: float = 0.0,
    cooldown: ArrayLike = 0,
    accumulation_size: ArrayLike = 1,
    min_scale: ArrayLike = 0.0,
) -> GradientTransformationExtraArgs:
    r"""Multiplies the updates by a scale that shrinks by ``factor`` whenever the monitored value plateaus.

    ``update(updates, state, params, value=loss)`` averages ``value`` over windows of ``accumulation_size`` calls.
    At the end of each window with mean :math:`\bar f`, with the best mean so far :math:`f^*`:

    .. math::
      \text{improved} \iff \bar f < f^* - \mathrm{rtol}\,|f^*| - \mathrm{atol}; \qquad
      s \leftarrow \max(\mathrm{factor}\cdot s,\ s_{\min}) \text{ after } \mathrm{patience}
      \text{ windows without improvement,}

    then ``cooldown`` windows pass before plateaus are counted again. The returned updates are :math:`s\,u`.
    The relative threshold uses :math:`|f^*|`, so it also works for negative values (see ``docs/differences.md``).

    Args:
      factor: multiplier of the scale at a plateau, in (0, 1].
      patience: windows without improvement before reducing (>= 0).
      rtol: relative improvement threshold (>= 0).
      atol: absolute improvement threshold (>= 0).
      cooldown: windows to wait after a reduction (>= 0).
      accumulation_size: number of values averaged per window (>= 1).
      min_scale: the scale never goes below this (>= 0).

    Returns:
      A :class:`GradientTransformationExtraArgs` whose ``update`` needs ``value``; state
      :class:`ReduceLROnPlateauState`.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> tx = gradax.contrib.reduce_on_plateau(factor=0.5, patience=1)
      >>> state = tx.init(jnp.zeros(2))
      >>> _, state = tx.update(jnp.ones(2), state, value=1.0)
      >>> u, state = tx.update(jnp.ones(2), state, value=1.0)
      >>> u
      Array([0.5, 0.5], dtype=float32)

    References:
      The ``ReduceLROnPlateau`` scheduler of Keras and PyTorch (``torch.optim.lr_scheduler.ReduceLROnPlateau``).
    """
    api = "reduce_on_plateau"
    check_interval(api, "factor", factor, 0.0, 1.0, low_closed=False)
    check_non_negative(api, "patience", patience)
    check_non_negative(api, "rtol", rtol)
    check_non_negative(api, "atol", atol)
    check_non_negative(api, "cooldown", cooldown)
    check_interval(api, "accumulation_size", accumulation_size, 1.0)
    check_non_negative(api, "min_scale", min_scale)

    def init(params):
        high = _params_dtype(params, "highest")
        return ReduceLROnPlateauState(
            scale=jnp.ones([], _params_dtype(params, "lowest")),
            best_value=jnp.asarray(jnp.inf, high),
            plateau_count=jnp.zeros([], jnp.int32),
            cooldown_count=jnp.zeros([], jnp.int32),
            count=jnp.zeros([], jnp.int32),
            avg_value=jnp.zeros([], high),
        )

    def end_of_window(state: ReduceLROnPlateauState) -> ReduceLROnPlateauState:
        best, avg = state.best_value, state.avg_value
        slack = jnp.where(best >= 0, (1 - rtol) * best, (1 + rtol) * best)
        improved = avg < slack - atol
        best = jnp.where(improved, avg, best).astype(state.best_value.dtype)
        plateau = jnp.where(improved, 0, safe_int32_increment(state.plateau_count))
        cooling = state.cooldown_count > 0
        reduce = jnp.logical_and(~cooling, plateau == patience)
        scale = jnp.where(reduce, state.scale * factor, state.scale)
        scale = jnp.where(cooling, state.scale, jnp.maximum(scale, min_scale)).astype(state.scale.dtype)
        plateau = jnp.where(jnp.logical_or(cooling, reduce), 0, plateau).astype(jnp.int32)
        cooldown_count = jnp.where(cooling, state.cooldown_count - 1, jnp.where(reduce, cooldown, 0))
        return ReduceLROnPlateauState(
            scale=scale,
            best_value=best,
            plateau_count=plateau,
            cooldown_count=cooldown_count.astype(jnp.int32),
            count=jnp.zeros([], jnp.int32),
            avg_value=jnp.zeros([], state.avg_value.dtype),
        )

    def update(updates, state, params=None, *, value=None, **extra_args):
        del params, extra_args
        check_needs(api, "value", value, "(the monitored loss)")
        count = safe_int32_increment(state.count)
        avg = (state.count * state.avg_value + jnp.asarray(value, state.avg_value.dtype)) / count
        state = state._replace(avg_value=avg.astype(state.avg_value.dtype), count=count)
        ended = end_of_window(state)
        done = count == accumulation_size
        state = jax.tree.map(lambda a, b: jnp.where(done, a, b), ended, state)
        out = jax.tree.map(lambda g: (state.scale * g).astype(g.dtype), updates)
        return out, state

    return GradientTransformationExtraArgs(init, update)
