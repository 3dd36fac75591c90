"""Tests of gradax.contrib muon, scale_by_muon, MuonDimensionNumbers, MuonState."""

import jax
import jax.numpy as jnp
import numpy as np
import optax  # the test oracle
import pytest

import gradax
from gradax import contrib
from tests.contrib._helpers import assert_matches_optax


def test_muon_matches_optax():
    assert_matches_optax(lambda lib: lib.contrib.muon(1e-2, weight_decay=1e-3), rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("pre", ["spectral", "aol", "schatten"])
def test_muon_preconditionings_match_optax(pre):
    assert_matches_optax(lambda lib: lib.contrib.muon(1e-2, preconditioning=pre, nesterov=False), rtol=2e-5, atol=2e-6)


def test_muon_options_match_optax():
    assert_matches_optax(
        lambda lib: lib.contrib.muon(lambda c: 1e-2 / (1 + c), ns_coeffs="dion", adaptive=True, consistent_rms=0.2),
        rtol=2e-5,
        atol=2e-6,
    )


def test_stacked_weights_match_optax_and_per_layer():
    params = {"w": jax.random.normal(jax.random.key(0), (3, 4, 5)), "b": jnp.ones(5)}
    dims = {"w": contrib.MuonDimensionNumbers(1, 2), "b": None}
    odims = {"w": optax.contrib.MuonDimensionNumbers(1, 2), "b": None}
    assert_matches_optax(
        lambda lib: lib.contrib.muon(1e-2, muon_weight_dimension_numbers=dims if lib is gradax else odims),
        params=params,
        rtol=2e-5,
        atol=2e-6,
    )
    # each layer is orthogonalized on its own: same as running the 2-D update per layer
    g = jax.random.normal(jax.random.key(1), (3, 4, 5))
    tx3 = contrib.scale_by_muon(weight_dimension_numbers=contrib.MuonDimensionNumbers(1, 2))
    u3, _ = tx3.update(g, tx3.init(g))
    tx2 = contrib.scale_by_muon()
    for k in range(3):
        u2, _ = tx2.update(g[k], tx2.init(g[k]))
        np.testing.assert_allclose(u3[k], u2, rtol=1e-5, atol=1e-6)
    # the default for a rank-3 leaf in scale_by_muon: leading axes are layers
    u_default, _ = tx2.update(g, tx2.init(g))
    np.testing.assert_allclose(u_default, u3, rtol=1e-6)


def test_orthogonalizes():
    # NS_5 maps singular values into roughly [0.7, 1.2] (Jordan et al., 2024)
    g = jax.random.normal(jax.random.key(3), (8, 5))
    tx = contrib.scale_by_muon(beta=0.0, nesterov=False)
    u, _ = tx.update(g, tx.init(g))
    s = np.linalg.svd(np.asarray(u), compute_uv=False)
    assert s.min() > 0.6 and s.max() < 1.25


def test_newton_schulz_memory_is_one_matrix():
    # jax.lax.map over stacked layers: the compiled temporaries do not grow with the number of layers
    def temp(layers):
        g = jax.ShapeDtypeStruct((layers, 64, 64), jnp.float32)
        tx = contrib.scale_by_muon(weight_dimension_numbers=contrib.MuonDimensionNumbers(1, 2))
        s = jax.eval_shape(tx.init, g)
        c = jax.jit(tx.update).lower(g, s).compile()
        return c.memory_analysis().temp_size_in_bytes

    small, big = temp(2), temp(32)
    assert big - small < 32 * 64 * 64 * 4 * 2  # far less than a batch of Gram matrices per layer


def test_converges_on_least_squares():
    # matrix least squares min ||W A - B||^2 (Jordan et al., 2024, orthogonalized updates on a linear layer)
    a = jax.random.normal(jax.random.key(0), (6, 6))
    w_star = jax.random.normal(jax.random.key(1), (4, 6))
    b = w_star @ a
    loss = lambda p: jnp.mean((p["w"] @ a - b) ** 2)
    opt = contrib.muon(lambda c: 0.1 * 0.98**c)
    p = {"w": jnp.zeros((4, 6))}
    s = opt.init(p)
    step = jax.jit(lambda p, s: opt.update(jax.grad(loss)(p), s, p))
    l0 = loss(p)
    for _ in range(200):
        u, s = step(p, s)
        p = gradax.apply_updates(p, u)
    assert loss(p) < 1e-2 * l0


def test_bf16_and_abstract_init():
    params = {"w": jnp.ones((3, 2), jnp.bfloat16), "b": jnp.ones((2,), jnp.bfloat16)}
    opt = contrib.muon(1e-2)
    s = opt.init(params)
    abstract = opt.init(jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), params))
    assert jax.tree.map(lambda x: (x.shape, x.dtype), s) == jax.tree.map(lambda x: (x.shape, x.dtype), abstract)
    u, s2 = jax.jit(opt.update)(params, s, params)
    assert u["w"].dtype == jnp.bfloat16
    assert jax.tree.map(lambda x: x.dtype, s2) == jax.tree.map(lambda x: x.dtype, s)
    assert contrib.MuonState._fields == ("count", "mu", "ns_coeffs")
    assert contrib.MuonDimensionNumbers() == (0, 1)


def test_errors():
    with pytest.raises(ValueError, match=r"muon\(beta=\.\.\.\) must be in \[0, 1\); got 1\.5"):
        contrib.muon(0.1, beta=1.5)
    with pytest.raises(ValueError, match=r"scale_by_muon\(preconditioning=\.\.\.\) must be one of"):
        contrib.scale_by_muon(preconditioning="qr")
    with pytest.raises(ValueError, match=r"muon\(ns_coeffs=\.\.\.\) must be one of 'standard', 'dion'"):
        contrib.muon(0.1, ns_coeffs="x")
    with pytest.raises(ValueError, match=r"scale_by_muon\(ns_coeffs=\.\.\.\) must be of shape \(3,\) or \(n, 3\)"):
        contrib.scale_by_muon(ns_coeffs=(1.0, 2.0))
    with pytest.raises(ValueError, match=r"scale_by_muon\(ns_coeffs=\.\.\.\) must be at least ns_steps=5 rows"):
        contrib.scale_by_muon(ns_coeffs=((1.0, 2.0, 3.0),))
    with pytest.raises(TypeError, match=r"scale_by_muon\(ns_steps=\.\.\.\) must be an int"):
        contrib.scale_by_muon(ns_steps=2.5)
    tx = contrib.scale_by_muon()
    with pytest.raises(ValueError, match=r"scale_by_muon: a parameter of rank 1 is not a matrix"):
        tx.update(jnp.ones(3), tx.init(jnp.ones(3)))
    tx = contrib.scale_by_muon(weight_dimension_numbers=contrib.MuonDimensionNumbers(0, 0))
    with pytest.raises(ValueError, match=r"must be disjoint"):
        tx.update(jnp.ones((2, 2)), tx.init(jnp.ones((2, 2))))


def test_inject_hyperparams_with_static_ns_steps():
    params = {"w": jax.random.normal(jax.random.key(0), (3, 4)), "b": jnp.ones(4)}
    a = gradax.inject_hyperparams(contrib.muon, static_args=("ns_steps",))(learning_rate=1e-2, ns_steps=5)
    b = contrib.muon(1e-2)
    ua, _ = a.update(params, a.init(params), params)
    ub, _ = b.update(params, b.init(params), params)
    jax.tree.map(lambda x, y: np.testing.assert_allclose(x, y, rtol=1e-6), ua, ub)
