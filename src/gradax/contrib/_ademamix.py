"""AdEMAMix (a mixture of a fast and a slow gradient EMA) and its simplified, schedule-free-like variant."""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from .._base import GradientTransformation, MaskOrFn, ScalarOrSchedule, Updates
from .._checks import check_decay, check_non_negative
from .._hyperparams import hyper_values, value_at
from .._maps import map_n
from .._numerics import compute_dtype, safe_int32_increment
from .._state import zeros_state_like
from ..transforms._adding import add_decayed_weights
from ..transforms._combining import chain
from ..transforms._scaling import scale_by_learning_rate


def _check_moments(api, b1, b2, alpha, eps, eps_root) -> None:
    """The checks both AdEMAMix variants share: two decays and non-negative alpha, eps, eps_root."""
    check_decay(api, "b1", b1)
    check_decay(api, "b2", b2)
    check_non_negative(api, "alpha", alpha)
    check_non_negative(api, "eps", eps)
    check_non_negative(api, "eps_root", eps_root)


def _with_decay_and_lr(scaler, weight_decay, mask, learning_rate, cautious=False) -> GradientTransformation:
    """The recipe of both variants: the scaled direction, decoupled weight decay, then a step of -learning_rate."""
    return chain(
        scaler, add_decayed_weights(weight_decay, mask, cautious=cautious), scale_by_learning_rate(learning_rate)
    )


class ScaleByAdemamixState(NamedTuple):
    """State of :func:`scale_by_ademamix`."""

    count: jax.Array  # shape=(), dtype=int32: the number of updates so far
    count_m2: jax.Array  # shape=(), dtype=int32: the step count of the slow EMA (drives the b3/alpha schedules)
    m1: Updates  # like params, mu_dtype rule: fast EMA of gradients
    m2: Updates  # like params, mu_dtype rule: slow EMA of gradients
    nu: Updates  # like params, mu_dtype rule: EMA of squared gradients


def scale_by_ademamix(
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    b3: ScalarOrSchedule = 0.9999,
    alpha: ScalarOrSchedule = 6.0,
    eps: ArrayLike = 1e-8,
    eps_root: ArrayLike = 0.0,
    mu_dtype: Any | None = None,
) -> GradientTransformation:
    r"""Rescales updates with AdEMAMix: bias-corrected fast EMA plus :math:`\alpha` times a slow EMA, over RMS.

    .. math::
      m^{(1)}_t = \beta_1 m^{(1)}_{t-1} + (1-\beta_1) g_t, \quad m^{(2)}_t = \beta_3 m^{(2)}_{t-1} + (1-\beta_3) g_t,
      \quad \nu_t = \beta_2 \nu_{t-1} + (1-\beta_2) g_t^2,

    .. math::
      u_t = \frac{m^{(1)}_t / (1-\beta_1^t) + \alpha\, m^{(2)}_t}{\sqrt{\nu_t / (1-\beta_2^t) + \bar\varepsilon}
      + \varepsilon}.

    ``b3`` and ``alpha`` may be schedules of ``count_m2`` (the paper warms both up). The three moments take
    ``mu_dtype`` when given, else float32 for bfloat16/float16 params.

    Args:
      b1: :math:`\beta_1 \in [0, 1)`, decay of the fast EMA.
      b2: :math:`\beta_2 \in [0, 1)`, decay of the second moment.
      b3: :math:`\beta_3 \in [0, 1)` (or a schedule), decay of the slow EMA.
      alpha: :math:`\alpha \ge 0` (or a schedule), weight of the slow EMA.
      eps: :math:`\varepsilon \ge 0`, added to the denominator.
      eps_root: :math:`\bar\varepsilon \ge 0`, added under the root.
      mu_dtype: dtype of the moments.

    Returns:
      A :class:`GradientTransformation` with state :class:`ScaleByAdemamixState`.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> tx = gradax.contrib.scale_by_ademamix(alpha=0.0)
      >>> tx.update(jnp.array([0.5, -2.0]), tx.init(jnp.zeros(2)))[0]
      Array([ 1., -1.], dtype=float32)

    References:
      Pagliardini, Ablin and Grangier, 2024, "The AdEMAMix Optimizer: Better, Faster, Older" (arXiv:2409.03152).
    """
    api = "scale_by_ademamix"
    _check_moments(api, b1, b2, alpha, eps, eps_root)
    check_decay(api, "b3", b3)

    def init(params):
        return ScaleByAdemamixState(
            count=jnp.zeros([], jnp.int32),
            count_m2=jnp.zeros([], jnp.int32),
            m1=zeros_state_like(params, mu_dtype),
            m2=zeros_state_like(params, mu_dtype),
            nu=zeros_state_like(params, mu_dtype),
        )

    def update(updates, state, params=None):
        del params
        beta3, a = value_at(b3, state.count_m2), value_at(alpha, state.count_m2)
        beta1, beta2, e, e_root = hyper_values(b1, b2, eps, eps_root)
        count = safe_int32_increment(state.count)
        debias1 = 1 - beta1 ** count.astype(beta1.dtype)
        debias2 = 1 - beta2 ** count.astype(beta2.dtype)

        def leaf(g, m1, m2, v):
            gc = g.astype(compute_dtype(g.dtype))
            m1_new = (1 - beta1) * gc + beta1 * m1
            m2_new = (1 - beta3) * gc + beta3 * m2
            v_new = (1 - beta2) * gc * gc + beta2 * v
            u = (m1_new / debias1 + a * m2_new) / (jnp.sqrt(v_new / debias2 + e_root) + e)
            return u.astype(g.dtype), m1_new.astype(m1.dtype), m2_new.astype(m2.dtype), v_new.astype(v.dtype)

        out, m1, m2, nu = map_n(4, leaf, updates, state.m1, state.m2, state.nu)
        new_state = ScaleByAdemamixState(
            count=count, count_m2=safe_int32_increment(state.count_m2), m1=m1, m2=m2, nu=nu
        )
        return out, new_state

    return GradientTransformation(init, update)


