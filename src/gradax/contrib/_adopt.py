"""ADOPT: Adam whose second moment lags one step and normalizes the gradient before the momentum."""

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from .._base import GradientTransformation, GradientTransformationExtraArgs, ScalarOrSchedule
from .._checks import check_callable_or_none, check_decay, check_non_negative
from .._hyperparams import hyper_values
from .._maps import map_n
from .._numerics import compute_dtype, safe_int32_increment
from .._state import zeros_state_like
from ..optimizers._adam import ScaleByAdamState
from ..transforms._combining import chain
from ..transforms._scaling import scale_by_learning_rate


def _quarter_power(count: jax.Array) -> jax.Array:
    return count**0.25


def scale_by_adopt(
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.9999,
    eps: ArrayLike = 1e-6,
    mu_dtype: Any | None = None,
    *,
    nesterov: bool = False,
    use_clipping: bool = True,
    clip_value_fn: Callable[[jax.Array], jax.Array] = _quarter_power,
) -> GradientTransformation:
    r"""Rescales updates with ADOPT: momentum of the gradient normalized by the PREVIOUS second moment.

    .. math::
      v_0 = g_0^2, \quad u_0 = 0; \qquad
      m_t = \beta_1 m_{t-1} + (1-\beta_1)\,\mathrm{clip}\!\left(\frac{g_t}{\max(\sqrt{v_{t-1}}, \varepsilon)},
      c_t\right), \quad u_t = m_t, \quad v_t = \beta_2 v_{t-1} + (1-\beta_2) g_t^2,

    with :math:`c_t` = ``clip_value_fn(t)`` (:math:`t^{1/4}`) when ``use_clipping``. The first step only initializes
    :math:`v`. With ``nesterov`` the update is :math:`\beta_1 m_t + (1-\beta_1)\,\mathrm{clip}(\cdot)`. Moments are
    float32 for bfloat16/float16 params (``mu_dtype`` wins for the momentum).

    Args:
      b1: :math:`\beta_1 \in [0, 1)`, decay of the momentum.
      b2: :math:`\beta_2 \in [0, 1)`, decay of the second moment.
      eps: :math:`\varepsilon \ge 0`, lower bound of the denominator.
      mu_dtype: dtype of the momentum.
      nesterov: use Nesterov momentum.
      use_clipping: clip the normalized gradient to :math:`[-c_t, c_t]`.
      clip_value_fn: :math:`c_t` as a function of the step count.

    Returns:
      A :class:`GradientTransformation` with state ``ScaleByAdamState(count, mu, nu)``.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> tx = gradax.contrib.scale_by_adopt()
      >>> tx.update(jnp.array([0.5, -2.0]), tx.init(jnp.zeros(2)))[0]
      Array([0., 0.], dtype=float32)

    References:
      Taniguchi et al., 2024, "ADOPT: Modified Adam Can Converge with Any beta_2 with the Optimal Rate" (NeurIPS).
    """
    api = "scale_by_adopt"
    check_decay(api, "b1", b1)
    check_decay(api, "b2", b2)
    check_non_negative(api, "eps", eps)
    check_callable_or_none(api, "clip_value_fn", clip_value_fn)

    def init(params):
        return ScaleByAdamState(
            count=jnp.zeros([], jnp.int32), mu=zeros_state_like(params, mu_dtype), nu=zeros_state_like(params)
        )

    def update(updates, state, params=None):
        del params
        beta1, beta2, e = hyper_values(b1, b2, eps)
        started = state.count > 0
        beta1 = jnp.where(started, beta1, 1.0)
        beta2 = jnp.where(started, beta2, 0.0)
        clip = clip_value_fn(state.count) if use_clipping else None

        def leaf(g, m, v):
            gc = g.astype(compute_dtype(g.dtype))
            v_new = (1 - beta2) * gc * gc + beta2 * v
            normalized = gc / jnp.maximum(jnp.sqrt(v), e)
            if clip is not None:
                normalized = jnp.clip(normalized, -clip, clip)
            m_new = (1 - beta1) * normalized + beta1 * m
            u = (1 - beta1) * normalized + beta1 * m_new if nesterov else m_new
            return u.astype(g.dtype), m_new.astype(m.dtype), v_new.astype(v.dtype)

        out, mu, nu = map_n(3, leaf, updates, state.mu, state.nu)
        return out, ScaleByAdamState(count=safe_int32_increment(state.count), mu=mu, nu=nu)

    return GradientTransformation(init, update)


def adopt(
    learning_rate: ScalarOrSchedule,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.9999,
    eps: ArrayLike = 1e-6,
    mu_dtype: Any | None = None,
    *,
    nesterov: bool = False,
    use_clipping: bool = True,
    clip_value_fn: Callable[[jax.Array], jax.Array] = _quarter_power,
) -> GradientTransformationExtraArgs:
    r"""The ADOPT optimizer: :func:`scale_by_adopt` then a step of :math:`-\eta_t`.

    .. math::
      \theta_t = \theta_{t-1} - \eta_t m_t, \quad
      m_t = \beta_1 m_{t-1} + (1-\beta_1)\,\mathrm{clip}(g_t / \max(\sqrt{v_{t-1}}, \varepsilon), t^{1/4}).

    Args:
      learning_rate: :math:`\eta`, a number, an array or a schedule of the step count.
      b1: :math:`\beta_1 \in [0, 1)`.
      b2: :math:`\beta_2 \in [0, 1)`.
      eps: :math:`\varepsilon \ge 0`.
      mu_dtype: dtype of the momentum.
      nesterov: use Nesterov momentum.
      use_clipping: clip the normalized gradient.
      clip_value_fn: the clipping bound as a function of the step count.

    Returns:
      A :class:`GradientTransformationExtraArgs`.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> opt = gradax.contrib.adopt(learning_rate=0.1)
      >>> opt.update(jnp.ones(2), opt.init(jnp.zeros(2)))[0]
      Array([-0., -0.], dtype=float32)

    References:
      Taniguchi et al., 2024, "ADOPT: Modified Adam Can Converge with Any beta_2 with the Optimal Rate" (NeurIPS).
    """
    return chain(
        scale_by_adopt(
            b1=b1,
            b2=b2,
            eps=eps,
            mu_dtype=mu_dtype,
            nesterov=nesterov,
            use_clipping=use_clipping,
            clip_value_fn=clip_value_fn,
        ),
        scale_by_learning_rate(learning_rate),
    )
