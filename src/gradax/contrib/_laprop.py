"""LaProp: Adam with the momentum taken after the RMSProp normalization (decoupling momentum from adaptivity)."""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from .._base import GradientTransformation, GradientTransformationExtraArgs, MaskOrFn, ScalarOrSchedule
from .._checks import check_decay, check_non_negative
from .._hyperparams import hyper_values
from .._maps import map_n
from .._numerics import compute_dtype, safe_int32_increment
from .._state import zeros_state_like
from ..optimizers._moments import debias_factor, ema_leaf, ema_sq_leaf
from ..transforms._adding import add_decayed_weights
from ..transforms._combining import chain
from ..transforms._scaling import scale_by_learning_rate


class ScaleByLaPropState(NamedTuple):
    """State of :func:`scale_by_laprop`."""

    count: jax.Array  # shape=(), dtype=int32: the number of updates so far
    mu: Any  # like params (mu_dtype; float32 for bf16/f16 params): the momentum of the normalized gradient
    nu: Any  # like params (float32 for bf16/f16 params): the second moment of the gradient


def scale_by_laprop(
    b1: ArrayLike = 0.9, b2: ArrayLike = 0.999, eps: ArrayLike = 1e-15, mu_dtype: Any | None = None
) -> GradientTransformation:
    r"""Rescales updates with LaProp: the gradient is normalized first, then averaged into the momentum.

    .. math::
      v_t = \beta_2 v_{t-1} + (1-\beta_2) g_t^2, \qquad
      m_t = \beta_1 m_{t-1} + (1-\beta_1) \frac{g_t}{\sqrt{v_t / (1-\beta_2^t)} + \varepsilon}, \qquad
      u_t = \frac{m_t}{1-\beta_1^t}.

    Unlike Adam, the momentum averages already-normalized steps, so :math:`\beta_1` and :math:`\beta_2` can be set
    independently (any :math:`\beta_1 < 1` with any :math:`\beta_2`) and the update stays bounded. Use it as a
    drop-in replacement of Adam that tolerates aggressive momentum settings.

    Args:
      b1: :math:`\beta_1 \in [0, 1)`, decay of the momentum.
      b2: :math:`\beta_2 \in [0, 1)`, decay of the second moment.
      eps: :math:`\varepsilon \ge 0`, added to the denominator.
      mu_dtype: dtype of the momentum.

    Returns:
      A :class:`GradientTransformation` with state :class:`ScaleByLaPropState`.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> tx = gradax.contrib.scale_by_laprop()
      >>> tx.update(jnp.array([0.5, -2.0]), tx.init(jnp.zeros(2)))[0]
      Array([ 1., -1.], dtype=float32)

    References:
      Ziyin, Wang and Ueda, 2020, "LaProp: Separating Momentum and Adaptivity in Adam",
      https://arxiv.org/abs/2002.04839.
    """
    api = "scale_by_laprop"
    check_decay(api, "b1", b1)
    check_decay(api, "b2", b2)
    check_non_negative(api, "eps", eps)

    def init(params):
        return ScaleByLaPropState(
            count=jnp.zeros([], jnp.int32), mu=zeros_state_like(params, mu_dtype), nu=zeros_state_like(params)
        )

    def update(updates, state, params=None):
        del params
        beta1, beta2, e = hyper_values(b1, b2, eps)
        count = safe_int32_increment(state.count)
        debias1 = debias_factor(beta1, count)
        debias2 = debias_factor(beta2, count)

        def leaf(g, m, v):
            gc = g.astype(compute_dtype(g.dtype))
            v_new = ema_sq_leaf(gc, v, beta2, 1 - beta2)
            m_new = ema_leaf(gc / (jnp.sqrt(v_new / debias2) + e), m, beta1, 1 - beta1)
            return (m_new / debias1).astype(g.dtype), m_new.astype(m.dtype), v_new.astype(v.dtype)

        out, mu, nu = map_n(3, leaf, updates, state.mu, state.nu)
        return out, ScaleByLaPropState(count=count, mu=mu, nu=nu)

    return GradientTransformation(init, update)


def laprop(
    learning_rate: ScalarOrSchedule = 4e-4,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-15,
    weight_decay: ScalarOrSchedule = 0.0,
    mask: MaskOrFn = None,
    *,
    mu_dtype: Any | None = None,
    cautious_weight_decay: bool = False,
) -> GradientTransformationExtraArgs:
    r"""The LaProp optimizer with decoupled weight decay.

    .. math::
      \theta_t = \theta_{t-1} - \eta_t \left(\frac{m_t}{1-\beta_1^t} + \lambda_t \theta_{t-1}\right),

    with :math:`m_t` from :func:`scale_by_laprop`.

    Args:
      learning_rate: :math:`\eta`, a number, an array or a schedule of the step count.
      b1: :math:`\beta_1 \in [0, 1)`.
      b2: :math:`\beta_2 \in [0, 1)`.
      eps: :math:`\varepsilon \ge 0`.
      weight_decay: :math:`\lambda \ge 0`, a number, an array or a schedule.
      mask: which leaves to decay (a tree of booleans or a function of the params); ``None`` decays all.
      mu_dtype: dtype of the momentum.
      cautious_weight_decay: decay only where the update and the parameter have the same sign.

    Returns:
      A :class:`GradientTransformationExtraArgs`.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> opt = gradax.contrib.laprop(learning_rate=0.1)
      >>> opt.update(jnp.array([0.5, -2.0]), opt.init(jnp.zeros(2)), jnp.zeros(2))[0]
      Array([-0.1,  0.1], dtype=float32)

    References:
      Ziyin, Wang and Ueda, 2020, "LaProp: Separating Momentum and Adaptivity in Adam",
      https://arxiv.org/abs/2002.04839.
    """
    return chain(
        scale_by_laprop(b1, b2, eps, mu_dtype),
        add_decayed_weights(weight_decay, mask, cautious=cautious_weight_decay),
        scale_by_learning_rate(learning_rate),
    )
