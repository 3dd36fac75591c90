"""RMSProp: scaling by the root mean square (or the standard deviation) of past gradients."""

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from .._base import (
    GradientTransformation,
    GradientTransformationExtraArgs,
    MaskOrFn,
    Params,
    ScalarOrSchedule,
    identity,
)
from .._checks import check_decay, check_non_negative
from .._hyperparams import as_value
from .._maps import map_n
from .._numerics import abs_sq, compute_dtype, safe_int32_increment
from .._state import full_state_like
from ..transforms._accumulation import trace
from ..transforms._adding import decoupled_weight_decay
from ..transforms._combining import chain
from ..transforms._scaling import scale_by_learning_rate


class ScaleByRmsState(NamedTuple):
    """State of :func:`scale_by_rms` (without bias correction)."""

    nu: Params  # like params, float32 for bf16/f16 params: EMA of the squared gradients


class ScaleByRmsWithCountState(NamedTuple):
    """State of :func:`scale_by_rms` with ``bias_correction=True``."""

    count: jax.Array  # shape=(), dtype=int32: the number of updates so far
    nu: Params  # like params: EMA of the squared gradients


class ScaleByRStdDevState(NamedTuple):
    """State of :func:`scale_by_stddev` (without bias correction)."""

    mu: Params  # like params: EMA of the gradients
    nu: Params  # like params: EMA of the squared gradients


class ScaleByRStdDevWithCountState(NamedTuple):
    """State of :func:`scale_by_stddev` with ``bias_correction=True``."""

    count: jax.Array  # shape=(), dtype=int32: the number of updates so far
    mu: Params  # like params: EMA of the gradients
    nu: Params  # like params: EMA of the squared gradients


def _scaled(g, variance, eps, eps_in_sqrt: bool):
    """``g / sqrt(variance + eps)`` (or ``g / (sqrt(variance) + eps)``), with ``0 / 0`` defined as 0.

    The division is written as a multiplication by ``rsqrt`` (resp. a reciprocal) as in the published rule. Where the
    denominator is exactly 0 (zero gradients with ``eps=0``) the update is 0 instead of ``0 * inf = NaN``; NaN
    inputs still give NaN.
    """
    if eps_in_sqrt:
        denom = variance + eps
        out = jax.lax.rsqrt(denom) * g
    else:
        denom = jnp.sqrt(variance) + eps
        out = (1 / denom) * g
    return jnp.where(denom == 0, jnp.zeros_like(out), out)


def _check_args(api, decay, eps, initial_scale):
    check_decay(api, "decay", decay)
    check_non_negative(api, "eps", eps)
    check_non_negative(api, "initial_scale", initial_scale)


def _step_scalars(decay, eps, bias_correction: bool, state):
    """This step's ``decay`` and ``eps`` values, the incremented count and the bias correction ``1 - decay**count``
    (both None without ``bias_correction``: the state then has no count)."""
    rho, e = as_value(decay), as_value(eps)
    if not bias_correction:
        return rho, e, None, None
    count = safe_int32_increment(state.count)
    return rho, e, count, 1 - rho**count


def _ema(x, moment, rho, correction, dtype):
    """One moving-average step of ``x`` into ``moment`` (computed in ``dtype``, stored in the moment's dtype) and the
    new moment divided by ``correction`` (the new moment itself when ``correction`` is None)."""
    new = ((1 - rho) * x + rho * moment.astype(dtype)).astype(moment.dtype)
    return new, (new if correction is None else new / correction.astype(new.dtype))


def _state(counted_cls, plain_cls, count, **moments):
    """``counted_cls(count, **moments)``, or ``plain_cls(**moments)`` when there is no count (no bias correction)."""
    return plain_cls(**moments) if count is None else counted_cls(count=count, **moments)


