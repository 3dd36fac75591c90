"""Losses at extreme inputs, documented edge cases, independent references, error messages and Optax differences."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradax

L = gradax.losses


def _finite(*trees):
    for tree in trees:
        for leaf in jax.tree.leaves(tree):
            assert np.all(np.isfinite(np.asarray(leaf))), leaf


# --- stability at extreme inputs ---------------------------------------------------------------------------------


def test_sigmoid_losses_are_stable_at_extreme_logits():
    x = jnp.array([-1e4, -100.0, -30.0, 0.0, 30.0, 100.0, 1e4])
    for y in (jnp.zeros(7), jnp.ones(7), jnp.full(7, 0.3)):
        for fn in (L.sigmoid_binary_cross_entropy, lambda a, b: L.sigmoid_focal_loss(a, b, gamma=0.5)):
            _finite(fn(x, y), jax.grad(lambda a: fn(a, y).sum())(x))
    # exact large-margin asymptotics: BCE(x, 0) = x for large x, BCE(-x, 1) = x
    np.testing.assert_allclose(L.sigmoid_binary_cross_entropy(jnp.array([1e4]), jnp.array([0.0])), [1e4])
    np.testing.assert_allclose(L.sigmoid_binary_cross_entropy(jnp.array([-100.0]), jnp.array([1.0])), [100.0])
    np.testing.assert_allclose(
        L.sigmoid_focal_loss(x, jnp.full(7, 0.3)), optax.sigmoid_focal_loss(x, jnp.full(7, 0.3)), rtol=1e-5
    )


def test_softmax_losses_are_stable_at_extreme_logits():
    logits = jnp.array([[1e4, -1e4, 0.0], [-3e38, 0.0, 3e38]])
    labels = jnp.array([[0.0, 1.0, 0.0], [0.5, 0.0, 0.5]])
    ints = jnp.array([1, 0])
    np.testing.assert_allclose(L.softmax_cross_entropy(logits[:1], labels[:1]), [2e4])
    np.testing.assert_allclose(L.softmax_cross_entropy_with_integer_labels(logits[:1], ints[:1]), [2e4])
    _finite(jax.grad(lambda x: L.softmax_cross_entropy(x, labels).sum())(logits))
    _finite(jax.grad(lambda x: L.softmax_cross_entropy_with_integer_labels(x, ints[:1]).sum())(logits[:1]))
    _finite(L.poly_loss_cross_entropy(logits[:1], labels[:1]), L.multiclass_sparsemax_loss(logits[:1], ints[:1]))


def test_log_cosh_does_not_overflow():
    x = jnp.array([0.0, 1.0, 100.0, -1e4])
    np.testing.assert_allclose(L.log_cosh(x), [0.0, np.log(np.cosh(1.0)), 100.0 - np.log(2.0), 1e4 - np.log(2.0)])
    with np.errstate(over="ignore"):
        assert np.isinf(np.log(np.cosh(np.float32(100.0))))  # the naive formula overflows in float32
    np.testing.assert_allclose(jax.grad(lambda a: L.log_cosh(a).sum())(x), np.tanh(np.asarray(x)), rtol=1e-6)


def test_ntxent_is_stable_at_small_temperature():
    e = jax.random.normal(jax.random.key(0), (6, 3))
    labels = jnp.array([0, 0, 1, 1, 2, 2])
    _finite(L.ntxent(e, labels, 1e-3), jax.grad(lambda a: L.ntxent(a, labels, 1e-3))(e))


# --- documented edge cases ----------------------------------------------------------------------------------------


def test_minus_inf_logits_under_where_masks():
    logits = jnp.array([[-jnp.inf, 1.0, 2.0], [0.5, -jnp.inf, -1.0]])
    where = jnp.isfinite(logits)
    labels = jnp.array([[0.0, 0.3, 0.7], [1.0, 0.0, 0.0]])
    ints = jnp.array([2, 0])
    cases = [
        lambda lib, x: lib.losses.softmax_cross_entropy(x, labels, where=where),
        lambda lib, x: lib.losses.softmax_cross_entropy_with_integer_labels(x, ints, where=where),
        lambda lib, x: lib.losses.poly_loss_cross_entropy(x, labels, where=where),
        lambda lib, x: lib.losses.ranking_softmax_loss(x, labels, where=where),
        lambda lib, x: lib.losses.safe_softmax_cross_entropy(x, labels),
    ]
    for case in cases:
        ours, theirs = case(gradax, logits), case(optax, logits)
        _finite(ours)
        np.testing.assert_allclose(ours, theirs, rtol=1e-6)
        g = jax.grad(lambda x, c=case: jnp.sum(c(gradax, x)))(logits)
        _finite(g)
        np.testing.assert_allclose(g, jax.grad(lambda x, c=case: jnp.sum(c(optax, x)))(logits), rtol=1e-5, atol=1e-7)
        assert np.all(np.asarray(g)[~np.asarray(where)] == 0.0)


def test_empty_rankings_contribute_zero():
    logits = jnp.array([[1.0, 2.0, 3.0], [0.5, -1.0, 2.0], [1.0, 1.0, 1.0]])
    labels = jnp.array([[0.0, 1.0, 0.0], [0.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    where = jnp.array([[True, True, True], [True, True, True], [False, False, False]])
    per_list = L.ranking_softmax_loss(logits, labels, where=where, reduce_fn=None)
    np.testing.assert_allclose(per_list[1:], [0.0, 0.0])
    # the mean runs over the lists with at least one valid item
    np.testing.assert_allclose(L.ranking_softmax_loss(logits, labels, where=where), per_list[0] / 2, rtol=1e-6)
    np.testing.assert_allclose(
        L.ranking_softmax_loss(logits, labels, where=where),
        optax.losses.ranking_softmax_loss(logits, labels, where=where),
    )
    _finite(jax.grad(lambda x: L.ranking_softmax_loss(x, labels, where=where))(logits))
    assert L.ranking_softmax_loss(jnp.zeros((0, 3)), jnp.zeros((0, 3)), reduce_fn=jnp.sum) == 0.0


def test_zero_and_one_probabilities():
    # BCE with hard labels equals -log p of the right class.
    x = jnp.array([2.0, -1.0])
    np.testing.assert_allclose(
        L.sigmoid_binary_cross_entropy(x, jnp.array([1.0, 0.0])),
        -np.log(jax.nn.sigmoid(np.array([2.0, 1.0]))),
        rtol=1e-6,
    )
    # KL with a one-hot target is the negative log-probability of that class.
    logq = jnp.log(jnp.array([0.2, 0.8]))
    np.testing.assert_allclose(L.kl_divergence(logq, jnp.array([0.0, 1.0])), -np.log(0.8), rtol=1e-6)
    np.testing.assert_allclose(
        L.kl_divergence(logq, jnp.array([0.0, 1.0])), optax.kl_divergence(logq, jnp.array([0.0, 1.0]))
    )
    # smoothing a one-hot label
    np.testing.assert_allclose(L.smooth_labels(jnp.array([0.0, 0.0, 1.0, 0.0]), 0.4), [0.1, 0.1, 0.7, 0.1])


def _ctc_brute_force(log_probs, labels, blank):
    """-log of the sum over all frame paths that collapse to ``labels`` (float64 NumPy)."""
    time, num_classes = log_probs.shape
    total = 0.0
    for path in itertools.product(range(num_classes), repeat=time):
        collapsed = [c for i, c in enumerate(path) if (i == 0 or c != path[i - 1]) and c != blank]
        if collapsed == list(labels):
            total += np.exp(sum(log_probs[t, c] for t, c in enumerate(path)))
    return -np.log(total)


@pytest.mark.parametrize("labels,blank", [([1, 2], 0), ([1, 1], 0), ([2], 1), ([0, 2, 2], 1)])
def test_ctc_matches_brute_force(labels, blank):
    logits = jax.random.normal(jax.random.key(len(labels) + blank), (1, 5, 3))
    log_probs = np.asarray(jax.nn.log_softmax(logits[0])).astype(np.float64)
    expected = _ctc_brute_force(log_probs, labels, blank)
    got = L.ctc_loss(logits, jnp.zeros((1, 5)), jnp.array([labels]), jnp.zeros((1, len(labels))), blank_id=blank)
    np.testing.assert_allclose(got, [expected], rtol=1e-5)


def test_ctc_padding_is_ignored():
    logits = jax.random.normal(jax.random.key(3), (1, 6, 4))
    labels = jnp.array([[1, 3]])
    short = L.ctc_loss(logits[:, :4], jnp.zeros((1, 4)), labels, jnp.zeros((1, 2)))
    padded_logits = logits.at[:, 4:].set(100.0)  # garbage in padded frames
    padded = L.ctc_loss(
        padded_logits,
        jnp.array([[0.0, 0, 0, 0, 1, 1]]),
        jnp.array([[1, 3, 3, 0]]),
        jnp.array([[0.0, 0, 1, 1]]),
    )
    np.testing.assert_allclose(padded, short, rtol=1e-6)
    g = jax.grad(lambda x: L.ctc_loss(x, jnp.array([[0.0, 0, 0, 0, 1, 1]]), labels, jnp.zeros((1, 2))).sum())(logits)
    np.testing.assert_array_equal(g[:, 4:], 0.0)


def test_ctc_forward_probs_shapes():
    loss, phi, emit = L.ctc_loss_with_forward_probs(
        jnp.zeros((2, 5, 3)), jnp.zeros((2, 5)), jnp.ones((2, 4), jnp.int32), jnp.zeros((2, 4))
    )
    assert loss.shape == (2,) and phi.shape == (5, 2, 5) and emit.shape == (5, 2, 4)


def test_multiclass_sparsemax_gradient_is_sparsemax_minus_onehot():
    scores = jnp.array([[1.0, 2.0, 0.5, 1.8]])
    g = jax.grad(lambda s: L.multiclass_sparsemax_loss(s, jnp.array([0])).sum())(scores)
    # sparsemax([1, 2, .5, 1.8]) = [0, .6, 0, .4]
    np.testing.assert_allclose(g, [[-1.0, 0.6, 0.0, 0.4]], atol=1e-6)


def test_dice_reference():
    probs = jnp.array([[[0.7, 0.3], [0.2, 0.8], [0.6, 0.4]]])
    targets = jnp.array([[[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]]])
    intersection = (probs * targets).sum(1)
    expected = 1 - (intersection + 1) / (0.5 * probs.sum(1) + 0.5 * targets.sum(1) + 1)  # Tversky, alpha=beta=1/2
    np.testing.assert_allclose(L.dice_loss(probs, targets, apply_softmax=False, reduction="none"), expected, rtol=1e-6)


# --- error messages -----------------------------------------------------------------------------------------------


def test_shape_errors():
    with pytest.raises(
        ValueError,
        match=r"softmax_cross_entropy\(labels=\.\.\.\) must have the shape of `logits` \(2, 3\); got shape \(3,\)\. ",
    ):
        L.softmax_cross_entropy(jnp.zeros((2, 3)), jnp.zeros(3))
    with pytest.raises(ValueError, match=r"squared_error\(targets=\.\.\.\) must have the shape of `predictions`"):
        L.squared_error(jnp.zeros((2, 3)), jnp.zeros(3))
    with pytest.raises(ValueError, match=r"huber_loss\(targets=\.\.\.\) must broadcast to the shape"):
        L.huber_loss(jnp.zeros((2, 3)), jnp.zeros((3, 2)))
    with pytest.raises(ValueError, match=r"kl_divergence\(targets=\.\.\.\) must have the shape"):
        L.kl_divergence(jnp.zeros((2, 3)), jnp.zeros((2, 4)))
    with pytest.raises(
        ValueError,
        match=r"softmax_cross_entropy_with_integer_labels\(labels=\.\.\.\) must have the shape of `logits` without the class axis \(2,\)",
    ):
        L.softmax_cross_entropy_with_integer_labels(jnp.zeros((2, 3)), jnp.zeros(3, jnp.int32))
    with pytest.raises(
        ValueError, match=r"softmax_cross_entropy_with_integer_labels\(labels=\.\.\.\) must have an integer dtype"
    ):
        L.softmax_cross_entropy_with_integer_labels(jnp.zeros((2, 3)), jnp.zeros(2))
    with pytest.raises(
        ValueError, match=r"ctc_loss_with_forward_probs\(logit_paddings=\.\.\.\) must have shape \[batch, time\]"
    ):
        L.ctc_loss(jnp.zeros((2, 5, 3)), jnp.zeros((2, 4)), jnp.zeros((2, 2), jnp.int32), jnp.zeros((2, 2)))
    with pytest.raises(ValueError, match=r"ctc_loss_with_forward_probs\(logits=\.\.\.\) must have 3 dimensions"):
        L.ctc_loss(jnp.zeros((5, 3)), jnp.zeros((2, 4)), jnp.zeros((2, 2), jnp.int32), jnp.zeros((2, 2)))
    with pytest.raises(
        ValueError, match=r"ctc_loss_with_forward_probs\(label_paddings=\.\.\.\) must have the shape of `labels`"
    ):
        L.ctc_loss(jnp.zeros((2, 5, 3)), jnp.zeros((2, 5)), jnp.zeros((2, 2), jnp.int32), jnp.zeros((2, 3)))
    with pytest.raises(ValueError, match=r"ntxent\(labels=\.\.\.\) must have shape \[batch\]"):
        L.ntxent(jnp.zeros((4, 2)), jnp.zeros(3, jnp.int32))
    with pytest.raises(ValueError, match=r"ntxent\(embeddings=\.\.\.\) must have 2 dimensions"):
        L.ntxent(jnp.zeros(4), jnp.zeros(4, jnp.int32))
    with pytest.raises(ValueError, match=r"triplet_margin_loss\(negatives=\.\.\.\) must have the shape of `anchors`"):
        L.triplet_margin_loss(jnp.zeros((2, 3)), jnp.zeros((2, 3)), jnp.zeros((3, 3)))
    with pytest.raises(
        ValueError, match=r"dice_loss\(reduction=\.\.\.\) must be one of 'mean', 'sum', 'none'; got 'max'"
    ):
        L.dice_loss(jnp.zeros((2, 3)), jnp.zeros((2, 3)), reduction="max")
    with pytest.raises(ValueError, match=r"dice_loss\(class_weights=\.\.\.\) must be of shape \[num_classes\]"):
        L.dice_loss(jnp.zeros((2, 3)), jnp.zeros((2, 3)), class_weights=jnp.ones(2))
    with pytest.raises(ValueError, match=r"dice_loss\(predictions=\.\.\.\) must be probabilities that sum to 1"):
        L.dice_loss(jnp.full((2, 3), 0.5), jnp.zeros((2, 3)), apply_softmax=False)
    with pytest.raises(ValueError, match=r"make_fenchel_young_loss\(\.\.\.\)\(targets=\.\.\.\) must have the shape"):
        L.make_fenchel_young_loss(jax.nn.logsumexp)(jnp.zeros((2, 3)), jnp.zeros(3))
    with pytest.raises(ValueError, match=r"sigmoid_binary_cross_entropy\(logits=\.\.\.\) must have a floating dtype"):
        L.sigmoid_binary_cross_entropy(jnp.zeros(3, jnp.int32), jnp.zeros(3))


# --- where gradax departs from Optax 0.2.8 (docs/differences.md) ---------------------------------------------------


def test_kl_divergence_zero_target_with_zero_prediction():
    logq = jnp.log(jnp.array([0.5, 0.5, 0.0]))
    p = jnp.array([0.5, 0.5, 0.0])
    assert np.isnan(optax.kl_divergence(logq, p))  # Optax: 0 * (-inf) = nan
    assert L.kl_divergence(logq, p) == 0.0  # gradax: 0 log(0/0) = 0
    _finite(jax.grad(lambda a: L.kl_divergence(a, p))(logq))
    assert np.isnan(optax.losses.kl_divergence_with_log_targets(logq, jnp.log(p)))
    assert L.kl_divergence_with_log_targets(logq, jnp.log(p)) == 0.0
    assert np.isnan(optax.losses.generalized_kl_divergence(logq, p))
    np.testing.assert_allclose(L.generalized_kl_divergence(logq, p), 0.0, atol=1e-7)


def test_triplet_margin_loss_odd_norm_degree():
    a, p, n = jnp.zeros((1, 2)), jnp.array([[1.0, 0.0]]), jnp.array([[0.0, 3.0]])
    assert np.isnan(optax.losses.triplet_margin_loss(a, p, n, norm_degree=3)[0])  # (-3)^3 < 0 under a cube root
    np.testing.assert_allclose(L.triplet_margin_loss(a, p, n, norm_degree=3, eps=0.0), [0.0])  # 1 - 3 + 1 < 0
    np.testing.assert_allclose(L.triplet_margin_loss(n, p, a, norm_degree=1, eps=0.0), [4.0 - 3.0 + 1.0])
    np.testing.assert_allclose(  # identical for even degrees
        L.triplet_margin_loss(a, p, n, norm_degree=2), optax.losses.triplet_margin_loss(a, p, n, norm_degree=2)
    )


def test_binary_dice_loss_accepts_probabilities():
    probs = jnp.array([[0.2, 0.9, 0.5]])
    targets = jnp.array([[0.0, 1.0, 1.0]])
    with pytest.raises(ValueError, match="sum to 1"):
        optax.losses.binary_dice_loss(probs, targets, apply_sigmoid=False)
    expected = 1 - (1.4 + 1) / (0.5 * 1.6 + 0.5 * 2 + 1)
    np.testing.assert_allclose(L.binary_dice_loss(probs, targets, apply_sigmoid=False), [expected], rtol=1e-6)


def test_dice_loss_on_probabilities_under_jit():
    probs = jax.nn.softmax(jax.random.normal(jax.random.key(0), (2, 4, 3)))
    targets = jax.nn.one_hot(jnp.arange(8).reshape(2, 4) % 3, 3)
    with pytest.raises(jax.errors.TracerBoolConversionError):
        jax.jit(lambda p: optax.losses.dice_loss(p, targets, apply_softmax=False))(probs)
    got = jax.jit(lambda p: L.dice_loss(p, targets, apply_softmax=False))(probs)
    np.testing.assert_allclose(got, optax.losses.dice_loss(probs, targets, apply_softmax=False), rtol=1e-6)
