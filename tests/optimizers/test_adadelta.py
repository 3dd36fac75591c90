"""Tests of scale_by_adadelta and adadelta (gradax.optimizers._adadelta)."""

import jax
import jax.numpy as jnp
import numpy as np
import optax  # the test oracle
import pytest

import gradax
from tests.optimizers._other_helpers import assert_matches_optax, converges


@pytest.mark.parametrize("kwargs", [{}, {"rho": 0.5, "eps": 1e-3}])
def test_scale_by_adadelta_matches_optax(kwargs):
    assert_matches_optax(lambda lib: lib.scale_by_adadelta(**kwargs))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"learning_rate": 1.0},
        {"learning_rate": lambda c: 1.0 / (1.0 + c), "weight_decay": 0.1},
        {
            "learning_rate": 0.5,
            "weight_decay": lambda c: 0.1 * 0.9**c,
            "weight_decay_mask": {"w": True, "b": False, "s": True, "t": False},
        },
    ],
)
def test_adadelta_matches_optax(kwargs):
    assert_matches_optax(lambda lib: lib.adadelta(**kwargs))


def test_learning_rate_none_descends():
    """Optax 0.2.8's adadelta(learning_rate=None) returns +step (ascent); gradax descends (docs/differences.md)."""
    params = jnp.array([1.0, -2.0])
    grads = 2 * params
    ours, theirs = gradax.adadelta(), optax.adadelta()
    u, _ = ours.update(grads, ours.init(params), params)
    v, _ = theirs.update(grads, theirs.init(params), params)
    assert np.all(np.sign(u) == -np.sign(grads))
    np.testing.assert_allclose(u, -v, rtol=1e-6)


def test_closed_form_first_step():
    rho, eps = 0.9, 1e-6
    g = jnp.array([2.0])
    tx = gradax.scale_by_adadelta(rho, eps)
    u, s = tx.update(g, tx.init(g))
    expected = np.sqrt(eps) / np.sqrt((1 - rho) * 4.0 + eps) * 2.0
    np.testing.assert_allclose(u, [expected], rtol=1e-5)
    np.testing.assert_allclose(s.e_x, [(1 - rho) * expected**2], rtol=1e-5)


def test_bf16():
    p = {"a": jnp.ones(3, jnp.bfloat16)}
    tx = gradax.adadelta(1.0, weight_decay=0.1)
    s = tx.init(p)
    u, s2 = jax.jit(tx.update)(p, s, p)
    assert u["a"].dtype == jnp.bfloat16 and s[1].e_g["a"].dtype == jnp.float32
    assert jax.tree.map(lambda x: x.dtype, s) == jax.tree.map(lambda x: x.dtype, s2)


def test_converges():
    assert converges(gradax.adadelta(10.0), steps=300, tol=0.05)[0]


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: gradax.scale_by_adadelta(rho=1.0), r"scale_by_adadelta\(rho=\.\.\.\) must be in \[0, 1\)"),
        (lambda: gradax.adadelta(eps=-1.0), r"scale_by_adadelta\(eps=\.\.\.\) must be >= 0"),
        (lambda: gradax.adadelta(weight_decay=-1.0), r"adadelta\(weight_decay=\.\.\.\) must be >= 0"),
    ],
)
def test_errors(call, match):
    with pytest.raises(ValueError, match=match):
        call()
