"""Learning-to-rank losses."""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from ._common import check_broadcastable, check_float


def ranking_softmax_loss(
    logits: ArrayLike,
    labels: ArrayLike,
    *,
    where: ArrayLike | None = None,
    weights: ArrayLike | None = None,
    reduce_fn: Callable[..., jax.Array] | None = jnp.mean,
) -> jax.Array:
    r"""Listwise softmax cross entropy between relevance labels and item scores.

    .. math::
        \ell(s, y) = -\sum_i w_i y_i \log \frac{e^{s_i}}{\sum_{j \in V} e^{s_j}}

    over the valid items :math:`V` (``where``); the labels are not normalized (as in Optax/Rax). Invalid items
    (which may hold ``-inf`` scores) and lists with no relevant item contribute 0; with ``where``, lists with no
    valid item are left out of the reduction (``reduce_fn`` is called with ``where=`` the lists that have one).

    Args:
      logits: item scores, shape ``[..., list_size]``.
      labels: relevance labels (``>= 0``), same shape.
      where: optional boolean mask of valid items, same shape.
      weights: optional per-item weights, same shape.
      reduce_fn: reduction over the lists (``jnp.mean``, ``jnp.sum``), or None for the per-list losses.

    Returns:
      The reduced loss, or the per-list losses of shape ``[...]`` when ``reduce_fn`` is None.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> gradax.losses.ranking_softmax_loss(jnp.array([0.0, 0.0]), jnp.array([1.0, 0.0]))
      Array(0.6931472, dtype=float32)

    References:
      Cao et al., `Learning to Rank: From Pairwise Approach to Listwise Approach
      <https://www.microsoft.com/en-us/research/publication/learning-to-rank-from-pairwise-approach-to-listwise-approach/>`_,
      2007.
    """
    api = "ranking_softmax_loss"
    logits = jnp.asarray(logits)
    check_float(api, "logits", logits)
    check_broadcastable(api, "labels", labels, "logits", logits)
    labels = jnp.asarray(labels).astype(logits.dtype)
    if where is not None:
        check_broadcastable(api, "where", where, "logits", logits)
        where = jnp.broadcast_to(jnp.asarray(where), logits.shape)
        labels = jnp.where(where, labels, 0.0)
    if weights is not None:
        check_broadcastable(api, "weights", weights, "logits", logits)
        labels = labels * jnp.asarray(weights)
    log_probs = jax.nn.log_softmax(logits, axis=-1, where=where)
    relevant = labels != 0
    if where is not None:
        relevant = relevant & where
    safe_log_probs = jnp.where(relevant, log_probs, 0.0)
    loss = -jnp.sum(jnp.where(relevant, labels * safe_log_probs, 0.0), axis=-1)
    if reduce_fn is None:
        return loss
    if where is None:
        return reduce_fn(loss)
    valid = jnp.any(where, axis=-1)
    # with every list masked out, reduce the (zero) losses of all lists: 0, as in Optax, not the nan of an empty mean
    return reduce_fn(loss, where=valid | ~jnp.any(valid))
