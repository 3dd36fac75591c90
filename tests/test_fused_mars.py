"""gradax.fused.mars: the MARS-AdamW step (C kernel through XLA's FFI on CPU: each leaf's norm, then the update)
against update + apply_updates (bit for bit in float32 where no leaf is clipped; within float32 rounding where the
norms, summed in another order, clip), its fallbacks, its refusal of the Lion variant, and the checks of
tests/test_fused.py applied to its ``step`` (vmap, grad, pytree shapes, inject_hyperparams)."""

from __future__ import annotations

import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradax
from gradax import _kernels
from tests._fused_common import check_usual_error, run_steps, update_apply

pytestmark = pytest.mark.xdist_group("fused")

HAS_CC = any(shutil.which(c) for c in ("cc", "gcc", "clang"))
needs_kernel = pytest.mark.skipif(not HAS_CC, reason="no C compiler: the fused kernel is not built here")
SCHED = gradax.warmup_cosine_decay_schedule(0.0, 1e-2, 3, 100, end_value=1e-4)
# IEEE corner cases: signed zeros, NaN, infinities, float32 subnormals (a leaf holding them has a NaN norm)
SPECIAL = [0.0, -0.0, np.nan, np.inf, -np.inf, 1e-40, -1e-40, 1e-45, 1.0, -1.0]


def _leaf(rng, shape, scale=1.0, special=False):
    x = np.asarray(rng.normal(size=shape) * scale, np.float32)
    if special and x.size > len(SPECIAL):
        x.reshape(-1)[: len(SPECIAL)] = SPECIAL
    return jnp.asarray(x)


def _tree(seed, shapes=((33,), (7, 5), (300, 257), (), (4,)), special=()):
    """Leaves ``l0``, ``l1``...; those named in ``special`` hold the IEEE corner cases."""
    rng = np.random.default_rng(seed)
    return {f"l{i}": _leaf(rng, s, special=f"l{i}" in special) for i, s in enumerate(shapes)}


def _with_state(opt, params, seed=2):
    """``opt.init(params)`` with random moments and previous gradient (zeros would hide half of the arithmetic)."""
    rng = np.random.default_rng(seed)
    state = opt.init(params)
    inner = state.inner_state if hasattr(state, "inner_state") else state
    mars = inner[0]
    mars = mars._replace(
        mu=jax.tree.map(lambda m: _leaf(rng, m.shape, 0.1), mars.mu),
        nu=jax.tree.map(lambda v: jnp.abs(_leaf(rng, v.shape, 0.1)), mars.nu),
        last_grad=jax.tree.map(lambda g: _leaf(rng, g.shape), mars.last_grad),
    )
    inner = (mars, *inner[1:])
    return state._replace(inner_state=inner) if hasattr(state, "inner_state") else inner


def _bits(x):
    x = np.asarray(x)
    return x.view(np.uint32) if x.dtype == np.float32 else x


def _assert_identical(a, b):
    """Equal trees, leaf for leaf and bit for bit (NaN payloads and signed zeros included)."""
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for (path, x), y in zip(jax.tree_util.tree_leaves_with_path(a), jax.tree.leaves(b), strict=True):
        assert x.dtype == y.dtype and x.shape == y.shape, jax.tree_util.keystr(path)
        np.testing.assert_array_equal(_bits(x), _bits(y), err_msg=jax.tree_util.keystr(path))


def _uses_kernel(opt, params, state, grads) -> bool:
    return "gradax_mars_step" in jax.jit(opt.step).lower(params, state, grads).as_text()


def _run(opt, params, grads, steps, fused, state):
    return run_steps(opt, params, grads, steps, fused, state=state, shrink=0.3)


CONFIGS = {
    "plain": dict(learning_rate=1e-2),
    "decay": dict(learning_rate=1e-2, weight_decay=0.1),
    "zero_decay_array": dict(learning_rate=1e-2, weight_decay=jnp.asarray(0.0)),  # decays by 0 (inf * 0 = NaN)
    "mask_tree": dict(learning_rate=1e-2, weight_decay=0.3, mask={f"l{i}": i % 2 == 0 for i in range(5)}),
    "schedules": dict(learning_rate=SCHED, weight_decay=lambda c: 0.1 * 0.9**c, b1=0.9, b2=0.95, gamma=0.1),
    "unclipped": dict(learning_rate=1e-2, max_norm=1e4, eps=1e-3),  # the norm stays below max_norm
}


