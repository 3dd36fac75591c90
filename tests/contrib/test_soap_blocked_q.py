"""SOAP's QR of large factors: ``Q`` formed from LAPACK's Householder reflectors a panel at a time by matrix
products (``_householder_q``), against LAPACK's own ``Q`` (``jnp.linalg.qr``). Small matrices with small panels
stand in for the 8,192 x 8,192 factors that take that path in training (``_BLOCKED_Q_FROM``)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gradax import contrib
from gradax.contrib import _soap


def _matrix(kind, n, rng):
    if kind == "rank_deficient":
        return rng.normal(size=(n, 3)) @ rng.normal(size=(3, n))
    if kind == "zero":  # every reflector the identity (tau = 0)
        return np.zeros((n, n))
    if kind == "identity":
        return np.eye(n)
    a = rng.normal(size=(n, n))
    if kind == "zero_columns":
        a[:, ::3] = 0
    return a


@pytest.mark.parametrize("kind", ["full", "rank_deficient", "zero", "identity", "zero_columns"])
@pytest.mark.parametrize(("n", "panel"), [(10, 4), (12, 3), (9, 9), (7, 16)])
def test_same_q_and_diagonal_as_lapack(kind, n, panel):
    a = _matrix(kind, n, np.random.default_rng(n * panel))
    with jax.enable_x64(True):
        q_ref, r = jnp.linalg.qr(jnp.asarray(a))
        q, diag = jax.jit(lambda m: _soap._qr(m, panel=panel, blocked_from=0))(jnp.asarray(a))
        np.testing.assert_allclose(q, q_ref, rtol=0, atol=1e-13)
        np.testing.assert_array_equal(diag, jnp.abs(jnp.diagonal(r)))
    # in float32 against LAPACK's float32 Q: a null space's columns are whatever the same rounding makes them
    a32 = jnp.asarray(a, jnp.float32)
    q32, _ = _soap._qr(a32, panel=panel, blocked_from=0)
    np.testing.assert_allclose(q32, jnp.linalg.qr(a32)[0], rtol=0, atol=2e-6)
    np.testing.assert_allclose(q32.T @ q32, np.eye(n), rtol=0, atol=2e-6)


def test_under_vmap_each_matrix_as_alone():
    rng = np.random.default_rng(0)
    a = jnp.asarray(np.stack([_matrix(k, 10, rng) for k in ("full", "rank_deficient", "zero")]), jnp.float32)
    q, diag = jax.vmap(lambda m: _soap._qr(m, panel=4, blocked_from=0))(a)
    for i in range(3):
        qi, di = _soap._qr(a[i], panel=4, blocked_from=0)
        np.testing.assert_allclose(q[i], qi, rtol=0, atol=1e-6)
        np.testing.assert_allclose(diag[i], di, rtol=0, atol=1e-6)


def test_soap_with_blocked_q_tracks_soap_with_lapacks(monkeypatch):
    """Ten refreshes (one a step) of a 24 x 20 weight's two factors, one run through each QR: the same basis
    (canonical signs), the same parameters to float32 rounding."""
    rng = np.random.default_rng(1)
    params = jnp.asarray(rng.normal(size=(24, 20)), jnp.float32)
    grads = [jnp.asarray(rng.normal(size=(24, 20)), jnp.float32) for _ in range(10)]

    def run():
        opt = contrib.soap(1e-2, precondition_frequency=1)
        p, s = params, opt.init(params)
        step = jax.jit(opt.update)
        for g in grads:
            u, s = step(g, s, p)
            p = p + u
        return p, s

    p_lapack, s_lapack = run()
    monkeypatch.setattr(_soap, "_BLOCKED_Q_FROM", 8)
    monkeypatch.setattr(_soap, "_PANEL", 5)
    p_blocked, s_blocked = run()
    np.testing.assert_allclose(p_blocked, p_lapack, rtol=0, atol=1e-5)
    for a, b in zip(jax.tree.leaves(s_blocked), jax.tree.leaves(s_lapack)):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-4)
