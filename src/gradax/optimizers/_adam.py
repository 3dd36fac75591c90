"""Adam and its direct recipes: scale_by_adam, adam, adamw, nadam, nadamw."""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from .._base import GradientTransformation, GradientTransformationExtraArgs, MaskOrFn, ScalarOrSchedule, Updates
from .._checks import check_decay, check_non_negative
from .._hyperparams import hyper_values
from .._numerics import safe_int32_increment
from .._quantization import (
    FIRST_MOMENT,
    SECOND_MOMENT,
    Blockwise8bit,
    quantized_step,
    quantized_zeros,
    resolve_moments,
)
from .._state import zeros_state_like
from ..transforms._adding import add_decayed_weights
from ..transforms._combining import chain
from ..transforms._scaling import scale_by_learning_rate
from ._moments import debias_factor, ema_leaf, ema_sq_leaf, moment_transformation


class ScaleByAdamState(NamedTuple):
    """State of :func:`scale_by_adam` (also used by :func:`scale_by_adamax`, :func:`scale_by_radam` and
    :func:`scale_by_yogi`)."""

    count: jax.Array  # shape=(), dtype=int32: the number of updates so far
    mu: Updates  # like params, dtype=mu_dtype rule: first moment
    nu: Updates  # like params, dtype=nu_dtype rule: second moment


def check_adam_args(api: str, b1: Any, b2: Any, eps: Any, eps_root: Any) -> None:
    """Validates the hyperparameters shared by the Adam family (concrete values only)."""
    check_decay(api, "b1", b1)
    check_decay(api, "b2", b2)
    check_non_negative(api, "eps", eps)
    check_non_negative(api, "eps_root", eps_root)


class FirstMomentHat(NamedTuple):
    """Scalars for the bias-corrected first moment, computed once per step (not per array)."""

    b1: jax.Array
    one_minus_b1: jax.Array
    correction: jax.Array  # 1 - b1**t
    next_correction: jax.Array | None  # 1 - b1**(t+1), for Nesterov

    @classmethod
    def at(cls, b1: Any, count_inc: jax.Array, nesterov: bool) -> "FirstMomentHat":
        (beta1,) = hyper_values(b1)
        nxt = debias_factor(beta1, safe_int32_increment(count_inc)) if nesterov else None
        return cls(beta1, 1 - beta1, debias_factor(beta1, count_inc), nxt)

    def __call__(self, g: jax.Array, m: jax.Array) -> jax.Array:
        """The bias-corrected first moment (plain), or Nesterov's look-ahead combination of moment and gradient."""
        if self.next_correction is None:
            return m / self.correction
        return self.b1 * (m / self.next_correction) + self.one_minus_b1 * (g / self.correction)


class AdamScalars(NamedTuple):
    """The scalars of one Adam step, computed once per step: the first moment's hat and the second moment's decay,
    bias correction and epsilons (shared by :func:`scale_by_adam`, :func:`scale_by_belief` and ``gradax.fused``)."""

    hat: FirstMomentHat
    b2: jax.Array
    one_minus_b2: jax.Array
    correction2: jax.Array  # 1 - b2**t
    eps: jax.Array
    eps_root: jax.Array

    @classmethod
    def at(cls, b1: Any, b2: Any, eps: Any, eps_root: Any, count_inc: jax.Array, nesterov: bool) -> "AdamScalars":
        hat = FirstMomentHat.at(b1, count_inc, nesterov)
        beta2, e, e_root = hyper_values(b2, eps, eps_root)
        return cls(hat, beta2, 1 - beta2, debias_factor(beta2, count_inc), e, e_root)


