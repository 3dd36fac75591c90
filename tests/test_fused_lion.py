"""gradax.fused.lion: the one-pass Lion step (C kernel through XLA's FFI on CPU) against update + apply_updates, bit
for bit in float32 and bfloat16, its fallbacks, and the checks of tests/test_fused.py applied to its ``step``
(vmap, grad, pytree shapes, inject_hyperparams)."""

from __future__ import annotations

import shutil
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradax
from gradax import _kernels
from gradax._kernels import LION_SCALARS, lion_step
from tests._fused_common import check_usual_error, run_steps, update_apply

pytestmark = pytest.mark.xdist_group("fused")

HAS_CC = any(shutil.which(c) for c in ("cc", "gcc", "clang"))
needs_kernel = pytest.mark.skipif(not HAS_CC, reason="no C compiler: the fused kernel is not built here")
SCHED = gradax.warmup_cosine_decay_schedule(0.0, 1e-2, 3, 100, end_value=1e-4)
BF16 = jnp.dtype(jnp.bfloat16)
# IEEE corner cases: signed zeros (sign(-0) = -0), NaN of both signs, infinities, float32 subnormals
SPECIAL = [0.0, -0.0, np.nan, -np.nan, np.inf, -np.inf, 1e-40, -1e-40, 1e-45, 3e-39, 1.0, -1.0]


def _leaf(rng, shape, dtype, scale=1.0):
    x = np.asarray(rng.normal(size=shape) * scale, np.float32)
    if x.size > len(SPECIAL):
        x.reshape(-1)[: len(SPECIAL)] = SPECIAL
    return jnp.asarray(x).astype(dtype)


def _tree(seed, dtype=jnp.float32, shapes=((33,), (7, 5), (300, 257), ())):
    rng = np.random.default_rng(seed)
    return {f"l{i}": _leaf(rng, s, dtype) for i, s in enumerate(shapes)}


def _with_momentum(opt, params, seed=2):
    """``opt.init(params)`` with a random momentum (the zero one would hide half of the arithmetic)."""
    rng = np.random.default_rng(seed)
    state = opt.init(params)
    inner = state.inner_state if hasattr(state, "inner_state") else state
    mu = jax.tree.map(lambda m: _leaf(rng, m.shape, m.dtype, 0.1), inner[0].mu)
    inner = (inner[0]._replace(mu=mu), *inner[1:])
    return state._replace(inner_state=inner) if hasattr(state, "inner_state") else inner


def _run(opt, params, grads, steps, fused, state=None):
    state = _with_momentum(opt, params) if state is None else state
    return run_steps(opt, params, grads, steps, fused, state=state, shrink=0.3)


def _bits(x):
    x = np.asarray(x)
    return x.view({2: np.uint16, 4: np.uint32}[x.dtype.itemsize]) if x.dtype.kind == "f" or x.dtype == BF16 else x


def _assert_identical(a, b):
    """Equal trees, leaf for leaf and bit for bit (NaN payloads and signed zeros included)."""
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for (path, x), y in zip(jax.tree_util.tree_leaves_with_path(a), jax.tree.leaves(b), strict=True):
        assert x.dtype == y.dtype and x.shape == y.shape, jax.tree_util.keystr(path)
        np.testing.assert_array_equal(_bits(x), _bits(y), err_msg=jax.tree_util.keystr(path))


def _uses_kernel(opt, params, state, grads) -> bool:
    return "gradax_lion_step" in jax.jit(opt.step).lower(params, state, grads).as_text()


CONFIGS = {
    "plain": dict(learning_rate=1e-3, weight_decay=1e-2),
    "no_decay": dict(learning_rate=1e-2, weight_decay=0.0),
    "zero_decay_array": dict(learning_rate=1e-2, weight_decay=jnp.asarray(0.0)),  # decays by 0 (inf * 0 = NaN)
    "mask_fn": dict(learning_rate=1e-2, weight_decay=0.3, mask=lambda p: jax.tree.map(lambda x: x.ndim > 1, p)),
    "mask_tree": dict(learning_rate=1e-2, weight_decay=0.3, mask={"l0": True, "l1": False, "l2": True, "l3": False}),
    "schedules": dict(learning_rate=SCHED, weight_decay=lambda c: 0.1 * 0.9**c, b1=0.5, b2=0.9),
}


