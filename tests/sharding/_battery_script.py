"""Run by tests/sharding/test_battery_sharding.py in ONE subprocess with 8 host CPU devices, over the whole registry.

For every registry entry: params ``a`` (8, 4) sharded ``P("model", None)`` and ``b`` (4, 8) sharded
``P(None, "model")`` on a ``(data=2, model=4)`` mesh; ``gradax.sharding.state_shardings(..., zero_axis="data")``
must place the state; ``init`` and two updates jitted with those ``out_shardings`` must return them, every state
leaf of a param's shape must hold 1/8 of it per device, and params and state must match the unsharded run
(reductions change order under sharding: rtol 1e-5, atol 1e-6, or the entry's looser oracle tolerance).
Prints one JSON line ``{"checked": n, "identical": n, "failures": {id: reason}}``.
"""

from __future__ import annotations

import collections
import json

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

import gradax

from ..contract.registry import Entry, entries

# Shampoo's inverse roots of the gradient statistics (8 x 8 and 4 x 4 matrices of rank <= 4 here) come out
# differently once the matrices are partitioned: up to 1.8e-4 on params of size ~1, checked to 1e-3.
# SOAP's eigenbases are fixed where the statistics leave them free (null spaces, signs: see _soap._eigenbasis), so
# the sharded run follows the unsharded one to float32 rounding amplified by the preconditioner: 3.8e-5 at most here
# (on unit-size updates of scale_by_soap), ~1e-4 over 25 steps with 12 refreshes; checked to 1e-4.
LOOSE = {"contrib.scale_by_shampoo": 1e-3, "contrib.shampoo": 1e-3, "contrib.scale_by_soap": 1e-4, "contrib.soap": 1e-4}


def _params():
    rng = np.random.default_rng(0)
    return {
        "a": jnp.asarray(rng.normal(size=(8, 4)) + 0.5, jnp.float32),
        "b": jnp.asarray(rng.normal(size=(4, 8)) + 0.5, jnp.float32),
    }


def check(entry, params, param_shardings, grads):
    """One entry; returns (identical, failure reason or None)."""
    tx = entry.build(gradax)

    def step(p, s, g):
        extra = dict(entry.extra_args(p, g, gradax)) if entry.extra_args is not None else {}
        u, s = tx.update(g, s, p if entry.needs_params else None, **extra)
        return gradax.apply_updates(p, u), s

    @jax.jit
    def reference(p, gs):
        s = tx.init(p)
        for g in gs:
            p, s = step(p, s, g)
        return p, s

    shardings = gradax.sharding.state_shardings(tx, params, param_shardings, zero_axis="data")
    sharded_params = jax.device_put(params, param_shardings)
    state = jax.jit(tx.init, out_shardings=shardings)(sharded_params)
    jstep = jax.jit(step, out_shardings=(param_shardings, shardings))
    p = sharded_params
    for g in grads:
        p, state = jstep(p, state, jax.device_put(g, param_shardings))
    bad = []
    for (path, leaf), want in zip(jax.tree_util.tree_leaves_with_path(state), jax.tree.leaves(shardings)):
        if not leaf.sharding.is_equivalent_to(want, leaf.ndim):
            bad.append(f"{jax.tree_util.keystr(path)} has {leaf.sharding.spec}, asked {want.spec}")
        elif leaf.shape in ((8, 4), (4, 8)) and max(s.data.size for s in leaf.addressable_shards) != 4:
            bad.append(f"{jax.tree_util.keystr(path)} {leaf.shape} is not split 8 ways ({want.spec})")
    if bad:
        return False, "state placement: " + "; ".join(bad)
    want_p, want_s = reference(params, grads)
    got, want = (
        [np.asarray(jax.random.key_data(x) if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key) else x) for x in t]
        for t in (jax.tree.leaves((p, state)), jax.tree.leaves((want_p, want_s)))
    )
    identical = all(np.array_equal(x, y) for x, y in zip(got, want))
    rtol, atol = max(entry.rtol, 1e-5), max(entry.atol, 1e-6, LOOSE.get(entry.name, 0.0))
    for x, y in zip(got, want):
        if x.dtype.kind == "f" and not np.allclose(x, y, rtol=rtol, atol=atol, equal_nan=True):
            return identical, f"sharded run differs from the unsharded one: max |diff| {np.max(np.abs(x - y)):.3g}"
        if x.dtype.kind != "f" and not np.array_equal(x, y):
            return identical, "sharded run differs from the unsharded one in a non-float leaf"
    return identical, None


def main():
    devices = np.array(jax.devices()[:8])
    assert devices.size == 8, f"need 8 devices, got {devices.size}"
    mesh = jax.sharding.Mesh(devices.reshape(2, 4), ("data", "model"))
    param_shardings = {
        "a": NamedSharding(mesh, PartitionSpec("model", None)),
        "b": NamedSharding(mesh, PartitionSpec(None, "model")),
    }
    params = _params()
    grads = [jax.tree.map(lambda x, k=k: x * (0.3 + 0.1 * k) - 0.2, params) for k in range(2)]
    failures, seen = {}, collections.Counter()
    checked = identical = 0
    for entry in entries():
        seen[entry.id] += 1
        eid = entry.id if seen[entry.id] == 1 else f"{entry.id}-{seen[entry.id]}"
        if "sharding" in entry.skip:
            continue
        try:
            same, reason = check(entry, params, param_shardings, grads)
            identical += same
            if reason is not None:
                failures[eid] = reason
            checked += 1
        except Exception as err:
            failures[eid] = f"{type(err).__name__}: {str(err)[:300]}"
    # the check must fail for an optimizer whose state it cannot place: a moment kept outside any params-shaped tree
    canary = Entry(
        "canary",
        make=lambda lib: lib.GradientTransformation(
            lambda p: [jnp.zeros((8, 4))], lambda u, s, p=None: (u, [s[0] + u["a"]])
        ),
    )
    canary_caught = check(canary, params, param_shardings, grads)[1] is not None
    print(json.dumps({"checked": checked, "identical": identical, "failures": failures, "canary": canary_caught}))


if __name__ == "__main__":
    main()
