"""Regression losses and vector similarities: squared error, Huber, log-cosh, cosine similarity."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from ._common import check_broadcastable, check_float, check_same_shape

Axis = int | tuple[int, ...] | None


def _errors(api: str, predictions: ArrayLike, targets: ArrayLike | None, strict: bool) -> jax.Array:
    predictions = jnp.asarray(predictions)
    check_float(api, "predictions", predictions)
    if targets is None:
        return predictions
    if strict:
        check_same_shape(api, "targets", targets, "predictions", predictions)
    else:
        check_broadcastable(api, "targets", targets, "predictions", predictions)
    return predictions - jnp.asarray(targets)


def squared_error(predictions: ArrayLike, targets: ArrayLike | None = None) -> jax.Array:
    r"""Elementwise squared error.

    .. math::
        \ell(x, y) = (x - y)^2

    Args:
      predictions: predictions, floating dtype.
      targets: targets of the same shape; None means zeros.

    Returns:
      The elementwise loss, shape of ``predictions``.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> gradax.losses.squared_error(jnp.array([1.0, 3.0]), jnp.array([0.0, 1.0]))
      Array([1., 4.], dtype=float32)
    """
    errors = _errors("squared_error", predictions, targets, strict=True)
    return errors * errors


def l2_loss(predictions: ArrayLike, targets: ArrayLike | None = None) -> jax.Array:
    r"""Half the squared error.

    .. math::
        \ell(x, y) = \tfrac12 (x - y)^2

    Args:
      predictions: predictions, floating dtype.
      targets: targets of the same shape; None means zeros.

    Returns:
      The elementwise loss, shape of ``predictions``.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> gradax.losses.l2_loss(jnp.array([1.0, 3.0]), jnp.array([0.0, 1.0]))
      Array([0.5, 2. ], dtype=float32)
    """
    errors = _errors("l2_loss", predictions, targets, strict=True)
    return 0.5 * (errors * errors)


def huber_loss(predictions: ArrayLike, targets: ArrayLike | None = None, *, delta: ArrayLike = 1.0) -> jax.Array:
    r"""Huber loss: quadratic for small errors, linear for large ones.

    .. math::
        \ell(e) = \begin{cases} \tfrac12 e^2 & |e| \le \delta \\ \delta (|e| - \tfrac12 \delta) & |e| > \delta
        \end{cases}, \qquad e = x - y

    Args:
      predictions: predictions, floating dtype.
      targets: targets broadcastable to ``predictions``; None means zeros.
      delta: where the loss turns from quadratic to linear (``> 0``).

    Returns:
      The elementwise loss.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> gradax.losses.huber_loss(jnp.array([0.5, 3.0]), delta=2.0)
      Array([0.125, 4.   ], dtype=float32)

    References:
      Huber, Robust Estimation of a Location Parameter, 1964.
    """
    errors = _errors("huber_loss", predictions, targets, strict=False)
    abs_errors = jnp.abs(errors)
    quadratic = jnp.minimum(abs_errors, delta)
    linear = abs_errors - quadratic
    return 0.5 * quadratic * quadratic + delta * linear


def log_cosh(predictions: ArrayLike, targets: ArrayLike | None = None) -> jax.Array:
    r"""Logarithm of the hyperbolic cosine of the error.

    .. math::
        \ell(e) = \log\cosh(e) = \mathrm{logaddexp}(e, -e) - \log 2, \qquad e = x - y

    The log-add-exp form is finite for any error (``cosh`` itself overflows beyond ``|e| ~ 89`` in float32).

    Args:
      predictions: predictions, floating dtype.
      targets: targets broadcastable to ``predictions``; None means zeros.

    Returns:
      The elementwise loss.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> print(gradax.losses.log_cosh(jnp.array([0.0, 1000.0])).round(2))
      [  0.   999.31]
    """
    errors = _errors("log_cosh", predictions, targets, strict=False)
    return jnp.logaddexp(errors, -errors) - jnp.log(2.0).astype(errors.dtype)


def cosine_similarity(
    predictions: ArrayLike,
    targets: ArrayLike,
    *,
    epsilon: ArrayLike = 0.0,
    axis: Axis = -1,
    where: ArrayLike | None = None,
) -> jax.Array:
    r"""Cosine of the angle between predictions and targets along ``axis``.

    .. math::
        \cos(x, y) = \frac{\langle x, y \rangle}{\sqrt{\max(\|x\|^2, \epsilon)} \sqrt{\max(\|y\|^2, \epsilon)}}

    As in Optax, ``epsilon`` bounds the *squared* norms from below (the norms from below by
    :math:`\sqrt{\epsilon}`). With the default ``epsilon=0`` a zero vector gives ``nan``.

    Args:
      predictions: vectors, shape ``[..., dim]``.
      targets: vectors, broadcastable to ``predictions``.
      epsilon: lower bound of the squared norms (``>= 0``).
      axis: the axis or axes holding the vector.
      where: optional boolean mask of the entries to include.

    Returns:
      The similarities, with ``axis`` reduced.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> gradax.losses.cosine_similarity(jnp.array([1.0, 0.0]), jnp.array([1.0, 1.0]))
      Array(0.70710677, dtype=float32)
    """
    predictions = jnp.asarray(predictions)
    check_float("cosine_similarity", "predictions", predictions)
    targets = jnp.asarray(targets)
    pred_norm = jnp.sqrt(
        jnp.maximum(jnp.sum(predictions * predictions, axis=axis, where=where, keepdims=True), epsilon)
    )
    targ_norm = jnp.sqrt(jnp.maximum(jnp.sum(targets * targets, axis=axis, where=where, keepdims=True), epsilon))
    return jnp.sum((predictions / pred_norm) * (targets / targ_norm), axis=axis, where=where)


def cosine_distance(
    predictions: ArrayLike,
    targets: ArrayLike,
    *,
    epsilon: ArrayLike = 0.0,
    axis: Axis = -1,
    where: ArrayLike | None = None,
) -> jax.Array:
    r"""One minus the cosine similarity.

    .. math::
        d(x, y) = 1 - \cos(x, y)

    Args:
      predictions: vectors, shape ``[..., dim]``.
      targets: vectors, broadcastable to ``predictions``.
      epsilon: lower bound of the squared norms (``>= 0``).
      axis: the axis or axes holding the vector.
      where: optional boolean mask of the entries to include.

    Returns:
      The distances in ``[0, 2]``, with ``axis`` reduced.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> gradax.losses.cosine_distance(jnp.array([1.0, 0.0]), jnp.array([0.0, 1.0]))
      Array(1., dtype=float32)
    """
    return 1.0 - cosine_similarity(predictions, targets, epsilon=epsilon, axis=axis, where=where)
