"""One workload measured: its steps in every library, the compile times over many leaves, L-BFGS to convergence."""

from __future__ import annotations

import gc
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

import gradax

from .columns import BYTES_PER_PARAM, COPY, DISPATCH, FUSED, FUSED_COLUMNS, FUSED_FLAT
from .report import fmt_t, ratio
from .timing import block, copy_reference, dispatch_floor, prepare_jax, summarize, time_jax, time_torch
from .trees import make_tree, many_shapes, n_params
from .workloads import Workload, clip_adamw, fused_clip_adamw, torch


def run_step_workload(wl: Workload, repeats: int, steps: int, hlo_dir: str | None) -> dict[str, Any]:
    params_np = make_tree(wl.shapes, wl.dtype, seed=0)
    grads_np = make_tree(wl.shapes, wl.dtype, seed=1)
    steps = max(wl.steps_multiple, steps - steps % wl.steps_multiple)
    runs: dict[str, Any] = {}
    compile_s: dict[str, float] = {}
    impls = [("gradax", gradax, None), ("optax", optax, None), *((n, gradax, f) for n, f in wl.extra.items())]
    state_bytes: dict[str, int] = {}
    for name, mod, make in impls:
        r = prepare_jax(wl, mod, params_np, grads_np, make)
        state_bytes[name] = sum(x.nbytes for x in jax.tree.leaves(r.state))
        compile_s[name] = r.compile_s
        if hlo_dir:
            os.makedirs(hlo_dir, exist_ok=True)
            with open(os.path.join(hlo_dir, f"{wl.name}.{name}.hlo.txt"), "w") as fh:
                fh.write(r.hlo)
        runs[name] = r
    if torch is not None and wl.torch_step is not None:
        tdtype = torch.bfloat16 if wl.dtype == jnp.bfloat16 else torch.float32
        tp = [torch.tensor(np.asarray(v, np.float32)).to(tdtype) for v in params_np.values()]
        tg = [torch.tensor(np.asarray(v, np.float32)).to(tdtype) for v in grads_np.values()]
        runs["torch"] = wl.torch_step(tp, tg)
    runs[DISPATCH] = dispatch_floor(runs["gradax"])
    runs[COPY] = copy_reference(n_params(wl.shapes) * 4)
    copy_bytes = int(runs[COPY].params.nbytes)
    # warm-up one batch each (first-call dispatch, allocator), then alternate
    for name, r in runs.items():
        time_jax(r, wl.steps_multiple) if name != "torch" else time_torch(r, wl.steps_multiple)
    times: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(repeats):
        for name, r in runs.items():
            times[name].append(time_jax(r, steps) if name != "torch" else time_torch(r, steps))
    n_arrays = len(jax.tree.leaves((runs["gradax"].params, runs["gradax"].state, runs["gradax"].grads)))
    del runs
    gc.collect()
    notes = list(wl.notes)
    floor = statistics.median(times[DISPATCH])
    copy_gbps = sorted(2 * copy_bytes / t / 1e9 for t in times[COPY])
    notes.append(
        f"copy reference timed in each repeat: {2 * copy_bytes / statistics.median(times[COPY]) / 1e9:.2f} GB/s "
        f"(median; {copy_gbps[0]:.2f}..{copy_gbps[-1]:.2f})"
    )
    notes.append(
        f"dispatch floor (a donated jitted identity taking the same {n_arrays} arrays): "
        f"{fmt_t(floor)}, {100 * floor / statistics.median(times['optax']):.0f}% of Optax's step"
    )
    if wl.extra:
        med = {k: statistics.median(v) for k, v in times.items()}
        for k in wl.extra:
            if k in FUSED_COLUMNS:  # their steps have a table of their own
                continue
            notes.append(
                f"step gradax / {k} = {ratio(med['gradax'], med[k])}, optimizer state gradax / {k} = "
                f"{state_bytes['gradax'] / state_bytes[k]:.3f} ({state_bytes['gradax'] / 1e6:.2f} MB vs "
                f"{state_bytes[k] / 1e6:.2f} MB; optax {state_bytes['optax'] / 1e6:.2f} MB)"
            )
    return {
        "kind": "step",
        "params": n_params(wl.shapes),
        "leaves": len(wl.shapes),
        "dtype": np.dtype(wl.dtype).name,
        "bytes_per_param": BYTES_PER_PARAM[wl.name],
        "steps_per_repeat": steps,
        "compile_s": compile_s,
        "step_s": {k: summarize(v) for k, v in times.items()},
        "copy_reference_bytes": copy_bytes,
        "state_bytes": state_bytes,
        "notes": notes,
    }


