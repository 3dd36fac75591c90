"""Prodigy (gradax.contrib.prodigy) against Optax 0.2.8 and the paper's properties."""

import jax
import jax.numpy as jnp
import optax
import pytest

import gradax
from tests.contrib._common import check_abstract_and_bf16, check_oracle, converges

# Same order of operations as Optax 0.2.8 (1 - b in float64, d g first, per-leaf contractions): agreement ~1e-6.
RTOL = 1e-5

P = {"a": jnp.array([0.5, -1.0, 2.0]), "b": jnp.array([1.0])}
G = [{"a": jnp.array([1.0, -2.0, 3.0]) * (i + 1) ** 0.5, "b": jnp.array([0.3])} for i in range(12)]


@pytest.mark.parametrize(
    "kw",
    [
        {"estim_lr0": 1e-3},
        {"estim_lr0": 1e-3, "weight_decay": 0.1, "safeguard_warmup": True},
        {"beta3": 0.9, "estim_lr_coef": 2.0, "betas": (0.8, 0.99)},
        {"learning_rate": lambda c: 1.0 / (1.0 + c), "estim_lr0": 1e-2},
    ],
)
def test_matches_optax(kw):
    check_oracle(gradax.contrib.prodigy(**kw), optax.contrib.prodigy(**kw), P, G, rtol=RTOL)


def test_default_random_tree_matches_optax():
    check_oracle(gradax.contrib.prodigy(), optax.contrib.prodigy(), rtol=RTOL)


def test_estimate_grows_and_x0_is_first_params():
    tx = gradax.contrib.prodigy(estim_lr0=1e-4)
    params = jnp.array([0.0, 0.0])
    state = tx.init(params)
    assert isinstance(state, gradax.contrib.ProdigyState)
    step = jax.jit(lambda p, s: tx.update(p - 10.0, s, p))
    for _ in range(50):
        u, state = step(params, state)
        params = params + u
    assert float(state.estim_lr) > 1e-2  # d_k grows toward ||x0 - x*|| (paper, Lemma: d_k <= D)
    assert float(state.estim_lr) <= 10.0 * 2**0.5 * 1.01
    assert jnp.all(state.params0 == 0.0)


def test_abstract_init_and_bf16():
    check_abstract_and_bf16(gradax.contrib.prodigy())


def test_converges_on_quadratic():
    a = jnp.array([1.0, 10.0, 0.1])
    loss = lambda x: 0.5 * jnp.sum(a * (x - 3.0) ** 2)
    assert converges(gradax.contrib.prodigy(estim_lr0=1e-4), loss, jnp.zeros(3), 400) < 5e-2


@pytest.mark.parametrize(
    ("kw", "msg"),
    [
        ({"betas": (1.0, 0.9)}, r"prodigy\(betas\[0\]=\.\.\.\) must be in \[0, 1\)"),
        ({"betas": 0.9}, r"prodigy\(betas=\.\.\.\) must be a pair"),
        ({"beta3": -0.1}, r"prodigy\(beta3=\.\.\.\) must be in \[0, 1\)"),
        ({"eps": -1.0}, r"prodigy\(eps=\.\.\.\) must be >= 0"),
        ({"estim_lr0": 0.0}, r"prodigy\(estim_lr0=\.\.\.\) must be > 0"),
        ({"estim_lr_coef": -1.0}, r"prodigy\(estim_lr_coef=\.\.\.\) must be > 0"),
        ({"weight_decay": -1.0}, r"prodigy\(weight_decay=\.\.\.\) must be >= 0"),
    ],
)
def test_errors(kw, msg):
    with pytest.raises(ValueError, match=msg):
        gradax.contrib.prodigy(**kw)


def test_needs_params():
    tx = gradax.contrib.prodigy()
    with pytest.raises(ValueError, match=r"prodigy: update\(\.\.\.\) needs `params`"):
        tx.update(jnp.ones(2), tx.init(jnp.zeros(2)))