@needs_kernel
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_step_matches_update_then_apply_bit_for_bit(name):
    """float32: the kernel makes XLA:CPU's roundings (its fused multiply-adds included), so every bit agrees, with
    NaN, infinities, signed zeros and subnormals in the params, grads and momentum."""
    opt = gradax.fused.lion(**CONFIGS[name])
    params, grads = _tree(0), _tree(1)
    assert _uses_kernel(opt, params, opt.init(params), grads)
    got = _run(opt, params, grads, 3, fused=True)
    want = _run(opt, params, grads, 3, fused=False)
    _assert_identical(got, want)
    assert int(got[1][0].count) == 3


@needs_kernel
@pytest.mark.parametrize("mu_dtype", [None, jnp.bfloat16])
@pytest.mark.parametrize("name", ["plain", "mask_tree", "schedules"])
def test_bfloat16_step_matches_update_then_apply_bit_for_bit(name, mu_dtype):
    """bfloat16 params and grads, with lion's default float32 momentum or a bfloat16 one: the kernel rounds to
    bfloat16 where the chain materializes a bfloat16 array (the update after the decay and after the learning rate,
    the params, a bfloat16 momentum), and XLA:CPU keeps no excess precision there: every bit agrees."""
    opt = gradax.fused.lion(**CONFIGS[name], mu_dtype=mu_dtype)
    params, grads = _tree(0, jnp.bfloat16), _tree(1, jnp.bfloat16)
    state = _with_momentum(opt, params)
    assert state[0].mu["l2"].dtype == (jnp.float32 if mu_dtype is None else BF16)
    assert _uses_kernel(opt, params, state, grads)
    _assert_identical(_run(opt, params, grads, 3, True, state), _run(opt, params, grads, 3, False, state))


@needs_kernel
def test_mixed_float32_and_bfloat16_leaves():
    """Each leaf has its own kind: float32 leaves beside bfloat16 ones go through the same kernel calls."""
    opt = gradax.fused.lion(1e-2, weight_decay=0.1)
    params = {**_tree(0), "h": _tree(3, jnp.bfloat16)}
    grads = {**_tree(1), "h": _tree(4, jnp.bfloat16)}
    assert _uses_kernel(opt, params, opt.init(params), grads)
    _assert_identical(_run(opt, params, grads, 2, fused=True), _run(opt, params, grads, 2, fused=False))


@needs_kernel
@pytest.mark.parametrize("kind", ["float32", "bfloat16", "bfloat16_mu"])
def test_kernel_matches_update_then_apply_per_leaf(kind):
    """The kernel called directly (lion_step) against lion's update + apply_updates in jnp, on sizes around the
    vector widths, the thread split (2**15 per part) and the call split (LEAVES_PER_CALL), decayed or not."""
    rng = np.random.default_rng(3)
    p_dtype = jnp.float32 if kind == "float32" else BF16
    m_dtype = BF16 if kind == "bfloat16_mu" else jnp.float32
    sizes = [0, 1, 7, 15, 16, 17, 31, 33, 2**16 + 3, 2**17 + 31] + [5] * (_kernels.LEAVES_PER_CALL + 1)
    params = [_leaf(rng, n, p_dtype) for n in sizes]
    grads = [_leaf(rng, n, p_dtype) for n in sizes]
    mu = [_leaf(rng, n, m_dtype, 0.1) for n in sizes]
    decayed = [i % 2 == 1 for i in range(len(sizes))]
    s = dict(b1=0.9, one_minus_b1=np.float32(1) - np.float32(0.9), b2=0.99, one_minus_b2=np.float32(1) - 0.99)
    s.update(weight_decay=0.1, neg_lr=-1e-2)
    scalars = jnp.asarray([s[k] for k in LION_SCALARS], jnp.float32)
    got = jax.jit(lion_step)(scalars, jnp.asarray(decayed, jnp.float32), params, grads, mu)

    opt = gradax.lion(1e-2, 0.9, 0.99, m_dtype, weight_decay=0.1, mask=decayed)
    state = opt.init(params)
    state = (state[0]._replace(mu=mu), *state[1:])

    def reference(p, s, g):
        u, s = opt.update(g, s, p)
        return gradax.apply_updates(p, u), s[0].mu

    _assert_identical(got, jax.jit(reference)(params, state, grads))


