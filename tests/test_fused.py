"""gradax.fused: the one-pass AdamW step (C kernel through XLA's FFI on CPU) against update + apply_updates, its
fallbacks, and the contract checks of the battery applied to ``step`` (jit, vmap, grad, scan, cond, dtypes, pytree
shapes, sharding)."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradax
from gradax import _kernels
from tests._fused_common import check_usual_error, run_steps, update_apply

pytestmark = pytest.mark.xdist_group("fused")

HAS_CC = any(shutil.which(c) for c in ("cc", "gcc", "clang"))
SCHED = gradax.warmup_cosine_decay_schedule(0.0, 1e-2, 3, 100, end_value=1e-4)


def _tree(seed, shapes=((33,), (7, 5), (300, 257), ())):
    rng = np.random.default_rng(seed)
    return {f"l{i}": jnp.asarray(rng.normal(size=s), jnp.float32) for i, s in enumerate(shapes)}


def _reference_opt(kwargs):
    kwargs = dict(kwargs)
    clip = kwargs.pop("max_grad_norm", None)
    opt = gradax.adamw(**kwargs)
    return opt if clip is None else gradax.chain(gradax.clip_by_global_norm(clip), opt)


def _run(opt, params, grads, steps, fused):
    return run_steps(opt, params, grads, steps, fused)


def _assert_close(a, b, rtol=2e-6, atol=2e-7):
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for (path, x), y in zip(jax.tree_util.tree_leaves_with_path(a), jax.tree.leaves(b), strict=True):
        assert x.dtype == y.dtype and x.shape == y.shape, jax.tree_util.keystr(path)
        np.testing.assert_allclose(
            np.asarray(x), np.asarray(y), rtol=rtol, atol=atol, err_msg=jax.tree_util.keystr(path)
        )


CONFIGS = {
    "plain": dict(learning_rate=1e-2, weight_decay=0.1),
    "nesterov_eps_root": dict(learning_rate=1e-2, weight_decay=0.1, nesterov=True, eps_root=1e-8),
    "no_decay": dict(learning_rate=1e-2, weight_decay=0.0),
    "mask_fn": dict(learning_rate=1e-2, weight_decay=0.1, mask=lambda p: jax.tree.map(lambda x: x.ndim > 1, p)),
    "mask_tree": dict(learning_rate=1e-2, weight_decay=0.1, mask={"l0": True, "l1": False, "l2": True, "l3": False}),
    "schedules_clip": dict(learning_rate=SCHED, weight_decay=lambda c: 0.1 * 0.9**c, max_grad_norm=5.0),
    "clip_inactive": dict(learning_rate=1e-2, max_grad_norm=1e6, b1=0.5, b2=0.9, eps=1e-6),
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_step_matches_update_then_apply(name):
    kwargs = CONFIGS[name]
    params, grads = _tree(0), _tree(1)
    got = _run(gradax.fused.adamw(**kwargs), params, grads, 4, fused=True)
    want = _run(_reference_opt(kwargs), params, grads, 4, fused=False)
    _assert_close(got, want, rtol=1e-5 if "max_grad_norm" in kwargs else 2e-6)
    # counts are exact, and update() is adamw's own
    assert [int(c) for c in jax.tree.leaves(got[1]) if c.dtype == jnp.int32] == [
        int(c) for c in jax.tree.leaves(want[1]) if c.dtype == jnp.int32
    ]


@pytest.mark.skipif(not HAS_CC, reason="no C compiler: the fused kernel is not built here")
def test_kernel_is_built_and_compiled_into_the_step():
    status = gradax.fused.kernel_status()
    assert status.available, status.reason
    assert Path(status.path).exists()
    opt = gradax.fused.adamw(1e-3, max_grad_norm=1.0)
    # leaves of one shape: JAX pairs donated buffers with results of one shape in order, so step's arguments come
    # in the order of its results (a (grads, state, params) order made XLA copy every leaf)
    params = {**_tree(0), "same0": jnp.ones((300, 257)), "same1": jnp.ones((300, 257))}
    state = opt.init(params)
    hlo = jax.jit(opt.step, donate_argnums=(0, 1)).lower(params, state, params).compile().as_text()
    assert 'custom_call_target="gradax_adamw_step"' in hlo
    # the clipping norm is clip_by_global_norm's own (XLA's float32 reduction), so that step is update + apply bit for bit
    assert 'custom_call_target="gradax_sum_squares"' not in hlo
    assert " copy(" not in hlo  # in place: params and moments alias the donated inputs
    assert "input_output_alias" in hlo


@pytest.mark.skipif(not HAS_CC, reason="no C compiler: the fused kernel is not built here")
@pytest.mark.parametrize("nesterov", [False, True])
def test_kernel_matches_its_jnp_math(nesterov):
    """The C kernel against the update rule in float32 NumPy (same operations, same order) on sizes around the
    vector width, the thread split (2**16 per thread) and the call split (LEAVES_PER_CALL), with and without decay."""
    rng = np.random.default_rng(3)
    sizes = [0, 1, 15, 17, 2**16 + 3, 2**17 + 31] + [5] * (_kernels.LEAVES_PER_CALL + 1)
    leaves = [[jnp.asarray(rng.normal(size=n), jnp.float32) for n in sizes] for _ in range(4)]
    leaves[3] = [jnp.abs(x) for x in leaves[3]]  # nu >= 0
    s = dict(b1=0.9, one_minus_b1=0.1, b2=0.99, one_minus_b2=0.01, c1=0.19, c1_next=0.271, c2=0.0199, eps=1e-8)
    s.update(eps_root=1e-9, neg_lr=-1e-2, grad_scale=0.7, nesterov=float(nesterov), divides=0.0, second_products=0.0)
    scalars = jnp.asarray([s[k] for k in _kernels.ADAMW_SCALARS], jnp.float32)
    wd = jnp.asarray([0.1 if i % 2 else 0.0 for i in range(len(sizes))], jnp.float32)
    got = jax.jit(_kernels.adamw_step)(scalars, wd, *leaves)
    f = {k: np.float32(v) for k, v in s.items()}
    want = [[], [], []]
    for i, (p, g, m, v) in enumerate(zip(*(map(np.asarray, x) for x in leaves), strict=True)):
        g = g * f["grad_scale"]
        m = f["one_minus_b1"] * g + f["b1"] * m
        v = f["one_minus_b2"] * (g * g) + f["b2"] * v
        mhat = f["b1"] * (m / f["c1_next"]) + f["one_minus_b1"] * (g / f["c1"]) if nesterov else m / f["c1"]
        u = mhat / (np.sqrt(v / f["c2"] + f["eps_root"]) + f["eps"])
        if float(wd[i]):
            u = u + np.float32(wd[i]) * p
        for out, x in zip(want, (p + u * f["neg_lr"], m, v), strict=True):
            out.append(x)
    _assert_close(tuple(got), tuple(want), rtol=1e-6, atol=1e-7)


def _bf16(tree):
    return jax.tree.map(lambda x: x.astype(jnp.bfloat16), tree)


BF16_CONFIGS = ["plain", "nesterov_eps_root", "mask_tree", "schedules_clip"]


@pytest.mark.parametrize("name", BF16_CONFIGS)
def test_bfloat16_step_matches_update_then_apply(name):
    """bfloat16 params and grads with float32 moments: the kernel rounds the update to bfloat16 where the chain
    does (after scale_by_adam, the decay, the learning rate, and the sum), so the params agree to the last bit but
    where a float32 moment differs in its last bit (XLA contracts some multiply-adds): at most one bfloat16 ulp,
    rarely."""
    kwargs = CONFIGS[name]
    params, grads = _bf16(_tree(0)), _bf16(_tree(1))
    opt = gradax.fused.adamw(**kwargs)
    step = jax.jit(opt.step)
    assert "gradax_adamw_step" in step.lower(grads, opt.init(params), params).as_text()
    got = _run(opt, params, grads, 4, fused=True)
    want = _run(_reference_opt(kwargs), params, grads, 4, fused=False)
    assert jax.tree.structure(got) == jax.tree.structure(want)
    for x, y in zip(jax.tree.leaves(got[0]), jax.tree.leaves(want[0]), strict=True):
        assert x.dtype == y.dtype == jnp.bfloat16
        x, y = np.asarray(x, np.float32), np.asarray(y, np.float32)
        np.testing.assert_allclose(x, y, rtol=2**-7, atol=1e-6)  # one bfloat16 ulp
        assert np.mean(x != y) < 0.05
    for x, y in zip(jax.tree.leaves(got[1]), jax.tree.leaves(want[1]), strict=True):
        assert x.dtype == y.dtype
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-5, atol=1e-9)  # float32 moments


_Q8 = gradax.Blockwise8bit(block_size=128, min_size=4096)


@pytest.mark.parametrize("kwargs", [{}, {"nesterov": True, "max_grad_norm": 5.0, "eps_root": 1e-9}])
def test_8bit_step_matches_update_then_apply(kwargs):
    """moments="8bit": the kernel decodes, updates and re-encodes the block-wise codes with scale_by_adam's
    arithmetic and stochastic rounding (same hash, same seeds), including the padded last block; small leaves stay
    dense (the float32 kernel). The codes agree exactly, the params and scales to float32 rounding."""
    rng = np.random.default_rng(0)
    shapes = [(300, 257), (5000,), (7,), (64, 64), (1, 4097)]
    params = {f"l{i}": jnp.asarray(rng.normal(size=s), jnp.float32) for i, s in enumerate(shapes)}
    grads = {
        f"l{i}": jnp.asarray(rng.normal(size=s) * 10 ** rng.uniform(-3, 0, size=s), jnp.float32)
        for i, s in enumerate(shapes)
    }
    opt = gradax.fused.adamw(1e-2, weight_decay=0.1, moments=_Q8, **kwargs)
    state = opt.init(params)
    hlo = jax.jit(opt.step, donate_argnums=(0, 1)).lower(params, state, grads).compile().as_text()
    assert 'custom_call_target="gradax_adamw8_step"' in hlo and 'custom_call_target="gradax_adamw_step"' in hlo
    assert " copy(" not in hlo
    got = _run(opt, params, grads, 3, fused=True)
    want = _run(opt, params, grads, 3, fused=False)
    assert jax.tree.structure(got) == jax.tree.structure(want)
    for (path, x), y in zip(jax.tree_util.tree_leaves_with_path(got), jax.tree.leaves(want), strict=True):
        assert x.dtype == y.dtype and x.shape == y.shape, jax.tree_util.keystr(path)
        if x.dtype == jnp.uint8:
            assert np.mean(np.asarray(x) != np.asarray(y)) < 1e-3, jax.tree_util.keystr(path)
        else:
            np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6, err_msg=jax.tree_util.keystr(path))


def test_falls_back_to_update_then_apply(monkeypatch):
    """float16 params, trees with a float16 leaf, or no kernels: exactly update + apply_updates."""
    opt = gradax.fused.adamw(1e-2, weight_decay=0.1)
    params = jax.tree.map(lambda x: x.astype(jnp.float16), _tree(0))
    grads = jax.tree.map(lambda x: x.astype(jnp.float16), _tree(1))
    got = _run(opt, params, grads, 2, fused=True)
    want = _run(opt, params, grads, 2, fused=False)
    _assert_close(got, want, rtol=0, atol=0)
    mixed = {**_tree(0), "h": jnp.ones(3, jnp.float16)}
    _assert_close(_run(opt, mixed, mixed, 2, fused=True), _run(opt, mixed, mixed, 2, fused=False), rtol=0, atol=0)
    monkeypatch.setattr(_kernels, "_status", _kernels.KernelStatus(False, "disabled in a test", ""))
    assert not gradax.fused.kernel_status().available
    hlo = jax.jit(lambda p, s, g: opt.step(p, s, g)).lower(_tree(0), opt.init(_tree(0)), _tree(1)).as_text()
    assert "gradax_adamw_step" not in hlo
    _assert_close(
        _run(opt, _tree(0), _tree(1), 2, fused=True), _run(opt, _tree(0), _tree(1), 2, fused=False), rtol=0, atol=0
    )


def test_unavailable_without_compiler(monkeypatch, tmp_path):
    monkeypatch.setattr(_kernels, "_status", None)
    monkeypatch.setattr(_kernels, "_compiler", lambda: None)
    status = _kernels.load()
    assert not status.available and "no C compiler" in status.reason
    monkeypatch.setattr(_kernels, "_status", None)
    monkeypatch.setenv("GRADAX_DISABLE_KERNELS", "1")
    assert "GRADAX_DISABLE_KERNELS" in _kernels.load().reason


def test_vmap_and_grad_of_step():
    """vmap (a batch of independent optimizers) and reverse-mode through the step use the jnp math."""
    opt = gradax.fused.adamw(1e-2, weight_decay=0.1, max_grad_norm=3.0)
    params = _tree(0, shapes=((6,), (3, 2)))
    batch = jax.tree.map(lambda x: jnp.stack([x, 2 * x, -x]), params)
    grads = jax.tree.map(lambda x: x * 0.5 + 0.1, batch)
    states = jax.vmap(opt.init)(batch)
    got = jax.jit(jax.vmap(opt.step))(batch, states, grads)
    for i in range(3):
        one = jax.tree.map(lambda x, i=i: x[i], (grads, states, batch))
        want = update_apply(opt, one[2], one[1], one[0])
        _assert_close(jax.tree.map(lambda x, i=i: x[i], got), want)

    def loss(p, fused):
        s = opt.init(p)
        g = jax.tree.map(lambda x: jnp.sin(x), p)
        new = opt.step(p, s, g)[0] if fused else gradax.apply_updates(p, opt.update(g, s, p)[0])
        return sum(jnp.sum(x**2) for x in jax.tree.leaves(new))

    _assert_close(jax.grad(loss)(params, True), jax.grad(loss)(params, False))


def test_scan_and_cond():
    opt = gradax.fused.adamw(SCHED, weight_decay=0.1)
    params, grads = _tree(0), _tree(1)

    def body(carry, k):
        p, s = carry
        g = jax.tree.map(lambda x: x * (1.0 + k), grads)
        p, s = jax.lax.cond(k % 2 == 0, lambda: opt.step(p, s, g), lambda: (p, s))
        return (p, s), None

    got = jax.jit(lambda p: jax.lax.scan(body, (p, opt.init(p)), jnp.arange(4.0))[0])(params)
    p, s = params, opt.init(params)
    for k in (0.0, 2.0):
        p, s = update_apply(opt, p, s, jax.tree.map(lambda x, k=k: x * (1.0 + k), grads))
    _assert_close(got, (p, s))


class Pair(NamedTuple):
    w: jax.Array
    b: jax.Array | None


def test_pytree_shapes():
    """None leaves, NamedTuples, Equinox modules, empty trees and scalars."""
    eqx = pytest.importorskip("equinox")
    opt = gradax.fused.adamw(1e-2, weight_decay=0.1, max_grad_norm=1.0)
    trees = [
        {"a": jnp.ones((3, 2)), "none": None, "pair": Pair(jnp.arange(4.0), None)},
        eqx.nn.Linear(3, 2, key=jax.random.key(0)),
        {},
        jnp.array(2.0),
    ]
    for params in trees:
        grads = jax.tree.map(lambda x: 0.5 * x + 1.0, params)
        got = jax.jit(opt.step)(params, opt.init(params), grads)
        want = update_apply(opt, params, opt.init(params), grads)
        _assert_close(got, want)


def test_wrong_grads_get_the_usual_error():
    check_usual_error(gradax.fused.adamw(1e-2))


def test_state_is_adamws_and_copies():
    import copy

    opt = gradax.fused.adamw(1e-2, weight_decay=0.1, max_grad_norm=1.0)
    params = _tree(0)
    state = opt.init(params)
    plain = gradax.chain(gradax.clip_by_global_norm(1.0), gradax.adamw(1e-2, weight_decay=0.1)).init(params)
    assert jax.tree.structure(state) == jax.tree.structure(plain)
    assert isinstance(opt, gradax.GradientTransformationExtraArgs)
    assert copy.copy(opt).step is opt.step
    # a copy with another update steps with that update
    replaced = opt._replace(update=gradax.sgd(1.0).update)
    new_params, _ = replaced.step(params, gradax.sgd(1.0).init(params), params)
    _assert_close(new_params, jax.tree.map(jnp.zeros_like, params))


SHARDING_SCRIPT = textwrap.dedent(
    """
    import json, jax, jax.numpy as jnp, numpy as np, gradax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    mesh = Mesh(np.array(jax.devices()[:4]), ("d",))
    sh = NamedSharding(mesh, P("d", None))
    rng = np.random.default_rng(0)
    params = {k: jax.device_put(jnp.asarray(rng.normal(size=(8, 4)), jnp.float32), sh) for k in "ab"}
    grads = jax.tree.map(lambda x: x * 0.3, params)
    opt = gradax.fused.adamw(1e-2, weight_decay=0.1, max_grad_norm=0.5)
    state = jax.jit(opt.init)(params)
    p1, s1 = jax.jit(opt.step)(params, state, grads)
    u, s2 = opt.update(grads, state, params)
    p2 = gradax.apply_updates(params, u)
    err = max(float(jnp.max(jnp.abs(a - b))) for a, b in zip(jax.tree.leaves((p1, s1)), jax.tree.leaves((p2, s2))))
    kept = all(x.sharding.is_equivalent_to(sh, 2) for x in jax.tree.leaves((p1, s1)) if x.shape == (8, 4))
    # inside shard_map the kernel runs on each device's block
    spec = lambda t: jax.tree.map(lambda x: P("d") if x.ndim else P(), t)
    local = jax.shard_map(lambda g, s, p: opt.step(p, s, g), mesh=mesh, in_specs=(spec(grads), spec(state),
                          spec(params)), out_specs=(spec(params), spec(state)), check_vma=False)
    hlo = jax.jit(local).lower(grads, state, params).as_text()
    print(json.dumps({"err": err, "kept": kept, "kernel_in_shard_map": "gradax_adamw_step" in hlo,
                      "kernels": gradax.fused.kernel_status().available}))
    """
)


def test_sharded_params_keep_their_sharding():
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4", JAX_PLATFORMS="cpu")
    proc = subprocess.run([sys.executable, "-c", SHARDING_SCRIPT], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    import json

    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["kept"] and report["err"] < 1e-6
    assert report["kernel_in_shard_map"] == report["kernels"]


def test_inject_hyperparams_keeps_the_fused_step():
    """inject_hyperparams(gradax.fused.adamw)(...) has a step equal to its update + apply_updates, and its state
    holds the learning rate like any injected optimizer."""
    opt = gradax.inject_hyperparams(gradax.fused.adamw)(learning_rate=SCHED, weight_decay=0.1, max_grad_norm=1.0)
    assert isinstance(opt, gradax.fused.FusedGradientTransformation)
    params, grads = _tree(0), _tree(1)
    got = _run(opt, params, grads, 3, fused=True)
    want = _run(opt, params, grads, 3, fused=False)
    _assert_close(got, want, rtol=1e-5)
    np.testing.assert_allclose(got[1].hyperparams["learning_rate"], SCHED(2), rtol=1e-6)
    assert not isinstance(
        gradax.inject_hyperparams(gradax.adamw)(learning_rate=0.1), gradax.fused.FusedGradientTransformation
    )


def test_cache_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("GRADAX_CACHE_DIR", str(tmp_path / "c"))
    assert _kernels._cache_dir() == tmp_path / "c"
    monkeypatch.delenv("GRADAX_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert _kernels._cache_dir() == tmp_path / "gradax"
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))  # cannot hold a cache: a temporary directory instead
    assert str(_kernels._cache_dir()).startswith(tempfile.gettempdir())


FLAT_SHAPES = ((33,), (7, 5), (300, 257), (), *[(3, 2)] * _kernels.FLAT_LEAVES_PER_CALL)  # over the call split


@pytest.mark.skipif(not HAS_CC, reason="no C compiler: the fused kernel is not built here")
@pytest.mark.parametrize("name", ["plain", "mask_fn", "schedules_clip"])
def test_flatten_step_matches_update_then_apply(name):
    """gradax.flatten(gradax.fused.adamw(...)): one flat vector per moment (flatten's own state), the params and
    grads left as leaves; every kernel call after the first starts inside the flat moments."""
    kwargs = {"plain": dict(learning_rate=1e-2, weight_decay=0.1, nesterov=True), **CONFIGS}[name]
    params, grads = _tree(0, FLAT_SHAPES), _tree(1, FLAT_SHAPES)
    opt = gradax.flatten(gradax.fused.adamw(**kwargs))
    state = opt.init(params)
    hlo = jax.jit(opt.step, donate_argnums=(0, 1)).lower(params, state, grads).compile().as_text()
    assert hlo.count('custom_call_target="gradax_adamw_flat_step"') == 2
    total = sum(int(np.prod(s)) for s in FLAT_SHAPES)
    assert not [x for x in hlo.splitlines() if " copy(" in x and "[] copy(" not in x]  # in place (scalars aside)
    assert not [x for x in hlo.splitlines() if "concatenate(" in x and f"f32[{total}]" in x]  # no flat params, grads
    got = _run(opt, params, grads, 3, fused=True)
    want = _run(gradax.flatten(_reference_opt(kwargs)), params, grads, 3, fused=False)
    _assert_close(got, want, rtol=1e-5 if "max_grad_norm" in kwargs else 2e-6)


@pytest.mark.skipif(not HAS_CC, reason="no C compiler: the fused kernel is not built here")
def test_flatten_step_falls_back_to_update_then_apply():
    """Leaves of two dtypes (flatten promotes them) or 8-bit moments: gradax.flatten's update + apply_updates."""
    mixed = {**_tree(0), "h": jnp.ones(3, jnp.bfloat16)}
    for opt, params in (
        (gradax.flatten(gradax.fused.adamw(1e-2, weight_decay=0.1)), mixed),
        (gradax.flatten(gradax.fused.adamw(1e-2, moments="8bit")), _tree(0)),
    ):
        assert "gradax_adamw" not in jax.jit(opt.step).lower(params, opt.init(params), params).as_text()
        _assert_close(_run(opt, params, params, 2, fused=True), _run(opt, params, params, 2, fused=False), 0, 0)
    check_usual_error(gradax.flatten(gradax.fused.adamw(1e-2)))


@pytest.mark.skipif(not HAS_CC, reason="no C compiler: the fused kernel is not built here")
def test_flatten_of_injected_fused_adamw_keeps_the_flat_step():
    """gradax.flatten(inject_hyperparams(gradax.fused.adamw)(...)) (what the CLI builds from "flatten(fused.adamw(...))")
    keeps the flat kernel, its hyperparameters stay in the state, and it agrees with update + apply_updates; a fused
    optimizer without a flat kernel (Adafactor) steps with flatten's update + apply_updates."""
    params, grads = _tree(0, FLAT_SHAPES), _tree(1, FLAT_SHAPES)
    opt = gradax.flatten(gradax.inject_hyperparams(gradax.fused.adamw)(learning_rate=1e-2, weight_decay=0.1))
    state = opt.init(params)
    hlo = jax.jit(opt.step, donate_argnums=(0, 1)).lower(params, state, grads).compile().as_text()
    assert hlo.count('custom_call_target="gradax_adamw_flat_step"') == 2
    got = _run(opt, params, grads, 2, fused=True)
    _assert_close(got, _run(opt, params, grads, 2, fused=False), rtol=2e-6)
    assert float(got[1].hyperparams["learning_rate"]) == pytest.approx(1e-2)
    lion = gradax.flatten(gradax.inject_hyperparams(gradax.fused.lion)(learning_rate=1e-3))
    assert "gradax_lion_flat_step" in jax.jit(lion.step).lower(params, lion.init(params), grads).as_text()
    other = gradax.flatten(gradax.inject_hyperparams(gradax.fused.adafactor)(learning_rate=1e-3))
    assert "gradax_" not in jax.jit(other.step).lower(params, other.init(params), grads).as_text()
    _assert_close(_run(other, params, grads, 1, fused=True), _run(other, params, grads, 1, fused=False), 0, 0)


_BITWISE = {
    "plain": dict(learning_rate=1e-2, weight_decay=0.1),
    "nesterov_schedule": dict(learning_rate=lambda c: 1e-2 / (1.0 + c), weight_decay=0.1, nesterov=True),
    "clip": dict(learning_rate=1e-2, weight_decay=0.1, max_grad_norm=1.0),
    "clip_nesterov": dict(learning_rate=1e-2, weight_decay=0.1, max_grad_norm=1.0, nesterov=True),
}


@pytest.mark.skipif(not HAS_CC, reason="no C compiler: the fused kernel is not built here")
@pytest.mark.parametrize("leaves", ["one", "several"])
@pytest.mark.parametrize("name", sorted(_BITWISE))
def test_float32_step_is_xla_bit_for_bit(name, leaves):
    """On float32 leaves the kernel makes XLA:CPU's roundings (docs/differences.md): the same params and state as
    update + apply_updates compiled by XLA, step after step, in a program of one leaf (reciprocals of the bias
    corrections) and of several (divisions), with and without clipping (which products XLA contracts)."""
    rng = np.random.default_rng(5)
    shapes = {"a": (40, 33)} if leaves == "one" else {"a": (40, 33), "b": (17,), "c": (3, 5)}
    params = {k: jnp.asarray(rng.normal(size=s), jnp.float32) for k, s in shapes.items()}
    opt = gradax.fused.adamw(**_BITWISE[name])
    fused = jax.jit(opt.step)
    xla = jax.jit(functools.partial(update_apply, opt))
    state = opt.init(params)
    for _ in range(3):
        grads = {k: jnp.asarray(rng.normal(size=s) + 0.3, jnp.float32) for k, s in shapes.items()}
        got, (params, state) = fused(params, state, grads), xla(params, state, grads)
        for x, y in zip(jax.tree.leaves(got), jax.tree.leaves((params, state)), strict=True):
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
