"""Classification losses: logistic, softmax and margin losses on logits or scores.

Every loss works on the last axis (or ``axis``) and keeps the leading (batch) dimensions. The log-probabilities are
always computed with ``log_sigmoid``/``log_softmax`` (log-sum-exp with the maximum subtracted), never as the log of
a probability, so extreme logits give finite losses and gradients.
"""

from __future__ import annotations

from typing import overload

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from ._common import check_broadcastable, check_float, same_shape_arrays

Axis = int | tuple[int, ...] | None


def sigmoid_binary_cross_entropy(logits, labels):
    r"""Binary cross entropy of independent Bernoulli predictions given by logits.

    .. math::
        \ell(x, y) = -y \log \sigma(x) - (1 - y) \log \sigma(-x)

    computed with ``log_sigmoid`` so that it stays finite for any logit.

    Args:
      logits: logits ``x``, any shape.
      labels: probabilities ``y`` in ``[0, 1]``, broadcastable to ``logits``.

    Returns:
      The elementwise loss, with the broadcast shape of ``logits`` and ``labels``.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> gradax.losses.sigmoid_binary_cross_entropy(jnp.array([0.0, 100.0]), jnp.array([1.0, 0.0]))
      Array([  0.6931472, 100.       ], dtype=float32)
    """
    logits = jnp.asarray(logits)
    check_float("sigmoid_binary_cross_entropy", "logits", logits)
    labels = jnp.asarray(labels).astype(logits.dtype)
    log_p = jax.nn.log_sigmoid(logits)
    log_not_p = jax.nn.log_sigmoid(-logits)
    return -labels * log_p - (1.0 - labels) * log_not_p


def hinge_loss(predictor_outputs: ArrayLike, targets: ArrayLike) -> jax.Array:
    r"""Hinge loss for binary classification with targets in ``{-1, 1}``.

    .. math::
        \ell(s, t) = \max(0, 1 - s t)

    Args:
      predictor_outputs: scores ``s``.
      targets: targets ``t`` in ``{-1, 1}``, broadcastable to the scores.

    Returns:
      The elementwise loss.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> gradax.losses.hinge_loss(jnp.array([0.5, 2.0]), jnp.array([1.0, -1.0]))
      Array([0.5, 3. ], dtype=float32)
    """
    return jnp.maximum(0.0, 1.0 - jnp.asarray(predictor_outputs) * jnp.asarray(targets))


def perceptron_loss(predictor_outputs: ArrayLike, targets: ArrayLike) -> jax.Array:
    r"""Perceptron loss for binary classification with targets in ``{-1, 1}``.

    .. math::
        \ell(s, t) = \max(0, -s t)

    Args:
      predictor_outputs: scores ``s``.
      targets: targets ``t`` in ``{-1, 1}``, broadcastable to the scores.

    Returns:
      The elementwise loss.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> gradax.losses.perceptron_loss(jnp.array([0.5, -2.0]), jnp.array([-1.0, -1.0]))
      Array([0.5, 0. ], dtype=float32)
    """
    return jnp.maximum(0.0, -jnp.asarray(predictor_outputs) * jnp.asarray(targets))


def softmax_cross_entropy(logits: ArrayLike, labels: ArrayLike, axis: Axis = -1, where: ArrayLike | None = None):
    r"""Cross entropy between a distribution ``labels`` and the softmax of ``logits``.

    .. math::
        \ell(x, y) = -\sum_i y_i \log \mathrm{softmax}(x)_i
                   = \mathrm{logsumexp}(x) - \sum_i y_i x_i \quad (\textstyle\sum_i y_i = 1)

    Entries where ``where`` is False are left out of both the normalisation and the sum, so they may hold ``-inf``.
    An unmasked ``-inf`` logit gives ``nan`` (as in Optax); use :func:`safe_softmax_cross_entropy` for those.

    Args:
      logits: logits, shape ``[..., num_classes]``.
      labels: probabilities (each row sums to 1), same shape as ``logits``.
      axis: the class axis or axes.
      where: optional boolean mask of the entries to include, broadcastable to ``logits``, or one boolean per row
        (the shape of ``logits`` without the class axis).

    Returns:
      The loss, with the class axis reduced.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> gradax.losses.softmax_cross_entropy(jnp.array([1.0, 1.0]), jnp.array([1.0, 0.0]))
      Array(0.6931472, dtype=float32)
    """
    logits, labels = same_shape_arrays("softmax_cross_entropy", "logits", logits, "labels", labels)
    where = _where_per_logit(where, logits.ndim, axis)
    log_probs = jax.nn.log_softmax(logits, axis=axis, where=where)
    if where is not None:  # masked-out logits give log_probs of -inf: keep them (and their gradient) out
        log_probs = jnp.where(where, log_probs, 0.0)
    return -jnp.sum(labels * log_probs, axis=axis, where=where)