def scale_by_rms(
    decay: ArrayLike = 0.9,
    eps: ArrayLike = 1e-8,
    initial_scale: ArrayLike = 0.0,
    eps_in_sqrt: bool = True,
    bias_correction: bool = False,
) -> GradientTransformation:
    r"""Divides updates by the root of an exponential moving average of their squares (RMSProp's scaling).

    .. math::
      \nu_t = \rho\, \nu_{t-1} + (1 - \rho)\, |g_t|^2, \qquad
      u_t = \frac{g_t}{\sqrt{\hat\nu_t + \epsilon}} \ \ \text{or} \ \ \frac{g_t}{\sqrt{\hat\nu_t} + \epsilon},

    with :math:`\hat\nu_t = \nu_t / (1 - \rho^t)` when ``bias_correction`` else :math:`\nu_t`, and
    :math:`\nu_0` = ``initial_scale``. Where the denominator is exactly zero (zero gradients and ``eps=0``) the
    update is defined as 0.

    Args:
      decay: :math:`\rho \in [0, 1)`, the decay of the moving average.
      eps: :math:`\epsilon \ge 0`, added for numerical stability.
      initial_scale: :math:`\nu_0 \ge 0`, the initial value of the moving average.
      eps_in_sqrt: add :math:`\epsilon` inside the square root (True) or outside it (False).
      bias_correction: divide the moving average by :math:`1 - \rho^t`.

    Returns:
      A :class:`GradientTransformation` with state :class:`ScaleByRmsState` (``ScaleByRmsWithCountState`` with
      bias correction).

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> tx = gradax.scale_by_rms(decay=0.75, eps=0.0)
      >>> tx.update(jnp.array([2.0, 0.0]), tx.init(jnp.zeros(2)))[0]
      Array([2., 0.], dtype=float32)

    References:
      Hinton, 2012, "Neural Networks for Machine Learning", lecture 6e (RMSProp).
    """
    _check_args("scale_by_rms", decay, eps, initial_scale)
    states = (ScaleByRmsWithCountState, ScaleByRmsState)

    def init(params):
        count = jnp.zeros([], jnp.int32) if bias_correction else None
        return _state(*states, count, nu=full_state_like(params, initial_scale))

    def update(updates, state, params=None):
        del params
        rho, e, count, correction = _step_scalars(decay, eps, bias_correction, state)

        def leaf(g, nu):
            dtype = compute_dtype(g.dtype)
            new_nu, nu_hat = _ema(abs_sq(g.astype(dtype)), nu, rho, correction, dtype)
            out = _scaled(g.astype(dtype), nu_hat.astype(dtype), e, eps_in_sqrt)
            return out.astype(g.dtype), new_nu

        new_updates, new_nu = map_n(2, leaf, updates, state.nu)
        return new_updates, _state(*states, count, nu=new_nu)

    return GradientTransformation(init, update)


def scale_by_stddev(
    decay: ArrayLike = 0.9,
    eps: ArrayLike = 1e-8,
    initial_scale: ArrayLike = 0.0,
    eps_in_sqrt: bool = True,
    bias_correction: bool = False,
) -> GradientTransformation:
    r"""Divides updates by the root of a moving estimate of their variance (centered RMSProp's scaling).

    .. math::
      \mu_t = \rho\, \mu_{t-1} + (1 - \rho)\, g_t, \quad
      \nu_t = \rho\, \nu_{t-1} + (1 - \rho)\, |g_t|^2, \quad
      u_t = \frac{g_t}{\sqrt{\hat\nu_t - |\hat\mu_t|^2 + \epsilon}}
      \ \ \text{or} \ \ \frac{g_t}{\sqrt{\hat\nu_t - |\hat\mu_t|^2} + \epsilon},

    with hats the bias-corrected moments when ``bias_correction`` is set. Where the denominator is exactly zero the
    update is defined as 0.

    Args:
      decay: :math:`\rho \in [0, 1)`, the decay of the moving averages.
      eps: :math:`\epsilon \ge 0`, added for numerical stability.
      initial_scale: :math:`\nu_0 \ge 0`, the initial value of the second moment.
      eps_in_sqrt: add :math:`\epsilon` inside the square root (True) or outside it (False).
      bias_correction: divide the moments by :math:`1 - \rho^t`.

    Returns:
      A :class:`GradientTransformation` with state :class:`ScaleByRStdDevState` (``ScaleByRStdDevWithCountState``
      with bias correction).

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> tx = gradax.scale_by_stddev(decay=0.5, eps=0.0)
      >>> tx.update(jnp.array([2.0]), tx.init(jnp.zeros(1)))[0]
      Array([2.], dtype=float32)

    References:
      Graves, 2013, "Generating Sequences With Recurrent Neural Networks" (centered RMSProp).
    """
    _check_args("scale_by_stddev", decay, eps, initial_scale)
    states = (ScaleByRStdDevWithCountState, ScaleByRStdDevState)

    def init(params):
        count = jnp.zeros([], jnp.int32) if bias_correction else None
        return _state(*states, count, mu=full_state_like(params, 0), nu=full_state_like(params, initial_scale))

    def update(updates, state, params=None):
        del params
        rho, e, count, correction = _step_scalars(decay, eps, bias_correction, state)

        def leaf(g, mu, nu):
            dtype = compute_dtype(g.dtype)
            gc = g.astype(dtype)
            new_mu, mu_hat = _ema(gc, mu, rho, correction, dtype)
            new_nu, nu_hat = _ema(abs_sq(gc), nu, rho, correction, dtype)
            variance = nu_hat.astype(dtype) - abs_sq(mu_hat.astype(dtype))
            out = _scaled(gc, variance, e, eps_in_sqrt)
            return out.astype(g.dtype), new_mu, new_nu

        new_updates, new_mu, new_nu = map_n(3, leaf, updates, state.mu, state.nu)
        return new_updates, _state(*states, count, mu=new_mu, nu=new_nu)

    return GradientTransformation(init, update)


