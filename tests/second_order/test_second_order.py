"""gradax.second_order: hvp, hessian_diag, fisher_diag against Optax 0.2.8 and the dense Hessian."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax  # the test oracle
import pytest

import gradax


def loss(p, x, y):
    return jnp.sum((jnp.tanh(x @ p["w"]) + p["b"] - y) ** 2)


PARAMS = {"w": jnp.full((3, 2), 0.3), "b": jnp.zeros(2)}
X = jax.random.normal(jax.random.key(0), (4, 3))
Y = jnp.ones((4, 2))


def _dense_hessian():
    flat, unravel = jax.flatten_util.ravel_pytree(PARAMS)
    return jax.hessian(lambda f: loss(unravel(f), X, Y))(flat)


def test_matches_optax_and_dense_hessian():
    v = jnp.arange(8.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ohvp = optax.second_order.hvp(loss, v, PARAMS, X, Y)
        odiag = optax.second_order.hessian_diag(loss, PARAMS, X, Y)
        ofisher = optax.second_order.fisher_diag(loss, PARAMS, X, Y)
    hv = gradax.second_order.hvp(loss, v, PARAMS, X, Y)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6), hv, ohvp)
    dense = _dense_hessian()
    np.testing.assert_allclose(jax.flatten_util.ravel_pytree(hv)[0], dense @ v, rtol=1e-4, atol=1e-5)
    diag = gradax.second_order.hessian_diag(loss, PARAMS, X, Y)
    np.testing.assert_allclose(diag, odiag, rtol=1e-6)
    np.testing.assert_allclose(diag, jnp.diag(dense), rtol=1e-4, atol=1e-5)
    fisher = gradax.second_order.fisher_diag(loss, PARAMS, X, Y)
    np.testing.assert_allclose(fisher, ofisher, rtol=1e-6)
    g = jax.flatten_util.ravel_pytree(jax.grad(loss)(PARAMS, X, Y))[0]
    np.testing.assert_allclose(fisher, g**2, rtol=1e-6)


def test_hvp_error():
    with pytest.raises(ValueError, match=r"hvp\(v=...\) must be a flat vector of shape \(8,\)"):
        gradax.second_order.hvp(loss, jnp.ones(3), PARAMS, X, Y)