@overload
def _where_per_logit(where: None, ndim: int, axis: Axis) -> None: ...
@overload
def _where_per_logit(where: ArrayLike, ndim: int, axis: Axis) -> jax.Array: ...
def _where_per_logit(where: ArrayLike | None, ndim: int, axis: Axis) -> jax.Array | None:
    """``where`` with the class axis (or axes) added when it was given per row (shape ``[batch]``), as Optax allows."""
    if where is None:
        return None
    where = jnp.asarray(where)
    return jnp.expand_dims(where, axis) if where.ndim != ndim and axis is not None else where


def safe_softmax_cross_entropy(logits: ArrayLike, labels: ArrayLike) -> jax.Array:
    r"""Softmax cross entropy that allows ``-inf`` logits on classes with zero label.

    .. math::
        \ell(x, y) = -\sum_{i:\, y_i \neq 0} y_i \log \mathrm{softmax}(x)_i

    A class with ``y_i = 0`` contributes nothing even when ``x_i = -inf`` (where the plain formula gives
    ``0 \cdot (-\infty) = \mathrm{nan}``); its gradient is zero.

    Args:
      logits: logits, shape ``[..., num_classes]``; may hold ``-inf`` where the label is 0.
      labels: probabilities, same shape.

    Returns:
      The loss, shape ``[...]``.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> gradax.losses.safe_softmax_cross_entropy(jnp.array([-jnp.inf, 0.0]), jnp.array([0.0, 1.0]))
      Array(0., dtype=float32)
    """
    logits, labels = same_shape_arrays("safe_softmax_cross_entropy", "logits", logits, "labels", labels)
    return -jnp.sum(_label_weighted_log_probs(logits, labels), axis=-1)


@jax.custom_jvp
def _label_weighted_log_probs(logits: jax.Array, labels: jax.Array) -> jax.Array:
    """``labels * log_softmax(logits)`` over the last axis, 0 wherever the label is 0 (even at a ``-inf`` logit)."""
    log_probs = jax.nn.log_softmax(logits, axis=-1)
    return jnp.where(labels == 0, 0.0, labels * jnp.where(labels == 0, 0.0, log_probs))


@_label_weighted_log_probs.defjvp
def _label_weighted_log_probs_jvp(primals, tangents):
    """The derivative of ``y * log softmax(x)`` in both arguments: ``y (dx - <softmax(x), dx>) + dy log softmax(x)``
    (the ``where`` of the value would otherwise zero the derivative in ``y`` where ``y = 0``)."""
    logits, labels = primals
    logits_dot, labels_dot = tangents
    log_probs = jax.nn.log_softmax(logits, axis=-1)
    mean_dot = jnp.sum(jax.nn.softmax(logits, axis=-1) * logits_dot, axis=-1, keepdims=True)
    out = _label_weighted_log_probs(logits, labels)
    return out, labels * (logits_dot - mean_dot) + labels_dot * log_probs


def _move_axes_last(x: jax.Array, axis: Axis) -> tuple[jax.Array, int]:
    """``x`` with the axes ``axis`` moved to the end and merged into one; the merged size."""
    axes = tuple(range(x.ndim)) if axis is None else (axis,) if isinstance(axis, int) else tuple(axis)
    axes = tuple(a % x.ndim for a in axes)
    rest = tuple(a for a in range(x.ndim) if a not in axes)
    moved = jnp.transpose(x, rest + axes)
    size = 1
    for a in axes:
        size *= x.shape[a]
    return moved.reshape(moved.shape[: len(rest)] + (size,)), size


