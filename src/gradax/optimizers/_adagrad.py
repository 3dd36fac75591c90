"""AdaGrad: scaling by the root of the running sum of squared gradients."""

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from .._base import GradientTransformation, GradientTransformationExtraArgs, MaskOrFn, Params, ScalarOrSchedule
from .._checks import check_non_negative
from .._hyperparams import as_value
from .._maps import map_n
from .._numerics import abs_sq, compute_dtype
from .._state import full_state_like
from ..transforms._adding import decoupled_weight_decay
from ..transforms._combining import chain
from ..transforms._scaling import scale_by_learning_rate


class ScaleByRssState(NamedTuple):
    """State of :func:`scale_by_rss`."""

    sum_of_squares: Params  # like params, float32 for bf16/f16 params: running sum of squared gradients


def scale_by_rss(initial_accumulator_value: ArrayLike = 0.1, eps: ArrayLike = 1e-7) -> GradientTransformation:
    r"""Divides updates by the root of the running sum of their squares (AdaGrad's scaling).

    .. math::
      s_t = s_{t-1} + |g_t|^2, \qquad u_t = \frac{g_t}{\sqrt{s_t + \epsilon}} \ \ (u_t = 0 \text{ where } s_t = 0),

    with :math:`s_0` = ``initial_accumulator_value``.

    Args:
      initial_accumulator_value: :math:`s_0 \ge 0`.
      eps: :math:`\epsilon \ge 0`, added inside the square root.

    Returns:
      A :class:`GradientTransformation` with state :class:`ScaleByRssState`.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> tx = gradax.scale_by_rss(initial_accumulator_value=0.0, eps=0.0)
      >>> tx.update(jnp.array([3.0, 0.0]), tx.init(jnp.zeros(2)))[0]
      Array([1., 0.], dtype=float32)

    References:
      Duchi et al., 2011, "Adaptive Subgradient Methods for Online Learning and Stochastic Optimization".
    """
    check_non_negative("scale_by_rss", "initial_accumulator_value", initial_accumulator_value)
    check_non_negative("scale_by_rss", "eps", eps)

    def init(params):
        return ScaleByRssState(sum_of_squares=full_state_like(params, initial_accumulator_value))

    def update(updates, state, params=None):
        del params
        e = as_value(eps)

        def leaf(g, s):
            dtype = compute_dtype(g.dtype)
            gc = g.astype(dtype)
            new_s = (abs_sq(gc) + s.astype(dtype)).astype(s.dtype)
            sc = new_s.astype(dtype)
            inv = jnp.where(sc > 0, jax.lax.rsqrt(sc + e), jnp.zeros_like(sc))
            return (inv * gc).astype(g.dtype), new_s

        new_updates, new_s = map_n(2, leaf, updates, state.sum_of_squares)
        return new_updates, ScaleByRssState(sum_of_squares=new_s)

    return GradientTransformation(init, update)


def adagrad(
    learning_rate: ScalarOrSchedule,
    initial_accumulator_value: ArrayLike = 0.1,
    eps: ArrayLike = 1e-7,
    *,
    weight_decay: ScalarOrSchedule | None = None,
    weight_decay_mask: MaskOrFn = None,
    cautious_weight_decay: bool = False,
) -> GradientTransformationExtraArgs:
    r"""AdaGrad: per-coordinate steps that shrink with the accumulated squared gradients.

    .. math::
      s_t = s_{t-1} + g_t^2, \qquad \theta_{t+1} = \theta_t - \eta_t \frac{g_t}{\sqrt{s_t + \epsilon}}.

    Args:
      learning_rate: :math:`\eta`, a number, an array or a schedule of the step count.
      initial_accumulator_value: :math:`s_0 \ge 0`.
      eps: :math:`\epsilon \ge 0`.
      weight_decay: :math:`\lambda \ge 0`, decoupled weight decay added to the update before the learning rate
        (:math:`\theta \leftarrow \theta - \eta_t (u_t + \lambda_t \theta)`): a number, an array or a schedule.
        ``None`` (the default) adds nothing: the chain, its state and its numbers are Optax's.
      weight_decay_mask: which leaves to decay (a tree of booleans or a function of the params); ``None`` decays all.
      cautious_weight_decay: decay only where the update and the parameter have the same sign (Chen et al., 2025).

    Returns:
      A :class:`GradientTransformationExtraArgs`: ``chain(scale_by_rss(...), scale_by_learning_rate(...))``.

    Example:
      >>> import gradax, jax, jax.numpy as jnp
      >>> params = jnp.array([1.0, -2.0])
      >>> opt = gradax.adagrad(learning_rate=0.5)
      >>> state = opt.init(params)
      >>> for _ in range(100):
      ...     grads = jax.grad(lambda p: jnp.sum(p**2))(params)
      ...     updates, state = opt.update(grads, state)
      ...     params = gradax.apply_updates(params, updates)
      >>> bool(jnp.all(jnp.abs(params) < 0.05))
      True

    References:
      Duchi et al., 2011, "Adaptive Subgradient Methods for Online Learning and Stochastic Optimization".
    """
    return chain(
        scale_by_rss(initial_accumulator_value=initial_accumulator_value, eps=eps),
        *decoupled_weight_decay(weight_decay, weight_decay_mask, cautious_weight_decay),
        scale_by_learning_rate(learning_rate),
    )
