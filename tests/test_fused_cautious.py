"""gradax.fused.cautious_adamw: the fused ``cautious(adamw)`` step (a counting pass and the AdamW pass in one C kernel
call through XLA's FFI on CPU) against ``cautious(adamw)``'s update + apply_updates, bit for bit in float32 (extreme
gradients included), its fallbacks, and the checks of tests/test_fused.py applied to its ``step`` (vmap, grad,
pytree shapes, inject_hyperparams)."""

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
# IEEE corner cases: signed zeros, NaN, infinities, float32 subnormals
SPECIAL = [0.0, -0.0, np.nan, np.inf, -np.inf, 1e-40, -1e-40, 1e-45, 1.0, -1.0]
# leaves of one element (XLA's code for them contracts v's other product), of fewer than 32 (the count has no rows)
# and one large enough for several threads
SHAPES = ((33,), (7, 5), (300, 257), (), (4,), (1,))


def _leaf(rng, shape, scale=1.0, special=False):
    x = np.asarray(rng.normal(size=shape) * scale, np.float32)
    if special and x.size > len(SPECIAL):
        x.reshape(-1)[: len(SPECIAL)] = SPECIAL
    return jnp.asarray(x)


def _tree(seed, shapes=SHAPES, special=()):
    """Leaves ``l0``, ``l1``...; those named in ``special`` hold the IEEE corner cases."""
    rng = np.random.default_rng(seed)
    return {f"l{i}": _leaf(rng, s, special=f"l{i}" in special) for i, s in enumerate(shapes)}


def _with_state(opt, params, seed=2):
    """``opt.init(params)`` with random moments (zeros would hide half of the arithmetic)."""
    rng = np.random.default_rng(seed)
    state = opt.init(params)
    inner = state.inner_state if hasattr(state, "inner_state") else state
    adam = inner[0]._replace(
        mu=jax.tree.map(lambda m: _leaf(rng, m.shape, 0.1), inner[0].mu),
        nu=jax.tree.map(lambda v: jnp.abs(_leaf(rng, v.shape, 0.1)), inner[0].nu),
    )
    inner = (adam, *inner[1:])
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
    return "gradax_cautious_adamw_step" in jax.jit(opt.step).lower(params, state, grads).as_text()


def _run(opt, params, grads, steps, fused, state):
    return run_steps(opt, params, grads, steps, fused, state=state, shrink=0.3)


CONFIGS = {
    "plain": dict(learning_rate=1e-2, weight_decay=0.0),
    "decay": dict(learning_rate=1e-2, weight_decay=0.1),
    "nesterov_eps_root": dict(learning_rate=1e-2, weight_decay=0.1, nesterov=True, eps_root=1e-8),
    "zero_decay_array": dict(learning_rate=1e-2, weight_decay=jnp.asarray(0.0)),  # decays by 0 (inf * 0 = NaN)
    "mask_tree": dict(learning_rate=1e-2, weight_decay=0.3, mask={f"l{i}": i % 2 == 0 for i in range(len(SHAPES))}),
    "schedules": dict(learning_rate=SCHED, weight_decay=lambda c: 0.1 * 0.9**c, b1=0.8, b2=0.95, eps=1e-3),
}


@needs_kernel
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_step_matches_update_then_apply_bit_for_bit(name):
    """float32: the kernel counts exactly what cautious counts and makes XLA:CPU's roundings (its fused
    multiply-adds included), so every bit of the params and state agrees over several steps, with NaN, infinities,
    signed zeros and subnormals in one leaf's params and another's grads."""
    opt = gradax.fused.cautious_adamw(**CONFIGS[name])
    params, grads = _tree(0, special=("l2",)), _tree(1, special=("l0",))
    state = _with_state(opt, params)
    assert _uses_kernel(opt, params, state, grads)
    got = _run(opt, params, grads, 3, True, state)
    _assert_identical(got, _run(opt, params, grads, 3, False, state))
    assert int(got[1][0].count) == 3