def run_compile_workload(leaf_counts: tuple[int, ...], repeats: int) -> dict[str, Any]:
    out = {}
    for n in leaf_counts:
        shapes = many_shapes(n, 16)
        params_np = make_tree(shapes, np.float32, 0)
        wl = Workload("compile", shapes, clip_adamw)
        # gradax.flatten(chain): the same optimizer on one flat buffer per dtype (opt-in; its state is flat too)
        flat = Workload("compile_flat", shapes, lambda o: o.flatten(clip_adamw(o)))
        fused = Workload("compile_fused", shapes, fused_clip_adamw)
        fused_flat = Workload("compile_fused_flat", shapes, lambda o: o.flatten(fused_clip_adamw(o)))
        impls = [("gradax", gradax, wl), ("optax", optax, wl), (FUSED, gradax, fused), (FUSED_FLAT, gradax, fused_flat)]
        if n <= 1000:  # flatten's concatenation of every leaf compiles no faster: skip the big trees
            impls.append(("gradax_flatten", gradax, flat))
        if n > 2000:  # the XLA steps of both libraries take minutes and over 23 GiB here: the fused ones only
            impls = [x for x in impls if x[0] in FUSED_COLUMNS]
        times: dict[str, list[float]] = {name: [] for name, _, _ in impls}
        for _ in range(max(1, min(repeats, 3))):
            for name, mod, w in impls:
                times[name].append(prepare_jax(w, mod, params_np, params_np).compile_s)
                gc.collect()
        out[str(n)] = {k: summarize(v) for k, v in times.items()}
    return {"kind": "compile", "compile_s": out}


def rosenbrock(x: jax.Array) -> jax.Array:
    return jnp.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)


def make_lbfgs_solver(mod: Any, dim: int, max_iter: int, tol: float) -> Callable:
    opt = mod.lbfgs()
    value_and_grad = mod.value_and_grad_from_state(rosenbrock)

    def solve(x0: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        def body(carry: Any) -> Any:
            x, s = carry
            value, grad = value_and_grad(x, state=s)
            u, s = opt.update(grad, s, x, value=value, grad=grad, value_fn=rosenbrock)
            return mod.apply_updates(x, u), s

        def cond(carry: Any) -> jax.Array:
            _, s = carry
            count = mod.tree_utils.tree_get(s, "count")
            g = mod.tree_utils.tree_get(s, "grad")
            err = jnp.sqrt(jnp.sum(g * g))
            return (count == 0) | ((count < max_iter) & (err >= tol))

        x, s = jax.lax.while_loop(cond, body, (x0, opt.init(x0)))
        return x, mod.tree_utils.tree_get(s, "count"), rosenbrock(x)

    return solve


def run_lbfgs(dims: tuple[int, ...], repeats: int) -> dict[str, Any]:
    import scipy.optimize

    out = {}
    tol, max_iter = 1e-4, 10_000
    for dim in dims:
        x0 = np.full((dim,), -1.2, np.float32)
        x0[1::2] = 1.0
        res: dict[str, Any] = {}
        solvers = {}
        for name, mod in (("gradax", gradax), ("optax", optax)):
            t = time.perf_counter()
            solvers[name] = jax.jit(make_lbfgs_solver(mod, dim, max_iter, tol)).lower(jnp.asarray(x0)).compile()
            res[name] = {"compile_s": time.perf_counter() - t, "times": []}

        def scipy_fg(x: np.ndarray) -> tuple[float, np.ndarray]:  # float64 NumPy objective, analytic gradient
            d = x[1:] - x[:-1] ** 2
            g = np.zeros_like(x)
            g[:-1] = -400.0 * x[:-1] * d - 2.0 * (1.0 - x[:-1])
            g[1:] += 200.0 * d
            return float(np.sum(100.0 * d**2 + (1.0 - x[:-1]) ** 2)), g

        res["scipy"] = {"compile_s": 0.0, "times": []}
        for _ in range(repeats):
            for name in ("gradax", "optax"):
                t = time.perf_counter()
                x, it, f = solvers[name](jnp.asarray(x0))
                block(x)
                res[name]["times"].append(time.perf_counter() - t)
                res[name].update(iterations=int(it), final_f=float(f))
            t = time.perf_counter()
            sp = scipy.optimize.minimize(
                scipy_fg, x0.astype(np.float64), jac=True, method="L-BFGS-B", options={"gtol": tol, "maxiter": max_iter}
            )
            res["scipy"]["times"].append(time.perf_counter() - t)
            res["scipy"].update(iterations=int(sp.nit), final_f=float(sp.fun))
        for v in res.values():
            v["time_s"] = summarize(v.pop("times"))
        out[str(dim)] = res
    return {"kind": "lbfgs", "tol": tol, "results": out}


# --------------------------------------------------------------------------------------------------------------
