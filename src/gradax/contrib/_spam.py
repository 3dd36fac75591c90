"""SPAM: Adam with periodic momentum resets, spike-aware gradient clipping and a cosine warmup after each reset."""

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from .._base import GradientTransformation, GradientTransformationExtraArgs, MaskOrFn, ScalarOrSchedule
from .._checks import check_decay, check_int, check_non_negative
from .._hyperparams import hyper_values
from .._maps import map_n
from .._numerics import abs_sq, compute_dtype, safe_int32_increment
from .._state import zeros_state_like
from ..optimizers._moments import debias_factor, ema_leaf
from ..transforms._adding import add_decayed_weights
from ..transforms._combining import chain
from ..transforms._scaling import scale_by_learning_rate

_WARMUP_START = 0.99  # the fraction of the step removed right after a reset (then decayed to 0 by a cosine)


class ScaleBySpamState(NamedTuple):
    """State of :func:`scale_by_spam`."""

    count: jax.Array  # shape=(), dtype=int32: the number of updates so far
    mu: Any  # like params (mu_dtype; float32 for bf16/f16 params): the momentum (zeroed every reset_interval steps)
    nu: Any  # like params (float32 for bf16/f16 params): the second moment (zeroed with the momentum)


def _warmup_scale(t: jax.Array, reset_interval: int, warmup_steps: int, dtype: Any) -> jax.Array:
    """The step's multiplier: 1 before the first reset; after a reset at step ``t0``, step ``t0 + k`` gets
    ``1 - 0.99 (1 + cos(pi (k + 1) / (warmup_steps + 1))) / 2`` for ``k < warmup_steps``, then 1."""
    since = jnp.mod(t, reset_interval)
    k = since.astype(dtype)
    removed = _WARMUP_START * (1 + jnp.cos(math.pi * (k + 1) / (warmup_steps + 1))) / 2
    warming = jnp.logical_and(t >= reset_interval, since < warmup_steps)
    return jnp.where(warming, 1 - removed, 1.0)


def scale_by_spam(
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-6,
    *,
    threshold: ArrayLike = 5000.0,
    reset_interval: int = 500,
    warmup_steps: int = 50,
    clip_delay: int = 20,
    mu_dtype: Any | None = None,
) -> GradientTransformation:
    r"""Rescales updates with SPAM: Adam that resets its moments periodically and clips gradient spikes.

    With :math:`t` the 1-based step, :math:`T` = ``reset_interval``, :math:`\theta` = ``threshold``:

    * every :math:`T` steps (:math:`t \bmod T = 0`) the moments are zeroed before the step;
    * spike-aware clipping, from step ``clip_delay`` on and at least ``clip_delay`` steps after a reset: where
      :math:`g_t^2 > \theta\, v_{t-1}`, :math:`g_t \leftarrow \mathrm{sign}(g_t) \sqrt{\theta\, v_{t-1}}`;
    * Adam's step, bias-corrected with the global step count:

    .. math::
      m_t = \beta_1 m_{t-1} + (1-\beta_1) g_t, \qquad v_t = \beta_2 v_{t-1} + (1-\beta_2) g_t^2, \qquad
      u_t = s_t \frac{\sqrt{1-\beta_2^t}}{1-\beta_1^t} \frac{m_t}{\sqrt{v_t} + \varepsilon},

    where :math:`s_t` ramps the step back up after each reset along a cosine over ``warmup_steps`` steps (from
    0.01 to 1; :math:`s_t = 1` before the first reset). Use it to train large language models through loss spikes:
    a spike is clipped instead of poisoning the moments, and the resets discard what a spike left behind.
    The paper's sparse-momentum variant (a random subset of the entries of each matrix) is not provided.
    The momentum's bound is computed from the new second moment (at a spike
    :math:`\theta v_{t-1} = \kappa v_t` with :math:`\kappa = \theta / (\beta_2 + (1-\beta_2)\theta)`): the same
    numbers up to rounding, and a step that reads and writes each array as often as AdamW's.

    Args:
      b1: :math:`\beta_1 \in [0, 1)`, decay of the momentum.
      b2: :math:`\beta_2 \in [0, 1)`, decay of the second moment.
      eps: :math:`\varepsilon \ge 0`, added to the denominator.
      threshold: :math:`\theta \ge 0`; a squared gradient above :math:`\theta v` is a spike. 0 turns clipping off.
      reset_interval: :math:`T \ge 1`, steps between momentum resets.
      warmup_steps: steps of the cosine ramp after each reset (an int >= 0).
      clip_delay: steps to wait (from the start and after each reset) before clipping (an int >= 0).
      mu_dtype: dtype of the momentum.

    Returns:
      A :class:`GradientTransformation` with state :class:`ScaleBySpamState`.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> tx = gradax.contrib.scale_by_spam(eps=0.0)
      >>> tx.update(jnp.array([0.5, -2.0]), tx.init(jnp.zeros(2)))[0]
      Array([ 1., -1.], dtype=float32)

    References:
      Huang et al., 2025, "SPAM: Spike-Aware Adam with Momentum Reset for Stable LLM Training" (ICLR),
      https://arxiv.org/abs/2501.06842.
    """
    api = "scale_by_spam"
    check_decay(api, "b1", b1)
    check_decay(api, "b2", b2)
    check_non_negative(api, "eps", eps)
    check_non_negative(api, "threshold", threshold)
    check_int(api, "reset_interval", reset_interval, low=1)
    check_int(api, "warmup_steps", warmup_steps, low=0)
    check_int(api, "clip_delay", clip_delay, low=0)

    def init(params):
        return ScaleBySpamState(
            count=jnp.zeros([], jnp.int32), mu=zeros_state_like(params, mu_dtype), nu=zeros_state_like(params)
        )

    def update(updates, state, params=None):
        del params
        beta1, beta2, e, theta = hyper_values(b1, b2, eps, threshold)
        t = safe_int32_increment(state.count)
        reset = jnp.mod(t, reset_interval) == 0
        clip = jnp.logical_and(t >= clip_delay, jnp.mod(t, reset_interval) >= clip_delay)
        clip = jnp.logical_and(clip, theta != 0)
        kappa = theta / (beta2 + (1 - beta2) * theta)  # the spike bound on g^2 in units of the new second moment
        step_scale = (
            jnp.sqrt(debias_factor(beta2, t))
            / debias_factor(beta1, t)
            * _warmup_scale(t, reset_interval, warmup_steps, beta1.dtype)
        )

        def leaf(g, m, v):
            gc = g.astype(compute_dtype(g.dtype))
            sq = abs_sq(gc)
            m = jnp.where(reset, 0, m).astype(m.dtype)
            v = jnp.where(reset, 0, v).astype(v.dtype)
            # the clipped gradient's square is min(g^2, theta v): the second moment's pass needs no square root
            bound = theta * v
            v_new = ema_leaf(jnp.where(jnp.logical_and(clip, sq > bound), bound, sq), v, beta2, 1 - beta2)
            v_new = v_new.astype(v.dtype)
            # the momentum's pass reads the new second moment, not the old one (which v_new overwrites in place):
            # theta v_{t-1} = kappa v_t at a spike, and g^2 > theta v_{t-1} exactly when g^2 > kappa v_t
            bound = kappa * v_new
            clipped = jnp.where(jnp.logical_and(clip, sq > bound), jnp.sign(gc) * jnp.sqrt(bound), gc)
            m_new = ema_leaf(clipped, m, beta1, 1 - beta1).astype(m.dtype)
            u = step_scale * m_new / (jnp.sqrt(v_new) + e)
            return u.astype(g.dtype), m_new, v_new

        out, mu, nu = map_n(3, leaf, updates, state.mu, state.nu)
        return out, ScaleBySpamState(count=t, mu=mu, nu=nu)

    return GradientTransformation(init, update)


