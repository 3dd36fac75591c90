"""NovoGrad: Adam-like steps with a second moment per layer (array) instead of per element."""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from .._base import GradientTransformation, GradientTransformationExtraArgs, ScalarOrSchedule, Updates
from .._checks import check_needs, check_non_negative
from .._hyperparams import hyper_values, value_at
from .._maps import map_n
from .._numerics import abs_sq, compute_dtype, safe_int32_increment, state_dtype
from .._state import zeros_state_like
from ..transforms._combining import chain
from ..transforms._scaling import scale_by_learning_rate
from ._adam import check_adam_args


class ScaleByNovogradState(NamedTuple):
    """State of :func:`scale_by_novograd`."""

    count: jax.Array  # shape=(), dtype=int32: the number of updates so far
    mu: Updates  # like params, dtype=mu_dtype rule: the momentum of normalized gradients
    nu: Updates  # one scalar per array (float32 for bfloat16/float16 params): EMA of the squared layer norm


def scale_by_novograd(
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.25,
    eps: ArrayLike = 1e-8,
    eps_root: ArrayLike = 0.0,
    weight_decay: ScalarOrSchedule = 0.0,
    mu_dtype: Any | None = None,
) -> GradientTransformation:
    r"""Rescales updates with NovoGrad: gradients normalized by a per-layer second moment, then momentum.

    For every array (layer) with gradient :math:`g_t` and parameters :math:`\theta_t`:

    .. math::
      v_t = \beta_2 v_{t-1} + (1-\beta_2) \|g_t\|^2 \ (v_1 = \|g_1\|^2), \quad
      m_t = \beta_1 m_{t-1} + \frac{g_t}{\sqrt{v_t + \epsilon_{root}} + \epsilon} + \lambda_t \theta_t
      \ (m_0 = 0),

    and the update is :math:`m_t`. ``weight_decay`` may be a schedule (evaluated at the step count).

    Args:
      b1: :math:`\beta_1 \in [0, 1)`, the momentum.
      b2: :math:`\beta_2 \in [0, 1)`, decay of the squared layer norms.
      eps: :math:`\epsilon \ge 0`.
      eps_root: :math:`\epsilon_{root} \ge 0`.
      weight_decay: :math:`\lambda`, a number, an array or a schedule.
      mu_dtype: dtype of the momentum (float32 for bfloat16/float16 params by default).

    Returns:
      A :class:`GradientTransformation` with state :class:`ScaleByNovogradState`; ``update`` needs ``params``.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> tx = gradax.scale_by_novograd(eps=0.0)
      >>> params = jnp.zeros(2)
      >>> tx.update(jnp.array([3.0, 4.0]), tx.init(params), params)[0]
      Array([0.6, 0.8], dtype=float32)

    References:
      Ginsburg et al., 2019, "Stochastic Gradient Methods with Layer-wise Adaptive Moments for Training of Deep
      Networks".
    """
    check_adam_args("scale_by_novograd", b1, b2, eps, eps_root)
    check_non_negative("scale_by_novograd", "weight_decay", weight_decay)

    def init(params):
        return ScaleByNovogradState(
            count=jnp.zeros([], jnp.int32),
            mu=zeros_state_like(params, mu_dtype),
            nu=jax.tree.map(lambda p: jnp.zeros([], state_dtype(p.dtype)), params),
        )

    def update(updates, state, params=None):
        check_needs("scale_by_novograd", "params", params)
        beta1, beta2, e, e_root = hyper_values(b1, b2, eps, eps_root)
        one_minus_b2 = 1 - beta2
        first = state.count == 0
        (wd,) = jax.lax.optimization_barrier((value_at(weight_decay, state.count),))

        def leaf(g, p, m, v):
            gc = g.astype(compute_dtype(g.dtype))
            sq_norm = jnp.sum(abs_sq(gc))
            v_new = jnp.where(first, sq_norm, one_minus_b2 * sq_norm + beta2 * v)
            step = gc / (jnp.sqrt(v_new + e_root) + e) + wd * p.astype(compute_dtype(p.dtype))
            m_new = jnp.where(first, step, beta1 * m + step)
            return m_new.astype(g.dtype), m_new.astype(m.dtype), v_new.astype(v.dtype)

        new_updates, mu, nu = map_n(3, leaf, updates, params, state.mu, state.nu)
        return new_updates, ScaleByNovogradState(count=safe_int32_increment(state.count), mu=mu, nu=nu)

    return GradientTransformation(init, update)


def novograd(
    learning_rate: ScalarOrSchedule,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.25,
    eps: ArrayLike = 1e-6,
    eps_root: ArrayLike = 0.0,
    weight_decay: ScalarOrSchedule = 0.0,
) -> GradientTransformationExtraArgs:
    r"""The NovoGrad optimizer: :func:`scale_by_novograd` followed by a step of size :math:`-\eta_t`.

    .. math::
      \theta_{t+1} = \theta_t - \eta_t m_t, \quad
      m_t = \beta_1 m_{t-1} + \frac{g_t}{\sqrt{v_t + \epsilon_{root}} + \epsilon} + \lambda_t \theta_t.

    Args:
      learning_rate: :math:`\eta`, a number, an array or a schedule of the step count.
      b1: :math:`\beta_1 \in [0, 1)`.
      b2: :math:`\beta_2 \in [0, 1)`.
      eps: :math:`\epsilon \ge 0`.
      eps_root: :math:`\epsilon_{root} \ge 0`.
      weight_decay: :math:`\lambda`, a number, an array or a schedule.

    Returns:
      A :class:`GradientTransformationExtraArgs`; ``update`` needs ``params``.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> opt = gradax.novograd(learning_rate=0.1, eps=0.0)
      >>> params = jnp.zeros(2)
      >>> jnp.round(opt.update(jnp.array([3.0, 4.0]), opt.init(params), params)[0], 4)
      Array([-0.06, -0.08], dtype=float32)

    References:
      Ginsburg et al., 2019, "Stochastic Gradient Methods with Layer-wise Adaptive Moments for Training of Deep
      Networks".
    """
    check_adam_args("novograd", b1, b2, eps, eps_root)
    check_non_negative("novograd", "weight_decay", weight_decay)
    return chain(
        scale_by_novograd(b1, b2, eps, eps_root, weight_decay),
        scale_by_learning_rate(learning_rate),
    )