def _assert_close(a, b):
    """Equal trees within float32 rounding: non-finite values in the same places, the others within 3e-6 relative
    or 1e-6 of the leaf's largest (a moment that cancels loses relative precision in both)."""
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for (path, x), y in zip(jax.tree_util.tree_leaves_with_path(a), jax.tree.leaves(b), strict=True):
        x, y = np.asarray(x), np.asarray(y)
        assert x.dtype == y.dtype and x.shape == y.shape, jax.tree_util.keystr(path)
        np.testing.assert_array_equal(np.isfinite(x), np.isfinite(y), err_msg=jax.tree_util.keystr(path))
        scale = float(np.abs(y[np.isfinite(y)]).max(initial=0.0))
        np.testing.assert_allclose(x, y, rtol=3e-6, atol=1e-6 * scale, err_msg=jax.tree_util.keystr(path))


@needs_kernel
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_step_matches_update_then_apply(name):
    """float32: the kernel makes XLA:CPU's element-wise roundings (its fused multiply-adds included); each leaf's
    norm is its own sum of the float32 squares, in float64, where update's is XLA's float32 reduction. So with NaN,
    infinities, signed zeros and subnormals in one leaf's params and another's grads (a NaN norm there), the params
    and state agree within float32 rounding over three steps, bit for bit where no leaf is clipped, and the kept
    gradient always bit for bit."""
    opt = gradax.fused.mars(**CONFIGS[name])
    params, grads = _tree(0, special=("l2",)), _tree(1, special=("l0",))
    state = _with_state(opt, params)
    assert _uses_kernel(opt, params, state, grads)
    got, want = _run(opt, params, grads, 3, True, state), _run(opt, params, grads, 3, False, state)
    (_assert_identical if name == "unclipped" else _assert_close)(got, want)
    assert int(got[1][0].count) == 3
    _assert_identical(got[1][0].last_grad, jax.tree.map(lambda g: g * (1.0 - 0.3 * 2), grads))


@needs_kernel
def test_norm_is_the_float64_sum_of_float32_squares():
    """One step from zero moments with b1 = b2 = 0 makes m' = c: the kernel's clipping factor is
    1 / max(1, sqrt(sum d^2) / C) with each square rounded to float32 and the sum correctly rounded (float64 here,
    then float32), on leaves in one group, in several groups and split into parts."""
    shapes = ((700, 1001), (300, 257), (5,), (1 << 20,), ())
    params, grads = _tree(0, shapes), _tree(1, shapes)
    opt = gradax.fused.mars(1e-3, b1=0.0, b2=0.0, gamma=0.0, max_norm=7.0)
    new_params, state = jax.jit(opt.step)(params, opt.init(params), grads)
    assert _uses_kernel(opt, params, opt.init(params), grads)
    for key, g in grads.items():
        g = np.asarray(g, np.float32)
        squares = (g * g).astype(np.float64)
        norm = np.float32(np.sqrt(np.float32(squares.sum()))) if g.size > 1 else np.abs(g)
        clip = np.float32(1) / np.maximum(np.float32(1), np.float32(norm) / np.float32(7.0))
        np.testing.assert_array_equal(np.asarray(state[0].mu[key]), g * clip, err_msg=key)


@needs_kernel
def test_kernel_is_compiled_into_the_step_in_place():
    """Donated params and state are updated in place: the kernel's results alias them, XLA copies nothing; 40
    leaves take two kernel calls."""
    opt = gradax.fused.mars(1e-3, weight_decay=0.1)
    params = _tree(0, shapes=[(4, 3)] * 40)
    hlo = jax.jit(opt.step, donate_argnums=(0, 1)).lower(params, opt.init(params), params).compile().as_text()
    assert hlo.count('custom_call_target="gradax_mars_step"') == 2
    assert not [x for x in hlo.splitlines() if " copy(" in x and "[] copy(" not in x]  # scalars aside
    assert "input_output_alias" in hlo


def test_xla_step_writes_last_grad_in_place():
    """update + apply_updates, donated: the kept gradient goes into last_grad's buffer without copying the old one
    aside (see ``contrib._mars.kept``), and the corrected gradient is never a temporary array of its own."""
    opt = gradax.contrib.mars(1e-3)
    params = {"w": jnp.ones((64, 32)), "b": jnp.ones(32)}
    hlo = jax.jit(lambda p, s, g: update_apply(opt, p, s, g), donate_argnums=(0, 1))
    text = hlo.lower(params, opt.init(params), params).compile().as_text()
    assert not [x for x in text.splitlines() if " copy(" in x and "[] copy(" not in x]


