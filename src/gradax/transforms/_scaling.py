"""Scaling updates by a constant, a schedule or a learning rate."""

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from .._base import EmptyState, GradientTransformation, ScalarOrSchedule, Schedule, identity
from .._hyperparams import as_value, is_schedule, value_at
from .._numerics import safe_int32_increment

ScaleState = EmptyState


class ScaleByScheduleState(NamedTuple):
    """State of :func:`scale_by_schedule`."""

    count: jax.Array  # shape=(), dtype=int32: the number of updates so far


def scale_leaves(updates, factor: jax.Array):
    """``factor * u`` for every leaf ``u``, computed in the promoted dtype and cast back to ``u``'s dtype."""
    return jax.tree.map(lambda u: (factor * u).astype(u.dtype), updates)


def scale(step_size: ArrayLike) -> GradientTransformation:
    r"""Multiplies every update by a constant: :math:`u \leftarrow \alpha u`.

    Args:
      step_size: the factor :math:`\alpha` (a number or an array).

    Returns:
      A :class:`GradientTransformation` with an empty state.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> tx = gradax.scale(-0.1)
      >>> tx.update(jnp.ones(2), tx.init(jnp.ones(2)))[0]
      Array([-0.1, -0.1], dtype=float32)
    """
    if is_schedule(step_size):
        raise TypeError(
            "scale(step_size=...) must be a number or an array; got a callable. "
            "Use scale_by_schedule(step_size_fn) for a schedule."
        )

    def init(params):
        del params
        return ScaleState()

    def update(updates, state, params=None):
        del params
        return scale_leaves(updates, as_value(step_size)), state

    return GradientTransformation(init, update)


def scale_by_schedule(step_size_fn: Schedule) -> GradientTransformation:
    r"""Multiplies updates by a schedule's value at the current step: :math:`u_t \leftarrow \alpha(t)\, u_t`.

    The schedule is evaluated at the count before it is incremented, so the first update uses ``step_size_fn(0)``.

    Args:
      step_size_fn: a function of the step count (an int32 scalar) returning the factor.

    Returns:
      A :class:`GradientTransformation` with state :class:`ScaleByScheduleState`.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> tx = gradax.scale_by_schedule(lambda count: 1.0 / (count + 1))
      >>> state = tx.init(jnp.ones(1))
      >>> u, state = tx.update(jnp.ones(1), state)
      >>> u, state = tx.update(jnp.ones(1), state)
      >>> u
      Array([0.5], dtype=float32)
    """
    if not callable(step_size_fn):
        raise TypeError(
            f"scale_by_schedule(step_size_fn=...) must be a callable of the step count; got {step_size_fn!r}. "
            "Use scale(step_size) for a constant."
        )

    def init(params):
        del params
        return ScaleByScheduleState(count=jnp.zeros([], jnp.int32))

    def update(updates, state, params=None):
        del params
        factor = value_at(step_size_fn, state.count)
        return scale_leaves(updates, factor), ScaleByScheduleState(count=safe_int32_increment(state.count))

    return GradientTransformation(init, update)


def scale_by_learning_rate(
    learning_rate: ScalarOrSchedule | None = None, *, flip_sign: bool = True
) -> GradientTransformation:
    r"""Scales updates by the learning rate, negated by default: :math:`u \leftarrow -\eta(t)\, u`.

    Optimizers end with this transformation, so that :func:`apply_updates` performs descent.

    Args:
      learning_rate: a number, an array, or a schedule (a function of the step count). ``None`` gives the identity.
      flip_sign: multiply by ``-learning_rate`` (descent) when True, by ``learning_rate`` when False.

    Returns:
      :func:`scale_by_schedule` for a schedule, :func:`scale` otherwise.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> tx = gradax.scale_by_learning_rate(0.1)
      >>> tx.update(jnp.ones(2), tx.init(jnp.ones(2)))[0]
      Array([-0.1, -0.1], dtype=float32)
    """
    if learning_rate is None:
        return identity()
    sign = -1 if flip_sign else 1
    if is_schedule(learning_rate):
        return scale_by_schedule(lambda count: sign * learning_rate(count))
    return scale(
        sign * jnp.asarray(learning_rate) if not isinstance(learning_rate, (int, float)) else sign * learning_rate
    )
