"""Prodigy: D-Adaptation AdamW whose distance estimate weights recent gradients more."""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from .._base import GradientTransformationExtraArgs, ScalarOrSchedule
from .._checks import check_decay, check_needs, check_positive
from .._dtype_policy import optax_scalar_dtype
from .._hyperparams import as_value, value_at
from .._maps import map_n
from .._numerics import at_first_step, compute_dtype, safe_int32_increment
from .._state import zeros_state_like
from ._dadapt_common import check_dadapt_args, sqrt_decay, tensor_vdot, with_complement


class ProdigyState(NamedTuple):
    """State of :func:`prodigy`.

    ``exp_avg``/``exp_avg_sq``: Adam moments of :math:`d_k g_k`; ``grad_sum``: :math:`s_k`; ``params0``: the starting
    point :math:`x_0` (zeros until the first update, which records the params it is given); ``estim_lr``: :math:`d_k`;
    ``numerator_weighted``: :math:`r_k`; ``count``: steps taken.
    """

    exp_avg: Any
    exp_avg_sq: Any
    grad_sum: Any
    params0: Any
    estim_lr: jax.Array
    numerator_weighted: jax.Array
    count: jax.Array


def prodigy(
    learning_rate: ScalarOrSchedule = 1.0,
    betas: tuple[ArrayLike, ArrayLike] = (0.9, 0.999),
    beta3: ArrayLike | None = None,
    eps: ArrayLike = 1e-8,
    estim_lr0: ArrayLike = 1e-6,
    estim_lr_coef: ArrayLike = 1.0,
    weight_decay: ScalarOrSchedule = 0.0,
    safeguard_warmup: bool = False,
) -> GradientTransformationExtraArgs:
    r"""The Prodigy optimizer: AdamW with a learned step size :math:`d_k` (a lower bound of :math:`\lVert x_0 -
    x_*\rVert`).

    With :math:`\lambda_k` = ``learning_rate(k)``, bias correction :math:`c_k = \sqrt{1-\beta_2^{k+1}}/(1-\beta_1^{k+1})`,
    :math:`\eta_k = d_k \lambda_k c_k` and :math:`\beta_3` (default :math:`\sqrt{\beta_2}`):

    .. math::
      r_k = \beta_3 r_{k-1} + \tfrac{d_k}{d_0}\eta_k \langle g_k, x_0 - x_k\rangle, \quad
      s_k = \beta_3 s_{k-1} + \tfrac{d_k}{d_0}\eta_k g_k, \\
      m_k = \beta_1 m_{k-1} + (1-\beta_1) d_k g_k, \quad v_k = \beta_2 v_{k-1} + (1-\beta_2) d_k^2 g_k^2, \\
      x_{k+1} = x_k - \eta_k\left(\frac{m_k}{\sqrt{v_k} + d_k\varepsilon} + w x_k\right), \quad
      d_{k+1} = \max\!\left(d_k, \; \mathrm{coef}\,\frac{r_k}{\lVert s_k\rVert_1}\right).

    The paper's :math:`(1-\beta_3)` factor of :math:`r_k, s_k` cancels in :math:`r_k/\lVert s_k\rVert_1` and is left out.
    ``safeguard_warmup`` drops :math:`\lambda_k c_k` from the weight of :math:`s_k` (weight :math:`d_k^2/d_0`).
    ``update`` needs ``params``; :math:`x_0` is the ``params`` of the first update (so ``init`` takes
    ``jax.ShapeDtypeStruct`` leaves).

    Args:
      learning_rate: :math:`\lambda_k`, a multiplier of the learned step (1.0, or a schedule with peak 1.0).
      betas: :math:`(\beta_1, \beta_2)`, each in :math:`[0, 1)`.
      beta3: :math:`\beta_3 \in [0, 1)`, decay of :math:`r, s`; ``None`` means :math:`\sqrt{\beta_2}`.
      eps: :math:`\varepsilon \ge 0`.
      estim_lr0: :math:`d_0 > 0`, the initial under-estimate.
      estim_lr_coef: :math:`\mathrm{coef} > 0`, multiplies each estimate of :math:`d`.
      weight_decay: :math:`w \ge 0`, decoupled weight decay (a number, an array or a schedule).
      safeguard_warmup: leave the learning rate out of :math:`s_k` (for warmup schedules).

    Returns:
      A :class:`GradientTransformationExtraArgs` with state :class:`ProdigyState`.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> opt = gradax.contrib.prodigy()
      >>> params = jnp.array([1.0, 2.0])
      >>> opt.update(jnp.array([1.0, -1.0]), opt.init(params), params)[0]
      Array([-1.e-06,  1.e-06], dtype=float32)

    References:
      Mishchenko and Defazio, 2023, "Prodigy: An Expeditiously Adaptive Parameter-Free Learner" (arXiv:2306.06101).
    """
    api = "prodigy"
    check_dadapt_args(api, betas, eps, estim_lr0, weight_decay)
    if beta3 is not None:
        check_decay(api, "beta3", beta3)
    check_positive(api, "estim_lr_coef", estim_lr_coef)

    def init(params):
        d0 = as_value(estim_lr0)
        d0 = d0.astype(optax_scalar_dtype(params, "lowest", d0.dtype))  # float32 unless the policy is Optax's
        return ProdigyState(
            exp_avg=zeros_state_like(params),
            exp_avg_sq=zeros_state_like(params),
            grad_sum=zeros_state_like(params),
            params0=zeros_state_like(params),
            estim_lr=d0,
            numerator_weighted=jnp.zeros([], d0.dtype),
            count=jnp.zeros([], jnp.int32),
        )

    def update(updates, state, params=None, **extra_args):
        del extra_args
        check_needs(api, "params", params)
        count = state.count
        lam = value_at(learning_rate, count)
        wd = value_at(weight_decay, count)
        # Optax 0.2.8's order: 1 - b and sqrt(b2) from the Python numbers, d g formed first, <g, x0 - x> as one
        # contraction per leaf
        (b1, one_b1), (b2, one_b2) = with_complement(betas[0]), with_complement(betas[1])
        b3 = as_value(sqrt_decay(betas[1]) if beta3 is None else beta3)
        d0, coef, e = as_value(estim_lr0), as_value(estim_lr_coef), as_value(eps)
        d = state.estim_lr.astype(d0.dtype)  # computed in the hyperparameters' dtype whatever its stored dtype
        k = safe_int32_increment(count)
        dlr = d * lam * ((1 - b2**k) ** 0.5 / (1 - b1**k))
        w_s = d if safeguard_warmup else dlr
        first = count == 0

        def leaf(g, x, x0, m, v, s):
            cd = compute_dtype(g.dtype)
            gc, xc = g.astype(cd), x.astype(cd)
            x0 = x0.astype(cd)
            dot = tensor_vdot(gc, x0 - xc)
            dg = d * gc
            m_new = b1 * m + one_b1 * dg
            v_new = b2 * v + one_b2 * dg * dg
            s_new = b3 * s + w_s * dg / d0
            dt = m.dtype
            return x0.astype(dt), m_new.astype(dt), v_new.astype(dt), s_new.astype(dt), dot

        x0, m, v, s, dots = map_n(
            5,
            leaf,
            updates,
            params,
            at_first_step(first, params, state.params0),
            state.exp_avg,
            state.exp_avg_sq,
            state.grad_sum,
        )
        dot = sum(jax.tree.leaves(dots), jnp.zeros([], d.dtype))
        num = b3 * state.numerator_weighted.astype(d.dtype) + (d / d0) * dlr * dot
        s_norm = sum((jnp.sum(jnp.abs(x)) for x in jax.tree.leaves(s)), jnp.zeros([], d.dtype))
        d_hat = coef * num / s_norm
        d_new = jnp.where(s_norm > 0, jnp.maximum(d, d_hat), d).astype(d.dtype)

        # the epsilon is scaled by the new estimate, as in Optax 0.2.8 (the paper's Algorithm 1 has the old one);
        # the update then follows the <g, x0 - x> reduction, so XLA writes the new params in place without first
        # copying the params that reduction reads
        def step(g, x, m_new, v_new):
            xc = x.astype(m_new.dtype)
            return (-wd * dlr * xc - dlr * m_new / (jnp.sqrt(v_new) + d_new * e)).astype(g.dtype)

        out = jax.tree.map(step, updates, params, m, v)
        new_state = ProdigyState(
            exp_avg=m,
            exp_avg_sq=v,
            grad_sum=s,
            params0=x0,
            estim_lr=d_new.astype(state.estim_lr.dtype),
            numerator_weighted=num.astype(state.numerator_weighted.dtype),
            count=safe_int32_increment(count),
        )
        return out, new_state

    return GradientTransformationExtraArgs(init, update)
