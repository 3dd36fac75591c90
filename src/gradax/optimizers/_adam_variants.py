"""Variants of Adam that change its second moment: AMSGrad, Adamax, RAdam, AdaBelief and Yogi."""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from .._base import GradientTransformation, GradientTransformationExtraArgs, MaskOrFn, ScalarOrSchedule, Updates
from .._checks import check_positive
from .._hyperparams import as_value, hyper_values
from .._numerics import abs_sq
from .._state import full_state_like
from ..transforms._adding import add_decayed_weights, decoupled_weight_decay
from ..transforms._combining import chain
from ..transforms._scaling import scale_by_learning_rate
from ._adam import AdamScalars, FirstMomentHat, ScaleByAdamState, check_adam_args
from ._moments import debias_factor, ema_leaf, ema_sq_leaf, moment_transformation, zero_moments


class ScaleByAmsgradState(NamedTuple):
    """State of :func:`scale_by_amsgrad`."""

    count: jax.Array  # shape=(), dtype=int32: the number of updates so far
    mu: Updates  # like params, dtype=mu_dtype rule: first moment
    nu: Updates  # like params, dtype=nu_dtype rule: second moment
    nu_max: Updates  # like params, dtype=nu_dtype rule: running maximum of the (corrected) second moment


class ScaleByBeliefState(NamedTuple):
    """State of :func:`scale_by_belief`."""

    count: jax.Array  # shape=(), dtype=int32: the number of updates so far
    mu: Updates  # like params: first moment
    nu: Updates  # like params: second moment of the prediction error g - mu (plus eps_root)


# --- AMSGrad --------------------------------------------------------------------------------------------------------


def scale_by_amsgrad(
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-8,
    eps_root: ArrayLike = 0.0,
    mu_dtype: Any | None = None,
    bias_correction_mu: bool = True,
    bias_correction_nu: bool = True,
    *,
    nu_dtype: Any | None = None,
) -> GradientTransformation:
    r"""Rescales updates with AMSGrad: Adam whose second moment never decreases.

    .. math::
      \tilde v_t = \frac{v_t}{1-\beta_2^t}, \quad v^{max}_t = \max(v^{max}_{t-1}, \tilde v_t), \quad
      u_t = \frac{m_t / (1-\beta_1^t)}{\sqrt{v^{max}_t + \epsilon_{root}} + \epsilon},

    with :math:`m_t, v_t` Adam's moments (see :func:`scale_by_adam`, including its dtype rule); each bias correction
    can be switched off.

    Args:
      b1: :math:`\beta_1 \in [0, 1)`.
      b2: :math:`\beta_2 \in [0, 1)`.
      eps: :math:`\epsilon \ge 0`.
      eps_root: :math:`\epsilon_{root} \ge 0`.
      mu_dtype: dtype of the first moment.
      bias_correction_mu: divide :math:`m_t` by :math:`1-\beta_1^t`.
      bias_correction_nu: divide :math:`v_t` by :math:`1-\beta_2^t` before taking the maximum.
      nu_dtype: dtype of ``nu`` and ``nu_max``; not in Optax.

    Returns:
      A :class:`GradientTransformation` with state :class:`ScaleByAmsgradState`.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> tx = gradax.scale_by_amsgrad()
      >>> tx.update(jnp.array([2.0]), tx.init(jnp.zeros(1)))[0]
      Array([1.], dtype=float32)

    References:
      Reddi et al., 2018, "On the Convergence of Adam and Beyond".
    """
    check_adam_args("scale_by_amsgrad", b1, b2, eps, eps_root)

    def make_leaf(count_inc):
        beta1, beta2, e, e_root = hyper_values(b1, b2, eps, eps_root)
        one_minus_b1, one_minus_b2 = 1 - beta1, 1 - beta2
        c1 = debias_factor(beta1, count_inc) if bias_correction_mu else None
        c2 = debias_factor(beta2, count_inc) if bias_correction_nu else None

        def leaf(g, m, v, vmax):
            m_new = ema_leaf(g, m, beta1, one_minus_b1)
            v_new = ema_sq_leaf(g, v, beta2, one_minus_b2)
            m_hat = m_new / c1 if c1 is not None else m_new
            v_eff = v_new / c2 if c2 is not None else v_new
            vmax_new = jnp.maximum(vmax, v_eff.astype(vmax.dtype))
            return m_hat / (jnp.sqrt(vmax_new + e_root) + e), m_new, v_new, vmax_new

        return leaf

    return moment_transformation(ScaleByAmsgradState, zero_moments(mu_dtype, nu_dtype, nu_dtype), make_leaf)


