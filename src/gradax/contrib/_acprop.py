"""ACProp: AdaBelief's centred second moment used asynchronously (the denominator lags one step)."""

import jax.numpy as jnp
from jax.typing import ArrayLike

from .._base import GradientTransformation, MaskOrFn, ScalarOrSchedule
from .._checks import check_decay, check_non_negative
from .._hyperparams import hyper_values
from .._maps import map_n
from .._numerics import compute_dtype, safe_int32_increment
from .._state import zeros_state_like
from ..optimizers._adam_variants import ScaleByBeliefState
from ..transforms._adding import add_decayed_weights
from ..transforms._combining import chain
from ..transforms._scaling import scale_by_learning_rate


def scale_by_acprop(
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-16,
    eps_root: ArrayLike = 1e-16,
) -> GradientTransformation:
    r"""Rescales updates with ACProp: the gradient over the root of the previous centred second moment.

    .. math::
      m_t = \beta_1 m_{t-1} + (1-\beta_1) g_t, \quad
      s_t = \beta_2 s_{t-1} + (1-\beta_2)(g_t - m_t)^2 + \bar\varepsilon, \quad
      u_t = g_t / \left(\sqrt{s_{t-1} / (1-\beta_2^{t-1})} + \varepsilon\right),

    with :math:`u_1 = g_1` (no second moment exists before the first step). The residual uses the NEW first moment
    :math:`m_t`, as in the paper and the reference PyTorch code; Optax 0.2.8 uses :math:`m_{t-1}`
    (``docs/differences.md``). Moments are float32 for bfloat16/float16 params.

    Args:
      b1: :math:`\beta_1 \in [0, 1)`, decay of the first moment.
      b2: :math:`\beta_2 \in [0, 1)`, decay of the centred second moment.
      eps: :math:`\varepsilon \ge 0`, added to the denominator.
      eps_root: :math:`\bar\varepsilon \ge 0`, added to the second moment at each step.

    Returns:
      A :class:`GradientTransformation` with state ``ScaleByBeliefState(count, mu, nu)``.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> tx = gradax.contrib.scale_by_acprop()
      >>> tx.update(jnp.array([0.5, -2.0]), tx.init(jnp.zeros(2)))[0]
      Array([ 0.5, -2. ], dtype=float32)

    References:
      Zhuang et al., 2021, "Momentum Centering and Asynchronous Update for Adaptive Gradient Methods" (NeurIPS).
    """
    api = "scale_by_acprop"
    check_decay(api, "b1", b1)
    check_decay(api, "b2", b2)
    check_non_negative(api, "eps", eps)
    check_non_negative(api, "eps_root", eps_root)

    def init(params):
        return ScaleByBeliefState(
            count=jnp.zeros([], jnp.int32), mu=zeros_state_like(params), nu=zeros_state_like(params)
        )

    def update(updates, state, params=None):
        del params
        beta1, beta2, e, e_root = hyper_values(b1, b2, eps, eps_root)
        first = state.count == 0
        # bias correction of s_{t-1}: 1 - b2^(t-1); on the first step the denominator is replaced by 1
        debias = 1 - beta2 ** jnp.where(first, 1, state.count).astype(beta2.dtype)

        def leaf(g, m, s):
            gc = g.astype(compute_dtype(g.dtype))
            m_new = (1 - beta1) * gc + beta1 * m
            s_new = (1 - beta2) * (gc - m_new) ** 2 + beta2 * s + e_root
            s_hat = jnp.where(first, 1.0, s / debias)
            u = gc / (jnp.sqrt(s_hat) + e)
            return u.astype(g.dtype), m_new.astype(m.dtype), s_new.astype(s.dtype)

        out, mu, nu = map_n(3, leaf, updates, state.mu, state.nu)
        return out, ScaleByBeliefState(count=safe_int32_increment(state.count), mu=mu, nu=nu)

    return GradientTransformation(init, update)


def acprop(
    learning_rate: ScalarOrSchedule,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-16,
    eps_root: ArrayLike = 1e-16,
    weight_decay: ScalarOrSchedule = 0.0,
    mask: MaskOrFn = None,
    *,
    cautious_weight_decay: bool = False,
) -> GradientTransformation:
    r"""The ACProp optimizer: :func:`scale_by_acprop`, decoupled weight decay, then a step of :math:`-\eta_t`.

    .. math::
      \theta_t = \theta_{t-1} - \eta_t \left(g_t / (\sqrt{\hat s_{t-1}} + \varepsilon) + \lambda \theta_{t-1}\right).

    Args:
      learning_rate: :math:`\eta`, a number, an array or a schedule of the step count.
      b1: :math:`\beta_1 \in [0, 1)`.
      b2: :math:`\beta_2 \in [0, 1)`.
      eps: :math:`\varepsilon \ge 0`.
      eps_root: :math:`\bar\varepsilon \ge 0`.
      weight_decay: :math:`\lambda`, a number, an array or a schedule.
      mask: which parameters to decay (a tree of booleans or a function of the params).
      cautious_weight_decay: decay only where the update and the parameter have the same sign (Chen et al., 2025).

    Returns:
      A :class:`GradientTransformation`; ``update`` needs ``params`` when ``weight_decay`` is not zero.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> opt = gradax.contrib.acprop(learning_rate=0.1)
      >>> opt.update(jnp.array([1.0, -1.0]), opt.init(jnp.zeros(2)), jnp.zeros(2))[0]
      Array([-0.1,  0.1], dtype=float32)

    References:
      Zhuang et al., 2021, "Momentum Centering and Asynchronous Update for Adaptive Gradient Methods" (NeurIPS).
    """
    return chain(
        scale_by_acprop(b1=b1, b2=b2, eps=eps, eps_root=eps_root),
        add_decayed_weights(weight_decay, mask, cautious=cautious_weight_decay),
        scale_by_learning_rate(learning_rate),
    )