@needs_kernel
def test_kernel_is_compiled_into_the_step_in_place():
    """Donated params and momentum are updated in place: the kernel's results alias them, XLA copies nothing; 40
    leaves take two kernel calls."""
    opt = gradax.fused.lion(1e-3, weight_decay=0.1)
    params = _tree(0, shapes=[(4, 3)] * 40)
    state = opt.init(params)
    hlo = jax.jit(opt.step, donate_argnums=(0, 1)).lower(params, state, params).compile().as_text()
    assert hlo.count('custom_call_target="gradax_lion_step"') == 2
    assert " copy(" not in hlo
    assert "input_output_alias" in hlo


def test_falls_back_to_update_then_apply(monkeypatch):
    """8-bit moments, float16 params, grads of another dtype than the params, a float16 momentum, or no kernels:
    ``step`` is exactly update + apply_updates."""
    q8 = gradax.Blockwise8bit(block_size=128, min_size=4096)
    cases = [
        (gradax.fused.lion(1e-2, moments=q8), _tree(0), _tree(1)),
        (gradax.fused.lion(1e-2), _tree(0, jnp.float16), _tree(1, jnp.float16)),
        (gradax.fused.lion(1e-2), _tree(0, jnp.bfloat16), _tree(1)),
        (gradax.fused.lion(1e-2, mu_dtype=jnp.float16), _tree(0), _tree(1)),
    ]
    for opt, params, grads in cases:
        state = opt.init(params)
        assert not _uses_kernel(opt, params, state, grads)
        _assert_identical(_run(opt, params, grads, 2, True, state), _run(opt, params, grads, 2, False, state))
    monkeypatch.setattr(_kernels, "_status", _kernels.KernelStatus(False, "disabled in a test", ""))
    opt = gradax.fused.lion(1e-2, weight_decay=0.1)
    assert not _uses_kernel(opt, _tree(0), opt.init(_tree(0)), _tree(1))
    _assert_identical(_run(opt, _tree(0), _tree(1), 2, fused=True), _run(opt, _tree(0), _tree(1), 2, fused=False))


def _close(a, b):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=2e-6, atol=2e-7)


def test_vmap_and_grad_of_step():
    """vmap (a batch of independent optimizers) and reverse-mode through the step use update + apply_updates."""
    opt = gradax.fused.lion(1e-2, weight_decay=0.1)
    params = _tree(0, shapes=((6,), (3, 2)))
    params = jax.tree.map(lambda x: jnp.nan_to_num(x, posinf=2.0, neginf=-2.0), params)
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


class Pair(NamedTuple):
    w: jax.Array
    b: jax.Array | None


def test_pytree_shapes():
    """None leaves, NamedTuples, empty trees and scalars."""
    opt = gradax.fused.lion(1e-2, weight_decay=0.1)
    for params in [{"a": jnp.ones((3, 2)), "none": None, "pair": Pair(jnp.arange(4.0), None)}, {}, jnp.array(2.0)]:
        grads = jax.tree.map(lambda x: 0.5 * x + 1.0, params)
        got = jax.jit(opt.step)(params, opt.init(params), grads)
        _assert_identical(got, jax.jit(lambda p, s, g: update_apply(opt, p, s, g))(params, opt.init(params), grads))


def test_wrong_grads_get_the_usual_error():
    check_usual_error(gradax.fused.lion(1e-2))


def test_state_is_lions():
    opt = gradax.fused.lion(1e-2, weight_decay=0.1, mask=lambda p: jax.tree.map(lambda x: x.ndim > 1, p))
    params = _tree(0)
    plain = gradax.lion(1e-2, weight_decay=0.1, mask=lambda p: jax.tree.map(lambda x: x.ndim > 1, p))
    assert jax.tree.structure(opt.init(params)) == jax.tree.structure(plain.init(params))
    assert isinstance(opt, gradax.fused.FusedGradientTransformation)


