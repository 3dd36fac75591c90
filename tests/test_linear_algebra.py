"""power_iteration, matrix_inverse_pth_root, nnls, multi_normal: Optax 0.2.8 and float64 references."""

import jax
import jax.numpy as jnp
import numpy as np
import optax  # the test oracle
import pytest
import scipy.optimize

import gradax
from gradax import _linear_algebra

A = jax.random.normal(jax.random.key(0), (5, 5))
M = A @ A.T + 0.1 * jnp.eye(5)


def test_power_iteration():
    ev, vec = gradax.power_iteration(M)
    oev, ovec = optax.power_iteration(M)
    np.testing.assert_allclose(ev, oev, rtol=1e-6)
    np.testing.assert_allclose(vec, ovec, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ev, np.linalg.eigvalsh(np.asarray(M, np.float64)).max(), rtol=1e-4)
    f = lambda v: {"a": 2 * v["a"], "b": 5 * v["b"]}
    v0 = {"a": jnp.ones(2), "b": jnp.ones(3)}
    ev, vec = gradax.power_iteration(f, v0=v0)
    np.testing.assert_allclose(ev, optax.power_iteration(f, v0=v0)[0], rtol=1e-6)
    np.testing.assert_allclose(ev, 5.0, rtol=1e-5)
    ev, _ = gradax.power_iteration(M, key=jax.random.PRNGKey(3), num_iters=200)
    np.testing.assert_allclose(ev, optax.power_iteration(M, key=jax.random.PRNGKey(3), num_iters=200)[0], rtol=1e-6)
    with pytest.raises(ValueError, match=r"power_iteration\(v0=...\) must be given when matrix is a function"):
        gradax.power_iteration(f)
    with pytest.raises(ValueError, match=r"power_iteration\(matrix=...\) must be a square 2-D array"):
        gradax.power_iteration(jnp.ones((2, 3)))


@pytest.mark.parametrize("kernel", [False, True], ids=["xla", "kernel"])
@pytest.mark.parametrize("p", [1, 2, 4, 8])
def test_matrix_inverse_pth_root(p, kernel, monkeypatch):
    """The XLA iteration is Optax's to float32 rounding, its error (a residual under the tolerance) too. The CPU kernel
    (``_kernels/fused_inverse_root.c``, where AVX-512 is) sums its products in another order and computes half of
    each by symmetry: the root to float32 rounding, the error within a few float32 ulps of 1 (docs/differences.md)."""
    if kernel and not _linear_algebra._kernel_root_applies(M):
        pytest.skip("the inverse-root kernel does not run here (no AVX-512 or no C compiler)")
    monkeypatch.setattr(_linear_algebra, "_kernel_root_applies", lambda m: kernel)
    root, err = gradax.matrix_inverse_pth_root(M, p)
    oroot, oerr = optax.matrix_inverse_pth_root(M, p)
    np.testing.assert_allclose(root, oroot, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(err, oerr, rtol=1e-5, atol=8 * np.finfo(np.float32).eps if kernel else 1e-7)
    w, V = np.linalg.eigh(np.asarray(M, np.float64))
    ref = V @ np.diag(w ** (-1.0 / p)) @ V.T
    np.testing.assert_allclose(root, ref, rtol=1e-2, atol=1e-3)


def test_matrix_inverse_pth_root_edge_cases():
    root, err = gradax.matrix_inverse_pth_root(jnp.array([[4.0]]), 2)
    np.testing.assert_allclose(root, optax.matrix_inverse_pth_root(jnp.array([[4.0]]), 2)[0])
    with pytest.raises(ValueError, match=r"matrix_inverse_pth_root\(p=...\) must be one of 1, 2, 4, 8; got 3"):
        gradax.matrix_inverse_pth_root(M, 3)
    with pytest.raises(ValueError, match=r"matrix_inverse_pth_root\(matrix=...\) must be a square 2-D array"):
        gradax.matrix_inverse_pth_root(jnp.ones(3), 2)


def test_nnls():
    B = jax.random.normal(jax.random.key(1), (8, 4))
    b = jax.random.normal(jax.random.key(2), (8,))
    x = gradax.nnls(B, b, 500)
    np.testing.assert_allclose(x, optax.nnls(B, b, 500), rtol=1e-5, atol=1e-6)
    ref, _ = scipy.optimize.nnls(np.asarray(B, np.float64), np.asarray(b, np.float64))
    np.testing.assert_allclose(x, ref, atol=1e-3)
    bm = jax.random.normal(jax.random.key(3), (8, 3))
    np.testing.assert_allclose(gradax.nnls(B, bm, 50, L=20.0, unroll=2), optax.nnls(B, bm, 50, L=20.0), rtol=1e-5)
    with pytest.raises(ValueError, match=r"nnls\(A=...\) must be a 2-D array"):
        gradax.nnls(jnp.ones(3), b, 5)
    with pytest.raises(ValueError, match=r"nnls\(b=...\) must be an array of shape \(8,\) or \(8, K\)"):
        gradax.nnls(B, jnp.ones(3), 5)


def test_multi_normal():
    loc, log_scale = jnp.arange(3.0), jnp.array([0.1, -0.2, 0.3])
    ours, theirs = gradax.multi_normal(loc, log_scale), optax.multi_normal(loc, log_scale)
    key = jax.random.key(4)
    np.testing.assert_allclose(ours.sample((4,), key), theirs.sample((4,), key), rtol=1e-6)
    x = jnp.ones((2, 3))
    np.testing.assert_allclose(ours.log_prob(x), theirs.log_prob(x), rtol=1e-6)
    ref = np.sum(
        -0.5 * ((1.0 - np.arange(3.0)) / np.exp([0.1, -0.2, 0.3])) ** 2
        - np.array([0.1, -0.2, 0.3])
        - 0.5 * np.log(2 * np.pi)
    )
    np.testing.assert_allclose(ours.log_prob(x), [ref, ref], rtol=1e-5)
    assert len(ours.params) == 2 and ours.log_scale.shape == (3,)
