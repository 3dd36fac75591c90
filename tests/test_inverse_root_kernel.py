"""Tests of the CPU kernel that runs ``matrix_inverse_pth_root``'s coupled Newton iteration (Shampoo's preconditioner
roots) a matrix at a time in the cache (``gradax/_kernels/fused_inverse_root.c``).

The truths: a float64 eigendecomposition of the same (ridged) matrix, and the XLA iteration, step for step. The
kernel takes the same steps (the same power iteration, ridge, scaling, stopping rule and fallback to the previous
iterate); its products sum in another order, keep every iterate exactly symmetric (half of each product mirrored,
M's update averaged with its transpose), so its roots agree with the XLA iteration's to float32 rounding and are at
least as close to the float64 truth.

The products run with AVX-512 or in plain C with the same order of work and roundings ("portable"), bit for bit
alike, so the padding, batching and bookkeeping are tested on every CPU the kernels build on.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradax
from gradax import _kernels, _linear_algebra
from gradax._linear_algebra import _newton_inverse_root, _start_vector

pytestmark = pytest.mark.skipif(not _kernels.load().available, reason="gradax's CPU kernels are not built here")

AVX512 = _kernels.avx512_available()
MODES = [
    pytest.param(False, id="portable"),
    pytest.param(True, id="avx512", marks=pytest.mark.skipif(not AVX512, reason="no AVX-512 here")),
]
HIGHEST = jax.lax.Precision.HIGHEST


def _statistic(n, rank, seed=0, ridge=1e-3):
    g = np.random.default_rng(seed).normal(size=(n, rank))
    return ((g @ g.T) / rank + ridge * np.eye(n)).astype(np.float32)


def _ill_conditioned(n, seed=0, cond=1e4):
    q, _ = np.linalg.qr(np.random.default_rng(seed).normal(size=(n, n)))
    lam = np.logspace(0, -np.log10(cond), n)
    return q, lam, ((q * lam) @ q.T).astype(np.float32)


def _kernel(a, p, avx512, ridge=1e-6, tol=1e-6, iters=100):
    a = jnp.asarray(a)
    params = jnp.asarray([ridge, tol, p, iters], jnp.float32)
    root, err = _kernels.inverse_pth_root(a, _start_vector(a.shape[-1], jnp.float32), params, avx512)
    return np.asarray(root), np.asarray(err)


def _xla(a, p, ridge=1e-6, tol=1e-6, iters=100):
    root, err = jax.jit(lambda m: _newton_inverse_root(m, p, iters, ridge, tol, HIGHEST))(jnp.asarray(a))
    return np.asarray(root), np.asarray(err)


@pytest.mark.parametrize("n", [2, 5, 32, 40, 100])
@pytest.mark.parametrize("p", [1, 2, 4, 8])
def test_portable_and_avx512_products_are_bit_for_bit_alike(n, p):
    """Padding to multiples of 32 (every n but 32), the 12-, 8- and 4-row blocks, every number of squarings."""
    if not AVX512:
        pytest.skip("no AVX-512 here")
    a = _statistic(n, max(2, n // 3))
    r0, e0 = _kernel(a, p, False)
    r1, e1 = _kernel(a, p, True)
    np.testing.assert_array_equal(r0, r1)
    np.testing.assert_array_equal(e0, e1)


@pytest.mark.parametrize("avx512", MODES)
@pytest.mark.parametrize("n", [5, 40, 96])
@pytest.mark.parametrize("p", [1, 2, 4, 8])
def test_steps_are_the_xla_iterations(avx512, n, p):
    """A well-conditioned statistic: the roots to float32 rounding, the errors (a residual under the tolerance)
    within a few float32 ulps of 1, and both within float32 rounding of the float64 truth."""
    a = _statistic(n, 4 * n)
    got, got_err = _kernel(a, p, avx512)
    want, want_err = _xla(a, p)
    assert got.shape == (n, n) and got.dtype == np.float32 and got_err.shape == ()
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6 * np.abs(want).max())
    assert abs(float(got_err) - float(want_err)) <= 8 * np.finfo(np.float32).eps
    w, v = np.linalg.eigh(a.astype(np.float64))
    truth = (v * (w + 1e-6 * w[-1]) ** (-1.0 / p)) @ v.T
    np.testing.assert_allclose(got, truth, rtol=1e-4, atol=1e-5 * np.abs(truth).max())


@pytest.mark.parametrize("avx512", MODES)
@pytest.mark.parametrize("n", [16, 64])
@pytest.mark.parametrize("p", [2, 4])
def test_at_least_as_accurate_as_the_xla_iteration_when_ill_conditioned(avx512, n, p):
    """cond 1e4, no ridge: against the float64 truth the kernel's root is no worse than the XLA iteration's (M's
    update averaged with its transpose; with that product mirrored too, the error was about twice the XLA one's)."""
    q, lam, a = _ill_conditioned(n)
    truth = (q * lam ** (-1.0 / p)) @ q.T
    err = lambda r: np.linalg.norm(r.astype(np.float64) - truth) / np.linalg.norm(truth)
    got, _ = _kernel(a, p, avx512, ridge=0.0)
    want, _ = _xla(a, p, ridge=0.0)
    assert err(got) <= 1.05 * err(want)
    assert err(got) < 1e-4


@pytest.mark.parametrize("avx512", MODES)
def test_stopping_rule_and_fallback_are_the_xla_iterations(avx512):
    """num_iters caps the steps (the root after 3 steps is the XLA root after 3 steps, far from converged), and an
    unreachable tolerance stops where the error stops falling, returning the iterate before the last."""
    a = _statistic(24, 96)
    for iters, tol in ((3, 1e-6), (100, 0.0)):
        got, got_err = _kernel(a, 4, avx512, tol=tol, iters=iters)
        want, want_err = _xla(a, 4, tol=tol, iters=iters)
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6 * np.abs(want).max())
        np.testing.assert_allclose(got_err, want_err, rtol=1e-3, atol=8 * np.finfo(np.float32).eps)
    assert float(_kernel(a, 4, avx512, iters=3)[1]) > 1e-3