@needs_kernel
def test_inject_hyperparams_keeps_the_fused_step():
    """inject_hyperparams(gradax.fused.lion)(...) has a step equal to its update + apply_updates bit for bit (the
    hyperparameters are then arrays), and its state holds the learning rate like any injected optimizer."""
    opt = gradax.inject_hyperparams(gradax.fused.lion)(learning_rate=SCHED, weight_decay=0.1, b1=0.8)
    assert isinstance(opt, gradax.fused.FusedGradientTransformation)
    params, grads = _tree(0), _tree(1)
    state = _with_momentum(opt, params)
    assert _uses_kernel(opt, params, state, grads)
    got = _run(opt, params, grads, 3, True, state)
    _assert_identical(got, _run(opt, params, grads, 3, False, state))
    np.testing.assert_allclose(got[1].hyperparams["learning_rate"], SCHED(2), rtol=1e-6)


FLAT_SHAPES = ((33,), (7, 5), (300, 257), (), *[(3, 2)] * _kernels.FLAT_LEAVES_PER_CALL)  # over the call split


@needs_kernel
@pytest.mark.parametrize(
    "name, dtype, mu_dtype",
    [("schedules", jnp.float32, None), ("plain", jnp.bfloat16, None), ("schedules", jnp.bfloat16, jnp.bfloat16)],
)  # fmt: skip
def test_flatten_step_matches_update_then_apply_bit_for_bit(name, dtype, mu_dtype):
    """gradax.flatten(gradax.fused.lion(...)): the momentum is flatten's one flat vector, updated in place slice by
    slice (every call after the first starts inside it), the params and grads left as leaves (no concatenation).
    Bit for bit, but for a float32 momentum of bfloat16 params: in flatten's program XLA:CPU contracts the other
    multiply-add of the momentum than per leaf (the kernel makes the per-leaf one), so that momentum agrees to its
    float32 rounding (the params still bit for bit)."""
    params, grads = _tree(0, dtype, FLAT_SHAPES), _tree(1, dtype, FLAT_SHAPES)
    opt = gradax.flatten(gradax.fused.lion(**CONFIGS[name], mu_dtype=mu_dtype))
    state = _with_momentum(opt, params)
    hlo = jax.jit(opt.step, donate_argnums=(0, 1)).lower(params, state, grads).compile().as_text()
    assert hlo.count('custom_call_target="gradax_lion_flat_step"') == 2
    total = sum(int(np.prod(s)) for s in FLAT_SHAPES)
    assert not [x for x in hlo.splitlines() if " copy(" in x and "[] copy(" not in x]  # in place (scalars aside)
    assert not [x for x in hlo.splitlines() if "concatenate(" in x and f"[{total}]" in x]  # no flat params, grads
    got, want = _run(opt, params, grads, 3, True, state), _run(opt, params, grads, 3, False, state)
    if dtype == jnp.bfloat16 and mu_dtype is None:
        np.testing.assert_allclose(got[1][0].mu, want[1][0].mu, rtol=1e-5, atol=1e-6)
        got, want = (got[0], got[1][0].count), (want[0], want[1][0].count)
    _assert_identical(got, want)


@needs_kernel
def test_flatten_step_falls_back_to_update_then_apply():
    """Leaves of two dtypes (flatten promotes them) or 8-bit momentum: gradax.flatten's update + apply_updates."""
    mixed = {**_tree(0), "h": jnp.ones(3, jnp.bfloat16)}
    for opt, params in (
        (gradax.flatten(gradax.fused.lion(1e-2, weight_decay=0.1)), mixed),
        (gradax.flatten(gradax.fused.lion(1e-2, moments="8bit")), _tree(0)),
    ):
        assert "gradax_lion" not in jax.jit(opt.step).lower(params, opt.init(params), params).as_text()
        _assert_identical(run_steps(opt, params, params, 2, True), run_steps(opt, params, params, 2, False))
    check_usual_error(gradax.flatten(gradax.fused.lion(1e-2)))
