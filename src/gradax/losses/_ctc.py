"""Connectionist temporal classification (CTC) loss, computed by the forward algorithm in log space."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from ._common import check_ndim


def _check(api, logits, logit_paddings, labels, label_paddings):
    check_ndim(api, "logits", logits, 3, "[batch, time, num_classes]")
    check_ndim(api, "labels", labels, 2, "[batch, max_label_length]")
    batch, time = logits.shape[:2]
    if logit_paddings.shape != (batch, time):
        raise ValueError(
            f"{api}(logit_paddings=...) must have shape [batch, time] = {(batch, time)}; got shape "
            f"{logit_paddings.shape}. Pass one padding flag (1.0 = padded) per frame."
        )
    if labels.shape[0] != batch:
        raise ValueError(
            f"{api}(labels=...) must have the batch size of `logits` ({batch}); got shape {labels.shape}. "
            "Pass one label sequence per logit sequence."
        )
    if label_paddings.shape != labels.shape:
        raise ValueError(
            f"{api}(label_paddings=...) must have the shape of `labels` {labels.shape}; got shape "
            f"{label_paddings.shape}. Pass one padding flag (1.0 = padded) per label."
        )


def ctc_loss_with_forward_probs(
    logits: ArrayLike,
    logit_paddings: ArrayLike,
    labels: ArrayLike,
    label_paddings: ArrayLike,
    *,
    blank_id: int = 0,
    log_epsilon: ArrayLike = -1e5,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    r"""CTC loss and the forward (alpha) log-probabilities of the lattice.

    The negative log-likelihood of the label sequence summed over all its alignments (label repeats and blanks
    between them), computed by the forward recursion in log space. The lattice has two kinds of states: ``phi[n]``
    (``n`` labels emitted, the last frame was a blank or the label was just completed; ``n = 0..N``) and ``emit[n]``
    (label ``n`` is being emitted by the current frame; ``n = 0..N-1``). Per frame :math:`t` with log-probabilities
    :math:`b_t` (blank) and :math:`e_t[n]` (label ``n``):

    .. math::
        \tilde\phi[n+1] = \mathrm{lae}(\phi[n+1], \mathrm{emit}[n] + \epsilon\, r_n),\quad
        \mathrm{emit}'[n] = \mathrm{lae}(\tilde\phi[n], \mathrm{emit}[n]) + e_t[n],\quad
        \phi'[n+1] = \mathrm{lae}(\tilde\phi[n+1] + b_t, \mathrm{emit}[n] + b_t + \epsilon (1 - r_n))

    where :math:`r_n = 1` when label ``n + 1`` repeats label ``n`` (a blank is then required between them) and
    :math:`\epsilon` is ``log_epsilon`` (a finite stand-in for :math:`\log 0`). Padded frames keep the state. The
    loss is :math:`-\phi_T[N_b]` after a last emit-to-phi transition, with :math:`N_b` the unpadded label length.

    Args:
      logits: shape ``[batch, time, num_classes]``; log-softmax is applied over the classes.
      logit_paddings: shape ``[batch, time]``, 1.0 for padded frames, 0.0 for valid ones (padding at the end).
      labels: integer labels, shape ``[batch, max_label_length]``.
      label_paddings: shape ``[batch, max_label_length]``, 1.0 for padding (at the end), 0.0 for valid labels.
      blank_id: the class index of the blank.
      log_epsilon: the log-probability used for impossible transitions.

    Returns:
      ``(per_seq_loss [batch], logalpha_phi [time, batch, N+1], logalpha_emit [time, batch, N])``.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> logits = jnp.zeros((1, 2, 2))
      >>> loss, phi, emit = gradax.losses.ctc_loss_with_forward_probs(
      ...     logits, jnp.zeros((1, 2)), jnp.array([[1]]), jnp.zeros((1, 1)))
      >>> print(loss.round(4))  # 3 alignments of probability 1/4 each: -log(3/4)
      [0.2877]

    References:
      Graves et al., `Connectionist temporal classification
      <https://www.cs.toronto.edu/~graves/icml_2006.pdf>`_, 2006.
    """
    api = "ctc_loss_with_forward_probs"
    logits = jnp.asarray(logits)
    logit_paddings = jnp.asarray(logit_paddings)
    labels = jnp.asarray(labels)
    label_paddings = jnp.asarray(label_paddings)
    _check(api, logits, logit_paddings, labels, label_paddings)
    batch, _, num_classes = logits.shape
    max_label_len = labels.shape[1]
    dtype = logits.dtype

    log_probs = jax.nn.log_softmax(logits, axis=-1)
    label_lengths = max_label_len - jnp.sum(label_paddings, axis=1).astype(jnp.int32)
    repeats = jnp.concatenate([(labels[:, :-1] == labels[:, 1:]).astype(dtype), jnp.zeros((batch, 1), dtype)], axis=1)
    # Per frame, time-major: the blank log-probability [T, B, 1] and the label log-probabilities [T, B, N].
    blank_lp = jnp.transpose(log_probs[:, :, blank_id : blank_id + 1], (1, 0, 2))
    label_lp = jnp.transpose(jnp.take_along_axis(log_probs, labels[:, None, :], axis=2), (1, 0, 2))
    del num_classes

    def add_to_tail(phi, extra):
        """``phi`` with ``extra`` log-added to entries 1..N."""
        return jnp.concatenate([phi[:, :1], jnp.logaddexp(phi[:, 1:], extra)], axis=1)

    def step(carry, frame):
        phi, emit = carry
        lp_emit, lp_blank, pad = frame
        phi_in = add_to_tail(phi, emit + log_epsilon * repeats)
        new_emit = jnp.logaddexp(phi_in[:, :-1] + lp_emit, emit + lp_emit)
        new_phi = add_to_tail(phi_in + lp_blank, emit + lp_blank + log_epsilon * (1.0 - repeats))
        keep = pad[:, None]
        new_phi = keep * phi + (1.0 - keep) * new_phi
        new_emit = keep * emit + (1.0 - keep) * new_emit
        return (new_phi, new_emit), (new_phi, new_emit)

    phi0 = jnp.full((batch, max_label_len + 1), log_epsilon, dtype).at[:, 0].set(0.0)
    emit0 = jnp.full((batch, max_label_len), log_epsilon, dtype)
    frames = (label_lp, blank_lp, jnp.transpose(logit_paddings).astype(dtype))
    _, (logalpha_phi, logalpha_emit) = jax.lax.scan(step, (phi0, emit0), frames)

    final_phi = add_to_tail(logalpha_phi[-1], logalpha_emit[-1])
    logalpha_phi = logalpha_phi.at[-1].set(final_phi)
    per_seq_loss = -jnp.take_along_axis(final_phi, label_lengths[:, None], axis=1)[:, 0]
    return per_seq_loss, logalpha_phi, logalpha_emit


def ctc_loss(
    logits: ArrayLike,
    logit_paddings: ArrayLike,
    labels: ArrayLike,
    label_paddings: ArrayLike,
    *,
    blank_id: int = 0,
    log_epsilon: ArrayLike = -1e5,
) -> jax.Array:
    r"""CTC loss: the negative log-likelihood of a label sequence over all its alignments to the frames.

    .. math::
        \ell = -\log \sum_{\pi \in \mathcal{B}^{-1}(y)} \prod_t p_t(\pi_t)

    where :math:`\mathcal{B}` removes repeats and then blanks. See :func:`ctc_loss_with_forward_probs` for the
    recursion, the arguments and the padding conventions.

    Args:
      logits: shape ``[batch, time, num_classes]``.
      logit_paddings: shape ``[batch, time]``, 1.0 for padded frames.
      labels: integer labels, shape ``[batch, max_label_length]``.
      label_paddings: shape ``[batch, max_label_length]``, 1.0 for padding.
      blank_id: the class index of the blank.
      log_epsilon: the log-probability used for impossible transitions.

    Returns:
      The loss per sequence, shape ``[batch]``.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> loss = gradax.losses.ctc_loss(jnp.zeros((1, 2, 2)), jnp.zeros((1, 2)), jnp.array([[1]]), jnp.zeros((1, 1)))
      >>> print(loss.round(4))
      [0.2877]
    """
    per_seq_loss, _, _ = ctc_loss_with_forward_probs(
        logits, logit_paddings, labels, label_paddings, blank_id=blank_id, log_epsilon=log_epsilon
    )
    return per_seq_loss