def amsgrad(
    learning_rate: ScalarOrSchedule,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-8,
    eps_root: ArrayLike = 0.0,
    mu_dtype: Any | None = None,
    bias_correction_mu: bool = True,
    bias_correction_nu: bool = True,
    *,
    nu_dtype: Any | None = None,
    weight_decay: ScalarOrSchedule | None = None,
    weight_decay_mask: MaskOrFn = None,
    cautious_weight_decay: bool = False,
) -> GradientTransformationExtraArgs:
    r"""The AMSGrad optimizer: :func:`scale_by_amsgrad` followed by a step of size :math:`-\eta_t`.

    .. math::
      \theta_t = \theta_{t-1} - \eta_t \frac{\hat m_t}{\sqrt{v^{max}_t + \epsilon_{root}} + \epsilon}.

    Args:
      learning_rate: :math:`\eta`, a number, an array or a schedule of the step count.
      b1: :math:`\beta_1 \in [0, 1)`.
      b2: :math:`\beta_2 \in [0, 1)`.
      eps: :math:`\epsilon \ge 0`.
      eps_root: :math:`\epsilon_{root} \ge 0`.
      mu_dtype: dtype of the first moment.
      bias_correction_mu: bias-correct the first moment.
      bias_correction_nu: bias-correct the second moment.
      nu_dtype: dtype of the second moments.
      weight_decay: :math:`\lambda \ge 0`, decoupled weight decay added to the update before the learning rate
        (:math:`\theta \leftarrow \theta - \eta_t (u_t + \lambda_t \theta)`): a number, an array or a schedule.
        ``None`` (the default) adds nothing: the chain, its state and its numbers are Optax's.
      weight_decay_mask: which leaves to decay (a tree of booleans or a function of the params); ``None`` decays all.
      cautious_weight_decay: decay only where the update and the parameter have the same sign (Chen et al., 2025).

    Returns:
      A :class:`GradientTransformationExtraArgs`.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> opt = gradax.amsgrad(learning_rate=0.1)
      >>> opt.update(jnp.array([3.0]), opt.init(jnp.zeros(1)))[0]
      Array([-0.1], dtype=float32)

    References:
      Reddi et al., 2018, "On the Convergence of Adam and Beyond".
    """
    check_adam_args("amsgrad", b1, b2, eps, eps_root)
    return chain(
        scale_by_amsgrad(b1, b2, eps, eps_root, mu_dtype, bias_correction_mu, bias_correction_nu, nu_dtype=nu_dtype),
        *decoupled_weight_decay(weight_decay, weight_decay_mask, cautious_weight_decay),
        scale_by_learning_rate(learning_rate),
    )


# --- Adamax ---------------------------------------------------------------------------------------------------------


