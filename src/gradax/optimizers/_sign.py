"""Sign-based methods: scale_by_sign, signSGD and Signum."""

from typing import Any

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from .._base import (
    GradientTransformation,
    GradientTransformationExtraArgs,
    MaskOrFn,
    ScalarOrSchedule,
    init_empty_state,
)
from .._checks import check_decay
from ..transforms._accumulation import ema
from ..transforms._adding import decoupled_weight_decay
from ..transforms._combining import chain
from ..transforms._scaling import scale_by_learning_rate


def scale_by_sign() -> GradientTransformation:
    r"""Replaces every update by its sign: :math:`u \leftarrow \mathrm{sign}(u)` (0 stays 0).

    Returns:
      A :class:`GradientTransformation` with an empty state.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> tx = gradax.scale_by_sign()
      >>> tx.update(jnp.array([-2.0, 0.0, 0.5]), tx.init(None))[0]
      Array([-1.,  0.,  1.], dtype=float32)

    References:
      Bernstein et al., 2018, "signSGD: Compressed Optimisation for Non-Convex Problems".
    """

    def update(updates, state, params=None):
        del params
        return jax.tree.map(jnp.sign, updates), state

    return GradientTransformation(init_empty_state, update)


def sign_sgd(
    learning_rate: ScalarOrSchedule,
    *,
    weight_decay: ScalarOrSchedule | None = None,
    weight_decay_mask: MaskOrFn = None,
    cautious_weight_decay: bool = False,
) -> GradientTransformationExtraArgs:
    r"""signSGD: steps of fixed size along the sign of the gradient, :math:`\theta \leftarrow \theta - \eta_t\,
    \mathrm{sign}(g_t)`.

    Args:
      learning_rate: :math:`\eta`, a number, an array or a schedule of the step count.
      weight_decay: :math:`\lambda \ge 0`, decoupled weight decay added to the update before the learning rate
        (:math:`\theta \leftarrow \theta - \eta_t (u_t + \lambda_t \theta)`): a number, an array or a schedule.
        ``None`` (the default) adds nothing: the chain, its state and its numbers are Optax's.
      weight_decay_mask: which leaves to decay (a tree of booleans or a function of the params); ``None`` decays all.
      cautious_weight_decay: decay only where the update and the parameter have the same sign (Chen et al., 2025).

    Returns:
      A :class:`GradientTransformationExtraArgs`: ``chain(scale_by_sign(), scale_by_learning_rate(...))``.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> opt = gradax.sign_sgd(0.1)
      >>> opt.update(jnp.array([3.0, -0.2]), opt.init(jnp.zeros(2)))[0]
      Array([-0.1,  0.1], dtype=float32)

    References:
      Bernstein et al., 2018, "signSGD: Compressed Optimisation for Non-Convex Problems".
    """
    return chain(
        scale_by_sign(),
        *decoupled_weight_decay(weight_decay, weight_decay_mask, cautious_weight_decay),
        scale_by_learning_rate(learning_rate),
    )


def signum(
    learning_rate: ScalarOrSchedule,
    beta: ArrayLike = 0.9,
    accumulator_dtype: Any | None = None,
    *,
    weight_decay: ScalarOrSchedule | None = None,
    weight_decay_mask: MaskOrFn = None,
    cautious_weight_decay: bool = False,
) -> GradientTransformationExtraArgs:
    r"""Signum: signSGD on an exponential moving average of the gradients (sign momentum).

    .. math::
      m_t = \beta m_{t-1} + (1 - \beta) g_t, \qquad \theta_{t+1} = \theta_t - \eta_t\, \mathrm{sign}(m_t).

    Args:
      learning_rate: :math:`\eta`, a number, an array or a schedule of the step count.
      beta: :math:`\beta \in [0, 1)`, the decay of the moving average (not debiased: the sign does not need it).
      accumulator_dtype: dtype of the average (default float32 for bf16/f16 params, else the params').
      weight_decay: :math:`\lambda \ge 0`, decoupled weight decay added to the update before the learning rate
        (:math:`\theta \leftarrow \theta - \eta_t (u_t + \lambda_t \theta)`): a number, an array or a schedule.
        ``None`` (the default) adds nothing: the chain, its state and its numbers are Optax's.
      weight_decay_mask: which leaves to decay (a tree of booleans or a function of the params); ``None`` decays all.
      cautious_weight_decay: decay only where the update and the parameter have the same sign (Chen et al., 2025).

    Returns:
      A :class:`GradientTransformationExtraArgs`: ``chain(ema(beta, debias=False), scale_by_sign(),
      scale_by_learning_rate(...))``.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> opt = gradax.signum(0.1)
      >>> opt.update(jnp.array([3.0, -0.2]), opt.init(jnp.zeros(2)))[0]
      Array([-0.1,  0.1], dtype=float32)

    References:
      Bernstein et al., 2018, "signSGD: Compressed Optimisation for Non-Convex Problems".
    """
    check_decay("signum", "beta", beta)
    return chain(
        ema(beta, debias=False, accumulator_dtype=accumulator_dtype),
        scale_by_sign(),
        *decoupled_weight_decay(weight_decay, weight_decay_mask, cautious_weight_decay),
        scale_by_learning_rate(learning_rate),
    )