def scale_by_adam(
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-8,
    eps_root: ArrayLike = 0.0,
    mu_dtype: Any | None = None,
    *,
    nesterov: bool = False,
    nu_dtype: Any | None = None,
    moments: str | Blockwise8bit | None = None,
) -> GradientTransformation:
    r"""Rescales updates with Adam's bias-corrected moment estimates.

    .. math::
      m_t = \beta_1 m_{t-1} + (1-\beta_1) g_t, \quad v_t = \beta_2 v_{t-1} + (1-\beta_2) |g_t|^2, \\
      \hat m_t = \frac{m_t}{1-\beta_1^t}, \quad \hat v_t = \frac{v_t}{1-\beta_2^t}, \quad
      u_t = \frac{\hat m_t}{\sqrt{\hat v_t + \epsilon_{root}} + \epsilon}.

    With ``nesterov=True`` (NAdam), :math:`\hat m_t = \beta_1 \frac{m_t}{1-\beta_1^{t+1}} + (1-\beta_1)
    \frac{g_t}{1-\beta_1^t}`.

    Dtypes: ``mu`` is kept in ``mu_dtype`` and ``nu`` in ``nu_dtype`` when given. When not given, a moment takes the
    dtype of its parameter, except for bfloat16/float16 parameters, whose moments are float32 (a bfloat16 ``nu``
    loses small gradients and ``b2=0.999`` would round to 1). The arithmetic is done in at least float32 and the
    updates come back in the dtype of the incoming updates.

    Low-memory mode (not in Optax): ``moments="8bit"`` (or a :class:`gradax.Blockwise8bit`) stores ``mu`` and ``nu``
    of every floating parameter with at least ``min_size`` (4096) elements as a :class:`gradax.BlockQuantized`:
    8-bit codes plus one float32 scale per block of 256 elements, about 0.25x of float32 moments (Dettmers et al.,
    2022). Each step decodes them, computes the moments and the update in float32 as above, and encodes the new
    moments; the default (``moments=None``) is unchanged.

    Args:
      b1: :math:`\beta_1 \in [0, 1)`, decay of the first moment.
      b2: :math:`\beta_2 \in [0, 1)`, decay of the second moment.
      eps: :math:`\epsilon \ge 0`, added to the denominator outside the square root.
      eps_root: :math:`\epsilon_{root} \ge 0`, added inside the square root (make it positive to differentiate
        through the update).
      mu_dtype: dtype of the first moment (see the dtype rule above).
      nesterov: use Nesterov momentum (NAdam).
      nu_dtype: dtype of the second moment (see the dtype rule above); not in Optax.
      moments: None (dense moments), ``"8bit"`` or a :class:`gradax.Blockwise8bit`: block-wise 8-bit moments;
        not in Optax, and not combinable with ``mu_dtype``/``nu_dtype``.

    Returns:
      A :class:`GradientTransformation` with state :class:`ScaleByAdamState`.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> tx = gradax.scale_by_adam()
      >>> u, state = tx.update(jnp.array([2.0, -4.0]), tx.init(jnp.zeros(2)))
      >>> jnp.round(u, 4)
      Array([ 1., -1.], dtype=float32)

    References:
      Kingma and Ba, 2015, "Adam: A Method for Stochastic Optimization";
      Dozat, 2016, "Incorporating Nesterov Momentum into Adam";
      Dettmers et al., 2022, "8-bit Optimizers via Block-wise Quantization" (``moments="8bit"``).
    """
    check_adam_args("scale_by_adam", b1, b2, eps, eps_root)
    storage = resolve_moments("scale_by_adam", moments, mu_dtype, nu_dtype)

    def init_moments(params):
        if storage is not None:
            return quantized_zeros(params, storage), quantized_zeros(params, storage)
        return zeros_state_like(params, mu_dtype), zeros_state_like(params, nu_dtype)

    def make_leaf(count_inc):
        hat, beta2, one_minus_b2, c2, e, e_root = AdamScalars.at(b1, b2, eps, eps_root, count_inc, nesterov)

        def leaf(gc, m, v):
            m_new = ema_leaf(gc, m, hat.b1, hat.one_minus_b1)
            v_new = ema_sq_leaf(gc, v, beta2, one_minus_b2)
            return hat(gc, m_new) / (jnp.sqrt(v_new / c2 + e_root) + e), m_new, v_new

        if storage is None:
            return leaf
        # 8-bit moments: the same arithmetic on (num_blocks, block_size) views; one hash for both roundings
        kinds = ((FIRST_MOMENT, hat.b1, hat.one_minus_b1), (SECOND_MOMENT, beta2, one_minus_b2))
        return quantized_step(leaf, kinds, 2 * count_inc)

    return moment_transformation(ScaleByAdamState, init_moments, make_leaf)


def _adam_chain(api, learning_rate, b1, b2, eps, eps_root, mu_dtype, nesterov, nu_dtype, moments, decay=None):
    check_adam_args(api, b1, b2, eps, eps_root)
    resolve_moments(api, moments, mu_dtype, nu_dtype)
    parts = [scale_by_adam(b1, b2, eps, eps_root, mu_dtype, nesterov=nesterov, nu_dtype=nu_dtype, moments=moments)]
    if decay is not None:
        weight_decay, mask, cautious = decay
        parts.append(add_decayed_weights(weight_decay, mask, cautious=cautious))
    parts.append(scale_by_learning_rate(learning_rate))
    return chain(*parts)


