"""D-Adaptation for AdamW: the step size is learned from a lower bound on the distance to the solution."""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from .._base import GradientTransformationExtraArgs, ScalarOrSchedule
from .._checks import check_needs
from .._hyperparams import as_value, value_at
from .._maps import map_n
from .._numerics import compute_dtype, safe_int32_increment
from .._state import zeros_state_like
from ._dadapt_common import check_dadapt_args, sqrt_decay, tensor_vdot, with_complement
from ._dog import _scalar_dtype


class DAdaptAdamWState(NamedTuple):
    """State of :func:`dadapt_adamw`."""

    exp_avg: Any  # like params (float32 for bf16/f16): first moment of d-scaled gradients
    exp_avg_sq: Any  # like params (float32 for bf16/f16): second moment of gradients
    grad_sum: Any  # like params (float32 for bf16/f16): s, the EMA of d-scaled gradients
    estim_lr: jax.Array  # shape=(): d, the distance estimate
    numerator_weighted: jax.Array  # shape=(): r, the weighted numerator of the estimate
    count: jax.Array  # shape=(), dtype=int32: the number of updates so far


def dadapt_adamw(
    learning_rate: ScalarOrSchedule = 1.0,
    betas: tuple[ArrayLike, ArrayLike] = (0.9, 0.999),
    eps: ArrayLike = 1e-8,
    estim_lr0: ArrayLike = 1e-6,
    weight_decay: ScalarOrSchedule = 0.0,
) -> GradientTransformationExtraArgs:
    r"""AdamW with D-Adaptation: the effective step size :math:`d_k` grows to the distance to the solution.

    With :math:`\lambda_k = d_k \eta_k \sqrt{1-\beta_2^{k+1}} / (1-\beta_1^{k+1})`, :math:`A = \sqrt{v} + \varepsilon`:

    .. math::
      r_{k+1} = \sqrt{\beta_2} r_k + (1-\sqrt{\beta_2}) \lambda_k \langle g_k, s_k / A_k\rangle, \quad
      s_{k+1} = \sqrt{\beta_2} s_k + (1-\sqrt{\beta_2}) \lambda_k g_k,

    .. math::
      m_{k+1} = \beta_1 m_k + (1-\beta_1)\lambda_k g_k, \quad v_{k+1} = \beta_2 v_k + (1-\beta_2) g_k^2, \quad
      d_{k+1} = \max\left(d_k, \frac{r_{k+1}}{(1-\sqrt{\beta_2}) \|s_{k+1}\|_1}\right),

    .. math::
      u_k = -\frac{m_{k+1}}{\sqrt{v_{k+1}} + \varepsilon} - \lambda_k \mu\, x_k.

    Args:
      learning_rate: :math:`\eta` (1 by default), a number, an array or a schedule.
      betas: :math:`(\beta_1, \beta_2)`, both in ``[0, 1)``.
      eps: :math:`\varepsilon \ge 0`.
      estim_lr0: :math:`d_0 > 0`, the initial distance estimate.
      weight_decay: :math:`\mu \ge 0`, decoupled weight decay; a number, an array or a schedule of the step count.

    Returns:
      A :class:`GradientTransformationExtraArgs` with state :class:`DAdaptAdamWState`; ``update`` needs ``params``.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> opt = gradax.contrib.dadapt_adamw(estim_lr0=1.0)
      >>> opt.update(jnp.array([1.0]), opt.init(jnp.zeros(1)), jnp.zeros(1))[0].round(3)
      Array([-1.], dtype=float32)

    References:
      Defazio and Mishchenko, 2023, "Learning-Rate-Free Learning by D-Adaptation" (ICML).
    """
    api = "dadapt_adamw"
    check_dadapt_args(api, betas, eps, estim_lr0, weight_decay)

    def init(params):
        dtype = _scalar_dtype(params)
        return DAdaptAdamWState(
            exp_avg=zeros_state_like(params),
            exp_avg_sq=zeros_state_like(params),
            grad_sum=zeros_state_like(params),
            estim_lr=as_value(estim_lr0, dtype),
            numerator_weighted=jnp.zeros([], dtype),
            count=jnp.zeros([], jnp.int32),
        )

    def update(updates, state, params=None, **extra_args):
        del extra_args
        check_needs(api, "params", params)
        dtype = state.estim_lr.dtype
        # Optax 0.2.8's order: 1 - b and sqrt(b2) from the Python numbers, <g, s/A> as one contraction per leaf
        (beta1, one_b1), (beta2, one_b2) = with_complement(betas[0], dtype), with_complement(betas[1], dtype)
        sb2, one_sb2 = with_complement(sqrt_decay(betas[1], dtype), dtype)
        e = as_value(eps, dtype)
        wd = value_at(weight_decay, state.count, dtype)
        count = safe_int32_increment(state.count)
        bc = (1 - beta2**count) ** 0.5 / (1 - beta1**count)
        dlr = (state.estim_lr * value_at(learning_rate, state.count, dtype) * bc).astype(dtype)

        def num_leaf(g, s, v):
            return (tensor_vdot(g.astype(s.dtype), s / (jnp.sqrt(v) + e)),)

        (dots,) = map_n(1, num_leaf, updates, state.grad_sum, state.exp_avg_sq)
        numerator_acc = sum(jax.tree.leaves(dots), jnp.zeros([], dtype))

        def leaf(g, m, v, s, p):
            gc = g.astype(compute_dtype(g.dtype))
            m_new = beta1 * m + one_b1 * dlr * gc
            v_new = beta2 * v + one_b2 * gc * gc
            s_new = sb2 * s + one_sb2 * dlr * gc
            u = -wd * dlr * p.astype(m.dtype) - m_new / (jnp.sqrt(v_new) + e)
            return u.astype(g.dtype), m_new.astype(m.dtype), v_new.astype(v.dtype), s_new.astype(s.dtype)

        out, m, v, s = map_n(4, leaf, updates, state.exp_avg, state.exp_avg_sq, state.grad_sum, params)
        s_l1 = sum((jnp.sum(jnp.abs(x)) for x in jax.tree.leaves(s)), jnp.zeros([], dtype))
        numerator = sb2 * state.numerator_weighted + one_sb2 * dlr * numerator_acc
        estim = jnp.maximum(state.estim_lr, numerator / (one_sb2 * s_l1))
        return out, DAdaptAdamWState(m, v, s, estim.astype(dtype), numerator.astype(dtype), count)

    return GradientTransformationExtraArgs(init, update)