def scale_by_adamax(b1: ArrayLike = 0.9, b2: ArrayLike = 0.999, eps: ArrayLike = 1e-8) -> GradientTransformation:
    r"""Rescales updates with Adamax, Adam's variant based on the infinity norm.

    .. math::
      m_t = \beta_1 m_{t-1} + (1-\beta_1) g_t, \quad v_t = \max(|g_t| + \epsilon, \beta_2 v_{t-1}), \quad
      u_t = \frac{m_t}{(1-\beta_1^t)\, v_t}.

    Moments follow the dtype rule of :func:`scale_by_adam` (float32 for bfloat16/float16 params).

    Args:
      b1: :math:`\beta_1 \in [0, 1)`.
      b2: :math:`\beta_2 \in [0, 1)`.
      eps: :math:`\epsilon \ge 0`, keeps :math:`v_t` away from zero.

    Returns:
      A :class:`GradientTransformation` with state :class:`ScaleByAdamState` (``nu`` holds :math:`v_t`).

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> tx = gradax.scale_by_adamax(eps=0.0)
      >>> tx.update(jnp.array([-2.0]), tx.init(jnp.zeros(1)))[0]
      Array([-1.], dtype=float32)

    References:
      Kingma and Ba, 2015, "Adam: A Method for Stochastic Optimization", section 7.1.
    """
    check_adam_args("scale_by_adamax", b1, b2, eps, 0.0)

    def make_leaf(count_inc):
        beta1, beta2, e = hyper_values(b1, b2, eps)
        one_minus_b1 = 1 - beta1
        c1 = debias_factor(beta1, count_inc)

        def leaf(g, m, v):
            m_new = ema_leaf(g, m, beta1, one_minus_b1)
            v_new = jnp.maximum(jnp.abs(g) + e, beta2 * v)
            return (m_new / c1) / v_new, m_new, v_new

        return leaf

    return moment_transformation(ScaleByAdamState, zero_moments(None, None), make_leaf)


def adamax(
    learning_rate: ScalarOrSchedule, b1: ArrayLike = 0.9, b2: ArrayLike = 0.999, eps: ArrayLike = 1e-8
) -> GradientTransformationExtraArgs:
    r"""The Adamax optimizer: :func:`scale_by_adamax` followed by a step of size :math:`-\eta_t`.

    .. math::
      \theta_t = \theta_{t-1} - \eta_t \frac{m_t}{(1-\beta_1^t)\, v_t}.

    Args:
      learning_rate: :math:`\eta`, a number, an array or a schedule of the step count.
      b1: :math:`\beta_1 \in [0, 1)`.
      b2: :math:`\beta_2 \in [0, 1)`.
      eps: :math:`\epsilon \ge 0`.

    Returns:
      A :class:`GradientTransformationExtraArgs`.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> opt = gradax.adamax(learning_rate=0.1, eps=0.0)
      >>> opt.update(jnp.array([2.0]), opt.init(jnp.zeros(1)))[0]
      Array([-0.1], dtype=float32)

    References:
      Kingma and Ba, 2015, "Adam: A Method for Stochastic Optimization", section 7.1.
    """
    check_adam_args("adamax", b1, b2, eps, 0.0)
    return chain(scale_by_adamax(b1, b2, eps), scale_by_learning_rate(learning_rate))


def adamaxw(
    learning_rate: ScalarOrSchedule,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-8,
    weight_decay: ScalarOrSchedule = 1e-4,
    mask: MaskOrFn = None,
    *,
    cautious_weight_decay: bool = False,
) -> GradientTransformationExtraArgs:
    r"""Adamax with decoupled weight decay.

    .. math::
      \theta_t = \theta_{t-1} - \eta_t \left(\frac{m_t}{(1-\beta_1^t)\, v_t} + \lambda_t \theta_{t-1}\right).

    Args:
      learning_rate: :math:`\eta`, a number, an array or a schedule of the step count.
      b1: :math:`\beta_1 \in [0, 1)`.
      b2: :math:`\beta_2 \in [0, 1)`.
      eps: :math:`\epsilon \ge 0`.
      weight_decay: :math:`\lambda`, a number, an array or a schedule.
      mask: which parameters to decay (a tree of booleans or a function of the params); None decays all.
      cautious_weight_decay: decay only where the update and the parameter have the same sign (Chen et al., 2025).

    Returns:
      A :class:`GradientTransformationExtraArgs`; ``update`` needs ``params``.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> opt = gradax.adamaxw(learning_rate=0.1, eps=0.0, weight_decay=1.0)
      >>> params = jnp.ones(1)
      >>> opt.update(jnp.array([2.0]), opt.init(params), params)[0]
      Array([-0.2], dtype=float32)

    References:
      Kingma and Ba, 2015; Loshchilov and Hutter, 2019, "Decoupled Weight Decay Regularization".
    """
    check_adam_args("adamaxw", b1, b2, eps, 0.0)
    return chain(
        scale_by_adamax(b1, b2, eps),
        add_decayed_weights(weight_decay, mask, cautious=cautious_weight_decay),
        scale_by_learning_rate(learning_rate),
    )


