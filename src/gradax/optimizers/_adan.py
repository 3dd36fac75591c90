"""Adan: adaptive Nesterov momentum with moments of the gradient differences."""

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from .._base import GradientTransformation, GradientTransformationExtraArgs, MaskOrFn, ScalarOrSchedule, Updates
from .._checks import check_decay
from .._hyperparams import hyper_values
from .._maps import map_n
from .._numerics import compute_dtype, safe_int32_increment
from .._state import zeros_state_like
from ..transforms._adding import add_decayed_weights
from ..transforms._combining import chain
from ..transforms._scaling import scale_by_learning_rate
from ._adam import check_adam_args
from ._moments import debias_factor, ema_leaf, ema_sq_leaf


class ScaleByAdanState(NamedTuple):
    """State of :func:`scale_by_adan`."""

    m: Updates  # like params: EMA of the gradients
    v: Updates  # like params: EMA of the gradient differences
    n: Updates  # like params: EMA of the squared look-ahead gradients
    g: Updates  # like params: the previous gradient
    t: jax.Array  # shape=(), dtype=int32: the number of updates so far


def scale_by_adan(
    b1: ArrayLike = 0.98,
    b2: ArrayLike = 0.92,
    b3: ArrayLike = 0.99,
    eps: ArrayLike = 1e-8,
    eps_root: ArrayLike = 0.0,
) -> GradientTransformation:
    r"""Rescales updates with Adan (Algorithm 1 of the paper, with bias correction).

    With :math:`\Delta_t = g_t - g_{t-1}` (zero at the first step):

    .. math::
      m_t = \beta_1 m_{t-1} + (1-\beta_1) g_t, \quad v_t = \beta_2 v_{t-1} + (1-\beta_2) \Delta_t, \\
      n_t = \beta_3 n_{t-1} + (1-\beta_3) |g_t + (1-\beta_2)\Delta_t|^2, \quad
      u_t = \frac{\hat m_t + (1-\beta_2) \hat v_t}{\sqrt{\hat n_t + \epsilon_{root}} + \epsilon},

    where hats divide by :math:`1-\beta_i^t`. Note that the decay rates weight the *previous* average, as in the
    other optimizers of this library (the paper's :math:`\beta` are :math:`1-\beta` here). State arrays follow the
    params' dtype (float32 for bfloat16/float16 params).

    Args:
      b1: :math:`\beta_1 \in [0, 1)`, decay of the gradient average.
      b2: :math:`\beta_2 \in [0, 1)`, decay of the gradient-difference average.
      b3: :math:`\beta_3 \in [0, 1)`, decay of the squared average.
      eps: :math:`\epsilon \ge 0`.
      eps_root: :math:`\epsilon_{root} \ge 0`.

    Returns:
      A :class:`GradientTransformation` with state :class:`ScaleByAdanState`.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> tx = gradax.scale_by_adan(eps=0.0)
      >>> tx.update(jnp.array([2.0]), tx.init(jnp.zeros(1)))[0]
      Array([1.], dtype=float32)

    References:
      Xie et al., 2022, "Adan: Adaptive Nesterov Momentum Algorithm for Faster Optimizing Deep Models".
    """
    check_adam_args("scale_by_adan", b1, b2, eps, eps_root)
    check_decay("scale_by_adan", "b3", b3)

    def init(params):
        return ScaleByAdanState(
            m=zeros_state_like(params),
            v=zeros_state_like(params),
            n=zeros_state_like(params),
            g=zeros_state_like(params),
            t=jnp.zeros([], jnp.int32),
        )

    def update(updates, state, params=None):
        del params
        beta1, beta2, beta3, e, e_root = hyper_values(b1, b2, b3, eps, eps_root)
        om1, om2, om3 = 1 - beta1, 1 - beta2, 1 - beta3
        first = state.t == 0
        t = safe_int32_increment(state.t)
        c1, c2, c3 = debias_factor(beta1, t), debias_factor(beta2, t), debias_factor(beta3, t)

        def leaf(g, m, v, n, g_prev):
            gc = g.astype(compute_dtype(g.dtype))
            diff = jnp.where(first, jnp.zeros_like(gc), gc - g_prev)
            m_new = ema_leaf(gc, m, beta1, om1)
            v_new = ema_leaf(diff, v, beta2, om2)
            n_new = ema_sq_leaf(gc + om2 * diff, n, beta3, om3)
            direction = m_new / c1 + om2 * (v_new / c2)
            u = direction / (jnp.sqrt(n_new / c3 + e_root) + e)
            return (
                u.astype(g.dtype),
                m_new.astype(m.dtype),
                v_new.astype(v.dtype),
                n_new.astype(n.dtype),
                gc.astype(g_prev.dtype),
            )

        new_updates, m, v, n, g_prev = map_n(5, leaf, updates, state.m, state.v, state.n, state.g)
        return new_updates, ScaleByAdanState(m=m, v=v, n=n, g=g_prev, t=t)

    return GradientTransformation(init, update)


def adan(
    learning_rate: ScalarOrSchedule,
    b1: ArrayLike = 0.98,
    b2: ArrayLike = 0.92,
    b3: ArrayLike = 0.99,
    eps: ArrayLike = 1e-8,
    eps_root: ArrayLike = 1e-8,
    weight_decay: ScalarOrSchedule = 0.0,
    mask: MaskOrFn = None,
    *,
    cautious_weight_decay: bool = False,
) -> GradientTransformationExtraArgs:
    r"""The Adan optimizer: :func:`scale_by_adan`, decoupled weight decay, then a step of size :math:`-\eta_t`.

    .. math::
      \theta_t = \theta_{t-1} - \eta_t \left(\frac{\hat m_t + (1-\beta_2)\hat v_t}{\sqrt{\hat n_t +
      \epsilon_{root}} + \epsilon} + \lambda_t \theta_{t-1}\right).

    Args:
      learning_rate: :math:`\eta`, a number, an array or a schedule of the step count.
      b1: :math:`\beta_1 \in [0, 1)`.
      b2: :math:`\beta_2 \in [0, 1)`.
      b3: :math:`\beta_3 \in [0, 1)`.
      eps: :math:`\epsilon \ge 0`.
      eps_root: :math:`\epsilon_{root} \ge 0`.
      weight_decay: :math:`\lambda`, a number, an array or a schedule.
      mask: which parameters to decay (a tree of booleans or a function of the params); None decays all.
      cautious_weight_decay: decay only where the update and the parameter have the same sign (Chen et al., 2025).

    Returns:
      A :class:`GradientTransformationExtraArgs`.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> opt = gradax.adan(learning_rate=0.1, eps_root=0.0, eps=0.0)
      >>> params = jnp.ones(1)
      >>> opt.update(jnp.array([3.0]), opt.init(params), params)[0]
      Array([-0.1], dtype=float32)

    References:
      Xie et al., 2022, "Adan: Adaptive Nesterov Momentum Algorithm for Faster Optimizing Deep Models".
    """
    check_adam_args("adan", b1, b2, eps, eps_root)
    check_decay("adan", "b3", b3)
    return chain(
        scale_by_adan(b1, b2, b3, eps, eps_root),
        add_decayed_weights(weight_decay, mask, cautious=cautious_weight_decay),
        scale_by_learning_rate(learning_rate),
    )
