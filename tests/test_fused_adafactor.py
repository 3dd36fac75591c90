"""gradax.fused.adafactor: the step on factored float32 matrices (XLA's reductions, then the element-wise update in
a C kernel through XLA's FFI on CPU) against update + apply_updates (bit for bit), the kernel against float64 NumPy,
the fallbacks and the contract checks of ``step`` (jit, vmap, grad, donation, inject_hyperparams)."""

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
    # an array learning rate, a constant of the program (folded by XLA into the final -1 without the parameter scale)
    "array_lr_no_scale": dict(learning_rate=jnp.asarray(3e-2), multiply_by_parameter_scale=False),
}


def _assert_bitwise(got, want):
    assert jax.tree.structure(got) == jax.tree.structure(want)
    for (path, x), y in zip(jax.tree_util.tree_leaves_with_path(got), jax.tree.leaves(want), strict=True):
        assert x.dtype == y.dtype and x.shape == y.shape, jax.tree_util.keystr(path)
        np.testing.assert_array_equal(x, y, err_msg=jax.tree_util.keystr(path))


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_step_matches_update_then_apply(name):
    """Params and state bit for bit those of update + apply_updates over three steps: the reductions are XLA's
    own (the same expressions in the step's program) and the kernel makes the final pass with XLA's roundings."""
    opt = gradax.fused.adafactor(**CONFIGS[name])
    params, grads = _tree(0), _tree(1)
    assert "gradax_adafactor_matrices" in jax.jit(opt.step).lower(params, opt.init(params), grads).as_text()
    _assert_bitwise(run_steps(opt, params, grads, 3, fused=True), run_steps(opt, params, grads, 3, fused=False))


def test_donated_step_is_in_place():
    opt = gradax.fused.adafactor(1e-2)
    params = {"a": jnp.ones((256, 128)), "b": jnp.ones((256, 128)), "c": jnp.ones((128, 512))}
    hlo = jax.jit(opt.step, donate_argnums=(0, 1)).lower(params, opt.init(params), params).compile().as_text()
    assert 'custom_call_target="gradax_adafactor_matrices"' in hlo
    # in place: no copy of a matrix (the scalars and placeholders may be copied)
    assert not [line for line in hlo.splitlines() if " copy(" in line and ("[256,128]" in line or "[128,512]" in line)]


def _numpy_update(p, g, a, b, scales):
    """The kernel's update in float64: ``p - g a b s1 s2 s3`` (``a`` per row, ``b`` per column)."""
    p, g, a, b = (x.astype(np.float64) for x in (p, g, a, b))
    return p - g * a[:, None] * b[None, :] * np.prod(np.asarray(scales, np.float64))


def test_kernel_matches_numpy():
    """The matrix kernel against float64 NumPy, on shapes around the vector width and the part split (rows cut
    between parts), both orientations of the normalized factor, scales of 1 and not, and over the 32-leaf call
    split; within float32 rounding of the few products."""
    rng = np.random.default_rng(2)
    shapes = [(1, 1), (3, 17), (33, 15), (1000, 129), (129, 1000), (40, 50)] + [(2, 3)] * _kernels.LEAVES_PER_CALL
    g = [rng.normal(size=s).astype(np.float32) for s in shapes]
    p = [rng.normal(size=s).astype(np.float32) for s in shapes]
    a = [rng.uniform(0.5, 2, size=s[0]).astype(np.float32) for s in shapes]
    b = [rng.uniform(0.5, 2, size=s[1]).astype(np.float32) for s in shapes]
    rows = []
    for k in range(len(shapes)):  # a leaf in three has no scalar factor (y_last), one in three only the last
        s1, s2, s3 = (1.0, 1.0, 1.0) if k % 3 == 0 else (1.0, 1.0, 0.1) if k % 3 == 1 else rng.uniform(0.01, 2, 3)
        rows.append(dict(b_first=k % 2, first_scale=s1, second_scale=s2, last_scale=s3, y_last=float(k % 3 == 0)))
    scalars = jnp.asarray([[r[name] for name in _kernels.ADAFACTOR_SCALARS] for r in rows], jnp.float32)
    got = jax.jit(_kernels.adafactor_matrices)(scalars, p, g, a, b)
    for k in range(len(shapes)):
        scales = np.asarray([rows[k][name] for name in ("first_scale", "second_scale", "last_scale")], np.float32)
        want = _numpy_update(p[k], g[k], a[k], b[k], scales)
        tol = 4e-7 * np.max(np.abs(want - p[k])) + np.max(np.spacing(np.abs(p[k])))  # and p's rounding
        np.testing.assert_allclose(got[k], want, rtol=0, atol=tol, err_msg=str(shapes[k]))


def test_falls_back_to_update_then_apply(monkeypatch):
    """momentum, weight decay, float16 leaves or no kernels: exactly update + apply_updates (whose second moment
    still comes from the factored-moments kernel where the kernels run, but not the fused final pass)."""
    params, grads = _tree(0), _tree(1)
    for kwargs in (dict(learning_rate=1e-2, momentum=0.9), dict(learning_rate=1e-2, weight_decay_rate=1e-3)):
        opt = gradax.fused.adafactor(**kwargs)
        assert "gradax_adafactor_matrices" not in jax.jit(opt.step).lower(params, opt.init(params), grads).as_text()
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
    _assert_bitwise(got, want)  # the learning rate a value of the state: not folded by XLA