def adam(
    learning_rate: ScalarOrSchedule,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-8,
    eps_root: ArrayLike = 0.0,
    mu_dtype: Any | None = None,
    *,
    nesterov: bool = False,
    nu_dtype: Any | None = None,
    moments: str | Blockwise8bit | None = None,
) -> GradientTransformationExtraArgs:
    r"""The Adam optimizer: :func:`scale_by_adam` followed by a step of size :math:`-\eta_t`.

    .. math::
      \theta_{t} = \theta_{t-1} - \eta_t \frac{\hat m_t}{\sqrt{\hat v_t + \epsilon_{root}} + \epsilon}.

    Args:
      learning_rate: :math:`\eta`, a number, an array or a schedule of the step count.
      b1: :math:`\beta_1 \in [0, 1)`.
      b2: :math:`\beta_2 \in [0, 1)`.
      eps: :math:`\epsilon \ge 0`.
      eps_root: :math:`\epsilon_{root} \ge 0`.
      mu_dtype: dtype of the first moment (float32 for bfloat16/float16 params by default).
      nesterov: use Nesterov momentum (NAdam).
      nu_dtype: dtype of the second moment (float32 for bfloat16/float16 params by default).
      moments: None (dense), ``"8bit"`` or a :class:`gradax.Blockwise8bit`: 8-bit block-wise moments (see
        :func:`scale_by_adam`; not in Optax).

    Returns:
      A :class:`GradientTransformationExtraArgs` with state ``(ScaleByAdamState, ScaleState |
      ScaleByScheduleState)``.

    Example:
      >>> import gradax, jax, jax.numpy as jnp
      >>> params = jnp.array([1.0, -2.0])
      >>> opt = gradax.adam(learning_rate=0.1)
      >>> state = opt.init(params)
      >>> updates, state = opt.update(jax.grad(lambda p: jnp.sum(p**2))(params), state)
      >>> gradax.apply_updates(params, updates)
      Array([ 0.9, -1.9], dtype=float32)

    References:
      Kingma and Ba, 2015, "Adam: A Method for Stochastic Optimization".
    """
    return _adam_chain("adam", learning_rate, b1, b2, eps, eps_root, mu_dtype, nesterov, nu_dtype, moments)


def adamw(
    learning_rate: ScalarOrSchedule,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-8,
    eps_root: ArrayLike = 0.0,
    mu_dtype: Any | None = None,
    weight_decay: ScalarOrSchedule = 1e-4,
    mask: MaskOrFn = None,
    *,
    nesterov: bool = False,
    nu_dtype: Any | None = None,
    moments: str | Blockwise8bit | None = None,
    cautious_weight_decay: bool = False,
) -> GradientTransformationExtraArgs:
    r"""Adam with decoupled weight decay (AdamW).

    .. math::
      \theta_{t} = \theta_{t-1} - \eta_t \left(\frac{\hat m_t}{\sqrt{\hat v_t + \epsilon_{root}} + \epsilon}
      + \lambda_t \theta_{t-1}\right).

    Args:
      learning_rate: :math:`\eta`, a number, an array or a schedule of the step count.
      b1: :math:`\beta_1 \in [0, 1)`.
      b2: :math:`\beta_2 \in [0, 1)`.
      eps: :math:`\epsilon \ge 0`.
      eps_root: :math:`\epsilon_{root} \ge 0`.
      mu_dtype: dtype of the first moment.
      weight_decay: :math:`\lambda`, a number, an array or a schedule of the step count.
      mask: which parameters to decay: a tree of booleans like the params (or a prefix), or a function of the
        params returning one; None decays all.
      nesterov: use Nesterov momentum (NAdamW).
      nu_dtype: dtype of the second moment.
      moments: None (dense), ``"8bit"`` or a :class:`gradax.Blockwise8bit`: 8-bit block-wise moments (see
        :func:`scale_by_adam`; not in Optax).
      cautious_weight_decay: decay only where the update and the parameter have the same sign (Chen et al., 2025).

    Returns:
      A :class:`GradientTransformationExtraArgs`; ``update`` needs ``params``.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> params = jnp.array([1.0, -2.0])
      >>> opt = gradax.adamw(learning_rate=0.1, weight_decay=0.5)
      >>> updates, state = opt.update(jnp.array([2.0, -4.0]), opt.init(params), params)
      >>> gradax.apply_updates(params, updates)
      Array([ 0.85, -1.8 ], dtype=float32)

    References:
      Loshchilov and Hutter, 2019, "Decoupled Weight Decay Regularization".
    """
    return _adam_chain(
        "adamw",
        learning_rate,
        b1,
        b2,
        eps,
        eps_root,
        mu_dtype,
        nesterov,
        nu_dtype,
        moments,
        decay=(weight_decay, mask, cautious_weight_decay),
    )


