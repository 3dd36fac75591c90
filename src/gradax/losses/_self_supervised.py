"""Self-supervised and metric-learning losses: NT-Xent and the triplet margin loss."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from ._common import check_float, check_ndim, check_same_shape


def ntxent(embeddings: ArrayLike, labels: ArrayLike, temperature: ArrayLike = 0.07) -> jax.Array:
    r"""Normalized temperature-scaled cross entropy (NT-Xent, the SimCLR contrastive loss).

    With cosine similarities :math:`s_{ij} = \cos(e_i, e_j) / \tau`, for each positive pair :math:`(i, j)`
    (:math:`i \neq j`, same label) and the negatives :math:`N(i)` of :math:`i` (other labels):

    .. math::
        \ell_{ij} = -\log \frac{e^{s_{ij}}}{e^{s_{ij}} + \sum_{k \in N(i)} e^{s_{ik}}}

    averaged over all positive pairs (computed with log-sum-exp, stable for any temperature). With no positive pair
    the mean is undefined (``nan``), as in Optax.

    Args:
      embeddings: shape ``[batch, dim]``.
      labels: integer group labels, shape ``[batch]``; equal labels mark positive pairs.
      temperature: ``tau > 0``.

    Returns:
      The scalar loss.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> e = jnp.array([[1.0, 0.0], [1.0, 0.1], [0.0, 1.0], [0.1, 1.0]])
      >>> float(gradax.losses.ntxent(e, jnp.array([0, 0, 1, 1]), 0.1)) < 1e-3
      True

    References:
      Chen et al., `A Simple Framework for Contrastive Learning of Visual Representations
      <http://arxiv.org/abs/2002.05709>`_, 2020.
    """
    embeddings = jnp.asarray(embeddings)
    labels = jnp.asarray(labels)
    check_ndim("ntxent", "embeddings", embeddings, 2, "[batch, dim]")
    if labels.shape != embeddings.shape[:1]:
        raise ValueError(
            f"ntxent(labels=...) must have shape [batch] = {embeddings.shape[:1]}; got shape {labels.shape}. "
            "Pass one label per embedding."
        )
    # squared norms bounded below by the dtype's epsilon (Optax's cosine similarity): a zero embedding is finite
    eps = jnp.finfo(embeddings.dtype).eps
    norms = jnp.sqrt(jnp.maximum(jnp.sum(embeddings * embeddings, axis=-1, keepdims=True), eps))
    unit = embeddings / norms
    sims = (unit @ unit.T) / temperature
    same = labels[:, None] == labels[None, :]
    eye = jnp.eye(labels.shape[0], dtype=bool)
    positives = same & ~eye
    negatives = ~same
    neg_lse = jax.nn.logsumexp(jnp.where(negatives, sims, -jnp.inf), axis=-1, keepdims=True)
    neg_lse = jnp.where(jnp.any(negatives, axis=-1, keepdims=True), neg_lse, -jnp.inf)
    pair_loss = jnp.logaddexp(sims, neg_lse) - sims
    num_pairs = jnp.sum(positives)
    return jnp.sum(jnp.where(positives, pair_loss, 0.0)) / num_pairs


def triplet_margin_loss(
    anchors: ArrayLike,
    positives: ArrayLike,
    negatives: ArrayLike,
    axis: int = -1,
    norm_degree: ArrayLike = 2,
    margin: ArrayLike = 1.0,
    eps: ArrayLike = 1e-6,
) -> jax.Array:
    r"""Triplet margin loss: the positive must be closer to the anchor than the negative, by a margin.

    .. math::
        \ell(a, p, n) = \max\big(0, d(a, p) - d(a, n) + m\big), \qquad
        d(x, y) = \Big(\sum_i |x_i - y_i|^q + \epsilon\Big)^{1/q}

    Optax 0.2.8 omits the absolute value (``(x - y)^q``), which is wrong for odd ``q`` (``nan`` or negative
    "distances"); gradax uses :math:`|x - y|^q` (identical for even ``q``; see ``docs/differences.md``).

    Args:
      anchors: shape ``[batch, dim]``.
      positives: same shape.
      negatives: same shape.
      axis: the feature axis.
      norm_degree: ``q >= 1``.
      margin: ``m``.
      eps: added inside the root for a finite gradient at zero distance.

    Returns:
      The loss per example, with ``axis`` reduced.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> a = jnp.array([[0.0, 0.0]]); p = jnp.array([[0.0, 1.0]]); n = jnp.array([[3.0, 4.0]])
      >>> gradax.losses.triplet_margin_loss(a, p, n, eps=0.0)
      Array([0.], dtype=float32)

    References:
      Balntas et al., `Learning shallow convolutional feature descriptors with triplet losses
      <https://bmva-archive.org.uk/bmvc/2016/papers/paper119/abstract119.pdf>`_, 2016.
    """
    api = "triplet_margin_loss"
    anchors = jnp.asarray(anchors)
    check_float(api, "anchors", anchors)
    check_float(api, "positives", positives)
    check_float(api, "negatives", negatives)
    check_same_shape(api, "positives", positives, "anchors", anchors)
    check_same_shape(api, "negatives", negatives, "anchors", anchors)

    def distance(x, y):
        return jnp.power(jnp.sum(jnp.power(jnp.abs(x - y), norm_degree), axis=axis) + eps, 1.0 / norm_degree)

    return jnp.maximum(distance(anchors, positives) - distance(anchors, negatives) + margin, 0.0)
