"""MADGRAD: momentumized, adaptive, dual-averaged gradient method."""

from typing import NamedTuple

import jax
import jax.numpy as jnp

from .._base import GradientTransformation, ScalarOrSchedule, Updates
from .._checks import check_interval, check_needs, check_non_negative
from .._hyperparams import as_value, value_at
from .._maps import map_n
from .._numerics import at_first_step, compute_dtype, leaf_dtype, safe_int32_increment, state_dtype, zeros_for
from ..transforms._adding import add_decayed_weights
from ..transforms._combining import chain


class MadgradState(NamedTuple):
    """State of :func:`scale_by_madgrad`."""

    count: jax.Array  # shape=(), dtype=int32: the number of updates so far
    grad_sum_sq: Updates  # like params (float32 for bf16/f16): weighted sum of squared gradients
    s: Updates  # like params (float32 for bf16/f16): weighted sum of gradients
    x0: Updates  # like params (float32 for bf16/f16): the initial point (captured at the first update)


def _is_abstract(params) -> bool:
    return any(isinstance(p, jax.ShapeDtypeStruct) for p in jax.tree.leaves(params))


def scale_by_madgrad(
    learning_rate: ScalarOrSchedule,
    momentum: float = 0.9,
    eps: float = 1e-6,
) -> GradientTransformation:
    r"""MADGRAD's step as an update (the difference between the new and the current params).

    .. math::
      \lambda_k = (\eta_k + \varepsilon)\sqrt{k+1}, \quad s_{k+1} = s_k + \lambda_k g_k, \quad
      \nu_{k+1} = \nu_k + \lambda_k g_k^2, \quad z_{k+1} = x_0 - \frac{s_{k+1}}{\nu_{k+1}^{1/3} + \varepsilon},

    .. math::
      x_{k+1} = (1 - c)\, z_{k+1} + c\, x_k \ \ (c = \text{momentum}), \qquad u_k = x_{k+1} - x_k.

    ``x0`` is the params at the first update, so ``init`` also works on ``jax.ShapeDtypeStruct`` leaves (Optax 0.2.8
    copies the params at ``init``; both agree when the params do not change between ``init`` and the first update).

    Args:
      learning_rate: :math:`\eta`, a number, an array or a schedule of the step count.
      momentum: :math:`c \in [0, 1]`, the weight of the current iterate (0 is pure dual averaging).
      eps: :math:`\varepsilon \ge 0`.

    Returns:
      A :class:`GradientTransformation` with state :class:`MadgradState`; ``update`` needs ``params``.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> tx = gradax.contrib.scale_by_madgrad(learning_rate=0.1, momentum=0.0)
      >>> u, _ = tx.update(jnp.array([1.0, -1.0]), tx.init(jnp.zeros(2)), jnp.zeros(2))
      >>> u.round(3)
      Array([-0.215,  0.215], dtype=float32)

    References:
      Defazio and Jelassi, 2022, "Adaptivity without Compromise: A Momentumized, Adaptive, Dual Averaged Gradient
      Method for Stochastic Optimization" (JMLR).
    """
    api = "scale_by_madgrad"
    check_interval(api, "momentum", momentum, 0.0, 1.0)
    check_non_negative(api, "eps", eps)

    def init(params):
        def leaf(p):
            dtype = state_dtype(leaf_dtype(p))
            zeros = lambda: zeros_for(p, dtype)
            start = zeros() if isinstance(p, jax.ShapeDtypeStruct) else jnp.array(p, dtype, copy=True)
            return zeros(), zeros(), start

        gss, s, x0 = map_n(3, leaf, params)
        return MadgradState(count=jnp.zeros([], jnp.int32), grad_sum_sq=gss, s=s, x0=x0)

    def update(updates, state, params=None):
        check_needs(api, "params", params)
        lr = value_at(learning_rate, state.count)
        c, e = as_value(momentum), as_value(eps)
        lamb = (lr + e) * jnp.sqrt(state.count.astype(lr.dtype) + 1)
        first = state.count == 0

        def leaf(g, gss, s, x0, p):
            gc = g.astype(compute_dtype(g.dtype))
            pc = p.astype(gss.dtype)
            gss_new = gss + lamb * gc * gc
            s_new = s + lamb * gc
            z = x0 - s_new / (jnp.cbrt(gss_new) + e)
            x_new = (1 - c) * z + c * pc
            u = x_new - pc
            return u.astype(g.dtype), gss_new.astype(gss.dtype), s_new.astype(s.dtype), x0.astype(gss.dtype)

        out, gss, s, x0 = map_n(
            4, leaf, updates, state.grad_sum_sq, state.s, at_first_step(first, params, state.x0), params
        )
        return out, MadgradState(count=safe_int32_increment(state.count), grad_sum_sq=gss, s=s, x0=x0)

    return GradientTransformation(init, update)


def madgrad(
    learning_rate: ScalarOrSchedule,
    momentum: float = 0.9,
    weight_decay: ScalarOrSchedule = 0.0,
    eps: float = 1e-6,
) -> GradientTransformation:
    r"""The MADGRAD optimizer: weight decay added to the gradient, then :func:`scale_by_madgrad`.

    .. math::
      g_k \leftarrow g_k + \lambda x_k, \qquad x_{k+1} = (1-c)\left(x_0 - \frac{\sum_i \lambda_i g_i}
      {(\sum_i \lambda_i g_i^2)^{1/3} + \varepsilon}\right) + c\, x_k.

    Args:
      learning_rate: :math:`\eta`, a number, an array or a schedule of the step count.
      momentum: :math:`c \in [0, 1]`.
      weight_decay: :math:`\lambda`, a number, an array or a schedule.
      eps: :math:`\varepsilon \ge 0`.

    Returns:
      A :class:`GradientTransformation`; ``update`` needs ``params``.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> opt = gradax.contrib.madgrad(learning_rate=0.1)
      >>> u, _ = opt.update(jnp.array([1.0]), opt.init(jnp.zeros(1)), jnp.zeros(1))
      >>> u.round(4)
      Array([-0.0215], dtype=float32)

    References:
      Defazio and Jelassi, 2022, "Adaptivity without Compromise: A Momentumized, Adaptive, Dual Averaged Gradient
      Method for Stochastic Optimization" (JMLR).
    """
    return chain(add_decayed_weights(weight_decay), scale_by_madgrad(learning_rate, momentum=momentum, eps=eps))
