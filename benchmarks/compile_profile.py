"""Compile-time profile of the clip+AdamW chain: trace, lower and XLA compile times and the process's peak memory.

Run one library per process (peak RSS is per process)::

    python -m benchmarks.compile_profile 2000 gradax
    python -m benchmarks.compile_profile 2000 optax
    python -m benchmarks.compile_profile 10000 fused        # gradax.fused.adamw(..., max_grad_norm=1).step
    python -m benchmarks.compile_profile 10000 fused_flat   # gradax.flatten(that).step
"""

from __future__ import annotations

import importlib
import resource
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks.suite.trees import make_tree, many_shapes
from benchmarks.suite.workloads import clip_adamw, fused_clip_adamw


def profile(n_leaves: int, library: str) -> dict[str, float]:
    params = jax.tree.map(jnp.asarray, make_tree(many_shapes(n_leaves, 16), np.float32, 0))
    if library in ("fused", "fused_flat"):
        mod = importlib.import_module("gradax")
        opt = fused_clip_adamw(mod)
        if library == "fused_flat":
            opt = mod.flatten(opt)
        step = opt.step
    else:
        mod = importlib.import_module(library)
        opt = clip_adamw(mod)

        def step(p, s, g):
            u, s = opt.update(g, s, p)
            return mod.apply_updates(p, u), s

    state = jax.eval_shape(opt.init, params)

    t0 = time.perf_counter()
    traced = jax.jit(step, donate_argnums=(0, 1)).trace(params, state, params)
    t1 = time.perf_counter()
    lowered = traced.lower()
    t2 = time.perf_counter()
    lowered.compile()
    t3 = time.perf_counter()
    return {
        "trace_s": t1 - t0,
        "lower_s": t2 - t1,
        "compile_s": t3 - t2,
        "total_s": t3 - t0,
        "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6,
    }


if __name__ == "__main__":
    n, lib = int(sys.argv[1]), sys.argv[2]
    r = profile(n, lib)
    print(f"{lib} {n} leaves: " + ", ".join(f"{k} {v:.2f}" for k, v in r.items()), flush=True)