def ademamix(
    learning_rate: ScalarOrSchedule,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    b3: ScalarOrSchedule = 0.9999,
    alpha: ScalarOrSchedule = 5.0,
    eps: ArrayLike = 1e-8,
    eps_root: ArrayLike = 0.0,
    mu_dtype: Any | None = None,
    weight_decay: ScalarOrSchedule = 0.0,
    mask: MaskOrFn = None,
    *,
    cautious_weight_decay: bool = False,
) -> GradientTransformation:
    r"""The AdEMAMix optimizer: :func:`scale_by_ademamix`, decoupled weight decay, then a step of :math:`-\eta_t`.

    .. math::
      \theta_t = \theta_{t-1} - \eta_t\left(\frac{\hat m^{(1)}_t + \alpha m^{(2)}_t}{\sqrt{\hat\nu_t + \bar\varepsilon}
      + \varepsilon} + \lambda \theta_{t-1}\right).

    Args:
      learning_rate: :math:`\eta`, a number, an array or a schedule of the step count.
      b1: :math:`\beta_1 \in [0, 1)`.
      b2: :math:`\beta_2 \in [0, 1)`.
      b3: :math:`\beta_3 \in [0, 1)` or a schedule.
      alpha: :math:`\alpha \ge 0` or a schedule.
      eps: :math:`\varepsilon \ge 0`.
      eps_root: :math:`\bar\varepsilon \ge 0`.
      mu_dtype: dtype of the moments.
      weight_decay: :math:`\lambda`, a number, an array or a schedule.
      mask: which parameters to decay.
      cautious_weight_decay: decay only where the update and the parameter have the same sign (Chen et al., 2025).

    Returns:
      A :class:`GradientTransformation`.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> opt = gradax.contrib.ademamix(learning_rate=0.1, alpha=0.0)
      >>> opt.update(jnp.array([2.0]), opt.init(jnp.zeros(1)), jnp.zeros(1))[0]
      Array([-0.1], dtype=float32)

    References:
      Pagliardini, Ablin and Grangier, 2024, "The AdEMAMix Optimizer: Better, Faster, Older" (arXiv:2409.03152).
    """
    scaler = scale_by_ademamix(b1=b1, b2=b2, b3=b3, alpha=alpha, eps=eps, eps_root=eps_root, mu_dtype=mu_dtype)
    return _with_decay_and_lr(scaler, weight_decay, mask, learning_rate, cautious_weight_decay)


class ScaleBySimplifiedAdEMAMixState(NamedTuple):
    """State of :func:`scale_by_simplified_ademamix`."""

    t: jax.Array  # shape=(), dtype=int32: the number of updates so far
    m: Updates  # like params (float32 for bf16/f16): accumulated (undamped) momentum
    n: Updates  # like params (float32 for bf16/f16): EMA of squared gradients


