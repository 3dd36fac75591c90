"""Tests of scale_gradient, normalize_by_update_norm, centralize, scale_by_param_block_norm/rms (_misc.py)."""

import jax
import jax.numpy as jnp
import numpy as np
import optax  # the test oracle
import pytest

import gradax
from tests.optimizers._other_helpers import assert_matches_optax


@pytest.mark.parametrize(
    "make",
    [
        lambda lib: lib.normalize_by_update_norm(),
        lambda lib: lib.normalize_by_update_norm(scale_factor=2.0, eps=1e-3),
        lambda lib: lib.centralize(),
        lambda lib: lib.scale_by_param_block_norm(),
        lambda lib: lib.scale_by_param_block_rms(min_scale=0.5),
    ],
)
def test_matches_optax(make):
    assert_matches_optax(make)


@pytest.mark.parametrize("scale", [0.0, 1.0, 0.5, -2.0])
def test_scale_gradient(scale):
    def f(lib, x):
        return jnp.sum(lib.scale_gradient({"a": x}, scale)["a"] ** 2)

    x = jnp.array([1.0, 2.0])
    np.testing.assert_allclose(f(gradax, x), f(optax, x))
    np.testing.assert_allclose(jax.grad(lambda x: f(gradax, x))(x), scale * 2 * x)
    np.testing.assert_allclose(jax.grad(lambda x: f(gradax, x))(x), jax.grad(lambda x: f(optax, x))(x))


def test_scale_gradient_traced_scale():
    g = jax.jit(jax.grad(lambda x, s: jnp.sum(gradax.scale_gradient(x, s) ** 2)))(jnp.ones(2), 3.0)
    np.testing.assert_allclose(g, [6.0, 6.0])


def test_closed_forms():
    u, _ = gradax.normalize_by_update_norm(eps=0.0).update({"a": jnp.array([3.0]), "b": jnp.array([4.0])}, None)
    np.testing.assert_allclose([u["a"][0], u["b"][0]], [0.6, 0.8])
    x = jnp.arange(6.0).reshape(2, 3)
    c, _ = gradax.centralize().update({"m": x, "v": jnp.arange(3.0)}, None)
    np.testing.assert_allclose(c["m"].mean(axis=1), 0.0, atol=1e-6)
    np.testing.assert_allclose(c["v"], jnp.arange(3.0))


def test_needs_params_and_errors():
    with pytest.raises(ValueError, match=r"scale_by_param_block_rms: update\(\.\.\.\) needs `params`"):
        gradax.scale_by_param_block_rms().update(jnp.ones(2), None)
    with pytest.raises(ValueError, match=r"scale_by_param_block_norm: update\(\.\.\.\) needs `params`"):
        gradax.scale_by_param_block_norm().update(jnp.ones(2), None)
    with pytest.raises(ValueError, match=r"normalize_by_update_norm\(eps=\.\.\.\) must be >= 0"):
        gradax.normalize_by_update_norm(eps=-1.0)
    with pytest.raises(ValueError, match=r"scale_by_param_block_rms\(min_scale=\.\.\.\) must be >= 0"):
        gradax.scale_by_param_block_rms(min_scale=-1.0)


def test_bf16_dtypes():
    p = {"a": jnp.ones((2, 3), jnp.bfloat16)}
    for tx in [gradax.normalize_by_update_norm(), gradax.centralize(), gradax.scale_by_param_block_rms()]:
        u, _ = jax.jit(tx.update)(p, tx.init(p), p)
        assert u["a"].dtype == jnp.bfloat16