# --- RAdam ----------------------------------------------------------------------------------------------------------


def scale_by_radam(
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-8,
    eps_root: ArrayLike = 0.0,
    threshold: ArrayLike = 5.0,
    *,
    nesterov: bool = False,
) -> GradientTransformation:
    r"""Rescales updates with Rectified Adam: Adam's step, rectified while the variance estimate is unreliable.

    .. math::
      \rho_\infty = \frac{2}{1-\beta_2} - 1, \quad \rho_t = \rho_\infty - \frac{2 t \beta_2^t}{1-\beta_2^t}, \quad
      r_t = \sqrt{\frac{(\rho_t-4)(\rho_t-2)\rho_\infty}{(\rho_\infty-4)(\rho_\infty-2)\rho_t}}, \\
      u_t = r_t \frac{\hat m_t}{\sqrt{\hat v_t + \epsilon_{root}} + \epsilon} \ \text{if } \rho_t \ge
      \text{threshold}, \quad u_t = \hat m_t \ \text{otherwise}.

    :math:`\rho_\infty` is computed from the same (float32) :math:`\beta_2` as :math:`\beta_2^t`, so
    :math:`\rho_1 = 1` exactly (see ``docs/differences.md``). Moments follow :func:`scale_by_adam`'s dtype rule.

    Args:
      b1: :math:`\beta_1 \in [0, 1)`.
      b2: :math:`\beta_2 \in [0, 1)`.
      eps: :math:`\epsilon \ge 0`.
      eps_root: :math:`\epsilon_{root} \ge 0`.
      threshold: the value of :math:`\rho_t` from which the adaptive step is used.
      nesterov: use Nesterov momentum for :math:`\hat m_t` (see :func:`scale_by_adam`).

    Returns:
      A :class:`GradientTransformation` with state :class:`ScaleByAdamState`.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> tx = gradax.scale_by_radam()
      >>> tx.update(jnp.array([2.0]), tx.init(jnp.zeros(1)))[0]
      Array([2.], dtype=float32)

    References:
      Liu et al., 2020, "On the Variance of the Adaptive Learning Rate and Beyond".
    """
    check_adam_args("scale_by_radam", b1, b2, eps, eps_root)

    def make_leaf(count_inc):
        hat = FirstMomentHat.at(b1, count_inc, nesterov)
        beta2, e, e_root, thresh = hyper_values(b2, eps, eps_root, threshold)
        one_minus_b2 = 1 - beta2
        c2 = debias_factor(beta2, count_inc)
        rho_inf = 2 / one_minus_b2 - 1
        b2t = beta2**count_inc
        rho = rho_inf - 2 * count_inc.astype(rho_inf.dtype) * b2t / (1 - b2t)
        rect = jnp.sqrt((rho - 4) * (rho - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho))
        use_adaptive = rho >= thresh

        def leaf(g, m, v):
            m_new = ema_leaf(g, m, hat.b1, hat.one_minus_b1)
            v_new = ema_sq_leaf(g, v, beta2, one_minus_b2)
            m_hat = hat(g, m_new)
            adaptive = rect * m_hat / (jnp.sqrt(v_new / c2 + e_root) + e)
            return jnp.where(use_adaptive, adaptive, m_hat), m_new, v_new

        return leaf

    return moment_transformation(ScaleByAdamState, zero_moments(None, None), make_leaf)


