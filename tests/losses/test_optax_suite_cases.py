"""Loss cases found by Optax 0.2.8's own test suite: masks given per row, rows with every logit masked, gradients
in the labels, all-masked ranking lists, zero embeddings, binary dice shapes. Checked against Optax."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax  # the oracle (tests only)
import pytest
from jax.test_util import check_grads

import gradax

LOGITS = np.array([[10.0, 1.0, -2.0], [1.0, 4.0, 0.2]], np.float32)
PROBS = np.array([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]], np.float32)
INTS = np.array([1, 0], np.int32)
ROW_MASK = np.array([True, False])
LOGIT_MASK = np.array([[1, 0, 0], [0, 0, 0]], bool)


@pytest.mark.parametrize(
    "name, labels", [("softmax_cross_entropy", PROBS), ("softmax_cross_entropy_with_integer_labels", INTS)]
)
@pytest.mark.parametrize("where", [ROW_MASK, LOGIT_MASK], ids=["per_row", "per_logit"])
def test_cross_entropy_masks_like_optax(name, labels, where):
    def loss_and_grad(lib):
        f = getattr(lib.losses, name)
        return f(LOGITS, labels, where=where), jax.grad(lambda x: jnp.sum(f(x, labels, where=where)))(LOGITS)

    (value, grad), (o_value, o_grad) = loss_and_grad(gradax), loss_and_grad(optax)
    assert bool(jnp.all(jnp.isfinite(grad)))
    np.testing.assert_allclose(value, o_value, rtol=1e-6)
    np.testing.assert_allclose(grad, o_grad, rtol=1e-6, atol=1e-7)


def test_integer_labels_row_with_every_logit_masked_is_zero():
    out = gradax.losses.softmax_cross_entropy_with_integer_labels(LOGITS, INTS, where=LOGIT_MASK)
    np.testing.assert_array_equal(out[1], 0.0)  # the second row has no logit left
    assert bool(jnp.isfinite(out[0]))


def test_safe_softmax_cross_entropy_gradient_in_the_labels():
    """The derivative in a zero label is -log softmax(x), not 0 (check_grads compares with finite differences)."""
    check_grads(gradax.losses.safe_softmax_cross_entropy, (LOGITS, PROBS), order=1)
    logits = np.array([[-np.inf, 0.0, 0.0], [0.0, 1.0, 2.0]], np.float32)
    labels = np.array([[0.0, 0.5, 0.5], [0.0, 0.3, 0.7]], np.float32)
    both = [
        jax.grad(lambda x, y: jnp.sum(lib.losses.safe_softmax_cross_entropy(x, y)), argnums=(0, 1))(logits, labels)
        for lib in (gradax, optax)
    ]
    for ours, theirs in zip(*both):
        np.testing.assert_allclose(ours, theirs, rtol=1e-6)


def test_ranking_softmax_loss_every_list_masked_is_zero():
    scores, labels = jnp.asarray([0.0, 3.0, 1.0, 2.0]), jnp.asarray([0.0, 0.0, 1.0, 1.0])
    where = jnp.zeros(4, bool)
    f = gradax.losses.ranking_softmax_loss
    assert float(f(scores, labels, where=where)) == 0.0
    assert not bool(jnp.any(jnp.isnan(jax.grad(f)(scores, labels, where=where))))
    batch = jnp.stack([where, ~where])
    np.testing.assert_allclose(
        f(jnp.stack([scores] * 2), jnp.stack([labels] * 2), where=batch),
        optax.losses.ranking_softmax_loss(jnp.stack([scores] * 2), jnp.stack([labels] * 2), where=batch),
        rtol=1e-6,
    )


def test_ntxent_zero_embedding_is_finite_like_optax():
    emb = jnp.array([[0.0, 0.0], [0.238, -0.5703], [1.8745, -0.0195], [-0.6719, -1.921]])
    labels = jnp.array([0, 0, 1, 1])
    ours = jax.jit(gradax.losses.ntxent)(emb, labels)
    np.testing.assert_allclose(ours, optax.losses.ntxent(emb, labels), rtol=1e-5)
    np.testing.assert_allclose(ours, 9.2889, atol=1e-4)


@pytest.mark.parametrize("case", ["targets_have_axis", "predictions_have_axis"])
def test_dice_loss_binary_trailing_axis_on_one_side(case):
    key = jax.random.key(0)
    preds, targets = jax.random.normal(key, (2, 4, 4)), jax.random.bernoulli(key, 0.5, (2, 4, 4, 1))
    if case == "predictions_have_axis":
        preds, targets = preds[..., None], targets[..., 0]
    ours = gradax.losses.dice_loss(preds, targets)
    assert ours.shape == (2,)
    np.testing.assert_allclose(ours, optax.losses.dice_loss(preds, targets), rtol=1e-6)
    with pytest.raises(ValueError, match=r"dice_loss\(targets=...\) must have the shape of `predictions`"):
        gradax.losses.dice_loss(preds, jnp.zeros((2, 4, 4, 2)))


def test_dice_loss_probability_message_has_optax_words():
    probs = jax.random.uniform(jax.random.key(0), (2, 4, 4, 3))
    with pytest.raises(ValueError, match=r"must be probabilities that sum to 1.*valid probability distributions"):
        gradax.losses.dice_loss(probs, jnp.zeros((2, 4, 4, 3)), apply_softmax=False)