def softmax_cross_entropy_with_integer_labels(
    logits: ArrayLike, labels: ArrayLike, axis: int | tuple[int, ...] = -1, where: ArrayLike | None = None
) -> jax.Array:
    r"""Softmax cross entropy with the target class given as an integer.

    .. math::
        \ell(x, c) = \mathrm{logsumexp}(x) - x_c

    computed as a log-sum-exp with the maximum subtracted (stable for any logits). ``where`` removes entries from the
    log-sum-exp. An out-of-range label gives ``nan``.

    Args:
      logits: logits, shape ``[..., num_classes]`` (the class axis is ``axis``; a tuple merges several axes, and the
        label then indexes their row-major flattening).
      labels: integer labels, shape of ``logits`` without the class axis.
      axis: the class axis or axes.
      where: optional boolean mask of the logits to include, broadcastable to ``logits``.

    Returns:
      The loss, shape of ``labels``.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> gradax.losses.softmax_cross_entropy_with_integer_labels(jnp.array([[0.0, 0.0]]), jnp.array([1]))
      Array([0.6931472], dtype=float32)
    """
    api = "softmax_cross_entropy_with_integer_labels"
    logits = jnp.asarray(logits)
    labels = jnp.asarray(labels)
    if not jnp.issubdtype(labels.dtype, jnp.integer):
        raise ValueError(
            f"{api}(labels=...) must have an integer dtype; got dtype {labels.dtype}. "
            "Pass class indices, or use softmax_cross_entropy for probabilities."
        )
    flat, _ = _move_axes_last(logits, axis)
    if tuple(labels.shape) != tuple(flat.shape[:-1]):
        raise ValueError(
            f"{api}(labels=...) must have the shape of `logits` without the class axis {tuple(flat.shape[:-1])}; "
            f"got shape {tuple(labels.shape)}. Pass one integer label per row of logits."
        )
    if where is None:
        label_logits = jnp.take_along_axis(flat, labels[..., None], axis=-1)[..., 0]
        return jax.nn.logsumexp(flat, axis=-1) - label_logits
    where = _where_per_logit(where, logits.ndim, axis)
    where_flat, _ = _move_axes_last(jnp.broadcast_to(where, logits.shape), axis)
    kept = jnp.any(where_flat, axis=-1)
    # a row with every logit masked out is 0, with a zero gradient (its logits are replaced before the log-sum-exp)
    flat = jnp.where(kept[..., None], flat, 0.0)
    label_logits = jnp.take_along_axis(flat, labels[..., None], axis=-1)[..., 0]
    log_normalizers = jax.nn.logsumexp(flat, axis=-1, where=where_flat | ~kept[..., None])
    return jnp.where(kept, log_normalizers - label_logits, 0.0)


def _scores_and_one_hot(scores: ArrayLike, labels: ArrayLike) -> tuple[jax.Array, jax.Array]:
    """``scores`` as an array and the one-hot encoding of the integer ``labels`` over its last (class) axis, in the
    dtype of the scores: the opening of the multiclass margin losses."""
    scores = jnp.asarray(scores)
    return scores, jax.nn.one_hot(jnp.asarray(labels), scores.shape[-1], dtype=scores.dtype)


def multiclass_hinge_loss(scores: ArrayLike, labels: ArrayLike) -> jax.Array:
    r"""Multiclass hinge loss (Crammer-Singer).

    .. math::
        \ell(s, c) = \max_j \big(s_j + 1 - [j = c]\big) - s_c

    Args:
      scores: scores, shape ``[..., num_classes]``.
      labels: integer labels, shape ``[...]``.

    Returns:
      The loss, shape ``[...]``.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> gradax.losses.multiclass_hinge_loss(jnp.array([1.0, 2.0, -1.0]), jnp.array(0))
      Array(2., dtype=float32)
    """
    scores, one_hot = _scores_and_one_hot(scores, labels)
    label_scores = jnp.sum(scores * one_hot, axis=-1)
    return jnp.max(scores + 1.0 - one_hot, axis=-1) - label_scores


def multiclass_perceptron_loss(scores: ArrayLike, labels: ArrayLike) -> jax.Array:
    r"""Multiclass perceptron loss.

    .. math::
        \ell(s, c) = \max_j s_j - s_c

    Args:
      scores: scores, shape ``[..., num_classes]``.
      labels: integer labels, shape ``[...]``.

    Returns:
      The loss, shape ``[...]``.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> gradax.losses.multiclass_perceptron_loss(jnp.array([1.0, 2.0, -1.0]), jnp.array(0))
      Array(1., dtype=float32)
    """
    scores, one_hot = _scores_and_one_hot(scores, labels)
    return jnp.max(scores, axis=-1) - jnp.sum(scores * one_hot, axis=-1)


