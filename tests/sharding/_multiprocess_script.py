"""Multi-process ZeRO-1 training with an Orbax checkpoint, run by tests/sharding/test_multiprocess.py.

``train PROCESS_ID PORT DIR``: one of 2 processes (4 CPU devices each, 8 in all, gloo collectives) trains a small
MLP for ``FIRST`` steps with params replicated and the optimizer state split over the 8 devices (ZeRO-1), then
saves params and state to the multi-process Orbax checkpoint ``DIR``.
``resume DEVICES DIR``: one process with ``DEVICES`` CPU devices restores the checkpoint onto its own mesh (the state
split over those devices), trains ``SECOND`` more steps and prints the params; with ``DEVICES=1`` it also prints an
uninterrupted ``FIRST + SECOND``-step run in the same process.
"""

from __future__ import annotations

import json
import sys

FIRST, SECOND = 3, 3


def _setup(devices: int, process_id: int | None = None, port: str | None = None):
    import jax

    jax.config.update("jax_platforms", "cpu")
    jax.config.update("jax_num_cpu_devices", devices)
    if process_id is not None:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(
            coordinator_address=f"127.0.0.1:{port}",
            num_processes=2,
            process_id=process_id,
            initialization_timeout=60,
        )
    return jax


def _problem():
    import jax.numpy as jnp
    import numpy as np

    import gradax

    rng = np.random.default_rng(0)
    x = rng.normal(size=(FIRST + SECOND, 16, 8)).astype(np.float32)
    y = np.sin(x.sum(-1)).astype(np.float32)
    params = {
        "w1": jnp.asarray(rng.normal(size=(8, 16)) * 0.3, jnp.float32),
        "b1": jnp.zeros((16,), jnp.float32),
        "w2": jnp.asarray(rng.normal(size=(16,)) * 0.3, jnp.float32),
    }
    opt = gradax.chain(gradax.clip_by_global_norm(1.0), gradax.adamw(1e-2, weight_decay=1e-2))
    return x, y, params, opt


def _trainer(jax, mesh, opt, params):
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    import gradax

    replicated = NamedSharding(mesh, P())
    param_shardings = jax.tree.map(lambda _: replicated, params)
    state_shardings = gradax.sharding.state_shardings(opt, params, param_shardings, zero_axis="data")
    batch = NamedSharding(mesh, P("data"))

    def loss(p, xb, yb):
        h = jnp.tanh(xb @ p["w1"] + p["b1"])
        return jnp.mean((h @ p["w2"] - yb) ** 2)

    @jax.jit
    def step(p, s, xb, yb):
        g = jax.grad(loss)(p, xb, yb)
        u, s = opt.update(g, s, p)
        return gradax.apply_updates(p, u), s

    step = jax.jit(step, out_shardings=(param_shardings, state_shardings))

    def put(a):
        return jax.make_array_from_callback(a.shape, batch, lambda idx: a[idx])

    return param_shardings, state_shardings, step, put


def _abstract(jax, tree, shardings):
    return jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), tree, shardings)


def train(process_id: int, port: str, path: str) -> None:
    jax = _setup(4, process_id, port)
    import orbax.checkpoint as ocp

    x, y, params, opt = _problem()
    mesh = jax.make_mesh((8,), ("data",))
    param_shardings, state_shardings, step, put = _trainer(jax, mesh, opt, params)
    p = jax.jit(lambda q: q, out_shardings=param_shardings)(params)
    s = jax.jit(opt.init, out_shardings=state_shardings)(p)
    for i in range(FIRST):
        p, s = step(p, s, put(x[i]), put(y[i]))
    mu = s[1][0].mu["w1"]
    local = sum(shard.data.nbytes for shard in mu.addressable_shards)
    ckpt = ocp.StandardCheckpointer()
    ckpt.save(path, {"params": p, "opt_state": s})
    ckpt.wait_until_finished()
    print(json.dumps({"process": process_id, "devices": jax.device_count(), "mu_w1_local_bytes": local}))
    jax.distributed.shutdown()


def resume(devices: int, path: str) -> None:
    jax = _setup(devices)
    import numpy as np
    import orbax.checkpoint as ocp

    x, y, params, opt = _problem()
    mesh = jax.make_mesh((devices,), ("data",))
    param_shardings, state_shardings, step, put = _trainer(jax, mesh, opt, params)
    target = {
        "params": _abstract(jax, params, param_shardings),
        "opt_state": _abstract(jax, jax.eval_shape(opt.init, params), state_shardings),
    }
    restored = ocp.StandardCheckpointer().restore(path, target)
    p, s = restored["params"], restored["opt_state"]
    placed = all(
        a.sharding.is_equivalent_to(b, a.ndim) for a, b in zip(jax.tree.leaves(s), jax.tree.leaves(state_shardings))
    )
    for i in range(FIRST, FIRST + SECOND):
        p, s = step(p, s, put(x[i]), put(y[i]))
    out = {"devices": devices, "placed": placed, "resumed": jax.tree.map(lambda a: np.asarray(a).tolist(), p)}
    if devices == 1:
        q = params
        r = opt.init(q)
        for i in range(FIRST + SECOND):
            q, r = step(q, r, x[i], y[i])
        out["uninterrupted"] = jax.tree.map(lambda a: np.asarray(a).tolist(), q)
    print(json.dumps(out))


if __name__ == "__main__":
    if sys.argv[1] == "train":
        train(int(sys.argv[2]), sys.argv[3], sys.argv[4])
    else:
        resume(int(sys.argv[2]), sys.argv[3])
