"""Segmentation losses: Dice, Tversky and generalized Dice."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from .._checks import argument_error, check_one_of
from .._hyperparams import is_concrete
from ._common import check_same_shape


def _check_probabilities(api: str, arg: str, probs: jax.Array) -> None:
    """Raises when concrete multi-class ``probs`` do not sum to 1 along the last axis (traced values pass)."""
    if probs.shape[-1] < 2 or not is_concrete(probs) or probs.size == 0:
        return
    sums = np.asarray(jnp.sum(probs, axis=-1))
    if not np.all(np.abs(sums - 1.0) <= 1e-5):
        raise argument_error(
            api,
            arg,
            "probabilities that sum to 1 along the class axis when apply_softmax=False",
            f"sums in [{sums.min():.6g}, {sums.max():.6g}]",
            "Predictions with apply_softmax=False must be valid probability distributions: pass logits with "
            "apply_softmax=True, or normalize the predictions",
        )


def _dice_per_class(probs, targets, smooth, alpha, beta, axes):
    intersection = jnp.sum(probs * targets, axis=axes)
    pred_sum = jnp.sum(probs, axis=axes)
    target_sum = jnp.sum(targets, axis=axes)
    denominator = intersection + alpha * (pred_sum - intersection) + beta * (target_sum - intersection) + smooth
    return 1.0 - (intersection + smooth) / denominator


def _reduce_axes(api: str, ndim: int, axis) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(1, ndim - 1))
    axes = (axis,) if isinstance(axis, int) else tuple(int(a) for a in axis)
    out = []
    for a in axes:
        if not -ndim <= a < ndim or a % ndim == ndim - 1:
            raise argument_error(
                api,
                "axis",
                f"spatial axes of the predictions (not the class axis {ndim - 1})",
                axis,
                "Pass axes between 0 and ndim - 2",
            )
        out.append(a % ndim)
    return tuple(out)


def _dice(
    api, predictions, targets, class_weights, smooth, alpha, beta, activation, reduction, ignore_background, axis
):
    predictions = jnp.asarray(predictions)
    targets = jnp.asarray(targets).astype(predictions.dtype)
    # binary masks: a trailing class axis of size 1 on one side only is added to the other (as Optax does)
    if targets.ndim == predictions.ndim + 1 and targets.shape == (*predictions.shape, 1):
        predictions = predictions[..., None]
    elif predictions.ndim == targets.ndim + 1 and predictions.shape == (*targets.shape, 1):
        targets = targets[..., None]
    check_same_shape(api, "targets", targets, "predictions", predictions)
    check_one_of(api, "reduction", reduction, ("mean", "sum", "none"))
    if predictions.ndim == 0:
        raise argument_error(
            api,
            "predictions",
            "an array with a class axis",
            predictions.shape,
            "Pass predictions of shape [..., num_classes]",
        )
    num_classes = predictions.shape[-1]
    if activation == "auto":
        probs = jax.nn.sigmoid(predictions) if num_classes == 1 else jax.nn.softmax(predictions, axis=-1)
    elif activation == "sigmoid":
        probs = jax.nn.sigmoid(predictions)
    else:
        _check_probabilities(api, "predictions", predictions)
        probs = predictions
    axes = _reduce_axes(api, predictions.ndim, axis)
    loss = _dice_per_class(probs, targets, smooth, alpha, beta, axes)
    if class_weights is not None:
        class_weights = jnp.asarray(class_weights)
        if class_weights.shape != (num_classes,):
            raise argument_error(
                api,
                "class_weights",
                f"of shape [num_classes] = ({num_classes},)",
                class_weights.shape,
                "Pass one weight per class",
            )
        loss = loss * class_weights
    if ignore_background and num_classes > 1:
        loss = loss[..., 1:]
    if reduction == "mean":
        return jnp.mean(loss, axis=-1)
    if reduction == "sum":
        return jnp.sum(loss, axis=-1)
    return loss


def dice_loss(
    predictions: ArrayLike,
    targets: ArrayLike,
    *,
    class_weights: ArrayLike | None = None,
    smooth: ArrayLike = 1.0,
    alpha: ArrayLike = 0.5,
    beta: ArrayLike = 0.5,
    apply_softmax: bool = True,
    reduction: str = "mean",
    ignore_background: bool = False,
    axis: ArrayLike | None = None,
) -> jax.Array:
    r"""Soft Dice (Tversky) loss for segmentation, per class then reduced over classes.

    With probabilities :math:`p` and targets :math:`t`, summed over the spatial axes for each class :math:`c`:
    :math:`I_c = \sum p t`, :math:`P_c = \sum p`, :math:`T_c = \sum t`, and

    .. math::
        \ell_c = 1 - \frac{I_c + s}{I_c + \alpha (P_c - I_c) + \beta (T_c - I_c) + s}

    ``alpha = beta = 0.5`` is the Dice loss; other values give the Tversky loss. With a single class (last axis of
    size 1) the probabilities are ``sigmoid(predictions)``, otherwise ``softmax`` over the last axis.

    Args:
      predictions: logits (or probabilities with ``apply_softmax=False``), shape ``[batch, *spatial, num_classes]``.
      targets: one-hot (or soft) targets, same shape; for one class, a trailing axis of size 1 on only one of the two
        is added to the other.
      class_weights: optional weights per class, shape ``[num_classes]``.
      smooth: smoothing constant ``s >= 0``.
      alpha: weight of false positives.
      beta: weight of false negatives.
      apply_softmax: whether to turn logits into probabilities (softmax, or sigmoid for one class).
      reduction: ``"mean"``, ``"sum"`` over classes, or ``"none"``.
      ignore_background: leave out class 0 (when there are several classes).
      axis: axis or axes summed over; None means all but the first and the last.

    Returns:
      Shape ``[batch]`` (the non-summed, non-class axes) for ``"mean"``/``"sum"``; with the class axis for ``"none"``.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> probs = jnp.array([[[1.0, 0.0], [0.0, 1.0]]])
      >>> gradax.losses.dice_loss(probs, probs, apply_softmax=False)
      Array([0.], dtype=float32)

    References:
      Milletari et al., `V-Net <https://arxiv.org/abs/1606.04797>`_, 2016; Salehi et al., `Tversky loss function for
      image segmentation <https://arxiv.org/abs/1706.05721>`_, 2017.
    """
    activation = "auto" if apply_softmax else None
    return _dice(
        "dice_loss",
        predictions,
        targets,
        class_weights,
        smooth,
        alpha,
        beta,
        activation,
        reduction,
        ignore_background,
        axis,
    )


def binary_dice_loss(
    predictions: ArrayLike, targets: ArrayLike, *, smooth: ArrayLike = 1.0, apply_sigmoid: bool = True
) -> jax.Array:
    r"""Dice loss for binary segmentation (one foreground probability per pixel).

    .. math::
        \ell = 1 - \frac{2 \sum p t + s}{\sum p + \sum t + s}, \qquad p = \sigma(x) \text{ or } x

    summed over all axes but the first (a trailing axis of size 1 is added when missing).

    With ``apply_sigmoid=False`` the predictions are foreground probabilities in ``[0, 1]``; Optax 0.2.8 rejects
    every such input unless it is all ones (see ``docs/differences.md``).

    Args:
      predictions: logits (or probabilities), shape ``[batch, ...]`` or ``[batch, ..., 1]``.
      targets: binary targets, same shape.
      smooth: smoothing constant ``s >= 0``.
      apply_sigmoid: whether to apply the sigmoid to the predictions.

    Returns:
      The loss, shape ``[batch]`` (the leading axis).

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> p = jnp.array([[1.0, 0.0, 1.0]])
      >>> gradax.losses.binary_dice_loss(p, p, apply_sigmoid=False)
      Array([0.], dtype=float32)
    """
    predictions = jnp.asarray(predictions)
    targets = jnp.asarray(targets)
    if predictions.ndim == 0 or predictions.shape[-1] != 1:
        predictions = predictions[..., None]
        targets = targets[..., None]
    activation = "sigmoid" if apply_sigmoid else None
    return _dice("binary_dice_loss", predictions, targets, None, smooth, 0.5, 0.5, activation, "mean", False, None)


def multiclass_generalized_dice_loss(
    predictions: ArrayLike,
    targets: ArrayLike,
    *,
    smooth: ArrayLike = 1.0,
    apply_softmax: bool = True,
    ignore_background: bool = False,
) -> jax.Array:
    r"""Generalized Dice loss: Dice with class weights from inverse squared class volumes.

    .. math::
        w_c \propto \frac{1}{(\sum_{b,i} t_{b,i,c})^2 + 10^{-8}}, \qquad \textstyle\sum_c w_c = C

    then the class-weighted :func:`dice_loss` averaged over classes and the batch.

    Args:
      predictions: logits (or probabilities), shape ``[batch, *spatial, num_classes]``.
      targets: one-hot targets, same shape.
      smooth: smoothing constant.
      apply_softmax: whether to apply softmax (sigmoid for one class) to the predictions.
      ignore_background: leave out class 0.

    Returns:
      The scalar loss.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> t = jnp.array([[[1.0, 0.0], [0.0, 1.0]]])
      >>> gradax.losses.multiclass_generalized_dice_loss(t, t, apply_softmax=False)
      Array(0., dtype=float32)

    References:
      Sudre et al., `Generalised Dice overlap as a deep learning loss function for highly unbalanced segmentations
      <https://arxiv.org/abs/1707.03237>`_, 2017.
    """
    predictions = jnp.asarray(predictions)
    targets = jnp.asarray(targets).astype(predictions.dtype)
    check_same_shape("multiclass_generalized_dice_loss", "targets", targets, "predictions", predictions)
    volumes = jnp.sum(targets, axis=tuple(range(targets.ndim - 1)))
    weights = 1.0 / (volumes * volumes + 1e-8)
    weights = weights / jnp.sum(weights) * weights.shape[0]
    activation = "auto" if apply_softmax else None
    per_example = _dice(
        "multiclass_generalized_dice_loss",
        predictions,
        targets,
        weights,
        smooth,
        0.5,
        0.5,
        activation,
        "mean",
        ignore_background,
        None,
    )
    return jnp.mean(per_example)