def poly_loss_cross_entropy(
    logits: ArrayLike, labels: ArrayLike, *, epsilon: ArrayLike = 2.0, axis: Axis = -1, where: ArrayLike | None = None
) -> jax.Array:
    r"""Poly-1 loss: cross entropy plus a linear term in :math:`1 - p_t`.

    .. math::
        \ell(x, y) = -\sum_i y_i \log p_i + \epsilon \sum_i y_i (1 - p_i), \qquad p = \mathrm{softmax}(x)

    Args:
      logits: logits, shape ``[..., num_classes]``.
      labels: probabilities, same shape.
      epsilon: weight of the polynomial term (``-1 <= epsilon``; 0 gives cross entropy).
      axis: the class axis or axes.
      where: optional boolean mask of the entries to include.

    Returns:
      The loss, with the class axis reduced.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> gradax.losses.poly_loss_cross_entropy(jnp.array([0.0, 0.0]), jnp.array([1.0, 0.0]))
      Array(1.6931472, dtype=float32)

    References:
      Leng et al., `PolyLoss: A Polynomial Expansion Perspective of Classification Loss Functions
      <https://arxiv.org/abs/2204.12511>`_, 2022.
    """
    logits, labels = same_shape_arrays("poly_loss_cross_entropy", "logits", logits, "labels", labels)
    probs = jax.nn.softmax(logits, axis=axis, where=where)
    one_minus_pt = jnp.sum(labels * (1.0 - probs), axis=axis, where=where)
    cross_entropy = softmax_cross_entropy(logits, labels, axis=axis, where=where)
    return cross_entropy + epsilon * one_minus_pt


def sigmoid_focal_loss(
    logits: ArrayLike, labels: ArrayLike, *, alpha: ArrayLike | None = None, gamma: ArrayLike = 2.0
) -> jax.Array:
    r"""Focal loss: the binary cross entropy scaled down on well-classified examples.

    .. math::
        \ell(x, y) = \alpha_t (1 - p_t)^\gamma \, \mathrm{BCE}(x, y), \quad
        1 - p_t = y (1 - \sigma(x)) + (1 - y) \sigma(x), \quad \alpha_t = \alpha y + (1 - \alpha)(1 - y)

    The factor :math:`(1 - p_t)^\gamma` is computed in log space,
    :math:`\exp(\gamma\,\mathrm{logaddexp}(\log y + \log\sigma(-x), \log(1-y) + \log\sigma(x)))`, so it is exact for
    extreme logits and any ``gamma > 0``.

    Args:
      logits: logits, any shape.
      labels: labels in ``[0, 1]`` (hard or soft), broadcastable to ``logits``.
      alpha: optional weight of the positive class in ``(0, 1)``; None for no weighting.
      gamma: focusing exponent ``>= 0``.

    Returns:
      The elementwise loss, shape of ``logits``.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> gradax.losses.sigmoid_focal_loss(jnp.array([0.0]), jnp.array([1.0]))
      Array([0.1732868], dtype=float32)

    References:
      Lin et al., `Focal Loss for Dense Object Detection <https://arxiv.org/abs/1708.02002>`_, 2017.
    """
    logits = jnp.asarray(logits)
    check_broadcastable("sigmoid_focal_loss", "labels", labels, "logits", logits)
    labels = jnp.asarray(labels).astype(logits.dtype)
    cross_entropy = sigmoid_binary_cross_entropy(logits, labels)
    log_p = jax.nn.log_sigmoid(logits)
    log_q = jax.nn.log_sigmoid(-logits)
    log_one_minus_pt = jnp.logaddexp(jnp.log(labels) + log_q, jnp.log1p(-labels) + log_p)
    loss = jnp.exp(gamma * log_one_minus_pt) * cross_entropy
    if alpha is not None:
        loss = (alpha * labels + (1.0 - alpha) * (1.0 - labels)) * loss
    return jnp.asarray(loss)  # an array already; asarray tells the type checker (alpha may be a NumPy array)


def smooth_labels(labels: ArrayLike, alpha: ArrayLike, *, axis: Axis = -1, where: ArrayLike | None = None):
    r"""Label smoothing: mixes the labels with the uniform distribution over the classes.

    .. math::
        \tilde y_i = (1 - \alpha) y_i + \alpha / K

    where ``K`` is the number of classes along ``axis`` (those where ``where`` is True).

    Args:
      labels: one-hot labels, shape ``[..., num_classes]``.
      alpha: smoothing factor in ``[0, 1]``.
      axis: the class axis or axes.
      where: optional boolean mask of the classes that count.

    Returns:
      The smoothed labels, shape of ``labels``.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> print(gradax.losses.smooth_labels(jnp.array([0.0, 1.0]), 0.2).round(3))
      [0.1 0.9]

    References:
      Muller et al., `When does label smoothing help? <https://arxiv.org/abs/1906.02629>`_, 2019.
    """
    labels = jnp.asarray(labels)
    if where is None:
        num = jnp.sum(jnp.ones_like(labels), axis=axis, keepdims=True)
    else:
        num = jnp.sum(jnp.broadcast_to(jnp.asarray(where), labels.shape), axis=axis, keepdims=True)
    return (1.0 - alpha) * labels + alpha / num