def test_falls_back_to_update_then_apply(monkeypatch):
    """bfloat16 params, a bfloat16 momentum, cautious weight decay, or no kernels: ``step`` is exactly update +
    apply_updates."""
    bf16 = jax.tree.map(lambda x: x.astype(jnp.bfloat16), _tree(0))
    cases = [
        (gradax.fused.mars(1e-2), bf16, jax.tree.map(lambda x: x.astype(jnp.bfloat16), _tree(1))),
        (gradax.fused.mars(1e-2, mu_dtype=jnp.bfloat16), _tree(0), _tree(1)),
        (gradax.fused.mars(1e-2, weight_decay=0.1, cautious_weight_decay=True), _tree(0), _tree(1)),
    ]
    for opt, params, grads in cases:
        state = opt.init(params)
        assert not _uses_kernel(opt, params, state, grads)
        _assert_identical(_run(opt, params, grads, 2, True, state), _run(opt, params, grads, 2, False, state))
    monkeypatch.setattr(_kernels, "_status", _kernels.KernelStatus(False, "disabled in a test", ""))
    opt = gradax.fused.mars(1e-2, weight_decay=0.1)
    state = opt.init(_tree(0))
    assert not _uses_kernel(opt, _tree(0), state, _tree(1))
    _assert_identical(_run(opt, _tree(0), _tree(1), 2, True, state), _run(opt, _tree(0), _tree(1), 2, False, state))


def test_lion_variant_is_refused():
    with pytest.raises(ValueError, match=r"fused.mars\(variant=...\) must be 'adamw'; got 'lion'. For MARS-Lion use"):
        gradax.fused.mars(1e-2, variant="lion")
    with pytest.raises(ValueError, match=r"scale_by_mars\(max_norm=...\) must be"):
        gradax.fused.mars(1e-2, max_norm=0.0)


def _close(a, b):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=2e-6, atol=2e-7)


def test_vmap_and_grad_of_step():
    """vmap (a batch of independent optimizers) and reverse-mode through the step use update + apply_updates."""
    opt = gradax.fused.mars(1e-2, weight_decay=0.1)
    params = _tree(0, shapes=((6,), (3, 2)))
    batch = jax.tree.map(lambda x: jnp.stack([x, 2 * x, -x]), params)
    grads = jax.tree.map(lambda x: x * 0.5 + 0.1, batch)
    states = jax.vmap(opt.init)(batch)
    got = jax.jit(jax.vmap(opt.step))(batch, states, grads)
    for i in range(3):
        one = jax.tree.map(lambda x, i=i: x[i], (batch, states, grads))
        _close(jax.tree.map(lambda x, i=i: x[i], got), update_apply(opt, *one))

    def loss(p, fused):
        s = opt.init(p)
        g = jax.tree.map(jnp.sin, p)
        new = opt.step(p, s, g)[0] if fused else gradax.apply_updates(p, opt.update(g, s, p)[0])
        return sum(jnp.sum(x**2) for x in jax.tree.leaves(new))

    _close(jax.grad(loss)(params, True), jax.grad(loss)(params, False))


def test_pytree_shapes_and_state():
    """None leaves, empty trees and scalars; the state is contrib.mars's."""
    opt = gradax.fused.mars(1e-2, weight_decay=0.1)
    for params in [{"a": jnp.ones((3, 2)), "none": None, "s": jnp.array(2.0)}, {}, jnp.array(2.0)]:
        grads = jax.tree.map(lambda x: 0.5 * x + 1.0, params)
        got = jax.jit(opt.step)(params, opt.init(params), grads)
        _assert_identical(got, jax.jit(lambda p, s, g: update_apply(opt, p, s, g))(params, opt.init(params), grads))
    params = _tree(0)
    plain = gradax.contrib.mars(1e-2, weight_decay=0.1)
    assert jax.tree.structure(opt.init(params)) == jax.tree.structure(plain.init(params))
    assert isinstance(opt, gradax.fused.FusedGradientTransformation)
    check_usual_error(opt)


@needs_kernel
def test_inject_hyperparams_keeps_the_fused_step():
    """inject_hyperparams(gradax.fused.mars)(...) has a step equal to its update + apply_updates (the
    hyperparameters are then arrays), within float32 rounding as above."""
    opt = gradax.inject_hyperparams(gradax.fused.mars)(learning_rate=SCHED, weight_decay=0.1, gamma=0.05)
    assert isinstance(opt, gradax.fused.FusedGradientTransformation)
    params, grads = _tree(0), _tree(1)
    state = _with_state(opt, params)
    assert _uses_kernel(opt, params, state, grads)
    got = _run(opt, params, grads, 3, True, state)
    _assert_close(got, _run(opt, params, grads, 3, False, state))
    np.testing.assert_allclose(got[1].hyperparams["learning_rate"], SCHED(2), rtol=1e-6)
