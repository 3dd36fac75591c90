"""Accumulating updates over steps: momentum traces."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from .._base import GradientTransformation, Params
from .._checks import check_non_negative
from .._hyperparams import as_value
from .._maps import map_n
from .._numerics import state_dtype


class TraceState(NamedTuple):
    """State of :func:`trace`."""

    trace: Params  # like params, dtype=accumulator_dtype (float32 for bf16/f16 params): the momentum


def zeros_state_like(params: Params, dtype=None) -> Params:
    """Zeros shaped like ``params`` (arrays or ``ShapeDtypeStruct``), with the dtype rule of :func:`state_dtype`."""
    return jax.tree.map(lambda p: jnp.zeros(jnp.shape(p), state_dtype(p.dtype, dtype)), params)


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