def sparsemax_loss(logits: ArrayLike, labels: ArrayLike) -> jax.Array:
    r"""Binary sparsemax loss: the Fenchel-Young loss of sparsemax for two classes.

    With :math:`z = -x` for label 1 and :math:`z = x` for label 0,

    .. math::
        \ell(x, y) = \begin{cases} 0 & z \le -1 \\ (z + 1)^2 / 4 & -1 < z < 1 \\ z & z \ge 1 \end{cases}

    a smooth, sparse alternative to the logistic loss (zero when the margin exceeds 1).

    Args:
      logits: logits, any shape.
      labels: binary labels (0 or 1), same shape.

    Returns:
      The elementwise loss.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> gradax.losses.sparsemax_loss(jnp.array([0.0, 2.0, -2.0]), jnp.array([1, 1, 1]))
      Array([0.25, 0.  , 2.  ], dtype=float32)

    References:
      Martins and Astudillo, `From Softmax to Sparsemax <https://arxiv.org/abs/1602.02068>`_, 2016.
    """
    logits, labels = same_shape_arrays("sparsemax_loss", "logits", logits, "labels", labels)
    z = jnp.where(labels != 0, -logits, logits)
    return jnp.where(z <= -1.0, 0.0, jnp.where(z >= 1.0, z, 0.25 * jnp.square(z + 1.0)))


def _sparsemax(z: jax.Array) -> jax.Array:
    """Euclidean projection of each last-axis row of ``z`` onto the probability simplex."""
    k = z.shape[-1]
    z_sorted = jnp.flip(jnp.sort(z, axis=-1), axis=-1)
    cumsum = jnp.cumsum(z_sorted, axis=-1)
    ranks = jnp.arange(1, k + 1, dtype=z.dtype)
    support = 1.0 + ranks * z_sorted > cumsum
    support_size = jnp.sum(support, axis=-1, keepdims=True)
    tau = (jnp.take_along_axis(cumsum, support_size - 1, axis=-1) - 1.0) / support_size.astype(z.dtype)
    return jnp.maximum(z - tau, 0.0)


def multiclass_sparsemax_loss(scores: ArrayLike, labels: ArrayLike) -> jax.Array:
    r"""Multiclass sparsemax loss: the Fenchel-Young loss of sparsemax with integer labels.

    .. math::
        \ell(s, c) = \langle s, p^\star \rangle - \tfrac12 \|p^\star\|^2 + \tfrac12 - s_c,
        \qquad p^\star = \mathrm{sparsemax}(s) = \arg\min_{p \in \Delta} \|p - s\|^2

    Its gradient is :math:`p^\star - e_c`.

    Args:
      scores: scores, shape ``[..., num_classes]``.
      labels: integer labels, shape ``[...]``.

    Returns:
      The loss, shape ``[...]``.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> gradax.losses.multiclass_sparsemax_loss(jnp.array([1.0, 2.0, 0.5]), jnp.array(0))
      Array(1., dtype=float32)

    References:
      Martins and Astudillo, `From Softmax to Sparsemax <https://arxiv.org/abs/1602.02068>`_, 2016.
    """
    scores = jnp.asarray(scores)
    labels = jnp.asarray(labels)
    one_hot = jax.nn.one_hot(labels, scores.shape[-1], dtype=scores.dtype)
    return _sparsemax_fy(scores, one_hot)


@jax.custom_jvp
def _sparsemax_fy(scores: jax.Array, one_hot: jax.Array) -> jax.Array:
    p = _sparsemax(scores)
    return jnp.sum(scores * p, axis=-1) - 0.5 * jnp.sum(p * p, axis=-1) + 0.5 - jnp.sum(scores * one_hot, axis=-1)


@_sparsemax_fy.defjvp
def _sparsemax_fy_jvp(primals, tangents):
    scores, one_hot = primals
    d_scores, d_one_hot = tangents
    out = _sparsemax_fy(scores, one_hot)
    p = _sparsemax(scores)
    return out, jnp.sum((p - one_hot) * d_scores, axis=-1) - jnp.sum(scores * d_one_hot, axis=-1)