@needs_kernel
@pytest.mark.parametrize("nesterov", [False, True])
def test_one_leaf_matches_update_then_apply_bit_for_bit(nesterov):
    """A tree of one leaf: XLA multiplies by the reciprocals of the bias corrections there (it divides in a tree of
    several leaves); the kernel follows."""
    opt = gradax.fused.cautious_adamw(SCHED, weight_decay=0.1, nesterov=nesterov)
    params, grads = _leaf(np.random.default_rng(0), (300, 257)), _leaf(np.random.default_rng(1), (300, 257))
    state = _with_state(opt, params)
    assert _uses_kernel(opt, params, state, grads)
    _assert_identical(_run(opt, params, grads, 2, True, state), _run(opt, params, grads, 2, False, state))


@needs_kernel
def test_groups_of_leaves_match_update_then_apply_bit_for_bit():
    """The kernel counts and steps the leaves group by group (at most 2**19 elements, or one larger leaf alone, each
    counted in parts before any part of it is stepped, backward): leaves that share a group, a leaf larger than a
    group and one that fills its group exactly all match update + apply_updates, each leaf with its own rescale."""
    shapes = ((700, 1001), (300, 1000), (300, 257), (5,), (1 << 19,), (3, 7))
    opt = gradax.fused.cautious_adamw(1e-2, weight_decay=0.1)
    params, grads = _tree(0, shapes), _tree(1, shapes, special=("l1",))
    state = _with_state(opt, params)
    assert _uses_kernel(opt, params, state, grads)
    _assert_identical(_run(opt, params, grads, 2, True, state), _run(opt, params, grads, 2, False, state))


@needs_kernel
def test_where_xla_contracts_the_first_moment_otherwise():
    """Some vectors of more than 32,768 elements (700,001 here; not 700,002): XLA:CPU fuses update's first moment
    with the count's tail and contracts its other product there. The kernel keeps its one rounding, so the step
    differs from update + apply_updates by float32 rounding (docs/differences.md), not more."""
    shapes = ((700_001,), (5,))
    opt = gradax.fused.cautious_adamw(1e-2, weight_decay=0.1)
    params, grads = _tree(0, shapes), _tree(1, shapes)
    state = _with_state(opt, params)
    got, want = _run(opt, params, grads, 2, True, state), _run(opt, params, grads, 2, False, state)
    _close(got, want)
    mu = lambda out: np.asarray(out[1][0].mu["l0"]).view(np.uint32)
    assert (mu(got) != mu(want)).any()  # if XLA stops doing it, this test and the docs can say bit for bit


def _extreme(params):
    """Gradients on which caution decides differently: all zeros (nothing kept), 1e30 (squares overflow), float32
    subnormals, and ordinary values with one NaN and one infinity."""
    rng = np.random.default_rng(5)
    ordinary = jax.tree.map(lambda p: np.asarray(rng.normal(size=np.shape(p)), np.float32), params)

    def poison(x):
        x = x.copy()
        x.reshape(-1)[0] = np.nan
        x.reshape(-1)[-1] = np.inf if x.size > 1 else np.nan
        return x

    return {
        "zeros": jax.tree.map(jnp.zeros_like, params),
        "1e30": jax.tree.map(lambda p: jnp.full(np.shape(p), 1e30, jnp.float32), params),
        "subnormal": jax.tree.map(lambda p: jnp.full(np.shape(p), 1e-40, jnp.float32), params),
        "ordinary": jax.tree.map(jnp.asarray, ordinary),
        "nan_inf": jax.tree.map(lambda x: jnp.asarray(poison(x)), ordinary),
    }


@needs_kernel
def test_extreme_gradients_bit_for_bit():
    """Zeros, 1e30, subnormals, a NaN and an infinity: the fused step is the XLA path bit for bit (one compile of
    each, reused over the gradients)."""
    opt = gradax.fused.cautious_adamw(1e-2, weight_decay=0.1)
    params = _tree(0)
    state = _with_state(opt, params)
    fused = jax.jit(opt.step)
    xla = jax.jit(lambda p, s, g: update_apply(opt, p, s, g))
    for name, grads in _extreme(params).items():
        got = fused(params, state, grads)
        _assert_identical(got, xla(params, state, grads))
        if name == "zeros":  # u = -lr wd p disagrees with g = 0 everywhere: only the moments move
            _assert_identical(got[0], params)


