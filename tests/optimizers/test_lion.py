"""Tests of scale_by_lion and lion (differential vs Optax 0.2.8, float64 reference from the paper)."""

import jax
import jax.numpy as jnp
import numpy as np
import optax  # the test oracle
import pytest

import gradax

from ._adam_common import assert_matches_optax, quadratic_converges, traced_equals_concrete


@pytest.mark.parametrize(
    "make",
    [
        lambda ox: ox.scale_by_lion(),
        lambda ox: ox.scale_by_lion(mode="smooth", smooth_beta=2.0),
        lambda ox: ox.scale_by_lion(mode="refined"),
        lambda ox: ox.lion(1e-3, weight_decay=0.1),
        lambda ox: ox.lion(lambda c: 1e-3 * 0.9**c, weight_decay=lambda c: 0.1 / (1.0 + c)),
    ],
)
def test_matches_optax(make):
    assert_matches_optax(make)


def test_float64_reference():
    rng = np.random.default_rng(1)
    params = rng.normal(size=(4, 2))
    grads = [rng.normal(size=(4, 2)) for _ in range(10)]
    lr, b1, b2, wd = 0.01, 0.9, 0.99, 0.1
    m, p = np.zeros_like(params), params.copy()
    for g in grads:
        c = b1 * m + (1 - b1) * g
        p = p - lr * (np.sign(c) + wd * p)
        m = b2 * m + (1 - b2) * g
    with jax.enable_x64(True):
        opt = gradax.lion(lr, b1, b2, weight_decay=wd)
        x = jnp.asarray(params)
        state = opt.init(x)
        for g in grads:
            u, state = opt.update(jnp.asarray(g), state, x)
            x = gradax.apply_updates(x, u)
        assert x.dtype == jnp.float64
        np.testing.assert_allclose(np.asarray(x), p, rtol=1e-12, atol=1e-12)


def test_state_and_dtypes():
    state = gradax.scale_by_lion(mu_dtype=jnp.bfloat16).init({"a": jnp.zeros(3)})
    assert isinstance(state, gradax.ScaleByLionState) and state._fields == ("count", "mu")
    assert state.mu["a"].dtype == jnp.bfloat16
    assert gradax.scale_by_lion().init(jnp.zeros(2, jnp.bfloat16)).mu.dtype == jnp.float32


def test_converges_on_quadratic():
    sched = lambda c: 0.05 * 0.99**c
    assert quadratic_converges(gradax.lion(sched, weight_decay=0.0), steps=600, tol=5e-2)


def test_traced_hyperparameters_bit_identical():
    traced_equals_concrete(gradax.lion, {"learning_rate": 1e-3, "b1": 0.8, "weight_decay": 0.1})


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda: gradax.lion(1e-3, b1=1.0), r"lion\(b1=\.\.\.\) must be in \[0, 1\); got 1\.0\."),
        (lambda: gradax.scale_by_lion(b2=-1.0), r"scale_by_lion\(b2=\.\.\.\) must be in \[0, 1\)"),
        (lambda: gradax.scale_by_lion(mode="soft"), r"scale_by_lion\(mode=\.\.\.\) must be one of 'hard'"),
    ],
)
def test_argument_errors(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_oracle_is_optax():
    assert hasattr(optax, "scale_by_lion")