def radam(
    learning_rate: ScalarOrSchedule,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-8,
    eps_root: ArrayLike = 0.0,
    threshold: ArrayLike = 5.0,
    *,
    nesterov: bool = False,
    weight_decay: ScalarOrSchedule | None = None,
    weight_decay_mask: MaskOrFn = None,
    cautious_weight_decay: bool = False,
) -> GradientTransformationExtraArgs:
    r"""The Rectified Adam optimizer: :func:`scale_by_radam` followed by a step of size :math:`-\eta_t`.

    .. math::
      \theta_t = \theta_{t-1} - \eta_t u_t \quad (u_t \text{ from } \texttt{scale\_by\_radam}).

    Args:
      learning_rate: :math:`\eta`, a number, an array or a schedule of the step count.
      b1: :math:`\beta_1 \in [0, 1)`.
      b2: :math:`\beta_2 \in [0, 1)`.
      eps: :math:`\epsilon \ge 0`.
      eps_root: :math:`\epsilon_{root} \ge 0`.
      threshold: the value of :math:`\rho_t` from which the adaptive step is used.
      nesterov: use Nesterov momentum.
      weight_decay: :math:`\lambda \ge 0`, decoupled weight decay added to the update before the learning rate
        (:math:`\theta \leftarrow \theta - \eta_t (u_t + \lambda_t \theta)`): a number, an array or a schedule.
        ``None`` (the default) adds nothing: the chain, its state and its numbers are Optax's.
      weight_decay_mask: which leaves to decay (a tree of booleans or a function of the params); ``None`` decays all.
      cautious_weight_decay: decay only where the update and the parameter have the same sign (Chen et al., 2025).

    Returns:
      A :class:`GradientTransformationExtraArgs`.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> opt = gradax.radam(learning_rate=0.1)
      >>> opt.update(jnp.array([2.0]), opt.init(jnp.zeros(1)))[0]
      Array([-0.2], dtype=float32)

    References:
      Liu et al., 2020, "On the Variance of the Adaptive Learning Rate and Beyond".
    """
    check_adam_args("radam", b1, b2, eps, eps_root)
    return chain(
        scale_by_radam(b1, b2, eps, eps_root, threshold, nesterov=nesterov),
        *decoupled_weight_decay(weight_decay, weight_decay_mask, cautious_weight_decay),
        scale_by_learning_rate(learning_rate),
    )


# --- AdaBelief ------------------------------------------------------------------------------------------------------


def scale_by_belief(
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-16,
    eps_root: ArrayLike = 1e-16,
    *,
    nesterov: bool = False,
) -> GradientTransformation:
    r"""Rescales updates with AdaBelief: Adam with the variance of the gradient around its moving average.

    .. math::
      m_t = \beta_1 m_{t-1} + (1-\beta_1) g_t, \quad
      s_t = \beta_2 s_{t-1} + (1-\beta_2) |g_t - m_t|^2 + \epsilon_{root}, \quad
      u_t = \frac{m_t / (1-\beta_1^t)}{\sqrt{s_t / (1-\beta_2^t)} + \epsilon}.

    Moments follow :func:`scale_by_adam`'s dtype rule.

    Args:
      b1: :math:`\beta_1 \in [0, 1)`.
      b2: :math:`\beta_2 \in [0, 1)`.
      eps: :math:`\epsilon \ge 0`.
      eps_root: :math:`\epsilon_{root} \ge 0`, added to :math:`s_t` at every step (it is kept in the state).
      nesterov: use Nesterov momentum for the first moment.

    Returns:
      A :class:`GradientTransformation` with state :class:`ScaleByBeliefState`.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> tx = gradax.scale_by_belief()
      >>> jnp.round(tx.update(jnp.array([2.0]), tx.init(jnp.zeros(1)))[0], 4)
      Array([1.1111], dtype=float32)

    References:
      Zhuang et al., 2020, "AdaBelief Optimizer: Adapting Stepsizes by the Belief in Observed Gradients".
    """
    check_adam_args("scale_by_belief", b1, b2, eps, eps_root)

    def make_leaf(count_inc):
        hat, beta2, one_minus_b2, c2, e, e_root = AdamScalars.at(b1, b2, eps, eps_root, count_inc, nesterov)

        def leaf(g, m, s):
            m_new = ema_leaf(g, m, hat.b1, hat.one_minus_b1)
            s_new = ema_sq_leaf(g - m_new, s, beta2, one_minus_b2) + e_root
            return hat(g, m_new) / (jnp.sqrt(s_new / c2) + e), m_new, s_new

        return leaf

    return moment_transformation(ScaleByBeliefState, zero_moments(None, None), make_leaf)


