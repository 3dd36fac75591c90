"""Tests of Adan, NovoGrad, the optimistic methods and LAMB (differential vs Optax 0.2.8, references)."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax  # the test oracle
import pytest

import gradax

from ._adam_common import assert_matches_optax, quadratic_converges, traced_equals_concrete


def _quiet(f):
    def make(ox):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            return f(ox)

    return make


@pytest.mark.parametrize(
    "make",
    [
        lambda ox: ox.scale_by_adan(b1=0.5, eps_root=1e-3),
        lambda ox: ox.adan(1e-2, weight_decay=0.1),
        lambda ox: ox.scale_by_novograd(b1=0.5, eps_root=1e-3, weight_decay=0.01),
        lambda ox: ox.novograd(lambda c: 1e-2 / (1.0 + c), weight_decay=0.01),
        lambda ox: ox.scale_by_optimistic_gradient(alpha=0.5, beta=2.0),
        lambda ox: ox.optimistic_gradient_descent(1e-2),
        _quiet(lambda ox: ox.optimistic_adam(1e-2)),
        lambda ox: ox.optimistic_adam_v2(1e-2, alpha=2.0, beta=0.5),
        lambda ox: ox.lamb(1e-2, weight_decay=0.1),
        lambda ox: ox.lamb(lambda c: 1e-2 * 0.9**c, weight_decay=lambda c: 0.1 * 0.9**c),
    ],
)
def test_matches_optax(make):
    assert_matches_optax(make)


def test_lamb_float64_reference():
    rng = np.random.default_rng(2)
    params = {"a": rng.normal(size=(3, 4)), "b": rng.normal(size=(5,))}
    grads = [{k: rng.normal(size=v.shape) for k, v in params.items()} for _ in range(10)]
    lr, b1, b2, eps, wd = 0.01, 0.9, 0.999, 1e-6, 0.1
    ref = {k: v.copy() for k, v in params.items()}
    m = {k: np.zeros_like(v) for k, v in params.items()}
    v2 = {k: np.zeros_like(v) for k, v in params.items()}
    for t, g in enumerate(grads, start=1):
        for k in ref:
            m[k] = b1 * m[k] + (1 - b1) * g[k]
            v2[k] = b2 * v2[k] + (1 - b2) * g[k] ** 2
            r = (m[k] / (1 - b1**t)) / (np.sqrt(v2[k] / (1 - b2**t)) + eps) + wd * ref[k]
            ref[k] = ref[k] - lr * np.linalg.norm(ref[k]) / np.linalg.norm(r) * r
    with jax.enable_x64(True):
        opt = gradax.lamb(lr, b1, b2, eps, weight_decay=wd)
        x = jax.tree.map(jnp.asarray, params)
        state = opt.init(x)
        for g in grads:
            u, state = opt.update(jax.tree.map(jnp.asarray, g), state, x)
            x = gradax.apply_updates(x, u)
        for k in ref:
            assert x[k].dtype == jnp.float64
            np.testing.assert_allclose(np.asarray(x[k]), ref[k], rtol=1e-12, atol=1e-12)


def test_adan_state_and_first_step():
    tx = gradax.scale_by_adan(eps=0.0)
    state = tx.init(jnp.zeros(2))
    assert isinstance(state, gradax.ScaleByAdanState) and state._fields == ("m", "v", "n", "g", "t")
    u, state = tx.update(jnp.array([2.0, -0.5]), state)
    np.testing.assert_allclose(u, [1.0, -1.0], rtol=1e-6)
    np.testing.assert_array_equal(state.g, [2.0, -0.5])


def test_novograd_per_layer_norm():
    tx = gradax.scale_by_novograd(b1=0.9, b2=0.5, eps=0.0)
    params = {"a": jnp.zeros(2), "b": jnp.zeros(3)}
    state = tx.init(params)
    assert isinstance(state, gradax.ScaleByNovogradState) and state.nu["a"].shape == ()
    g1 = {"a": jnp.array([3.0, 4.0]), "b": jnp.ones(3)}
    u, state = tx.update(g1, state, params)
    np.testing.assert_allclose(state.nu["a"], 25.0)
    np.testing.assert_allclose(u["a"], [0.6, 0.8], rtol=1e-6)
    g2 = {"a": jnp.array([0.0, 1.0]), "b": jnp.ones(3)}
    u, state = tx.update(g2, state, params)
    np.testing.assert_allclose(state.nu["a"], 0.5 * 25.0 + 0.5 * 1.0, rtol=1e-6)
    np.testing.assert_allclose(u["a"], 0.9 * np.array([0.6, 0.8]) + np.array([0.0, 1.0]) / np.sqrt(13.0), rtol=1e-6)


def test_novograd_needs_params():
    tx = gradax.scale_by_novograd()
    with pytest.raises(ValueError, match=r"scale_by_novograd: update\(\.\.\.\) needs `params`"):
        tx.update(jnp.ones(1), tx.init(jnp.ones(1)))


def test_novograd_weight_decay_schedule():
    tx = gradax.scale_by_novograd(eps=1e-8, weight_decay=lambda c: 0.5 * (c + 1))
    params = jnp.array([1.0])
    state = tx.init(params)
    u, state = tx.update(jnp.array([0.0]), state, params)
    np.testing.assert_allclose(u, [0.5])
    u, state = tx.update(jnp.array([0.0]), state, params)
    np.testing.assert_allclose(u, [0.9 * 0.5 + 1.0])


def test_optimistic_adam_deprecated_and_no_schedule():
    with pytest.warns(DeprecationWarning, match="optimistic_adam_v2"):
        gradax.optimistic_adam(1e-2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        with pytest.raises(ValueError, match=r"optimistic_adam\(learning_rate=\.\.\.\) must be a number or an array"):
            gradax.optimistic_adam(lambda c: 1e-2)


def test_optimistic_gradient_closed_form():
    tx = gradax.optimistic_gradient_descent(1.0, alpha=0.5, beta=2.0)
    state = tx.init(jnp.zeros(1))
    u, state = tx.update(jnp.array([1.0]), state)
    np.testing.assert_allclose(u, [-0.5])
    u, state = tx.update(jnp.array([3.0]), state)
    np.testing.assert_allclose(u, [-(2.5 * 3.0 - 2.0 * 1.0)])
    with pytest.raises(ValueError, match=r"scale_by_optimistic_gradient\(alpha=\.\.\.\) must be a number"):
        gradax.scale_by_optimistic_gradient(alpha=lambda c: 1.0)


@pytest.mark.parametrize(
    "opt",
    [gradax.adan(0.1), gradax.novograd(0.1), gradax.optimistic_adam_v2(0.1), gradax.lamb(lambda c: 0.05 * 0.99**c)],
    ids=["adan", "novograd", "optimistic_adam_v2", "lamb"],
)
def test_converges_on_quadratic(opt):
    sched_free = quadratic_converges(opt, steps=500, tol=1e-1)
    assert sched_free


@pytest.mark.parametrize(
    "factory,kwargs,rtol",
    [
        # Known gap: adan and novograd differ from their traced-hyperparameter versions by 1 ulp in a few elements.
        (gradax.adan, {"learning_rate": 1e-2, "b1": 0.9, "b3": 0.9, "weight_decay": 0.1}, 1e-6),
        (gradax.novograd, {"learning_rate": 1e-2, "b2": 0.5, "weight_decay": 0.1}, 1e-6),
        (gradax.lamb, {"learning_rate": 1e-2, "b1": 0.8, "weight_decay": 0.1}, 0.0),
    ],
)
def test_traced_hyperparameters_identical(factory, kwargs, rtol):
    traced_equals_concrete(factory, kwargs, rtol=rtol)


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda: gradax.adan(1e-2, b3=1.0), r"adan\(b3=\.\.\.\) must be in \[0, 1\); got 1\.0\."),
        (lambda: gradax.scale_by_adan(b1=2.0), r"scale_by_adan\(b1=\.\.\.\) must be in \[0, 1\)"),
        (lambda: gradax.novograd(1e-2, weight_decay=-1.0), r"novograd\(weight_decay=\.\.\.\) must be >= 0"),
        (lambda: gradax.lamb(1e-2, b2=1.0), r"lamb\(b2=\.\.\.\) must be in \[0, 1\)"),
        (lambda: gradax.optimistic_adam_v2(1e-2, b1=-0.1), r"optimistic_adam_v2\(b1=\.\.\.\) must be in"),
    ],
)
def test_argument_errors(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_oracle_is_optax():
    assert hasattr(optax, "adan")
