"""Mechanic: a learned global scale for any base optimizer."""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from .._base import (
    GradientTransformation,
    GradientTransformationExtraArgs,
    ScalarOrSchedule,
    with_extra_args_support,
)
from .._checks import check_int, check_needs, check_non_negative, check_positive
from .._hyperparams import value_at
from .._numerics import at_first_step, safe_int32_increment
from ..tree._math import norm as tree_norm
from ..tree._math import vdot as tree_vdot
from ._reduce_on_plateau import _params_dtype
from ._state_copies import copy_tree


class MechanicState(NamedTuple):
    """State of :func:`mechanize`."""

    base_optimizer_state: Any
    count: jax.Array
    r: jax.Array  # per-beta reward
    m: jax.Array  # per-beta max |h|
    v: jax.Array  # per-beta sum of h^2
    s: jax.Array  # per-beta scale
    x0: Any  # reference point (the params at the first update)


def mechanize(
    base_optimizer: GradientTransformation,
    weight_decay: ScalarOrSchedule = 1e-2,
    eps: ArrayLike = 1e-8,
    s_init: ArrayLike = 1e-6,
    num_betas: int = 6,
) -> GradientTransformationExtraArgs:
    r"""Mechanic: tunes a global scale :math:`s = \sum_i s_i` of the base optimizer's updates online.

    With base updates :math:`u_t`, reference point :math:`x_0` and :math:`\Delta_{t-1} = (x_0 - x_t)/(s+\epsilon)`:

    .. math::
      h = \langle g_t + \lambda s \tfrac{\|g_t\|}{\|x_t\|+\epsilon} x_t, \Delta_{t-1}\rangle, \quad
      m_i \leftarrow \max(\beta_i m_i, |h| + \epsilon), \quad v_i \leftarrow \beta_i^2 v_i + h^2, \\
      r_i \leftarrow \beta_i r_i + \mathrm{clip}(h, \pm m_i^{old})\, s_i, \quad
      s_i = \frac{\tfrac{s_{init}}{n} m_i + \max(r_i, 0)}{\sqrt{v_i} + \epsilon}, \quad
      x_{t+1} = x_0 - \Big(\sum_i s_i\Big) (\Delta_{t-1} - u_t),

    with :math:`\beta_i = 1 - 10^{-i}`, :math:`i = 1..n`.

    Args:
      base_optimizer: the optimizer whose updates are rescaled.
      weight_decay: :math:`\lambda \ge 0`; a number, an array or a schedule of the step count.
      eps: :math:`\epsilon > 0`.
      s_init: initial scale per beta (> 0).
      num_betas: number :math:`n \ge 1` of betas.

    Returns:
      A :class:`GradientTransformationExtraArgs` with state :class:`MechanicState`; needs ``params``.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> tx = gradax.contrib.mechanize(gradax.sgd(0.1))
      >>> p = jnp.ones(2)
      >>> u, _ = tx.update(p, tx.init(p), p)
      >>> bool(jnp.all(u < 0))
      True

    References:
      Cutkosky, Defazio and Mehta, 2023, "Mechanic: A Learning Rate Tuner" (NeurIPS).
    """
    api = "mechanize"
    check_non_negative(api, "weight_decay", weight_decay)
    check_positive(api, "eps", eps)
    check_positive(api, "s_init", s_init)
    check_int(api, "num_betas", num_betas, low=1)
    base = with_extra_args_support(base_optimizer)

    def init(params):
        dt = _params_dtype(params, "lowest")
        zeros = lambda: jnp.zeros([num_betas], dt)  # one buffer per field (donation-safe)
        return MechanicState(
            base_optimizer_state=base.init(params),
            count=jnp.zeros([], jnp.int32),
            r=zeros(),
            m=zeros(),
            v=zeros(),
            s=jnp.full([num_betas], s_init, dt),
            x0=copy_tree(params),
        )

    def update(updates, state, params=None, **extra_args):
        check_needs(api, "params", params)
        base_updates, base_state = base.update(updates, state.base_optimizer_state, params, **extra_args)
        x0 = at_first_step(state.count == 0, params, state.x0)
        s_sum = jnp.sum(state.s)
        wd = value_at(weight_decay, state.count, state.s.dtype)
        decay = wd * s_sum * tree_norm(updates) / (tree_norm(params) + eps)
        grads = jax.tree.map(lambda g, p: g + decay * p, updates, params)
        delta_prev = jax.tree.map(lambda p, x: (x - p) / (s_sum + eps), params, x0)
        h = tree_vdot(grads, delta_prev)
        betas = jnp.asarray([1.0 - 0.1**i for i in range(1, num_betas + 1)], state.s.dtype)
        clipped = jnp.clip(h, -state.m, state.m)
        m = jnp.maximum(betas * state.m, jnp.abs(h) + eps)
        v = betas**2 * state.v + h**2
        r = betas * state.r + clipped * state.s
        s = ((s_init / num_betas) * m + jnp.maximum(r, 0.0)) / (jnp.sqrt(v) + eps)
        total = jnp.sum(s)
        out = jax.tree.map(
            lambda x, d, u, p: ((x - total * (d - u)) - p).astype(jnp.result_type(u)),
            x0,
            delta_prev,
            base_updates,
            params,
        )
        new = MechanicState(
            base_state,
            safe_int32_increment(state.count),
            r.astype(state.r.dtype),
            m.astype(state.m.dtype),
            v.astype(state.v.dtype),
            jnp.asarray(s, state.s.dtype),
            x0,
        )
        return out, new

    return GradientTransformationExtraArgs(init, update)
