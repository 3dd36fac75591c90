"""SOAP's QR of large factors: ``Q`` formed from LAPACK's Householder reflectors a panel at a time by matrix
products (``_householder_q``), and the factorization itself by panels (``_geqrf_by_panels``), against LAPACK's own
``Q`` and ``geqrf`` (``jnp.linalg.qr``). Small matrices with small panels stand in for the 8,192 x 8,192 factors
that take those paths in training (``_BLOCKED_Q_FROM``, ``_PANELS_FROM``)."""

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
    if kind == "upper":  # nothing below the diagonal: every reflector the identity
        a = np.triu(a)
    if kind == "block_upper":  # a full block, then an upper-triangular one: identities after proper reflectors
        h = n // 2
        a[h:, :h] = 0
        a[:h, h:] = 0
        a[h:, h:] = np.triu(a[h:, h:])
    return a


_PANEL_CASES = [(40, 8), (37, 10), (16, 16), (9, 32)]


@pytest.mark.parametrize("kind", ["full", "zero", "identity", "zero_columns", "upper", "block_upper"])
@pytest.mark.parametrize(("n", "panel"), _PANEL_CASES)
def test_geqrf_by_panels_is_lapacks_geqrf(kind, n, panel):
    a = jnp.asarray(_matrix(kind, n, np.random.default_rng(n + panel)))
    with jax.enable_x64(True):
        a = jnp.asarray(a, jnp.float64)
        h_ref, tau_ref = jnp.linalg.qr(a, mode="raw")
        h, tau = jax.jit(lambda m: _soap._geqrf_by_panels(m, panel))(a)
        np.testing.assert_allclose(h, h_ref.T, rtol=0, atol=1e-13)
        np.testing.assert_allclose(tau, tau_ref, rtol=0, atol=1e-13)
        q, diag = _soap._qr(a, panel=panel, blocked_from=0, qr_panel=panel, panels_from=0)
        np.testing.assert_allclose(q, jnp.linalg.qr(a)[0], rtol=0, atol=1e-13)
        np.testing.assert_allclose(diag, jnp.abs(jnp.diagonal(h_ref.T)), rtol=0, atol=1e-13)


@pytest.mark.parametrize(("n", "panel"), _PANEL_CASES)
def test_geqrf_by_panels_of_a_rank_deficient_matrix(n, panel):
    """Past the rank, what is left of the matrix is rounding noise, and the two factorizations' later reflectors
    are whatever their own roundings make them (SOAP's refresh replaces those columns): the first columns of ``Q``
    and the whole of ``|diag(R)|`` agree; ``Q`` is orthogonal."""
    a = jnp.asarray(_matrix("rank_deficient", n, np.random.default_rng(n + panel)))
    with jax.enable_x64(True):
        a = jnp.asarray(a, jnp.float64)
        q_ref, r_ref = jnp.linalg.qr(a)
        q, diag = _soap._qr(a, panel=panel, blocked_from=0, qr_panel=panel, panels_from=0)
        np.testing.assert_allclose(q[:, :3], q_ref[:, :3], rtol=0, atol=1e-12)
        np.testing.assert_allclose(diag, jnp.abs(jnp.diagonal(r_ref)), rtol=0, atol=1e-12)
        np.testing.assert_allclose(q.T @ q, np.eye(n), rtol=0, atol=1e-13)


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
    monkeypatch.setattr(_soap, "_PANELS_FROM", 8)
    monkeypatch.setattr(_soap, "_QR_PANEL", 6)
    p_blocked, s_blocked = run()
    np.testing.assert_allclose(p_blocked, p_lapack, rtol=0, atol=1e-5)
    for a, b in zip(jax.tree.leaves(s_blocked), jax.tree.leaves(s_lapack)):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-4)