def rmsprop(
    learning_rate: ScalarOrSchedule,
    decay: ArrayLike = 0.9,
    eps: ArrayLike = 1e-8,
    initial_scale: ArrayLike = 0.0,
    eps_in_sqrt: bool = True,
    centered: bool = False,
    momentum: ArrayLike | None = None,
    nesterov: bool = False,
    bias_correction: bool = False,
    *,
    weight_decay: ScalarOrSchedule | None = None,
    weight_decay_mask: MaskOrFn = None,
    cautious_weight_decay: bool = False,
) -> GradientTransformationExtraArgs:
    r"""RMSProp: gradients divided by a running RMS (or standard deviation), times the learning rate, with momentum.

    .. math::
      s_t = \eta_t \frac{g_t}{\sqrt{\nu_t + \epsilon}}, \qquad
      \theta_{t+1} = \theta_t - s_t \ \ (\text{or } - \text{trace}_\beta(s)_t \text{ with momentum}),

    where :math:`\nu_t` is the moving average of :func:`scale_by_rms` (of :func:`scale_by_stddev` when
    ``centered``).

    Args:
      learning_rate: :math:`\eta`, a number, an array or a schedule of the step count.
      decay: :math:`\rho \in [0, 1)`, the decay of the moving averages.
      eps: :math:`\epsilon \ge 0`.
      initial_scale: initial value of the second moment.
      eps_in_sqrt: add :math:`\epsilon` inside the square root (True) or outside it (False).
      centered: divide by the standard deviation rather than the RMS.
      momentum: :math:`\beta \in [0, 1)` for a momentum trace after the scaling, or None.
      nesterov: use Nesterov momentum.
      bias_correction: bias-correct the moving averages.
      weight_decay: :math:`\lambda \ge 0`, decoupled weight decay added to the update before the learning rate
        (:math:`\theta \leftarrow \theta - \eta_t (u_t + \lambda_t \theta)`): a number, an array or a schedule.
        ``None`` (the default) adds nothing: the chain, its state and its numbers are Optax's.
      weight_decay_mask: which leaves to decay (a tree of booleans or a function of the params); ``None`` decays all.
      cautious_weight_decay: decay only where the update and the parameter have the same sign (Chen et al., 2025).

    Returns:
      A :class:`GradientTransformationExtraArgs`: the chain of the scaling, the learning rate and the momentum.

    Example:
      >>> import gradax, jax, jax.numpy as jnp
      >>> params = jnp.array([1.0, -2.0])
      >>> opt = gradax.rmsprop(learning_rate=0.1)
      >>> state = opt.init(params)
      >>> for _ in range(100):
      ...     grads = jax.grad(lambda p: jnp.sum(p**2))(params)
      ...     updates, state = opt.update(grads, state)
      ...     params = gradax.apply_updates(params, updates)
      >>> bool(jnp.all(jnp.abs(params) < 0.1))
      True

    References:
      Hinton, 2012, "Neural Networks for Machine Learning", lecture 6e;
      Graves, 2013, "Generating Sequences With Recurrent Neural Networks".
    """
    if momentum is not None:
        check_decay("rmsprop", "momentum", momentum)
    scaling = scale_by_stddev if centered else scale_by_rms
    return chain(
        scaling(
            decay=decay, eps=eps, initial_scale=initial_scale, eps_in_sqrt=eps_in_sqrt, bias_correction=bias_correction
        ),
        *decoupled_weight_decay(weight_decay, weight_decay_mask, cautious_weight_decay),
        scale_by_learning_rate(learning_rate),
        trace(decay=momentum, nesterov=nesterov) if momentum is not None else identity(),
    )