@needs_kernel
def test_kernel_is_compiled_into_the_step_in_place():
    """Donated params and state are updated in place: the kernel's results alias them, XLA copies nothing; 40
    leaves take two kernel calls."""
    opt = gradax.fused.cautious_adamw(1e-3, weight_decay=0.1)
    params = _tree(0, shapes=[(4, 3)] * 40)
    hlo = jax.jit(opt.step, donate_argnums=(0, 1)).lower(params, opt.init(params), params).compile().as_text()
    assert hlo.count('custom_call_target="gradax_cautious_adamw_step"') == 2
    assert not [x for x in hlo.splitlines() if " copy(" in x and "[] copy(" not in x]  # scalars aside
    assert "input_output_alias" in hlo


def test_falls_back_to_update_then_apply(monkeypatch):
    """bfloat16 params, a bfloat16 first moment, 8-bit moments, cautious weight decay, or no kernels: ``step`` is
    exactly update + apply_updates."""
    shapes = ((33,), (70, 70), ())
    bf16 = lambda t: jax.tree.map(lambda x: x.astype(jnp.bfloat16), t)
    params, grads = _tree(0, shapes), _tree(1, shapes)
    cases = [
        (gradax.fused.cautious_adamw(1e-2), bf16(params), bf16(grads)),
        (gradax.fused.cautious_adamw(1e-2, mu_dtype=jnp.bfloat16), params, grads),
        (gradax.fused.cautious_adamw(1e-2, moments="8bit"), params, grads),
        (gradax.fused.cautious_adamw(1e-2, weight_decay=0.1, cautious_weight_decay=True), params, grads),
    ]
    for opt, p, g in cases:
        state = opt.init(p)
        assert not _uses_kernel(opt, p, state, g)
        _assert_identical(_run(opt, p, g, 2, True, state), _run(opt, p, g, 2, False, state))
    monkeypatch.setattr(_kernels, "_status", _kernels.KernelStatus(False, "disabled in a test", ""))
    opt = gradax.fused.cautious_adamw(1e-2, weight_decay=0.1)
    state = opt.init(params)
    assert not _uses_kernel(opt, params, state, grads)
    _assert_identical(_run(opt, params, grads, 2, True, state), _run(opt, params, grads, 2, False, state))


def test_refuses_what_adamw_refuses():
    with pytest.raises(ValueError, match=r"adamw\(b1=...\) must be"):
        gradax.fused.cautious_adamw(1e-2, b1=1.5)


def _close(a, b):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=2e-6, atol=2e-7)


def test_vmap_and_grad_of_step():
    """vmap (a batch of independent optimizers) and reverse-mode through the step use update + apply_updates."""
    opt = gradax.fused.cautious_adamw(1e-2, weight_decay=0.1)
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
    """None leaves, empty trees and scalars; the state is cautious(adamw)'s."""
    opt = gradax.fused.cautious_adamw(1e-2, weight_decay=0.1)
    for params in [{"a": jnp.ones((3, 2)), "none": None, "s": jnp.array(2.0)}, {}, jnp.array(2.0)]:
        grads = jax.tree.map(lambda x: 0.5 * x + 1.0, params)
        got = jax.jit(opt.step)(params, opt.init(params), grads)
        _assert_identical(got, jax.jit(lambda p, s, g: update_apply(opt, p, s, g))(params, opt.init(params), grads))
    params = _tree(0)
    plain = gradax.cautious(gradax.adamw(1e-2, weight_decay=0.1))
    assert jax.tree.structure(opt.init(params)) == jax.tree.structure(plain.init(params))
    assert isinstance(opt, gradax.fused.FusedGradientTransformation)
    check_usual_error(opt)


@needs_kernel
def test_inject_hyperparams_keeps_the_fused_step():
    """inject_hyperparams(gradax.fused.cautious_adamw)(...) has a step equal to its update + apply_updates bit for
    bit (the hyperparameters are then arrays)."""
    opt = gradax.inject_hyperparams(gradax.fused.cautious_adamw)(learning_rate=SCHED, weight_decay=0.1, b1=0.85)
    assert isinstance(opt, gradax.fused.FusedGradientTransformation)
    params, grads = _tree(0), _tree(1)
    state = _with_state(opt, params)
    assert _uses_kernel(opt, params, state, grads)
    got = _run(opt, params, grads, 3, True, state)
    _assert_identical(got, _run(opt, params, grads, 3, False, state))
    np.testing.assert_allclose(got[1].hyperparams["learning_rate"], SCHED(2), rtol=1e-6)
