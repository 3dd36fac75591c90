"""Checkpoints move between Optax 0.2.8 and gradax: the same state tree (class and field names, order, shapes, dtypes)
for every registry entry with an Optax oracle, and Orbax checkpoints that restore across and train on identically.

The known differences are listed in ``KNOWN`` with their reasons (and in docs/differences.md, "Optimizer state
trees and checkpoints"); they must still differ, so the list cannot go stale.
"""

from __future__ import annotations

import collections

import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
import pytest

import gradax

from ..contract._helpers import simple_tree
from ..contract.registry import entries
from ._structure import describe, first_difference

KNOWN = {
    "monitor[custom]": "measurements have their final structure from init (Optax's grow at the first update)",
    "measure_with_ema[custom]": "measurements have their final structure from init (Optax's grow at the first update)",
    "polyak_sgd": "the chain of its two stateless parts is flat ((EmptyState, EmptyState)); Optax nests it in one "
    "more chain; no arrays, so checkpoints hold the same data",
}


def _oracle_entries():
    seen = collections.Counter()
    for entry in entries():
        seen[entry.id] += 1
        if entry.oracle:
            yield (entry.id if seen[entry.id] == 1 else f"{entry.id}-{seen[entry.id]}"), entry


def _float32_for_bfloat16(ours, theirs):
    """A float32 moment where Optax keeps bfloat16 (gradax's state dtype rule for bfloat16 params)."""
    (pa, wa), (pb, wb) = ours, theirs
    return pa == pb and wa.startswith("float32(") and wb.startswith("bfloat16(") and wa[7:] == wb[8:]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_state_tree_matches_optax_for_every_entry(dtype):
    params = simple_tree(jnp.dtype(dtype))
    differ, known_differ = {}, set()
    for eid, entry in _oracle_entries():
        if dtype not in entry.dtypes:
            continue
        ours = describe(jax.eval_shape(entry.build(gradax).init, params))
        theirs = describe(jax.eval_shape(entry.build(optax).init, params))
        if dtype == "bfloat16" and len(ours) == len(theirs):
            theirs = [a if _float32_for_bfloat16(a, b) else b for a, b in zip(ours, theirs)]
        found = first_difference(ours, theirs)
        if found is None:
            continue
        if eid in KNOWN:
            known_differ.add(eid)
        else:
            differ[eid] = found
    assert not differ, "state trees that differ from Optax 0.2.8's (path, gradax, optax):\n" + "\n".join(
        f"  {k}: {v}" for k, v in differ.items()
    )
    assert known_differ == set(KNOWN), f"listed as different but equal now: {set(KNOWN) - known_differ}"


def test_optax_dtype_policy_gives_optax_state_dtypes_for_every_entry():
    """Under ``gradax.state_dtype_policy("optax")`` the state of bfloat16 params has Optax's dtypes exactly (no
    float32 allowance), and one update keeps every dtype of the state (so the state can be a scan carry)."""
    params = simple_tree(jnp.bfloat16)
    grads = jax.tree.map(lambda p: (0.5 * p + 0.1).astype(p.dtype), params)
    differ, known_differ = {}, set()
    with gradax.state_dtype_policy("optax"):
        for eid, entry in _oracle_entries():
            if "bfloat16" not in entry.dtypes:
                continue
            opt = entry.build(gradax)
            ours = describe(jax.eval_shape(opt.init, params))
            found = first_difference(ours, describe(jax.eval_shape(entry.build(optax).init, params)))
            if found is not None and eid in KNOWN:
                known_differ.add(eid)
            elif found is not None:
                differ[eid] = found
            extra = entry.extra_args(params, grads, gradax) if entry.extra_args else {}
            after = jax.eval_shape(lambda g, s, p: opt.update(g, s, p, **extra)[1], grads, opt.init(params), params)
            changed = first_difference(describe(after), ours)
            if changed is not None:
                differ[f"{eid} (update changes the state)"] = changed
    assert not differ, "state trees that differ (path, gradax, optax / after update, at init):\n" + "\n".join(
        f"  {k}: {v}" for k, v in differ.items()
    )
    assert known_differ == set(KNOWN)


OPTIMIZERS = {
    "clip+adamw": lambda ox: ox.chain(ox.clip_by_global_norm(1.0), ox.adamw(1e-2, weight_decay=1e-2)),
    "inject(adamw)": lambda ox: ox.inject_hyperparams(ox.adamw)(learning_rate=ox.linear_schedule(1e-2, 1e-3, 6)),
    "multisteps(adam)": lambda ox: ox.MultiSteps(ox.adam(1e-2), every_k_schedule=2),
    "partition(adam, masked sgd)": lambda ox: ox.partition(
        {"a": ox.adam(1e-2), "s": ox.masked(ox.sgd(1e-2, momentum=0.9), {"w": True, "b": False, "s": True})},
        {"w": "a", "b": "s", "s": "s"},
    ),
    "adafactor": lambda ox: ox.adafactor(1e-2, min_dim_size_to_factor=2),
}


def _train(opt, params, state, start, steps):
    @jax.jit
    def step(p, s, k):
        g = jax.tree.map(lambda x: jnp.cos(x * (1.0 + 0.1 * k)), p)
        u, s = opt.update(g, s, p)
        return optax.apply_updates(p, u), s

    for k in range(start, start + steps):
        params, state = step(params, state, jnp.float32(k))
    return params, state


@pytest.mark.parametrize("name", list(OPTIMIZERS))
@pytest.mark.parametrize("direction", ["optax->gradax", "gradax->optax"])
def test_orbax_checkpoint_restores_across_and_training_continues(name, direction, tmp_path):
    writer_lib, reader_lib = (optax, gradax) if direction == "optax->gradax" else (gradax, optax)
    writer, reader = OPTIMIZERS[name](writer_lib), OPTIMIZERS[name](reader_lib)
    params = simple_tree()
    p, s = _train(writer, params, writer.init(params), 0, 3)
    ckpt = ocp.StandardCheckpointer()
    ckpt.save(tmp_path / "ckpt", {"params": p, "opt_state": s})
    ckpt.wait_until_finished()
    target = {"params": jax.eval_shape(lambda: p), "opt_state": jax.eval_shape(reader.init, params)}
    restored = ckpt.restore(tmp_path / "ckpt", target)
    assert jax.tree.structure(restored["opt_state"]) == jax.tree.structure(reader.init(params))
    got, _ = _train(reader, restored["params"], restored["opt_state"], 3, 3)
    want, _ = _train(writer, p, s, 3, 3)
    for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(got), jax.tree.leaves(want)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=jax.tree_util.keystr(path))