def adabelief(
    learning_rate: ScalarOrSchedule,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-16,
    eps_root: ArrayLike = 1e-16,
    *,
    nesterov: bool = False,
    weight_decay: ScalarOrSchedule | None = None,
    weight_decay_mask: MaskOrFn = None,
    cautious_weight_decay: bool = False,
) -> GradientTransformationExtraArgs:
    r"""The AdaBelief optimizer: :func:`scale_by_belief` followed by a step of size :math:`-\eta_t`.

    .. math::
      \theta_t = \theta_{t-1} - \eta_t \frac{\hat m_t}{\sqrt{\hat s_t} + \epsilon}.

    Args:
      learning_rate: :math:`\eta`, a number, an array or a schedule of the step count.
      b1: :math:`\beta_1 \in [0, 1)`.
      b2: :math:`\beta_2 \in [0, 1)`.
      eps: :math:`\epsilon \ge 0`.
      eps_root: :math:`\epsilon_{root} \ge 0`.
      nesterov: use Nesterov momentum.
      weight_decay: :math:`\lambda \ge 0`, decoupled weight decay added to the update before the learning rate
        (:math:`\theta \leftarrow \theta - \eta_t (u_t + \lambda_t \theta)`): a number, an array or a schedule.
        ``None`` (the default) adds nothing: the chain, its state and its numbers are Optax's.
      weight_decay_mask: which leaves to decay (a tree of booleans or a function of the params); ``None`` decays all.
      cautious_weight_decay: decay only where the update and the parameter have the same sign (Chen et al., 2025).

    Returns:
      A :class:`GradientTransformationExtraArgs`.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> opt = gradax.adabelief(learning_rate=0.1)
      >>> opt.update(jnp.array([2.0]), opt.init(jnp.zeros(1)))[0]
      Array([-0.2], dtype=float32)

    References:
      Zhuang et al., 2020, "AdaBelief Optimizer: Adapting Stepsizes by the Belief in Observed Gradients".
    """
    check_adam_args("adabelief", b1, b2, eps, eps_root)
    return chain(
        scale_by_belief(b1, b2, eps, eps_root, nesterov=nesterov),
        *decoupled_weight_decay(weight_decay, weight_decay_mask, cautious_weight_decay),
        scale_by_learning_rate(learning_rate),
    )


# --- Yogi -----------------------------------------------------------------------------------------------------------


