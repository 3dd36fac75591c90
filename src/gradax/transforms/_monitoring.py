"""Recording measurements of the updates in the state: ``snapshot``, ``monitor``, ``measure_with_ema``.

The updates pass through unchanged. Measurements are held in the state with fixed shapes and dtypes from ``init`` on
(zeros until the first update), so the state keeps its structure under ``jit``, ``scan`` and ``lax.cond``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from .._base import (
    EmptyState,
    GradientTransformation,
    GradientTransformationExtraArgs,
    is_transformation,
    with_extra_args_support,
)
from .._checks import check_interval
from .._hyperparams import hyperparam_dtype
from .._numerics import state_dtype
from ._accumulation import EmaState, ema


def _zeros_of(measure: Callable, updates: Any) -> Any:
    """Zeros with the shapes and dtypes ``measure(updates)`` would return (works on ``ShapeDtypeStruct`` leaves)."""
    shapes = jax.eval_shape(measure, updates)
    return jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)


class SnapshotState(NamedTuple):
    """State of :func:`snapshot`."""

    measurement: dict[str, Any]  # {measure_name: measure(updates)} of the last update (zeros after init)


def snapshot(measure_name: str, measure: Callable[[Any], Any]) -> GradientTransformation:
    """Stores ``measure(updates)`` in the state under ``measure_name``; the updates pass through unchanged.

    Read it back with ``gradax.tree.get(state, measure_name)``.

    Args:
      measure_name: the key of the measurement in the state.
      measure: a function of the updates (as they are at this point of a chain) returning arrays.

    Returns:
      A :class:`GradientTransformation` with state :class:`SnapshotState`.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> tx = gradax.snapshot("norm", lambda u: jnp.linalg.norm(u))
      >>> _, state = tx.update(jnp.array([3.0, 4.0]), tx.init(jnp.zeros(2)))
      >>> state.measurement["norm"]
      Array(5., dtype=float32)
    """
    if not isinstance(measure_name, str):
        raise TypeError(f"snapshot(measure_name=...) must be a str; got {measure_name!r:.60}.")
    if not callable(measure):
        raise TypeError(f"snapshot(measure=...) must be a function of the updates; got {measure!r:.60}.")

    def init(params):
        return SnapshotState(measurement={measure_name: _zeros_of(measure, params)})

    def update(updates, state, params=None):
        del params
        value = jax.tree.map(lambda n, o: jnp.asarray(n, o.dtype), measure(updates), state.measurement[measure_name])
        return updates, SnapshotState(measurement={measure_name: value})

    return GradientTransformation(init, update)


def measure_with_ema(
    measure: Callable[[Any], Any], decay: ArrayLike, debias: bool = True, accumulator_dtype: Any | None = None
) -> GradientTransformationExtraArgs:
    r"""A measurement averaged over steps: a transformation whose "updates" are the (debiased) exponential moving
    average of ``measure(updates)``. Meant for :func:`monitor`.

    .. math:: m_k = \beta m_{k-1} + (1 - \beta)\, \mathrm{measure}(u_k), \qquad \text{output } m_k / (1 - \beta^k).

    Args:
      measure: a function of the updates returning arrays (booleans and integers are averaged as floats).
      decay: :math:`\beta \in [0, 1]`.
      debias: divide by :math:`1 - \beta^k`.
      accumulator_dtype: dtype of the average; default float32 for boolean, integer, bfloat16 and float16
        measurements, else the measurement's dtype.

    Returns:
      A :class:`GradientTransformationExtraArgs` with state ``(EmptyState(), EmaState)``.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> tx = gradax.measure_with_ema(lambda u: jnp.sum(u), decay=0.5)
      >>> tx.update(jnp.ones(2), tx.init(jnp.ones(2)))[0]
      Array(2., dtype=float32)
    """
    check_interval("measure_with_ema", "decay", decay, 0.0, 1.0)
    if not callable(measure):
        raise TypeError(f"measure_with_ema(measure=...) must be a function of the updates; got {measure!r:.60}.")
    averager = ema(decay, debias=debias, accumulator_dtype=accumulator_dtype)

    def acc_dtype(dtype):
        if accumulator_dtype is not None:
            return jnp.dtype(accumulator_dtype)
        if not jnp.issubdtype(dtype, jnp.inexact):
            return hyperparam_dtype()
        return state_dtype(dtype)

    def as_float(m):
        return jax.tree.map(lambda x: jnp.asarray(x, acc_dtype(jnp.result_type(x))), m)

    def init(params):
        zeros = as_float(_zeros_of(measure, params))
        return EmptyState(), EmaState(count=jnp.zeros([], jnp.int32), ema=zeros)

    def update(updates, state, params=None, **extra_args):
        del params, extra_args
        empty, ema_state = state
        value, ema_state = averager.update(as_float(measure(updates)), ema_state)
        return value, (empty, ema_state)

    return GradientTransformationExtraArgs(init, update)


class MonitorState(NamedTuple):
    """State of :func:`monitor`."""

    measurements: dict[str, Any]  # {name: measurement of the last update} (zeros after init)
    measure_states: tuple  # one state per measure: EmptyState() for functions, the transformation's state otherwise


def monitor(measures: dict[str, Any]) -> GradientTransformationExtraArgs:
    """Records several measurements of the updates in the state; the updates pass through unchanged.

    Args:
      measures: ``{name: measure}`` where a measure is a function of the updates, or a transformation (such as
        :func:`measure_with_ema`) whose output "updates" are the measurement.

    Returns:
      A :class:`GradientTransformationExtraArgs` with state :class:`MonitorState`; read a measurement with
      ``gradax.tree.get(state, name)``.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> tx = gradax.monitor({"norm": lambda u: jnp.linalg.norm(u)})
      >>> _, state = tx.update(jnp.array([3.0, 4.0]), tx.init(jnp.zeros(2)))
      >>> state.measurements["norm"]
      Array(5., dtype=float32)
    """
    if not isinstance(measures, dict):
        raise TypeError(f"monitor(measures=...) must be a dict from name to measure; got {type(measures).__name__}.")
    items: list[tuple[str, Any, bool]] = []  # (name, measure, whether it is a transformation)
    for name, m in measures.items():
        if is_transformation(m):
            items.append((name, with_extra_args_support(m), True))
        elif callable(m):
            items.append((name, m, False))
        else:
            raise TypeError(
                f"monitor(measures=...) must map each name to a function or a transformation; measures[{name!r}] is "
                f"{type(m).__name__}."
            )

    def init(params):
        states, values = [], {}
        for name, m, is_tx in items:
            if is_tx:
                s = m.init(params)
                values[name] = _zeros_of(lambda u, m=m, s=s: m.update(u, s)[0], params)
            else:
                s = EmptyState()
                values[name] = _zeros_of(m, params)
            states.append(s)
        return MonitorState(measurements=values, measure_states=tuple(states))

    def update(updates, state, params=None, **extra_args):
        states, values = [], {}
        for (name, m, is_tx), s in zip(items, state.measure_states):
            if is_tx:
                value, s = m.update(updates, s, params, **extra_args)
            else:
                value = m(updates)
            values[name] = jax.tree.map(lambda n, o: jnp.asarray(n, o.dtype), value, state.measurements[name])
            states.append(s)
        return updates, MonitorState(measurements=values, measure_states=tuple(states))

    return GradientTransformationExtraArgs(init, update)
