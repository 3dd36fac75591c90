"""Noisy SGD: gradient descent with annealed Gaussian gradient noise."""

import jax
from jax.typing import ArrayLike

from .._base import GradientTransformationExtraArgs, MaskOrFn, ScalarOrSchedule
from ..transforms._adding import add_noise, decoupled_weight_decay
from ..transforms._combining import chain
from ..transforms._scaling import scale_by_learning_rate


def noisy_sgd(
    learning_rate: ScalarOrSchedule,
    eta: ArrayLike = 0.01,
    gamma: ArrayLike = 0.55,
    key: jax.Array | int | None = None,
    *,
    seed: int | None = None,
    weight_decay: ScalarOrSchedule | None = None,
    weight_decay_mask: MaskOrFn = None,
    cautious_weight_decay: bool = False,
) -> GradientTransformationExtraArgs:
    r"""SGD on gradients with added Gaussian noise whose variance decays with the step.

    .. math::
      \theta_{t+1} = \theta_t - \eta_t \left(g_t + \sqrt{\frac{\eta_{\text{noise}}}{(t+1)^{\gamma}}}\, \xi_t\right),
      \qquad \xi_t \sim \mathcal N(0, I).

    Args:
      learning_rate: :math:`\eta_t`, a number, an array or a schedule of the step count.
      eta: the base noise variance (>= 0).
      gamma: the decay exponent of the variance (0.55 in the paper).
      key: a PRNG key or an int seed for the noise (0, with a warning, when omitted).
      seed: deprecated spelling of an int ``key``.
      weight_decay: :math:`\lambda \ge 0`, decoupled weight decay added to the update before the learning rate
        (:math:`\theta \leftarrow \theta - \eta_t (u_t + \lambda_t \theta)`): a number, an array or a schedule.
        ``None`` (the default) adds nothing: the chain, its state and its numbers are Optax's.
      weight_decay_mask: which leaves to decay (a tree of booleans or a function of the params); ``None`` decays all.
      cautious_weight_decay: decay only where the update and the parameter have the same sign (Chen et al., 2025).

    Returns:
      A :class:`GradientTransformationExtraArgs`: ``chain(add_noise(...), scale_by_learning_rate(...))``.

    Example:
      >>> import gradax, jax, jax.numpy as jnp
      >>> opt = gradax.noisy_sgd(learning_rate=0.1, eta=0.0, key=jax.random.key(0))
      >>> opt.update(jnp.ones(2), opt.init(jnp.zeros(2)))[0]
      Array([-0.1, -0.1], dtype=float32)

    References:
      Neelakantan et al., 2015, "Adding Gradient Noise Improves Learning for Very Deep Networks".
    """
    return chain(
        add_noise(eta, gamma, key, seed=seed),
        *decoupled_weight_decay(weight_decay, weight_decay_mask, cautious_weight_decay),
        scale_by_learning_rate(learning_rate),
    )