def spam(
    learning_rate: ScalarOrSchedule = 1e-3,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-6,
    weight_decay: ScalarOrSchedule = 0.0,
    mask: MaskOrFn = None,
    *,
    threshold: ArrayLike = 5000.0,
    reset_interval: int = 500,
    warmup_steps: int = 50,
    clip_delay: int = 20,
    mu_dtype: Any | None = None,
    cautious_weight_decay: bool = False,
) -> GradientTransformationExtraArgs:
    r"""The SPAM optimizer with decoupled weight decay.

    .. math::
      \theta_t = \theta_{t-1} - \eta_t \left(u_t + \lambda_t \theta_{t-1}\right),

    with :math:`u_t` from :func:`scale_by_spam`.

    Args:
      learning_rate: :math:`\eta`, a number, an array or a schedule of the step count.
      b1: :math:`\beta_1 \in [0, 1)`.
      b2: :math:`\beta_2 \in [0, 1)`.
      eps: :math:`\varepsilon \ge 0`.
      weight_decay: :math:`\lambda \ge 0`, a number, an array or a schedule.
      mask: which leaves to decay (a tree of booleans or a function of the params); ``None`` decays all.
      threshold: the spike threshold (0 turns clipping off).
      reset_interval: steps between momentum resets.
      warmup_steps: steps of the cosine ramp after each reset.
      clip_delay: steps to wait before clipping.
      mu_dtype: dtype of the momentum.
      cautious_weight_decay: decay only where the update and the parameter have the same sign.

    Returns:
      A :class:`GradientTransformationExtraArgs`.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> opt = gradax.contrib.spam(learning_rate=0.1, eps=0.0)
      >>> opt.update(jnp.array([0.5, -2.0]), opt.init(jnp.zeros(2)), jnp.zeros(2))[0]
      Array([-0.1,  0.1], dtype=float32)

    References:
      Huang et al., 2025, "SPAM: Spike-Aware Adam with Momentum Reset for Stable LLM Training" (ICLR),
      https://arxiv.org/abs/2501.06842.
    """
    return chain(
        scale_by_spam(
            b1,
            b2,
            eps,
            threshold=threshold,
            reset_interval=reset_interval,
            warmup_steps=warmup_steps,
            clip_delay=clip_delay,
            mu_dtype=mu_dtype,
        ),
        add_decayed_weights(weight_decay, mask, cautious=cautious_weight_decay),
        scale_by_learning_rate(learning_rate),
    )
