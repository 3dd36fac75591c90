"""The contract battery: every registry entry through the shared checks (see tests/contract/registry/__init__.py).

Check names (an entry's ``skip`` maps one of them to a reason): contract, awkward_trees, abstract_init, vmap, scan,
cond, dtypes, inject, oracle, multisteps, masked, sharding.

Designed for speed: tiny trees. The dtype and oracle checks call one jitted step (update and apply_updates; for both
low-precision dtypes, or for gradax and Optax, in one program) once per step, so each check compiles a single step
however many steps run (XLA compile time grows with the unrolled program); the inject, multisteps and masked checks compile their transformations together in one program (there XLA
shares what is common and the compared results come from one program); ``vmap``/``scan``/``cond`` are only traced
and lowered (no XLA compile).
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradax

from ._helpers import (
    all_finite,
    assert_same_signature,
    assert_trees_close,
    assert_trees_equal,
    awkward_tree,
    python_scalar_tree,
    sds,
    signature,
    simple_tree,
)
from .registry import entries

try:  # the oracle (tests only)
    import optax
except ImportError:  # pragma: no cover
    optax = None

ENTRIES = entries()


def _ids(items):
    seen = collections.Counter()
    out = []
    for e in items:
        seen[e.id] += 1
        out.append(e.id if seen[e.id] == 1 else f"{e.id}-{seen[e.id]}")
    return out


IDS = _ids(ENTRIES)
_params = pytest.mark.parametrize("entry", ENTRIES, ids=IDS)

# Bit-identical except these, 1 ulp apart, whose recipes default to weight_decay=0: the plain chain skips a number 0
# (add_decayed_weights adds nothing), the injected one holds an array 0 and adds 0 * p, after which XLA folds the
# chain's constant scalings differently. Not inject_hyperparams: the plain recipe with weight_decay=jnp.float32(0)
# differs from weight_decay=0.0 in the same way.
INJECT_ULP = {
    "contrib.scion",
    "contrib.muon_clip",
    "contrib.kron",
    "contrib.shampoo",
}


def _skip(entry, *checks):
    for check in checks:
        if check in entry.skip:
            pytest.skip(f"{check}: {entry.skip[check]}")


def _update_fn(entry, tx, lib=gradax, unknown_kwarg=False):
    """update(g, s, p) with params and extra args as the entry needs them."""
    upd = lib.with_extra_args_support(tx).update if unknown_kwarg else tx.update

    def update(g, s, p):
        extra = dict(entry.extra_args(p, g, lib)) if entry.extra_args is not None else {}
        if unknown_kwarg:
            extra["some_unknown_kwarg"] = 1.0
        return upd(g, s, p if entry.needs_params else None, **extra)

    return update


def _grads(tree_fn, dtype, steps):
    return [jax.tree.map(lambda x: 0.5 * x, tree_fn(dtype, seed=k + 1)) for k in range(steps)]


def _jit_step(entry, tx, lib=gradax):
    """A jitted step (g, s, p) -> (updates, new state, new params): compiled once per tree signature and reused for
    every step (a state that changes structure on update only retraces)."""
    update = _update_fn(entry, tx, lib)

    @jax.jit
    def step(g, s, p):
        u, s = update(g, s, p)
        return u, s, lib.apply_updates(p, u)

    return step


def _unrolled(update, state, params, grads_seq, lib=gradax):
    """Steps unrolled inside one trace (for checks whose transformations XLA compiles together in one program)."""
    out = []
    for g in grads_seq:
        u, state = update(g, state, params)
        params = lib.apply_updates(params, u)
        out.append(u)
    return out, state, params


def _run(step, state, params, grads_seq):
    """Run a jitted step over ``grads_seq``; returns (list of updates, final state, final params)."""
    out = []
    for g in grads_seq:
        u, state, params = step(g, state, params)
        out.append(u)
    return out, state, params


# ---------------------------------------------------------------------------------------------------------------------
# a. the contract on the awkward-tree catalogue


@_params
def test_contract(entry):
    _skip(entry, "contract")
    tree_fn = simple_tree if "awkward_trees" in entry.skip else awkward_tree
    params = tree_fn(jnp.float32)
    grads_seq = _grads(tree_fn, jnp.float32, 3)
    tx = entry.build(gradax)
    state0 = tx.init(params)
    update = _update_fn(entry, tx, unknown_kwarg=True)

    traces = [0]

    @jax.jit
    def step(g, s, p):
        traces[0] += 1
        u, s = update(g, s, p)
        return u, s, gradax.apply_updates(p, u)

    state, p = state0, params
    for k, g in enumerate(grads_seq):
        u, state, p = step(g, state, p)
        assert_same_signature(state, state0, f"state after step {k + 1}")
        assert_same_signature(u, g, f"updates at step {k + 1}")
        assert_same_signature(p, params, f"params at step {k + 1}")
    assert traces[0] == 1, f"the jitted update retraced: {traces[0]} traces for 3 calls"

    if "abstract_init" not in entry.skip:
        abstract = tx.init(sds(params))
        assert_same_signature(abstract, state0, "abstract init vs concrete init")


# entries that differentiate an objective with respect to the params (the Hessian probes, the line searches' value
# and gradient at trial points): JAX (and so Optax) cannot for int leaves, so these get Python floats only
_GRAD_OF_PARAMS = {
    "contrib.hutchinson_estimator_diag_hessian",
    "contrib.sophia",
    "lbfgs",
    "scale_by_backtracking_linesearch",
    "scale_by_zoom_linesearch",
}


@_params
def test_python_scalar_leaves(entry):
    """Params and gradients with Python float and int leaves (Optax accepts them): init, update and apply_updates
    trace (no compile), the updates keep the gradients' structure, the state and params keep theirs."""
    _skip(entry, "contract")
    ints = entry.name not in _GRAD_OF_PARAMS
    params, grads = python_scalar_tree(0, ints), python_scalar_tree(1, ints)
    tx = entry.build(gradax)

    def run():
        state = tx.init(params)
        extra = dict(entry.extra_args(_arrays(params), _arrays(grads), gradax)) if entry.extra_args else {}
        u, new_state = tx.update(grads, state, params if entry.needs_params else None, **extra)
        return state, u, new_state, gradax.apply_updates(params, u)

    state, u, new_state, new_params = jax.eval_shape(run)
    assert jax.tree.structure(u) == jax.tree.structure(grads), "updates lost the gradients' structure"
    assert jax.tree.structure(new_params) == jax.tree.structure(params), "apply_updates changed the structure"
    assert jax.tree.structure(new_state) == jax.tree.structure(state), "update changed the state's structure"


