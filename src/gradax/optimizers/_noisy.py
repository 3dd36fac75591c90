"""Noisy SGD: gradient descent with annealed Gaussian gradient noise."""

from __future__ import annotations

import jax
from jax.typing import ArrayLike

from .._base import GradientTransformationExtraArgs, ScalarOrSchedule
from ..transforms._adding import add_noise
from ..transforms._combining import chain
from ..transforms._scaling import scale_by_learning_rate


def noisy_sgd(
    learning_rate: ScalarOrSchedule,
    eta: ArrayLike = 0.01,
    gamma: ArrayLike = 0.55,
    key: jax.Array | int | None = None,
    *,
    seed: int | None = None,
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
    return chain(add_noise(eta, gamma, key, seed=seed), scale_by_learning_rate(learning_rate))