def scale_by_simplified_ademamix(
    b1: ArrayLike = 0.99,
    b2: ArrayLike = 0.95,
    alpha: ScalarOrSchedule = 0.0,
    eps: ArrayLike = 1e-8,
    eps_root: ArrayLike = 0.0,
) -> GradientTransformation:
    r"""Rescales updates with simplified AdEMAMix: an undamped momentum plus :math:`\alpha g_t`, over RMS.

    .. math::
      m_t = \beta_1 m_{t-1} + g_t, \quad n_t = \beta_2 n_{t-1} + (1-\beta_2) g_t^2, \quad
      u_t = \frac{m_t + \alpha g_t}{\sqrt{n_t / (1-\beta_2^t) + \bar\varepsilon} + \varepsilon}.

    Args:
      b1: :math:`\beta_1 \in [0, 1)`, decay of the momentum.
      b2: :math:`\beta_2 \in [0, 1)`, decay of the second moment.
      alpha: :math:`\alpha \ge 0` (or a schedule of ``t``), weight of the current gradient.
      eps: :math:`\varepsilon \ge 0`.
      eps_root: :math:`\bar\varepsilon \ge 0`.

    Returns:
      A :class:`GradientTransformation` with state :class:`ScaleBySimplifiedAdEMAMixState`.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> tx = gradax.contrib.scale_by_simplified_ademamix()
      >>> tx.update(jnp.array([0.5, -2.0]), tx.init(jnp.zeros(2)))[0]
      Array([ 1., -1.], dtype=float32)

    References:
      Morwani et al., 2025, "Connections between Schedule-Free Optimizers, AdEMAMix, and Accelerated SGD Variants"
      (arXiv:2502.02431).
    """
    _check_moments("scale_by_simplified_ademamix", b1, b2, alpha, eps, eps_root)

    def init(params):
        return ScaleBySimplifiedAdEMAMixState(
            t=jnp.zeros([], jnp.int32), m=zeros_state_like(params), n=zeros_state_like(params)
        )

    def update(updates, state, params=None):
        del params
        a = value_at(alpha, state.t)
        beta1, beta2, e, e_root = hyper_values(b1, b2, eps, eps_root)
        t = safe_int32_increment(state.t)
        debias2 = 1 - beta2 ** t.astype(beta2.dtype)

        def leaf(g, m, n):
            gc = g.astype(compute_dtype(g.dtype))
            m_new = gc + beta1 * m
            n_new = gc * gc + beta2 * (n - gc * gc)  # lerp from g^2 towards n by b2
            u = (m_new + a * gc) / (jnp.sqrt(n_new / debias2 + e_root) + e)
            return u.astype(g.dtype), m_new.astype(m.dtype), n_new.astype(n.dtype)

        out, m, n = map_n(3, leaf, updates, state.m, state.n)
        return out, ScaleBySimplifiedAdEMAMixState(t=t, m=m, n=n)

    return GradientTransformation(init, update)


def simplified_ademamix(
    learning_rate: ScalarOrSchedule,
    b1: ArrayLike = 0.99,
    b2: ArrayLike = 0.95,
    alpha: ScalarOrSchedule = 0.0,
    eps: ArrayLike = 1e-8,
    eps_root: ArrayLike = 0.0,
    weight_decay: ScalarOrSchedule = 0.0,
    mask: MaskOrFn = None,
    *,
    cautious_weight_decay: bool = False,
) -> GradientTransformation:
    r"""Simplified AdEMAMix: :func:`scale_by_simplified_ademamix`, weight decay, then a step of :math:`-\eta_t`.

    .. math::
      \theta_t = \theta_{t-1} - \eta_t\left(\frac{m_t + \alpha g_t}{\sqrt{\hat n_t + \bar\varepsilon} + \varepsilon}
      + \lambda\theta_{t-1}\right), \quad m_t = \beta_1 m_{t-1} + g_t.

    Args:
      learning_rate: :math:`\eta`, a number, an array or a schedule of the step count.
      b1: :math:`\beta_1 \in [0, 1)`.
      b2: :math:`\beta_2 \in [0, 1)`.
      alpha: :math:`\alpha \ge 0` or a schedule.
      eps: :math:`\varepsilon \ge 0`.
      eps_root: :math:`\bar\varepsilon \ge 0`.
      weight_decay: :math:`\lambda`, a number, an array or a schedule.
      mask: which parameters to decay.
      cautious_weight_decay: decay only where the update and the parameter have the same sign (Chen et al., 2025).

    Returns:
      A :class:`GradientTransformation`.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> opt = gradax.contrib.simplified_ademamix(learning_rate=0.1)
      >>> opt.update(jnp.array([2.0]), opt.init(jnp.zeros(1)), jnp.zeros(1))[0]
      Array([-0.1], dtype=float32)

    References:
      Morwani et al., 2025, "Connections between Schedule-Free Optimizers, AdEMAMix, and Accelerated SGD Variants"
      (arXiv:2502.02431).
    """
    scaler = scale_by_simplified_ademamix(b1=b1, b2=b2, alpha=alpha, eps=eps, eps_root=eps_root)
    return _with_decay_and_lr(scaler, weight_decay, mask, learning_rate, cautious_weight_decay)