def _arrays(tree):
    return jax.tree.map(jnp.asarray, tree)


def _trace_and_lower(fn, *args):
    """Trace ``fn`` once, lower the trace to StableHLO (no XLA compile) and return the output shapes/dtypes."""
    traced = jax.jit(fn).trace(*args)
    traced.lower()
    return traced.out_info


@_params
@pytest.mark.parametrize("check", ["cond", "vmap", "scan"])
def test_transforms(entry, check):
    _skip(entry, "contract", check)
    tree_fn = simple_tree if "awkward_trees" in entry.skip else awkward_tree
    params = tree_fn(jnp.float32)
    g = _grads(tree_fn, jnp.float32, 1)[0]
    tx = entry.build(gradax)
    state = tx.init(params)
    update = _update_fn(entry, tx)

    if check == "cond":

        def f(g, s, p):
            pred = jnp.sum(jnp.asarray(jax.tree.leaves(g)[0])) > 0

            def noop(g, s, p):
                return jax.tree.map(jnp.zeros_like, g), s

            return jax.lax.cond(pred, update, noop, g, s, p)

        out = _trace_and_lower(f, g, state, params)
        assert_same_signature(out[1], state, "state through lax.cond")
    elif check == "vmap":
        stack = lambda t: jax.tree.map(lambda x: jnp.stack([x, x + 1]), t)
        pb, gb = stack(params), stack(g)

        def f(gb, pb):
            sb = jax.vmap(tx.init)(pb)
            return jax.vmap(update)(gb, sb, pb)

        ub, _ = _trace_and_lower(f, gb, pb)
        assert_same_signature(ub, gb, "vmapped updates")
    else:

        def f(g, s, p):
            def body(carry, _):
                s, p = carry
                u, s = update(g, s, p)
                return (s, gradax.apply_updates(p, u)), u

            return jax.lax.scan(body, (s, p), None, length=3)

        (s_out, _), _ = _trace_and_lower(f, g, state, params)
        assert_same_signature(s_out, state, "state through lax.scan")