def nadam(
    learning_rate: ScalarOrSchedule,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-8,
    eps_root: ArrayLike = 0.0,
    mu_dtype: Any | None = None,
    *,
    nesterov: bool = True,
    nu_dtype: Any | None = None,
    moments: str | Blockwise8bit | None = None,
) -> GradientTransformationExtraArgs:
    r"""NAdam: :func:`adam` with Nesterov momentum (``nesterov=True`` by default).

    .. math::
      \hat m_t = \beta_1 \frac{m_t}{1-\beta_1^{t+1}} + (1-\beta_1) \frac{g_t}{1-\beta_1^t}, \quad
      \theta_t = \theta_{t-1} - \eta_t \frac{\hat m_t}{\sqrt{\hat v_t + \epsilon_{root}} + \epsilon}.

    Args:
      learning_rate: :math:`\eta`, a number, an array or a schedule of the step count.
      b1: :math:`\beta_1 \in [0, 1)`.
      b2: :math:`\beta_2 \in [0, 1)`.
      eps: :math:`\epsilon \ge 0`.
      eps_root: :math:`\epsilon_{root} \ge 0`.
      mu_dtype: dtype of the first moment.
      nesterov: keep True for NAdam (False gives :func:`adam`).
      nu_dtype: dtype of the second moment.
      moments: None (dense), ``"8bit"`` or a :class:`gradax.Blockwise8bit`: 8-bit block-wise moments (see
        :func:`scale_by_adam`; not in Optax).

    Returns:
      A :class:`GradientTransformationExtraArgs`.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> opt = gradax.nadam(learning_rate=0.1)
      >>> u, _ = opt.update(jnp.array([1.0]), opt.init(jnp.zeros(1)))
      >>> u.shape
      (1,)

    References:
      Dozat, 2016, "Incorporating Nesterov Momentum into Adam".
    """
    return _adam_chain("nadam", learning_rate, b1, b2, eps, eps_root, mu_dtype, nesterov, nu_dtype, moments)


def nadamw(
    learning_rate: ScalarOrSchedule,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-8,
    eps_root: ArrayLike = 0.0,
    mu_dtype: Any | None = None,
    weight_decay: ScalarOrSchedule = 1e-4,
    mask: MaskOrFn = None,
    *,
    nesterov: bool = True,
    nu_dtype: Any | None = None,
    moments: str | Blockwise8bit | None = None,
    cautious_weight_decay: bool = False,
) -> GradientTransformationExtraArgs:
    r"""NAdamW: :func:`adamw` with Nesterov momentum (``nesterov=True`` by default).

    .. math::
      \theta_{t} = \theta_{t-1} - \eta_t \left(\frac{\hat m_t}{\sqrt{\hat v_t + \epsilon_{root}} + \epsilon}
      + \lambda_t \theta_{t-1}\right), \quad
      \hat m_t = \beta_1 \frac{m_t}{1-\beta_1^{t+1}} + (1-\beta_1) \frac{g_t}{1-\beta_1^t}.

    Args:
      learning_rate: :math:`\eta`, a number, an array or a schedule of the step count.
      b1: :math:`\beta_1 \in [0, 1)`.
      b2: :math:`\beta_2 \in [0, 1)`.
      eps: :math:`\epsilon \ge 0`.
      eps_root: :math:`\epsilon_{root} \ge 0`.
      mu_dtype: dtype of the first moment.
      weight_decay: :math:`\lambda`, a number, an array or a schedule.
      mask: which parameters to decay (see :func:`adamw`).
      nesterov: keep True for NAdamW.
      nu_dtype: dtype of the second moment.
      moments: None (dense), ``"8bit"`` or a :class:`gradax.Blockwise8bit`: 8-bit block-wise moments (see
        :func:`scale_by_adam`; not in Optax).
      cautious_weight_decay: decay only where the update and the parameter have the same sign (Chen et al., 2025).

    Returns:
      A :class:`GradientTransformationExtraArgs`; ``update`` needs ``params``.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> opt = gradax.nadamw(learning_rate=0.1)
      >>> params = jnp.ones(1)
      >>> u, _ = opt.update(jnp.array([1.0]), opt.init(params), params)
      >>> u.shape
      (1,)

    References:
      Dozat, 2016, "Incorporating Nesterov Momentum into Adam";
      Loshchilov and Hutter, 2019, "Decoupled Weight Decay Regularization".
    """
    return _adam_chain(
        "nadamw",
        learning_rate,
        b1,
        b2,
        eps,
        eps_root,
        mu_dtype,
        nesterov,
        nu_dtype,
        moments,
        decay=(weight_decay, mask, cautious_weight_decay),
    )
