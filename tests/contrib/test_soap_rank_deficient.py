"""SOAP on rank-deficient factor statistics: the eigenbasis (first call) and the power-iteration refresh depend on the
statistics, not on their rounding. ``G G^T`` of an ``m x n`` gradient with ``m > n`` has an ``(m - n)``-dimensional
null space, for which ``eigh`` and a plain QR of ``L Q`` return bases picked by rounding alone; Adam's element-wise
step in the basis then changed by O(1) between a sharded and an unsharded run (see docs/differences.md)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gradax import contrib
from gradax.contrib import _soap
from gradax.contrib._soap import _eigenbasis, _power_qr, _qr_pass, _zero_columns
from tests.contrib._helpers import assert_each_leaf_as_if_alone


@pytest.fixture(autouse=True, params=["full", "thin"])
def passes(request, monkeypatch):
    """Every test twice: the passes that find the columns adding no direction on full QRs, and (``thin``) on the
    thin QRs that the factors of 1,024 rows or more take (here from 2 rows, over half the columns)."""
    if request.param == "thin":
        monkeypatch.setattr(_soap, "_THIN_FROM", 2)
        monkeypatch.setattr(_soap, "_THIN_SHARE", 2)
    return request.param


def _gram(rng, m, n):
    g = rng.normal(size=(m, n)).astype(np.float32)
    return g @ g.T


def _jitter(s, rng, rel=1e-7):
    """``s`` plus a symmetric perturbation of rounding size."""
    e = rng.normal(size=s.shape).astype(np.float32) * rel * np.abs(s).max()
    return s + (e + e.T) / 2


def test_eigenbasis_of_a_null_space_does_not_depend_on_rounding():
    rng = np.random.default_rng(0)
    s = _gram(rng, 8, 3)  # rank 3: a 5-dimensional null space
    q = np.asarray(_eigenbasis(jnp.asarray(s)))
    q2 = np.asarray(_eigenbasis(jnp.asarray(_jitter(s, rng))))
    np.testing.assert_allclose(q, q2, atol=1e-4)
    # still an orthonormal eigenbasis, by decreasing eigenvalue
    np.testing.assert_allclose(q.T @ q, np.eye(8), atol=1e-5)
    lam = q.T @ s @ q
    np.testing.assert_allclose(lam - np.diag(np.diag(lam)), 0, atol=1e-5 * np.abs(s).max())
    assert np.all(np.diff(np.diag(lam)) <= 1e-5 * np.abs(s).max())
    # what eigh alone gives for the null space moves by O(1) under the same perturbation
    raw = [np.linalg.eigh(x)[1][:, :5] for x in (s, _jitter(s, rng))]
    assert np.abs(np.abs(raw[0].T @ raw[1]) - np.eye(5)).max() > 1e-2


def _refresh(s, q):
    (out,) = _power_qr((jnp.asarray(s),), (q,))
    return np.asarray(out)


def test_power_iteration_refresh_does_not_depend_on_rounding():
    rng = np.random.default_rng(1)
    s1 = _gram(rng, 8, 3)
    q = _eigenbasis(jnp.asarray(s1))
    s = 0.9 * s1 + _gram(rng, 8, 2)  # rank 5: L Q has three columns that add no direction
    a, b = _refresh(s, q), _refresh(_jitter(s, rng), q)
    np.testing.assert_allclose(a, b, atol=1e-4)
    np.testing.assert_allclose(a.T @ a, np.eye(8), atol=1e-5)


@pytest.mark.parametrize("scale", [1e-8, 1e-4, 1e4])
def test_refresh_of_a_rank_deficient_statistic_does_not_depend_on_its_scale(scale):
    # the basis of c L is the basis of L: the columns adding no direction are judged against the columns of L Q,
    # never against the previous basis's unit columns that stand in for them (which, before, made every column of
    # a small statistic look null, and froze its basis)
    rng = np.random.default_rng(6)
    s1 = _gram(rng, 16, 3)
    q = _eigenbasis(jnp.asarray(s1))
    s = 0.9 * s1 + _gram(rng, 16, 2)  # rank 5
    a = _refresh(s, q)
    b = _refresh((s * np.float32(scale)).astype(np.float32), q)
    np.testing.assert_allclose(b, a, atol=1e-4)


@pytest.mark.parametrize("steady", [True, False])
def test_columns_known_null_before_the_qr_are_ones_the_qr_finds(steady):
    # the null columns are marked from their norms before the QR (so a steady null space costs one QR, not two):
    # every column so marked is one that a pass without marks finds adding no direction, and where the previous
    # basis already spans the null space (the steady state), they are all of them and the pass finds no more
    rng = np.random.default_rng(7)
    d, r = 32, 6
    s = _gram(rng, d, r)
    if steady:
        q = _eigenbasis(jnp.asarray(s))
    else:
        q = jnp.asarray(np.linalg.qr(rng.normal(size=(d, d)))[0].astype(np.float32))
    lq = jnp.asarray(s) @ q
    est = jnp.sum(q * lq, axis=0)
    seed = np.asarray(_zero_columns(lq, est))
    _, found = _qr_pass(lq, q, est, jnp.zeros(d, bool))
    found = np.asarray(found)
    assert not np.any(seed & ~found)
    if steady:
        assert seed.sum() == d - r
        _, again = _qr_pass(lq, q, est, jnp.asarray(seed))
        np.testing.assert_array_equal(np.asarray(again), seed)
    else:
        assert seed.sum() == 0 and found.sum() == d - r


def test_full_rank_refresh_is_the_plain_sorted_qr():
    rng = np.random.default_rng(2)
    s = _gram(rng, 6, 12)
    q = _eigenbasis(jnp.asarray(_gram(rng, 6, 12)))
    got = _refresh(s, q)
    lq = s @ np.asarray(q)
    order = np.argsort(-np.sum(np.asarray(q) * lq, axis=0), kind="stable")
    want = np.linalg.qr(lq[:, order])[0][:, np.argsort(order)]
    np.testing.assert_allclose(np.abs(got), np.abs(want), atol=1e-5)  # same columns, up to their signs


def test_soap_updates_follow_the_gradients_not_their_rounding():
    rng = np.random.default_rng(3)
    grads = [rng.normal(size=(8, 3)).astype(np.float32) for _ in range(6)]
    tx = contrib.scale_by_soap(precondition_frequency=2)
    update = jax.jit(tx.update)

    def run(gs):
        state = tx.init(jnp.zeros((8, 3)))
        out = []
        for g in gs:
            u, state = update(jnp.asarray(g), state)
            out.append(np.asarray(u))
        return out

    plain = run(grads)
    rounded = run([g * (1 + 1e-7 * rng.normal(size=g.shape)).astype(np.float32) for g in grads])
    for x, y in zip(plain, rounded):
        np.testing.assert_allclose(x, y, atol=1e-4)


def test_a_batch_gets_what_each_factor_gets_alone():
    # the repairs run for a whole batch (factors of one size, across leaves) once any of them is rank-deficient;
    # a full-rank factor in that batch must come out as it does alone
    rng = np.random.default_rng(4)
    full, deficient = _gram(rng, 6, 12), _gram(rng, 6, 2)
    both = jnp.asarray(np.stack([full, deficient]))
    alone = [np.asarray(_eigenbasis(jnp.asarray(s))) for s in (full, deficient)]
    np.testing.assert_allclose(np.asarray(_eigenbasis(both)), np.stack(alone), atol=1e-5)
    q = _eigenbasis(jnp.asarray(np.stack([_gram(rng, 6, 12), _gram(rng, 6, 3)])))
    s = np.stack([_gram(rng, 6, 12), 0.9 * deficient + _gram(rng, 6, 1)])
    (got,) = _power_qr((jnp.asarray(s),), (q,))
    want = np.stack([_refresh(s[k], q[k]) for k in range(2)])
    np.testing.assert_allclose(np.asarray(got), want, atol=1e-5)


def test_leaves_sharing_a_factor_size_are_refreshed_as_one_batch_as_if_alone():
    tx = contrib.scale_by_soap(precondition_frequency=2)
    shapes = {"tall": (6, 2), "wide": (2, 6), "full": (6, 6)}
    assert_each_leaf_as_if_alone(tx, shapes, steps=5, seed=5)


@pytest.mark.parametrize("leak", [0.0, 1e-3, 3e-2])
def test_thin_passes_find_the_columns_of_the_full_passes(monkeypatch, leak):
    """The refresh with the null columns found on thin QRs is the refresh with them found on full ones, bit for
    bit (the thin QR's ``R`` is the full one's first columns, and the full QR then runs on the same columns): a
    steady null space (``leak`` 0: the marks before the QR are all or nearly all there is), and a previous basis with a null
    column turned slightly toward the range, which the QR finds adding nothing although its norm is over the marks'
    tolerance (what a repair pass was for)."""
    rng = np.random.default_rng(11)
    d, r = 32, 4
    s = _gram(rng, d, r)
    q = np.asarray(_eigenbasis(jnp.asarray(s)), np.float64)
    q[:, 0], q[:, -1] = (
        np.cos(leak) * q[:, 0] + np.sin(leak) * q[:, -1],
        -np.sin(leak) * q[:, 0] + np.cos(leak) * q[:, -1],
    )
    q = jnp.asarray(q.astype(np.float32))
    lq = jnp.asarray(s) @ q
    est = _soap._column_dots(q, lq)
    seed = np.asarray(_zero_columns(lq, est))
    _, bad = _qr_pass(lq, q, est, jnp.asarray(seed))
    assert (~seed).sum() <= d // 2  # the thin passes run
    assert leak == 0 or (np.asarray(bad) & ~seed).any()  # and have a column to find
    outs = []
    for thin_from in (10**9, 2):
        monkeypatch.setattr(_soap, "_THIN_FROM", thin_from)
        monkeypatch.setattr(_soap, "_THIN_SHARE", 2)
        outs.append(np.asarray(jax.jit(_power_qr)((jnp.asarray(s),), (q,))[0]))
    np.testing.assert_array_equal(outs[1], outs[0])
