"""Tests of scale_by_trust_ratio, fromage and lars (gradax.optimizers._trust)."""

import jax
import jax.numpy as jnp
import numpy as np
import optax  # the test oracle
import pytest

import gradax
from tests.optimizers._other_helpers import assert_matches_optax, converges, random_tree


@pytest.mark.parametrize("kwargs", [{}, {"min_norm": 0.5, "trust_coefficient": 0.1, "eps": 1e-3}])
def test_trust_ratio_matches_optax(kwargs):
    assert_matches_optax(lambda lib: lib.scale_by_trust_ratio(**kwargs))


def test_trust_ratio_closed_form_and_zero_norms():
    tx = gradax.scale_by_trust_ratio(trust_coefficient=0.5)
    params = {"a": jnp.array([3.0, 4.0]), "z": jnp.zeros(2), "g0": jnp.ones(2)}
    grads = {"a": jnp.array([0.0, 2.0]), "z": jnp.ones(2), "g0": jnp.zeros(2)}
    u, _ = tx.update(grads, tx.init(params), params)
    np.testing.assert_allclose(u["a"], 0.5 * 5.0 / 2.0 * np.array([0.0, 2.0]))
    np.testing.assert_allclose(u["z"], grads["z"])  # zero param norm: ratio 1
    np.testing.assert_allclose(u["g0"], 0.0)


def test_trust_ratio_bf16_and_needs_params():
    tx = gradax.scale_by_trust_ratio()
    p = {"a": jnp.ones(3, jnp.bfloat16)}
    u, _ = jax.jit(tx.update)(p, tx.init(p), p)
    assert u["a"].dtype == jnp.bfloat16
    with pytest.raises(ValueError, match=r"scale_by_trust_ratio: update\(\.\.\.\) needs `params`"):
        tx.update(p, tx.init(p))


@pytest.mark.parametrize("lr", [0.1, jnp.asarray(0.05), lambda c: 0.1 / (1.0 + c)])
def test_fromage_matches_optax(lr):
    assert_matches_optax(lambda lib: lib.fromage(lr))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"learning_rate": 0.1},
        {"learning_rate": 0.1, "weight_decay": 1e-2, "nesterov": True, "eps": 1e-6},
        {"learning_rate": lambda c: 0.1 * 0.9**c, "weight_decay": lambda c: 1e-2 / (1.0 + c)},
    ],
)
def test_lars_matches_optax(kwargs):
    assert_matches_optax(lambda lib: lib.lars(**kwargs))


def test_lars_masks_match_optax():
    mask = {"w": True, "b": False, "s": False, "t": True}
    assert_matches_optax(
        lambda lib: lib.lars(0.1, weight_decay=1e-2, weight_decay_mask=mask, trust_ratio_mask=lambda p: mask)
    )


def test_fromage_closed_form():
    """theta <- (theta - lr * |theta|/|g| g) / sqrt(1 + lr^2)."""
    lr = 0.3
    params, grads = jnp.array([1.0, -2.0]), jnp.array([0.5, 0.1])
    opt = gradax.fromage(lr)
    u, _ = opt.update(grads, opt.init(params), params)
    p, g = np.asarray(params, np.float64), np.asarray(grads, np.float64)
    expected = (p - lr * np.linalg.norm(p) / np.linalg.norm(g) * g) / np.sqrt(1 + lr**2)
    np.testing.assert_allclose(gradax.apply_updates(params, u), expected, rtol=1e-6)


def test_converge():
    assert converges(gradax.lars(0.1, trust_coefficient=1.0, momentum=0.5), steps=300, tol=0.05)[0]
    # fromage keeps |theta| shrinking by 1/sqrt(1+lr^2) per step: a decaying schedule reaches the minimum
    assert converges(gradax.fromage(lambda c: 0.5 * 0.98**c), steps=300, tol=0.05)[0]


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: gradax.scale_by_trust_ratio(min_norm=-1.0), r"scale_by_trust_ratio\(min_norm=\.\.\.\) must be >= 0"),
        (lambda: gradax.scale_by_trust_ratio(eps=-1.0), r"scale_by_trust_ratio\(eps=\.\.\.\) must be >= 0"),
        (lambda: gradax.fromage(0.1, min_norm=0.0), r"fromage\(min_norm=\.\.\.\) must be > 0"),
        (lambda: gradax.fromage(-0.1), r"fromage\(learning_rate=\.\.\.\) must be >= 0"),
        (lambda: gradax.lars(0.1, momentum=1.0), r"lars\(momentum=\.\.\.\) must be in \[0, 1\)"),
        (lambda: gradax.lars(0.1, weight_decay=-1.0), r"lars\(weight_decay=\.\.\.\) must be >= 0"),
    ],
)
def test_errors(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_abstract_init_and_tree():
    params = random_tree()
    state = gradax.lars(0.1).init(jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), params))
    assert jax.tree.structure(state).num_leaves == jax.tree.structure(optax.lars(0.1).init(params)).num_leaves