@pytest.mark.parametrize("avx512", MODES)
def test_a_batch_is_its_matrices(avx512):
    """vmap hands the kernel a batch (one call, matrices over the threads): each result is bit for bit the one of
    the matrix alone; batched parameters (a vmapped ridge) are per matrix."""
    stats = np.stack([_statistic(20, 30, seed=s) for s in range(5)])
    params = lambda ridge: jnp.asarray([ridge, 1e-6, 4.0, 100.0], jnp.float32)
    v0 = _start_vector(20, jnp.float32)
    call = lambda m, ridge: _kernels.inverse_pth_root(m, v0, params(ridge), avx512)
    roots, errs = jax.vmap(call, in_axes=(0, None))(jnp.asarray(stats), 1e-6)
    ridges = jnp.asarray([1e-6, 1e-3, 1e-6, 1e-2, 0.0], jnp.float32)
    roots2, _ = jax.vmap(call)(jnp.asarray(stats), ridges)
    for i in range(5):
        alone, alone_err = _kernel(stats[i], 4, avx512)
        np.testing.assert_array_equal(np.asarray(roots[i]), alone)
        np.testing.assert_array_equal(np.asarray(errs[i]), alone_err)
        np.testing.assert_array_equal(np.asarray(roots2[i]), _kernel(stats[i], 4, avx512, ridge=float(ridges[i]))[0])
    nested = jax.vmap(jax.vmap(call, in_axes=(0, None)), in_axes=(0, None))(
        jnp.asarray(stats).reshape(5, 1, 20, 20), 1e-6
    )
    np.testing.assert_array_equal(np.asarray(nested[0])[:, 0], np.asarray(roots))


def test_nan_statistics_give_nan_roots_like_the_xla_iteration():
    a = _statistic(8, 16)
    a[2, 3] = a[3, 2] = np.nan
    got, err = _kernel(a, 4, AVX512)
    want, want_err = _xla(a, 4)
    assert np.isnan(got).all() == np.isnan(want).all() and np.isnan(got).any()
    assert np.isnan(err) == np.isnan(want_err)


