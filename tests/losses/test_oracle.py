"""Differential tests of every loss against Optax 0.2.8: values, gradients, under jit and vmap."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from tests.contract.registry.losses import LOSS_NAMES, TOP_LEVEL_LOSSES

import gradax

K = jax.random.key(0)


def _normal(i, shape):
    return jax.random.normal(jax.random.fold_in(K, i), shape)


def _probs(i, shape):
    return jax.nn.softmax(2.0 * _normal(i, shape), axis=-1)


def _ints(i, shape, n):
    return jax.random.randint(jax.random.fold_in(K, i), shape, 0, n)


def _onehot(i, shape):
    return jax.nn.one_hot(_ints(i, shape[:-1], shape[-1]), shape[-1])


def _binary(i, shape):
    return (jax.random.uniform(jax.random.fold_in(K, i), shape) > 0.5).astype(jnp.float32)


MASK = jnp.array([[True, True, False, True], [True, False, True, True], [True, True, True, True]])
CTC = dict(
    logit_paddings=jnp.array([[0.0] * 6, [0.0] * 4 + [1.0] * 2, [0.0] * 5 + [1.0]]),
    labels=jnp.array([[1, 2, 2], [3, 1, 0], [2, 2, 2]]),
    label_paddings=jnp.array([[0.0, 0, 0], [0, 0, 1], [0, 1, 1]]),
)

# name, positional args (the first one is differentiated), keyword args
CASES = [
    ("sigmoid_binary_cross_entropy", (_normal(1, (3, 4)), _binary(2, (3, 4))), {}),
    ("sigmoid_binary_cross_entropy", (_normal(1, (3, 4)), jax.random.uniform(K, (3, 4))), {}),
    ("hinge_loss", (_normal(1, (3, 4)), 2 * _binary(2, (3, 4)) - 1), {}),
    ("perceptron_loss", (_normal(1, (3, 4)), 2 * _binary(2, (3, 4)) - 1), {}),
    ("softmax_cross_entropy", (_normal(1, (3, 4)), _probs(2, (3, 4))), {}),
    ("softmax_cross_entropy", (_normal(1, (3, 4)), _probs(2, (3, 4))), {"where": MASK}),
    ("softmax_cross_entropy", (_normal(1, (3, 4, 2)), _probs(2, (3, 4, 2))), {"axis": 1}),
    ("softmax_cross_entropy", (_normal(1, (3, 4, 2)), _probs(2, (3, 4, 2))), {"axis": (1, 2)}),
    ("safe_softmax_cross_entropy", (_normal(1, (3, 4)), _probs(2, (3, 4))), {}),
    ("softmax_cross_entropy_with_integer_labels", (_normal(1, (3, 4)), _ints(2, (3,), 4)), {}),
    ("softmax_cross_entropy_with_integer_labels", (_normal(1, (3, 4)), _ints(2, (3,), 4)), {"where": MASK}),
    ("softmax_cross_entropy_with_integer_labels", (_normal(1, (3, 4, 2)), _ints(2, (3, 2), 4)), {"axis": 1}),
    ("softmax_cross_entropy_with_integer_labels", (_normal(1, (2, 3, 4)), _ints(2, (2,), 12)), {"axis": (1, 2)}),
    ("multiclass_hinge_loss", (_normal(1, (3, 4)), _ints(2, (3,), 4)), {}),
    ("multiclass_perceptron_loss", (_normal(1, (3, 4)), _ints(2, (3,), 4)), {}),
    ("multiclass_sparsemax_loss", (_normal(1, (3, 4)), _ints(2, (3,), 4)), {}),
    ("sparsemax_loss", (2 * _normal(1, (3, 4)), _binary(2, (3, 4))), {}),
    ("poly_loss_cross_entropy", (_normal(1, (3, 4)), _probs(2, (3, 4))), {}),
    ("poly_loss_cross_entropy", (_normal(1, (3, 4)), _probs(2, (3, 4))), {"epsilon": -0.5, "where": MASK}),
    ("sigmoid_focal_loss", (3 * _normal(1, (3, 4)), _binary(2, (3, 4))), {}),
    ("sigmoid_focal_loss", (3 * _normal(1, (3, 4)), jax.random.uniform(K, (3, 4))), {"alpha": 0.3, "gamma": 1.5}),
    ("smooth_labels", (_onehot(1, (3, 4)), 0.1), {}),
    ("smooth_labels", (_onehot(1, (3, 4)), 0.2), {"where": MASK}),
    ("kl_divergence", (jnp.log(_probs(1, (3, 4))), _probs(2, (3, 4))), {}),
    ("kl_divergence", (jnp.log(_probs(1, (3, 4))), _probs(2, (3, 4))), {"where": MASK}),
    ("kl_divergence_with_log_targets", (jnp.log(_probs(1, (3, 4))), jnp.log(_probs(2, (3, 4)))), {}),
    ("generalized_kl_divergence", (_normal(1, (3, 4)), jnp.exp(_normal(2, (3, 4)))), {"axis": 0}),
    ("squared_error", (_normal(1, (3, 4)), _normal(2, (3, 4))), {}),
    ("squared_error", (_normal(1, (3, 4)),), {}),
    ("l2_loss", (_normal(1, (3, 4)), _normal(2, (3, 4))), {}),
    ("huber_loss", (3 * _normal(1, (3, 4)), _normal(2, (3, 4))), {"delta": 0.7}),
    ("log_cosh", (3 * _normal(1, (3, 4)), _normal(2, (3, 4))), {}),
    ("cosine_similarity", (_normal(1, (3, 4)), _normal(2, (3, 4))), {}),
    ("cosine_similarity", (0.1 * _normal(1, (3, 4)), _normal(2, (3, 4))), {"epsilon": 0.05, "where": MASK}),
    ("cosine_distance", (_normal(1, (3, 4)), _normal(2, (3, 4))), {"axis": 0}),
    ("ranking_softmax_loss", (_normal(1, (3, 4)), _ints(2, (3, 4), 3).astype(jnp.float32)), {}),
    (
        "ranking_softmax_loss",
        (_normal(1, (3, 4)), _ints(2, (3, 4), 3).astype(jnp.float32)),
        {"where": MASK, "weights": jnp.arange(4.0), "reduce_fn": jnp.sum},
    ),
    ("ranking_softmax_loss", (_normal(1, (3, 4)), _ints(2, (3, 4), 3).astype(jnp.float32)), {"reduce_fn": None}),
    ("dice_loss", (_normal(1, (2, 5, 3)), _onehot(2, (2, 5, 3))), {}),
    ("dice_loss", (_normal(1, (2, 3, 4, 3)), _onehot(2, (2, 3, 4, 3))), {"alpha": 0.3, "beta": 0.7, "axis": 2}),
    (
        "dice_loss",
        (_normal(1, (2, 5, 3)), _onehot(2, (2, 5, 3))),
        {"class_weights": jnp.array([1.0, 2.0, 3.0]), "ignore_background": True, "reduction": "sum"},
    ),
    ("dice_loss", (_normal(1, (2, 5, 1)), _binary(2, (2, 5, 1))), {"reduction": "none", "smooth": 0.5}),
    ("dice_loss", (_probs(1, (2, 5, 3)), _onehot(2, (2, 5, 3))), {"apply_softmax": False}),
    ("dice_loss", (_normal(1, (4, 3)), _onehot(2, (4, 3))), {}),
    ("binary_dice_loss", (_normal(1, (2, 5)), _binary(2, (2, 5))), {}),
    ("binary_dice_loss", (_normal(1, (2, 3, 1)), _binary(2, (2, 3, 1))), {"smooth": 0.1}),
    ("multiclass_generalized_dice_loss", (_normal(1, (2, 5, 3)), _onehot(2, (2, 5, 3))), {}),
    (
        "multiclass_generalized_dice_loss",
        (_normal(1, (2, 5, 3)), _onehot(2, (2, 5, 3))),
        {"ignore_background": True, "smooth": 0.5},
    ),
    ("ntxent", (_normal(1, (6, 3)), jnp.array([0, 0, 1, 1, 1, 2])), {}),
    ("ntxent", (_normal(1, (6, 3)), jnp.array([0, 0, 1, 1, 1, 2]), 0.5), {}),
    ("triplet_margin_loss", (_normal(1, (3, 4)), _normal(2, (3, 4)), _normal(3, (3, 4))), {}),
    ("triplet_margin_loss", (_normal(1, (3, 4)), _normal(2, (3, 4)), _normal(3, (3, 4))), {"margin": 2.0}),
    ("triplet_margin_loss", (_normal(1, (4, 3)), _normal(2, (4, 3)), _normal(3, (4, 3))), {"axis": 0}),
    ("ctc_loss", (_normal(1, (3, 6, 4)), *CTC.values()), {}),
    ("ctc_loss", (_normal(1, (3, 6, 4)), *CTC.values()), {"blank_id": 3, "log_epsilon": -1e4}),
    ("ctc_loss_with_forward_probs", (_normal(1, (3, 6, 4)), *CTC.values()), {}),
]

IDS = [f"{name}-{i}" for i, (name, _, _) in enumerate(CASES)]


def _fn(lib, name, kwargs):
    f = getattr(lib.losses, name)
    return lambda *args: f(*args, **kwargs)


def _scalar(out):
    return sum(jnp.sum(jnp.where(jnp.isfinite(o), o, 0.0)) for o in jax.tree.leaves(out))


def _close(a, b, rtol=2e-5, atol=2e-6):
    jax.tree.map(lambda x, y: np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=rtol, atol=atol), a, b)


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        yield


@pytest.mark.parametrize("name,args,kwargs", CASES, ids=IDS)
def test_values_and_grads_match_optax(name, args, kwargs):
    ours, theirs = _fn(gradax, name, kwargs), _fn(optax, name, kwargs)
    _close(ours(*args), theirs(*args))
    _close(jax.jit(ours)(*args), theirs(*args))
    g_ours = jax.grad(lambda x: _scalar(ours(x, *args[1:])))(args[0])
    g_theirs = jax.grad(lambda x: _scalar(theirs(x, *args[1:])))(args[0])
    _close(g_ours, g_theirs, rtol=1e-4, atol=1e-5)


VMAP_NAMES = sorted({name for name, _, _ in CASES} - {"ranking_softmax_loss"})


@pytest.mark.parametrize("name", VMAP_NAMES)
def test_vmap_matches_loop(name):
    name_, args, kwargs = next(c for c in CASES if c[0] == name)
    stacked = [
        jnp.stack([a, a * 0.5 if jnp.issubdtype(jnp.result_type(a), jnp.floating) and i == 0 else a])
        if isinstance(a, jax.Array)
        else a
        for i, a in enumerate(args)
    ]
    in_axes = [0 if isinstance(a, jax.Array) else None for a in args]
    ours = _fn(gradax, name, kwargs)
    batched = jax.vmap(ours, in_axes=in_axes)(*stacked)
    for j in range(2):
        one = ours(*[s[j] if ax == 0 else s for s, ax in zip(stacked, in_axes)])
        _close(jax.tree.map(lambda x: x[j], batched), one)
        theirs = _fn(optax, name, kwargs)(*[s[j] if ax == 0 else s for s, ax in zip(stacked, in_axes)])
        _close(one, theirs)


def test_fenchel_young_matches_optax():
    scores, targets = _normal(1, (3, 4)), _probs(2, (3, 4))
    ours = gradax.losses.make_fenchel_young_loss(jax.nn.logsumexp)
    theirs = optax.losses.make_fenchel_young_loss(jax.nn.logsumexp)
    _close(ours(scores, targets), theirs(scores, targets))
    _close(jax.jit(ours)(scores, targets), theirs(scores, targets))
    _close(jax.grad(lambda s: ours(s, targets).sum())(scores), jax.grad(lambda s: theirs(s, targets).sum())(scores))
    # the gradient of a Fenchel-Young loss is grad(max_fun) - targets
    _close(jax.grad(lambda s: ours(s, targets).sum())(scores), jax.nn.softmax(scores) - targets, atol=1e-6)
    # with logsumexp it is the softmax cross entropy (for targets that sum to 1)
    _close(ours(scores, targets), optax.softmax_cross_entropy(scores, targets), atol=1e-5)


def test_top_level_aliases_are_the_loss_functions():
    for name in TOP_LEVEL_LOSSES:
        assert getattr(gradax, name) is getattr(gradax.losses, name)


def test_registry_names_are_the_tested_losses():
    # the contract registry's LOSS_NAMES say this file covers them: every one has a case above or its own test here
    assert set(LOSS_NAMES) == {name for name, _, _ in CASES} | {"make_fenchel_young_loss", "convex_kl_divergence"}
    assert set(TOP_LEVEL_LOSSES) <= set(LOSS_NAMES)


def test_public_names_match_optax():
    public = lambda m: sorted(n for n in dir(m) if not n.startswith("_"))
    assert public(gradax.losses) == public(optax.losses)


def test_convex_kl_divergence_is_deprecated():
    with pytest.warns(DeprecationWarning, match="generalized_kl_divergence"):
        gradax.losses.convex_kl_divergence(jnp.zeros(3), jnp.ones(3))