def scale_by_yogi(
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-3,
    eps_root: ArrayLike = 0.0,
    initial_accumulator_value: ArrayLike = 1e-6,
) -> GradientTransformation:
    r"""Rescales updates with Yogi: Adam whose second moment moves by an additive, sign-controlled step.

    .. math::
      v_t = v_{t-1} - (1-\beta_2)\, \mathrm{sign}(v_{t-1} - |g_t|^2)\, |g_t|^2, \quad
      u_t = \frac{m_t / (1-\beta_1^t)}{\sqrt{v_t / (1-\beta_2^t) + \epsilon_{root}} + \epsilon},

    with both moments starting at ``initial_accumulator_value`` (not zero). Moments follow :func:`scale_by_adam`'s
    dtype rule.

    Args:
      b1: :math:`\beta_1 \in [0, 1)`.
      b2: :math:`\beta_2 \in [0, 1)`.
      eps: :math:`\epsilon \ge 0`.
      eps_root: :math:`\epsilon_{root} \ge 0`.
      initial_accumulator_value: the starting value of both moments, > 0.

    Returns:
      A :class:`GradientTransformation` with state :class:`ScaleByAdamState`.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> tx = gradax.scale_by_yogi()
      >>> tx.init(jnp.zeros(2)).nu
      Array([1.e-06, 1.e-06], dtype=float32)

    References:
      Zaheer et al., 2018, "Adaptive Methods for Nonconvex Optimization".
    """
    check_adam_args("scale_by_yogi", b1, b2, eps, eps_root)
    check_positive("scale_by_yogi", "initial_accumulator_value", initial_accumulator_value)

    def init_moments(params):
        value = as_value(initial_accumulator_value)
        return full_state_like(params, value), full_state_like(params, value)

    def make_leaf(count_inc):
        beta1, beta2, e, e_root = hyper_values(b1, b2, eps, eps_root)
        one_minus_b1, one_minus_b2 = 1 - beta1, 1 - beta2
        c1, c2 = debias_factor(beta1, count_inc), debias_factor(beta2, count_inc)

        def leaf(g, m, v):
            m_new = ema_leaf(g, m, beta1, one_minus_b1)
            g2 = abs_sq(g)
            v_new = v - one_minus_b2 * jnp.sign(v - g2) * g2
            return (m_new / c1) / (jnp.sqrt(v_new / c2 + e_root) + e), m_new, v_new

        return leaf

    return moment_transformation(ScaleByAdamState, init_moments, make_leaf)


def yogi(
    learning_rate: ScalarOrSchedule,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-3,
    *,
    weight_decay: ScalarOrSchedule | None = None,
    weight_decay_mask: MaskOrFn = None,
    cautious_weight_decay: bool = False,
) -> GradientTransformationExtraArgs:
    r"""The Yogi optimizer: :func:`scale_by_yogi` followed by a step of size :math:`-\eta_t`.

    .. math::
      \theta_t = \theta_{t-1} - \eta_t \frac{\hat m_t}{\sqrt{\hat v_t} + \epsilon}.

    Args:
      learning_rate: :math:`\eta`, a number, an array or a schedule of the step count.
      b1: :math:`\beta_1 \in [0, 1)`.
      b2: :math:`\beta_2 \in [0, 1)`.
      eps: :math:`\epsilon \ge 0`.
      weight_decay: :math:`\lambda \ge 0`, decoupled weight decay added to the update before the learning rate
        (:math:`\theta \leftarrow \theta - \eta_t (u_t + \lambda_t \theta)`): a number, an array or a schedule.
        ``None`` (the default) adds nothing: the chain, its state and its numbers are Optax's.
      weight_decay_mask: which leaves to decay (a tree of booleans or a function of the params); ``None`` decays all.
      cautious_weight_decay: decay only where the update and the parameter have the same sign (Chen et al., 2025).

    Returns:
      A :class:`GradientTransformationExtraArgs`.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> opt = gradax.yogi(learning_rate=0.1)
      >>> opt.update(jnp.array([1.0]), opt.init(jnp.zeros(1)))[0].shape
      (1,)

    References:
      Zaheer et al., 2018, "Adaptive Methods for Nonconvex Optimization".
    """
    check_adam_args("yogi", b1, b2, eps, 0.0)
    return chain(
        scale_by_yogi(b1, b2, eps),
        *decoupled_weight_decay(weight_decay, weight_decay_mask, cautious_weight_decay),
        scale_by_learning_rate(learning_rate),
    )