@pytest.mark.skipif(not AVX512, reason="no AVX-512 here: matrix_inverse_pth_root runs the XLA iteration")
def test_matrix_inverse_pth_root_takes_the_kernel_where_it_applies():
    """float32 of side 2..1,024 on a CPU with AVX-512; not float64 (x64), bfloat16, 1 x 1 or larger sides. The
    derivative is the XLA iteration's; vmap hands the kernel the batch in one call; p and num_iters may be traced."""
    a = jnp.asarray(_statistic(12, 40))
    hlo = lambda f, *x: jax.jit(f).lower(*x).as_text()
    assert "gradax_inverse_pth_root" in hlo(lambda m: gradax.matrix_inverse_pth_root(m, 4)[0], a)
    assert "gradax_inverse_pth_root" not in hlo(
        lambda m: gradax.matrix_inverse_pth_root(m, 4)[0], a.astype(jnp.bfloat16)
    )
    assert "gradax_inverse_pth_root" not in hlo(lambda m: gradax.matrix_inverse_pth_root(m, 4)[0], a[:1, :1])
    assert not _linear_algebra._kernel_root_applies(jax.ShapeDtypeStruct((1025, 1025), jnp.float32))
    batched = hlo(jax.vmap(lambda m: gradax.matrix_inverse_pth_root(m, 2)[0]), jnp.stack([a, 2 * a]))
    assert batched.count("gradax_inverse_pth_root") == 1
    with jax.enable_x64(True):
        assert "gradax_inverse_pth_root" not in hlo(
            lambda m: gradax.matrix_inverse_pth_root(m, 4)[0], jnp.asarray(_statistic(12, 40), jnp.float64)
        )
    traced = jax.jit(lambda m, p, k: gradax.matrix_inverse_pth_root(m, p, num_iters=k)[0])(a, 4, 100)
    np.testing.assert_array_equal(np.asarray(traced), np.asarray(gradax.matrix_inverse_pth_root(a, 4)[0]))
    t = jnp.asarray(_statistic(12, 40, seed=1))
    f = lambda kernel: lambda m: _kernel_switch(kernel, m)
    (y_k, dy_k), (y_x, dy_x) = jax.jvp(f(True), (a,), (t,)), jax.jvp(f(False), (a,), (t,))
    np.testing.assert_allclose(y_k, y_x, rtol=2e-5, atol=1e-6)
    np.testing.assert_allclose(dy_k, dy_x, rtol=1e-6, atol=1e-7)


def _kernel_switch(kernel, m):
    if kernel:
        return _linear_algebra._kernel_inverse_pth_root(m, 4, 100, 1e-6, 1e-6, HIGHEST)[0]
    return _newton_inverse_root(m, 4, 100, 1e-6, 1e-6, HIGHEST)[0]


def test_shampoo_trains_as_with_the_xla_iteration(monkeypatch):
    """Shampoo's roots (a batch per block size) by the kernel or the XLA iteration: the same parameters to float32
    rounding after the preconditioner has been refreshed three times."""
    rng = np.random.default_rng(0)
    params = {"w": jnp.asarray(rng.normal(size=(40, 24)), jnp.float32), "b": jnp.zeros(24)}
    grads = [jax.tree.map(lambda x: jnp.asarray(rng.normal(size=x.shape), jnp.float32), params) for _ in range(6)]

    def run():
        tx = gradax.contrib.shampoo(0.1, block_size=16, start_preconditioning_step=2, preconditioning_compute_steps=2)
        p, s = params, tx.init(params)
        step = jax.jit(tx.update)
        for g in grads:
            u, s = step(g, s, p)
            p = gradax.apply_updates(p, u)
        return p

    with_kernel = run()
    monkeypatch.setattr(_linear_algebra, "_kernel_root_applies", lambda m: False)
    without = run()
    # parameters of size about 1, six steps of 0.1: the roots' float32 differences move them by a few 1e-6
    jax.tree.map(lambda x, y: np.testing.assert_allclose(x, y, rtol=1e-5, atol=2e-5), with_kernel, without)
