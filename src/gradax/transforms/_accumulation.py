"""Accumulating updates over steps: momentum traces."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from .._base import GradientTransformation, Params
from .._checks import check_interval, check_non_negative
from .._hyperparams import as_value
from .._maps import map_n
from .._numerics import safe_int32_increment
from .._state import zeros_state_like


class TraceState(NamedTuple):
    """State of :func:`trace`."""

    trace: Params  # like params, dtype=accumulator_dtype (float32 for bf16/f16 params): the momentum


def trace(decay: ArrayLike, nesterov: bool = False, accumulator_dtype: Any | None = None) -> GradientTransformation:
    r"""Momentum: keeps a trace of past updates and returns it (heavy ball) or its Nesterov look-ahead.

    .. math::
      t_k = g_k + \beta\, t_{k-1}, \qquad u_k = t_k \ \text{(heavy ball)} \quad\text{or}\quad
      u_k = g_k + \beta\, t_k \ \text{(Nesterov)}.

    Args:
      decay: the momentum :math:`\beta \ge 0`.
      nesterov: use Nesterov momentum.
      accumulator_dtype: dtype of the trace; default float32 for bfloat16/float16 params, else the params' dtype.

    Returns:
      A :class:`GradientTransformation` with state :class:`TraceState`.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> tx = gradax.trace(0.5)
      >>> state = tx.init(jnp.zeros(1))
      >>> u, state = tx.update(jnp.ones(1), state)
      >>> u, state = tx.update(jnp.ones(1), state)
      >>> u
      Array([1.5], dtype=float32)

    References:
      Polyak, 1964, "Some methods of speeding up the convergence of iteration methods";
      Sutskever et al., 2013, "On the importance of initialization and momentum in deep learning".
    """
    check_non_negative("trace", "decay", decay)

    def init(params):
        return TraceState(trace=zeros_state_like(params, accumulator_dtype))

    def update(updates, state, params=None):
        del params
        beta = as_value(decay)

        def leaf(g, t):
            new_t = g + beta * t
            out = g + beta * new_t if nesterov else new_t
            return out.astype(g.dtype), new_t.astype(t.dtype)

        new_updates, new_trace = map_n(2, leaf, updates, state.trace)
        return new_updates, TraceState(trace=new_trace)

    return GradientTransformation(init, update)


class EmaState(NamedTuple):
    """State of :func:`ema`."""

    count: jax.Array  # shape=(), dtype=int32: the number of updates so far (for the debiasing)
    ema: Params  # like params, dtype=accumulator_dtype (float32 for bf16/f16 params): the biased moving average


def ema(decay: ArrayLike, debias: bool = True, accumulator_dtype: Any | None = None) -> GradientTransformation:
    r"""Exponential moving average of the updates, optionally debiased.

    .. math::
      m_k = \beta\, m_{k-1} + (1 - \beta)\, g_k, \qquad u_k = m_k \quad\text{or (debiased)}\quad
      u_k = \frac{m_k}{1 - \beta^k}.

    Args:
      decay: :math:`\beta \in [0, 1]`.
      debias: divide by :math:`1 - \beta^k` so that early averages are not biased towards zero.
      accumulator_dtype: dtype of the average; default float32 for bfloat16/float16 params, else the params' dtype.

    Returns:
      A :class:`GradientTransformation` with state :class:`EmaState`; the state keeps the biased average.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> tx = gradax.ema(0.9)
      >>> state = tx.init(jnp.zeros(1))
      >>> u, state = tx.update(jnp.ones(1), state)
      >>> u, state.ema
      (Array([1.], dtype=float32), Array([0.1], dtype=float32))

    References:
      Kingma and Ba, 2015, "Adam: a method for stochastic optimization" (bias correction).
    """
    check_interval("ema", "decay", decay, 0.0, 1.0)

    def init(params):
        return EmaState(count=jnp.zeros([], jnp.int32), ema=zeros_state_like(params, accumulator_dtype))

    def update(updates, state, params=None):
        del params
        beta = as_value(decay)
        one_minus_beta = 1 - beta  # from the float32 value, as inject_hyperparams' array decay computes it
        count = safe_int32_increment(state.count)
        correction = 1.0 - beta ** count.astype(beta.dtype)

        def leaf(g, m):
            new_m = one_minus_beta * g + beta * m
            out = new_m / correction.astype(new_m.dtype) if debias else new_m
            return out.astype(g.dtype), new_m.astype(m.dtype)

        new_updates, new_ema = map_n(2, leaf, updates, state.ema)
        return new_updates, EmaState(count=count, ema=new_ema)

    return GradientTransformation(init, update)