# ---------------------------------------------------------------------------------------------------------------------
# b. dtypes


def _dtype_cases(entry, names):
    return [n for n in names if n in entry.dtypes]


@_params
def test_low_precision_dtypes(entry):
    _skip(entry, "dtypes")
    names = _dtype_cases(entry, ("bfloat16", "float16"))
    if not names:
        pytest.skip("no low-precision dtype registered")
    tx = entry.build(gradax)
    update = _update_fn(entry, tx)
    params = {n: simple_tree(jnp.dtype(n)) for n in names}
    grads = {n: _grads(simple_tree, jnp.dtype(n), 2) for n in names}
    states0 = {n: tx.init(params[n]) for n in names}

    @jax.jit
    def step(g, s, p):  # one step of every dtype in one program, compiled once and called for each step
        out = {n: update(g[n], s[n], p[n]) for n in names}
        return (
            {n: out[n][0] for n in names},
            {n: out[n][1] for n in names},
            {n: gradax.apply_updates(p[n], out[n][0]) for n in names},
        )

    grads_seq = [{n: grads[n][k] for n in names} for k in range(2)]
    us, states, _ = _run(step, states0, params, grads_seq)
    for n in names:
        for u, g in zip(us, grads_seq):
            assert_same_signature(u[n], g[n], f"{n} updates")
        assert_same_signature(states[n], states0[n], f"{n} state")
        assert all_finite([u[n] for u in us]), f"{n}: non-finite updates"


@_params
def test_float64(entry):
    _skip(entry, "dtypes")
    if "float64" not in entry.dtypes:
        pytest.skip("float64 not registered")
    with jax.enable_x64(True):
        tx = entry.build(gradax)  # built under x64: its hyperparameters may become float64
        params = simple_tree(jnp.float64)
        grads = _grads(simple_tree, jnp.float64, 2)
        state0 = tx.init(params)
        us, state, _ = _run(_jit_step(entry, tx), state0, params, grads)
        for u, g in zip(us, grads):
            assert_same_signature(u, g, "float64 updates")
        assert_same_signature(state, state0, "float64 state")
        assert all_finite(us)


# ---------------------------------------------------------------------------------------------------------------------
# c. inject_hyperparams equivalence


@pytest.mark.parametrize(
    "entry",
    [e for e in ENTRIES if e.inject and e.make is None],
    ids=_ids([e for e in ENTRIES if e.inject and e.make is None]),
)
def test_inject_hyperparams(entry):
    _skip(entry, "inject")
    params = simple_tree()
    grads = _grads(simple_tree, jnp.float32, 3)
    plain = entry.factory(gradax)(**entry.kwargs)
    injected = gradax.inject_hyperparams(entry.factory(gradax))(**entry.kwargs)
    up, ui = _update_fn(entry, plain), _update_fn(entry, injected)

    @jax.jit
    def run(p, gs):
        a = _unrolled(up, plain.init(p), p, gs)[0]
        b = _unrolled(ui, injected.init(p), p, gs)[0]
        return a, b

    a, b = run(params, grads)
    if entry.name in INJECT_ULP:
        assert_trees_close(a, b, rtol=0, atol=1e-6, what="inject_hyperparams vs plain")
    else:
        assert_trees_equal(a, b, "inject_hyperparams vs plain")


# ---------------------------------------------------------------------------------------------------------------------
# d. Optax oracle

_ORACLE = [e for e in ENTRIES if e.oracle]


