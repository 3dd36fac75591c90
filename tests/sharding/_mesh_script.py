"""Run by tests/sharding/test_mesh.py in a subprocess with 8 host CPU devices: AdamW with ZeRO-1 and FSDP state,
Muon with FSDP-sharded matrices. Prints one JSON line of measurements."""

from __future__ import annotations

import hashlib
import json

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import gradax
from gradax.sharding import bytes_per_device, collective_bytes, state_shardings


def _params():
    rng = np.random.default_rng(0)
    shapes = {"emb": (64, 16), "w1": (16, 32), "b1": (32,), "w2": (32, 16)}
    return {k: jnp.asarray(rng.normal(size=s), jnp.float32) for k, s in shapes.items()}


def _grads(params, steps):
    return [jax.tree.map(lambda x, k=k: jnp.sin(x * (1.0 + k)) * 0.1, params) for k in range(steps)]


def run(opt, params, param_shardings, zero_axis, steps=3, bucket_bytes=None):
    """Sharded and unsharded runs of ``steps`` steps; what the sharded one holds, keeps and communicates.

    With ``bucket_bytes`` the sharded step applies the updates with ``gradax.sharding.apply_updates_zero1``."""

    def step(p, s, g):
        u, s = opt.update(g, s, p)
        return gradax.apply_updates(p, u), s

    def zero_step(p, s, g):
        u, s = opt.update(g, s, p)
        return gradax.sharding.apply_updates_zero1(
            p, u, param_shardings, zero_axis=zero_axis, bucket_bytes=bucket_bytes
        ), s

    shardings = state_shardings(opt, params, param_shardings, zero_axis=zero_axis)
    init = jax.jit(opt.init, out_shardings=shardings)
    jstep = jax.jit(step if bucket_bytes is None else zero_step, out_shardings=(param_shardings, shardings))
    p = jax.device_put(params, param_shardings)
    state = init(p)
    kept = True
    grads = _grads(params, steps)
    comm = collective_bytes(jstep, p, state, jax.device_put(grads[0], param_shardings))
    text = jstep.lower(p, state, jax.device_put(grads[0], param_shardings)).compile().as_text()
    for g in grads:
        p, state = jstep(p, state, jax.device_put(g, param_shardings))
        kept &= all(
            x.sharding.is_equivalent_to(s, x.ndim) for x, s in zip(jax.tree.leaves(state), jax.tree.leaves(shardings))
        )
    ref_p, ref_s = params, opt.init(params)
    ref_step = jax.jit(step)
    for g in grads:
        ref_p, ref_s = ref_step(ref_p, ref_s, g)
    got, want = jax.tree.leaves((p, state)), jax.tree.leaves((ref_p, ref_s))
    diff = max(
        float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)), initial=0))
        for a, b in zip(got, want)
    )
    scale = max(float(np.max(np.abs(np.asarray(b, np.float64)), initial=0)) for b in want)
    replicated = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(ref_s))
    scalars = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(ref_s) if x.ndim == 0)
    return {
        "identical": all(np.array_equal(np.asarray(a), np.asarray(b)) for a, b in zip(got, want)),
        "max_abs_diff": diff,
        "max_abs": scale,
        "kept": bool(kept),
        "state_bytes_per_device": bytes_per_device(state),
        "state_bytes_replicated": replicated,
        "scalar_bytes": scalars,
        "param_bytes": sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(params)),
        "collectives": comm,
        "all_gathers": text.count(" all-gather("),
        "digest": hashlib.sha256(b"".join(np.asarray(a).tobytes() for a in got)).hexdigest(),
    }


def nnx_recipe(mesh):
    """The README's Flax NNX recipe: nnx.Optimizer's state placed with ZeRO-1, kept through nnx.jit steps."""
    from flax import nnx

    model = nnx.Linear(16, 8, rngs=nnx.Rngs(0))
    tx = gradax.adamw(1e-3)
    optimizer = nnx.Optimizer(model, tx, wrt=nnx.Param)
    params = nnx.state(model, nnx.Param)
    shardings = state_shardings(tx, params, NamedSharding(mesh, P()), zero_axis="data")
    opt_state = nnx.state(optimizer.opt_state)  # the same leaves in the same order as gradax's state
    placed = jax.tree.unflatten(jax.tree.structure(opt_state), jax.tree.leaves(shardings))
    nnx.update(optimizer.opt_state, jax.device_put(opt_state, placed))

    @nnx.jit
    def train_step(model, optimizer, x, y):
        grads = nnx.grad(lambda m: jnp.mean((m(x) - y) ** 2))(model)
        optimizer.update(model, grads)

    for _ in range(2):
        train_step(model, optimizer, jnp.ones((4, 16)), jnp.zeros((4, 8)))
    state = nnx.state(optimizer.opt_state)
    return {
        "bytes_per_device": bytes_per_device(state),
        "bytes_replicated": sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(state)),
    }


def main():
    devices = np.array(jax.devices()[:8])
    assert devices.size == 8
    params = _params()
    data = jax.sharding.Mesh(devices, ("data",))
    grid = jax.sharding.Mesh(devices.reshape(2, 4), ("data", "model"))
    replicated = jax.tree.map(lambda _: NamedSharding(data, P()), params)
    fsdp = {k: NamedSharding(grid, P("model")) for k in params}
    adamw = gradax.adamw(1e-2, weight_decay=1e-2)
    muon = gradax.contrib.muon(1e-2)
    report = {
        "adamw_zero1": run(adamw, params, replicated, "data"),
        "adamw_fsdp": run(adamw, params, fsdp, None),
        "adamw_fsdp_zero1": run(adamw, params, fsdp, "data"),
        "adamw_zero1_buckets": run(adamw, params, replicated, "data", bucket_bytes=1 << 20),
        "adamw_zero1_per_leaf": run(adamw, params, replicated, "data", bucket_bytes=0),
        "adamw_zero1_explicit": run(adamw, params, NamedSharding(jax.make_mesh((8,), ("data",)), P()), "data"),
        "adamw_zero1_buckets_explicit": run(
            adamw, params, NamedSharding(jax.make_mesh((8,), ("data",)), P()), "data", bucket_bytes=1 << 20
        ),
        "adamw_fsdp_zero1_buckets": run(adamw, params, fsdp, "data", bucket_bytes=1 << 20),
        "muon_fsdp": run(muon, params, fsdp, None),
        "muon_fsdp_zero1": run(muon, params, fsdp, "data"),
        "nnx": nnx_recipe(data),
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
