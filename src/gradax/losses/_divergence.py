"""Divergences between a predicted distribution (given by its logarithm) and a target distribution."""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from ._common import same_shape_arrays

Axis = int | tuple[int, ...] | None


def _entropy_terms(log_predictions: jax.Array, targets: jax.Array) -> jax.Array:
    """``t * (log t - log q)`` elementwise, with the convention ``0 * (log 0 - log q) = 0`` for every ``q``."""
    zero = targets == 0
    safe_targets = jnp.where(zero, 1.0, targets)
    safe_log_q = jnp.where(zero, 0.0, log_predictions)
    return jnp.where(zero, 0.0, targets * (jnp.log(safe_targets) - safe_log_q))


def kl_divergence(
    log_predictions: ArrayLike, targets: ArrayLike, axis: Axis = -1, where: ArrayLike | None = None
) -> jax.Array:
    r"""Kullback-Leibler divergence of the predicted distribution ``q`` from the target ``p``.

    .. math::
        \mathrm{KL}(p \,\|\, q) = \sum_i p_i (\log p_i - \log q_i), \qquad 0 \cdot \log(0 / q_i) = 0

    Classes with zero target probability contribute 0 (with zero gradient) even where ``log q_i = -inf``; Optax
    0.2.8 returns ``nan`` there (see ``docs/differences.md``).

    Args:
      log_predictions: log-probabilities ``log q``, shape ``[..., dim]``.
      targets: probabilities ``p`` (non-negative), same shape.
      axis: the axis or axes to sum over.
      where: optional boolean mask of the entries to include.

    Returns:
      The divergence, with ``axis`` reduced.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> q = jnp.log(jnp.array([0.5, 0.5, 0.0]))
      >>> gradax.losses.kl_divergence(q, jnp.array([1.0, 0.0, 0.0]))
      Array(0.6931472, dtype=float32)

    References:
      Kullback and Leibler, `On Information and Sufficiency <https://www.jstor.org/stable/2236703>`_, 1951.
    """
    log_predictions, targets = same_shape_arrays(
        "kl_divergence", "log_predictions", log_predictions, "targets", targets
    )
    return jnp.sum(_entropy_terms(log_predictions, targets), axis=axis, where=where)


def kl_divergence_with_log_targets(
    log_predictions: ArrayLike, log_targets: ArrayLike, axis: Axis = -1, where: ArrayLike | None = None
) -> jax.Array:
    r"""Kullback-Leibler divergence with both distributions given as log-probabilities.

    .. math::
        \mathrm{KL}(p \,\|\, q) = \sum_i e^{\log p_i} (\log p_i - \log q_i)

    Classes with ``log p_i = -inf`` contribute 0 (Optax 0.2.8 returns ``nan``; see ``docs/differences.md``).

    Args:
      log_predictions: log-probabilities ``log q``, shape ``[..., dim]``.
      log_targets: log-probabilities ``log p``, same shape.
      axis: the axis or axes to sum over.
      where: optional boolean mask of the entries to include.

    Returns:
      The divergence, with ``axis`` reduced.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> q = jnp.log(jnp.array([0.5, 0.5]))
      >>> gradax.losses.kl_divergence_with_log_targets(q, jnp.log(jnp.array([1.0, 0.0])))
      Array(0.6931472, dtype=float32)
    """
    log_predictions, log_targets = same_shape_arrays(
        "kl_divergence_with_log_targets", "log_predictions", log_predictions, "log_targets", log_targets
    )
    zero = log_targets == -jnp.inf
    safe_log_p = jnp.where(zero, 0.0, log_targets)
    safe_log_q = jnp.where(zero, 0.0, log_predictions)
    terms = jnp.where(zero, 0.0, jnp.exp(safe_log_p) * (safe_log_p - safe_log_q))
    return jnp.sum(terms, axis=axis, where=where)


def generalized_kl_divergence(
    log_predictions: ArrayLike, targets: ArrayLike, axis: Axis = -1, where: ArrayLike | None = None
) -> jax.Array:
    r"""Generalized Kullback-Leibler divergence between unnormalized non-negative measures.

    The Bregman divergence of :math:`f(x) = x \log x - x`:

    .. math::
        D(p \,\|\, q) = \sum_i p_i (\log p_i - \log q_i) - p_i + q_i

    Args:
      log_predictions: ``log q`` (unnormalized), shape ``[..., dim]``.
      targets: ``p`` (non-negative, unnormalized), same shape.
      axis: the axis or axes to sum over.
      where: optional boolean mask of the entries to include.

    Returns:
      The divergence, with ``axis`` reduced.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> gradax.losses.generalized_kl_divergence(jnp.log(jnp.array([2.0])), jnp.array([1.0]))
      Array(0.30685282, dtype=float32)

    References:
      Bregman, The relaxation method of finding the common point of convex sets, 1967.
    """
    log_predictions, targets = same_shape_arrays(
        "generalized_kl_divergence", "log_predictions", log_predictions, "targets", targets
    )
    terms = _entropy_terms(log_predictions, targets) - targets + jnp.exp(log_predictions)
    return jnp.sum(terms, axis=axis, where=where)


def convex_kl_divergence(
    log_predictions: ArrayLike, targets: ArrayLike, axis: Axis = -1, where: ArrayLike | None = None
) -> jax.Array:
    r"""Deprecated name of :func:`generalized_kl_divergence` (same values); emits a ``DeprecationWarning``.

    .. math::
        D(p \,\|\, q) = \sum_i p_i (\log p_i - \log q_i) - p_i + q_i

    Args:
      log_predictions: ``log q``, shape ``[..., dim]``.
      targets: ``p``, same shape.
      axis: the axis or axes to sum over.
      where: optional boolean mask of the entries to include.

    Returns:
      The divergence, with ``axis`` reduced.

    Example:
      >>> import warnings, gradax, jax.numpy as jnp
      >>> with warnings.catch_warnings():
      ...     warnings.simplefilter("ignore")
      ...     gradax.losses.convex_kl_divergence(jnp.log(jnp.array([2.0])), jnp.array([1.0]))
      Array(0.30685282, dtype=float32)
    """
    warnings.warn(
        "convex_kl_divergence is deprecated; use generalized_kl_divergence (same values).",
        DeprecationWarning,
        stacklevel=2,
    )
    return generalized_kl_divergence(log_predictions, targets, axis=axis, where=where)
