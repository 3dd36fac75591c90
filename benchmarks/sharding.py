"""Replicated vs FSDP vs ZeRO-1 optimizer state: AdamW on the GPT-2-small-shaped tree over 8 devices.

    python -m benchmarks.sharding --size small        # 8 virtual CPU devices unless an accelerator has 8

Per placement: the state bytes each device holds (from the addressable shards), the median step time, the compile
time of the step and the bytes its collectives move per device (``gradax.sharding.collective_bytes``). The step is
``update`` + ``apply_updates`` with given gradients, jitted with the placement as ``out_shardings``.
"""

from __future__ import annotations

import os

if "--xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"

import argparse
import json
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import gradax
from benchmarks.suite.trees import SIZES, gpt2_shapes


def _fsdp_spec(shape, n):
    """Split a parameter's first dimension that divides by the axis size (its largest such dimension first)."""
    for i in sorted(range(len(shape)), key=lambda i: -shape[i]):
        if shape[i] % n == 0:
            return P(*([None] * i + ["data"]))
    return P()


def measure(name, opt, params, param_shardings, zero_axis, repeats, bucketed=False):
    """One placement; ``bucketed``: the params updated on each device's slice and gathered in buckets
    (``gradax.sharding.apply_updates_zero1``) instead of ``apply_updates``, which XLA gathers param by param."""
    shardings = gradax.sharding.state_shardings(opt, params, param_shardings, zero_axis=zero_axis)

    def step(p, s, g):
        u, s = opt.update(g, s, p)
        if bucketed:
            return gradax.sharding.apply_updates_zero1(p, u, param_shardings, zero_axis=zero_axis), s
        return gradax.apply_updates(p, u), s

    # fresh buffers (the step donates params and state; a device_put could share the caller's)
    p = jax.jit(lambda t: jax.tree.map(lambda x: x + 0, t), out_shardings=param_shardings)(params)
    g = jax.jit(lambda t: jax.tree.map(lambda x: x * 1e-3, t), out_shardings=param_shardings)(params)
    s = jax.jit(opt.init, out_shardings=shardings)(p)
    jstep = jax.jit(step, out_shardings=(param_shardings, shardings), donate_argnums=(0, 1))
    t0 = time.perf_counter()
    compiled = jstep.lower(p, s, g).compile()
    compile_s = time.perf_counter() - t0
    comm = gradax.sharding.collective_bytes(jstep, p, s, g)
    p, s = compiled(p, s, g)
    jax.block_until_ready(s)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        p, s = compiled(p, s, g)
        jax.block_until_ready(s)
        times.append(time.perf_counter() - t0)
    return {
        "placement": name,
        "state_bytes_per_device": gradax.sharding.bytes_per_device(s),
        "step_s": statistics.median(times),
        "compile_s": compile_s,
        "collective_bytes": comm["total"],
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=list(SIZES), default="tiny")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    args = parser.parse_args(argv)
    devices = np.array(jax.devices()[:8])
    mesh = jax.sharding.Mesh(devices, ("data",))
    n = devices.size
    shapes = gpt2_shapes(*SIZES[args.size]["gpt"])
    rng = np.random.default_rng(0)
    params = {k: jnp.asarray(rng.normal(size=s) * 0.02, jnp.float32) for k, s in shapes.items()}
    replicated = jax.tree.map(lambda _: NamedSharding(mesh, P()), params)
    fsdp = {k: NamedSharding(mesh, _fsdp_spec(s, n)) for k, s in shapes.items()}
    opt = gradax.adamw(1e-3, weight_decay=0.1)
    rows = [
        measure("replicated", opt, params, replicated, None, args.repeats),
        measure("FSDP", opt, params, fsdp, None, args.repeats),
        measure("ZeRO-1", opt, params, replicated, "data", args.repeats),
        measure("ZeRO-1, apply_updates_zero1", opt, params, replicated, "data", args.repeats, bucketed=True),
    ]
    base = rows[0]
    print(
        f"AdamW, GPT-2-shaped tree ({args.size}, {sum(x.size for x in params.values()):,} params), {n} devices "
        f"({jax.devices()[0].platform}, {os.cpu_count()} cores)"
    )
    print(
        "| placement | state bytes/device | vs replicated | step (ms) | vs replicated | compile (s) | vs replicated "
        "| collectives (bytes/device/step) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['placement']} | {r['state_bytes_per_device']:,} | "
            f"{r['state_bytes_per_device'] / base['state_bytes_per_device']:.3f} | {r['step_s'] * 1e3:.2f} | "
            f"{r['step_s'] / base['step_s']:.2f}x | {r['compile_s']:.2f} | {r['compile_s'] / base['compile_s']:.2f}x | "
            f"{r['collective_bytes']:,} |"
        )
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"size": args.size, "devices": n, "cores": os.cpu_count(), "rows": rows}, f, indent=1)
    return rows


if __name__ == "__main__":
    main()
