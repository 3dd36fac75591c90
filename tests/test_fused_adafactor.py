"""gradax.fused.adafactor: the three-pass step on factored float32 matrices (C kernels through XLA's FFI on CPU)
against update + apply_updates, the kernels against float64 NumPy, the fallbacks and the contract checks of
``step`` (jit, vmap, grad, donation, inject_hyperparams)."""

from __future__ import annotations

import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradax
from gradax import _kernels
from tests._fused_common import run_steps

pytestmark = [
    pytest.mark.xdist_group("fused"),
    pytest.mark.skipif(
        not any(shutil.which(c) for c in ("cc", "gcc", "clang")), reason="no C compiler: no fused kernels here"
    ),
]

# factored both ways round (largest axis first or second, and a tie), small leaves and a rank-3 leaf (update's)
SHAPES = [(300, 130), (130, 300), (200, 200), (64, 64), (7,), (3, 140, 150)]


def _tree(seed):
    rng = np.random.default_rng(seed)
    return {f"l{i}": jnp.asarray(rng.normal(size=s), jnp.float32) for i, s in enumerate(SHAPES)}


CONFIGS = {
    "lr": dict(learning_rate=1e-2),
    "relative_steps": dict(),
    "schedule_no_clip_no_scale": dict(
        learning_rate=gradax.linear_schedule(1e-2, 1e-3, 10),
        clipping_threshold=None,
        multiply_by_parameter_scale=False,
    ),  # fmt: skip
    "strong_clipping": dict(learning_rate=0.1, clipping_threshold=0.01, decay_rate=0.5, eps=1e-20),
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_step_matches_update_then_apply(name):
    """The params move as update + apply moves them, to float32 rounding of the sums (the kernels sum in float64,
    XLA in float32): within 5e-5 of the whole update; the statistics agree to 1e-5."""
    opt = gradax.fused.adafactor(**CONFIGS[name])
    params, grads = _tree(0), _tree(1)
    assert "gradax_adafactor_matrices" in jax.jit(opt.step).lower(params, opt.init(params), grads).as_text()
    got = run_steps(opt, params, grads, 3, fused=True)
    want = run_steps(opt, params, grads, 3, fused=False)
    assert jax.tree.structure(got) == jax.tree.structure(want)
    for key in params:
        x, y, p0 = (np.asarray(t[key]) for t in (got[0], want[0], params))
        assert x.dtype == y.dtype and x.shape == y.shape
        assert np.max(np.abs(x - y)) <= 5e-5 * np.max(np.abs(y - p0)), key
    for (path, x), y in zip(jax.tree_util.tree_leaves_with_path(got[1]), jax.tree.leaves(want[1]), strict=True):
        assert x.dtype == y.dtype and x.shape == y.shape, jax.tree_util.keystr(path)
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-30, err_msg=jax.tree_util.keystr(path))


def test_donated_step_is_in_place():
    opt = gradax.fused.adafactor(1e-2)
    params = {"a": jnp.ones((256, 128)), "b": jnp.ones((256, 128)), "c": jnp.ones((128, 512))}
    hlo = jax.jit(opt.step, donate_argnums=(0, 1)).lower(params, opt.init(params), params).compile().as_text()
    assert 'custom_call_target="gradax_adafactor_matrices"' in hlo
    # in place: no copy of a matrix (the scalars and placeholders may be copied)
    assert not [line for line in hlo.splitlines() if " copy(" in line and ("[256,128]" in line or "[128,512]" in line)]


def _numpy_matrix_step(p, g, row, col, b_first, beta, eps, clip, lr, scale):
    """Adafactor on one matrix in float64 (Shazeer and Stern, 2018, Algorithm 4 with update clipping and the
    relative step): the moving row and column means of g^2 + eps, the factor averaged over the axis the state
    normalizes, the update clipped to RMS ``clip`` and scaled by the parameters' RMS (at least 1e-3)."""
    p, g, row, col = (x.astype(np.float64) for x in (p, g, row, col))
    row = beta * row + (1 - beta) * (np.mean(g**2, axis=1) + eps)
    col = beta * col + (1 - beta) * (np.mean(g**2, axis=0) + eps)
    a, b = (row**-0.5, (col / col.mean()) ** -0.5) if b_first else ((row / row.mean()) ** -0.5, col**-0.5)
    u = g * a[:, None] * b[None, :]
    div = max(1.0, np.sqrt(np.mean(u**2)) / clip) if clip > 0 else 1.0
    ps = max(np.sqrt(np.mean(p**2)), 1e-3) if scale else 1.0
    return p - u / div * lr * ps, row, col


