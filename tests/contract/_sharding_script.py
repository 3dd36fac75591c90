"""Run by tests/contract/test_battery.py::test_sharding in a subprocess with 8 host CPU devices.

For every registry entry: params of shape (8, 4) sharded over an 8-device mesh, jitted init and 2 jitted updates;
every state leaf with the params' shape must keep the params' sharding. Prints one JSON line
``{"checked": n, "failures": {id: reason}}``.
"""

from __future__ import annotations

import collections
import json

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

import gradax

from .registry import entries


def main():
    devices = np.array(jax.devices()[:8])
    assert devices.size == 8, f"need 8 devices, got {devices.size}"
    mesh = Mesh(devices, ("d",))
    sharding = NamedSharding(mesh, PartitionSpec("d", None))
    rng = np.random.default_rng(0)
    params = {
        "a": jax.device_put(jnp.asarray(rng.normal(size=(8, 4)) + 0.5, jnp.float32), sharding),
        "b": jax.device_put(jnp.asarray(rng.normal(size=(8, 4)) + 0.5, jnp.float32), sharding),
    }
    grads = [jax.tree.map(lambda x, k=k: x * (0.3 + 0.1 * k), params) for k in range(2)]
    failures = {}
    seen = collections.Counter()
    checked = 0
    for entry in entries():
        seen[entry.id] += 1
        eid = entry.id if seen[entry.id] == 1 else f"{entry.id}-{seen[entry.id]}"
        if "sharding" in entry.skip:
            continue
        try:
            tx = entry.build(gradax)

            def update(g, s, p, tx=tx, entry=entry):
                extra = dict(entry.extra_args(p, g, gradax)) if entry.extra_args is not None else {}
                u, s = tx.update(g, s, p if entry.needs_params else None, **extra)
                return u, s, gradax.apply_updates(p, u)

            state = jax.jit(tx.init)(params)
            step = jax.jit(update)
            p = params
            for g in grads:
                _, state, p = step(g, state, p)
            bad = [
                jax.tree_util.keystr(path)
                for path, leaf in jax.tree_util.tree_leaves_with_path(state)
                if hasattr(leaf, "sharding")
                and jnp.shape(leaf) == (8, 4)
                and not leaf.sharding.is_equivalent_to(sharding, 2)
            ]
            if bad:
                failures[eid] = "state leaves not sharded like params: " + ", ".join(bad)
            checked += 1
        except Exception as err:
            failures[eid] = f"{type(err).__name__}: {str(err)[:300]}"
    print(json.dumps({"checked": checked, "failures": failures}))


if __name__ == "__main__":
    main()