@pytest.mark.parametrize("entry", _ORACLE, ids=_ids(_ORACLE))
def test_oracle(entry):
    _skip(entry, "oracle")
    if optax is None:
        pytest.skip("optax is not installed")
    try:
        if entry.make is None:  # a `make` names the Optax side itself (gradax-only names map to Optax's recipe)
            entry.factory(optax)
        ref = entry.build(optax)
    except AttributeError as err:
        pytest.skip(f"optax 0.2.8 lacks it: {err}")
    tx = entry.build(gradax)
    params = simple_tree(with_none=True)
    steps = 10
    rng = np.random.default_rng(7)
    xs = jax.tree.map(lambda x: np.asarray(rng.normal(size=(steps, *x.shape)), np.float32), params)
    grads_seq = [jax.tree.map(lambda x, k=k: x[k], xs) for k in range(steps)]

    # one jitted step per library, called for each step (not lax.scan): some Optax 0.2.8 states change structure
    # on update (monitor) or shape (DoG's scalar params), which only retraces the step and which the comparison of
    # updates should not trip on
    up_ours, up_theirs = _update_fn(entry, tx), _update_fn(entry, ref, optax)

    @jax.jit
    def step(g, s, p):
        (uo, so), (ut, st) = up_ours(g, s[0], p[0]), up_theirs(g, s[1], p[1])
        return (uo, ut), (so, st), (gradax.apply_updates(p[0], uo), optax.apply_updates(p[1], ut))

    us = _run(step, (tx.init(params), ref.init(params)), (params, params), grads_seq)[0]
    ours, theirs = [u[0] for u in us], [u[1] for u in us]
    assert_trees_close(ours, theirs, rtol=entry.rtol, atol=entry.atol, what="gradax vs optax updates")


# ---------------------------------------------------------------------------------------------------------------------
# e. MultiSteps and masked


@_params
def test_multisteps(entry):
    _skip(entry, "multisteps")
    tx = entry.build(gradax)
    params = simple_tree()
    g1, g2 = _grads(simple_tree, jnp.float32, 2)
    mean = jax.tree.map(lambda a, b: (a + b) / 2, g1, g2)
    ms = gradax.MultiSteps(tx, 2)
    update, ms_update = _update_fn(entry, tx), _update_fn(entry, ms)

    @jax.jit
    def run(p):
        s = ms.init(p)
        _, s = ms_update(g1, s, p)
        u_ms, _ = ms_update(g2, s, p)
        u, _ = update(mean, tx.init(p), p)
        return u_ms, u

    u_ms, u = run(params)
    assert_trees_close(u_ms, u, rtol=1e-5, atol=1e-6, what="MultiSteps(tx, 2) vs tx on the mean gradient")


@_params
def test_masked(entry):
    _skip(entry, "masked")
    tx = entry.build(gradax)
    params = simple_tree()
    grads = _grads(simple_tree, jnp.float32, 2)
    t_mask = jax.tree.map(lambda _: True, params)
    f_mask = jax.tree.map(lambda _: False, params)
    m_true, m_false = gradax.masked(tx, t_mask), gradax.masked(tx, f_mask)
    ups = [_update_fn(entry, t) for t in (tx, m_true, m_false)]

    @jax.jit
    def run(p, gs):
        return [_unrolled(up, t.init(p), p, gs)[0] for up, t in zip(ups, (tx, m_true, m_false))]

    plain, all_true, all_false = run(params, grads)
    assert_trees_equal(all_true, plain, "masked(tx, all True) vs tx")
    assert_trees_equal(all_false, grads, "masked(tx, all False) vs identity")


# ---------------------------------------------------------------------------------------------------------------------
# f. sharded params (one subprocess for every entry)


def test_sharding():
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ)
    env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONPATH"] = str(root) + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run(
        [sys.executable, "-m", "tests.contract._sharding_script"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["checked"] > 0
    assert not report["failures"], "entries whose state lost the params' sharding or failed:\n" + "\n".join(
        f"  {k}: {v}" for k, v in report["failures"].items()
    )


def test_signature_helper():
    """The helpers compare what they claim to compare."""
    a = {"x": jnp.zeros(3), "n": None}
    assert signature(a) == signature(sds(a))