@pytest.mark.parametrize("clip, scale", [(1.0, 1.0), (0.0, 0.0), (0.05, 1.0)])
def test_kernel_matches_numpy(clip, scale):
    """The matrix kernel against float64 NumPy, on shapes around the 16-lane width and the part split, both
    orientations of the normalized factor, parameters small enough for the 1e-3 floor, and over the 32-leaf call
    split."""
    rng = np.random.default_rng(2)
    shapes = [(1, 1), (3, 17), (33, 15), (1000, 129), (129, 1000), (40, 50)] + [(2, 3)] * _kernels.LEAVES_PER_CALL
    g = [rng.normal(size=s).astype(np.float32) for s in shapes]
    p = [rng.normal(size=s).astype(np.float32) for s in shapes]
    p[5] *= 1e-5  # RMS below the floor
    row = [rng.uniform(0.5, 2, size=s[0]).astype(np.float32) for s in shapes]
    col = [rng.uniform(0.5, 2, size=s[1]).astype(np.float32) for s in shapes]
    b_first = (np.arange(len(shapes)) % 2).astype(np.float32)
    beta, eps, lr = 0.7, 1e-3, 0.1
    values = dict(beta=beta, eps=eps, clipping_threshold=clip, learning_rate=lr, parameter_scale=scale)
    scalars = jnp.asarray([values[k] for k in _kernels.ADAFACTOR_SCALARS], jnp.float32)
    got = jax.jit(_kernels.adafactor_matrices)(scalars, jnp.asarray(b_first), p, g, row, col)
    for k in range(len(shapes)):
        want = _numpy_matrix_step(p[k], g[k], row[k], col[k], b_first[k], beta, eps, clip, lr, scale)
        tol = 1e-5 * np.max(np.abs(want[0] - p[k])) + 2 * np.max(np.spacing(np.abs(p[k])))  # and p's rounding
        np.testing.assert_allclose(got[0][k], want[0], rtol=0, atol=tol, err_msg=str(shapes[k]))
        np.testing.assert_allclose(got[1][k], want[1], rtol=1e-6, err_msg=str(shapes[k]))
        np.testing.assert_allclose(got[2][k], want[2], rtol=1e-6, err_msg=str(shapes[k]))


def test_falls_back_to_update_then_apply(monkeypatch):
    """momentum, weight decay, float16 leaves or no kernels: exactly update + apply_updates."""
    params, grads = _tree(0), _tree(1)
    for kwargs in (dict(learning_rate=1e-2, momentum=0.9), dict(learning_rate=1e-2, weight_decay_rate=1e-3)):
        opt = gradax.fused.adafactor(**kwargs)
        assert "gradax_" not in jax.jit(opt.step).lower(params, opt.init(params), grads).as_text()
        got, want = run_steps(opt, params, grads, 2, fused=True), run_steps(opt, params, grads, 2, fused=False)
        assert jax.tree.all(jax.tree.map(lambda x, y: bool(jnp.array_equal(x, y)), got, want))
    half = jax.tree.map(lambda x: x.astype(jnp.float16), params)
    opt = gradax.fused.adafactor(1e-2)
    assert "gradax_" not in jax.jit(opt.step).lower(half, opt.init(half), half).as_text()
    monkeypatch.setattr(_kernels, "_status", _kernels.KernelStatus(False, "disabled in a test", ""))
    assert "gradax_" not in jax.jit(opt.step).lower(params, opt.init(params), grads).as_text()


def test_vmap_grad_and_inject_hyperparams():
    opt = gradax.fused.adafactor(1e-2, min_dim_size_to_factor=2)
    params = {"w": jnp.arange(12.0).reshape(4, 3) / 10, "b": jnp.ones(3)}
    batch = jax.tree.map(lambda x: jnp.stack([x, 2 * x]), params)
    grads = jax.tree.map(lambda x: jnp.sin(x) + 0.1, batch)
    got = jax.jit(jax.vmap(opt.step))(batch, jax.vmap(opt.init)(batch), grads)
    for i in range(2):
        one = jax.tree.map(lambda x, i=i: x[i], (batch, grads))
        u, _ = opt.update(one[1], opt.init(one[0]), one[0])
        want = gradax.apply_updates(one[0], u)
        for key in params:
            np.testing.assert_allclose(got[0][key][i], want[key], rtol=1e-5, atol=1e-7)

    def loss(p, fused):
        g = jax.tree.map(jnp.sin, p)
        new = opt.step(p, opt.init(p), g)[0] if fused else gradax.apply_updates(p, opt.update(g, opt.init(p), p)[0])
        return sum(jnp.sum(x**2) for x in jax.tree.leaves(new))

    np.testing.assert_allclose(
        jax.grad(loss)(params, True)["w"], jax.grad(loss)(params, False)["w"], rtol=1e-5, atol=1e-7
    )
    injected = gradax.inject_hyperparams(gradax.fused.adafactor)(learning_rate=1e-2)
    assert isinstance(injected, gradax.fused.FusedGradientTransformation)
    big, big_grads = _tree(0), _tree(1)
    got = run_steps(injected, big, big_grads, 2, fused=True)
    want = run_steps(injected, big, big_grads, 2, fused=False)
    assert "gradax_adafactor_matrices" in jax.jit(injected.step).lower(big, injected.init(big), big_grads).as_text()
    for key in big:
        x, y, p0 = (np.asarray(t[key]) for t in (got[0], want[0], big))
        assert np.max(np.abs(x - y)) <= 5e-5 * np.max(np.abs(y - p0)), key
