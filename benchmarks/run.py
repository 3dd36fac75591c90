"""Benchmark suite: the same workloads through gradax, Optax 0.2.8 and torch.optim, in one run.

Run ``python -m benchmarks.run [--size tiny|small|full] [--only NAME] [--repeats N] [--out FILE] [--hlo DIR]``.

What is measured, per workload and implementation:

* compile time: ``jax.jit(step, donate_argnums=(0, 1)).lower(params, state, grads).compile()`` on a fresh function
  (trace + lower + XLA compile), timed separately from steps;
* step time: the compiled step run ``--steps`` times back to back and divided (params and optimizer state donated,
  the gradient tree fixed); repeated ``--repeats`` times with the implementations alternating inside each repeat
  (gradax, optax, torch, gradax, optax, torch, ...) so that drifting machine load hits all of them alike. The
  median and the spread (min..max over repeats) are reported;
* achieved bandwidth: the bytes the step's math must move (documented per workload in ``BYTES_PER_PARAM`` below,
  the minimum a perfectly fused implementation would read and write) divided by the step time, as a fraction of the
  streaming bandwidth measured in the same run (``jax.jit(lambda x: x + 1.0)`` on a large float32 array: read N,
  write N bytes; a NumPy ``copyto`` is recorded next to it).

torch.optim runs only when ``torch`` is importable; where torch has no equivalent the cell is empty.
L-BFGS on Rosenbrock is timed to convergence (wall time of the whole jitted ``while_loop``, compile excluded) and
compared with ``scipy.optimize.minimize(method="L-BFGS-B")``.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import math
import os
import platform
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

import gradax

warnings.filterwarnings("ignore", message=".*donated buffers.*")
warnings.filterwarnings("ignore", message=".*Some donated.*")

try:  # torch is optional
    import torch

    torch.manual_seed(0)
except Exception:  # noqa: BLE001 - any import failure means "no torch column"
    torch = None

IMPLS = ("gradax", "optax", "torch")
DISPATCH = "dispatch_floor"  # a donated identity step over the same arrays (see dispatch_floor)
COPY = "copy_reference"  # a donated jitted ``x + 1`` timed in every repeat beside the steps (see copy_reference)
FUSED = "gradax_fused"  # the column of gradax.fused.adamw(...).step (update and apply in one kernel on CPU)
FUSED_FLAT = "gradax_fused_flat"  # gradax.flatten(gradax.fused.adamw(...)).step: the same kernel on flat moments
FUSED_COLUMNS = (FUSED, FUSED_FLAT)

# Bytes per parameter that each step's math must move at minimum (float32 unless stated), used for % of copy
# bandwidth. Reads + writes of the arrays a fully fused step touches once each:
BYTES_PER_PARAM = {
    # read p, g, m, v (16) + write p, m, v (12)
    "adamw_gpt2": 28,
    "adamw_many_leaves": 28,
    "lion_many_leaves": 20,
    # as AdamW plus one extra read of g for the global norm (a fused step needs the norm before it can scale)
    "clip_adamw_schedule": 32,
    # read p, g, momentum (12) + write p, momentum (8)
    "sgd_nesterov": 20,
    # read p, g, m (12) + write p, m (8)
    "lion": 20,
    # factored matrices: read g twice (row/col statistics, then the update: 8) + read p (4) + write p (4); the
    # factored statistics are O(rows + cols) and ignored; vectors (biases, LayerNorm) also read and write v (+8)
    "adafactor": 16,
    # as AdamW: the no-decay group skips the decay term but apply_updates still reads and writes p
    "partition_decay": 28,
    # amortised over k=4 micro-steps: 3 accumulating micro-steps (24 each, below), and the 4th reads g, acc, p, m, v
    # and writes p, m, v, acc (36); (3 * 24 + 36) / 4 = 27
    "multisteps_adamw": 27,
    # a micro-step that only accumulates, with apply_updates in the same jitted step: MultiSteps reads g and acc and
    # writes acc (12); apply_updates reads p and the update (a select of zero, fused) and writes p (12)
    "multisteps_micro": 24,
    # bf16 params and grads, float32 moments: read p (2), g (2), m (4), v (4) + write p (2), m (4), v (4)
    "adamw_bf16": 22,
    # gradax's 8-bit moments: read p, g (8), m, v codes (2) + write p (4), m, v codes (2); block scales ignored
    "adamw_8bit": 16,
}

# Workloads whose step time torch can run (name -> builder below).
DESCRIPTIONS = {
    "adamw_gpt2": "AdamW, GPT-2-small-shaped tree",
    "adamw_many_leaves": "AdamW, many small leaves",
    "lion_many_leaves": "Lion, many small leaves",
    "clip_adamw_schedule": "chain(clip_by_global_norm(1), adamw(warmup_cosine))",
    "sgd_nesterov": "SGD, Nesterov momentum 0.9",
    "lion": "Lion",
    "adafactor": "Adafactor",
    "partition_decay": "partition: decay / no-decay AdamW groups",
    "multisteps_adamw": "MultiSteps(adamw, 4), per micro-step",
    "multisteps_micro": "MultiSteps(adamw), a micro-step that only accumulates",
    "adamw_bf16": "AdamW, bf16 params and grads",
    "adamw_8bit": "AdamW, gradax 8-bit block-wise moments vs Optax float32",
    "compile_clip_adamw": "compile time only: clip+AdamW chain",
    "lbfgs_rosenbrock": "L-BFGS on Rosenbrock, time to converge",
}

SIZES = {
    # GPT-2 shape: (vocab, n_ctx, width, layers); many-leaves: (leaves, params per leaf); compile: leaf counts;
    # rosenbrock: dimensions
    "tiny": dict(gpt=(256, 32, 16, 1), many=(20, 100), compile=(10, 50), rosen=(10,), steps=4),
    "small": dict(gpt=(8192, 512, 256, 12), many=(1000, 1000), compile=(1000,), rosen=(10, 1000), steps=10),
    # an XLA compile of the chain at 10,000 leaves went past 23 GiB of RAM here (swapping): at 10,000 only the
    # gradax.fused columns run
    "full": dict(
        gpt=(50257, 1024, 768, 12), many=(3000, 3333), compile=(1000, 2000, 10000), rosen=(10, 1000), steps=10
    ),
}


# --------------------------------------------------------------------------------------------------------------
# parameter trees


def gpt2_shapes(vocab: int, n_ctx: int, d: int, layers: int) -> dict[str, tuple[int, ...]]:
    """Leaf shapes of GPT-2 (HF naming): 148 leaves and ~124M params at (50257, 1024, 768, 12)."""
    shapes = {"wte": (vocab, d), "wpe": (n_ctx, d), "ln_f.g": (d,), "ln_f.b": (d,)}
    for i in range(layers):
        p = f"h{i:02d}."
        shapes.update(
            {
                p + "ln_1.g": (d,),
                p + "ln_1.b": (d,),
                p + "attn.c_attn.w": (d, 3 * d),
                p + "attn.c_attn.b": (3 * d,),
                p + "attn.c_proj.w": (d, d),
                p + "attn.c_proj.b": (d,),
                p + "ln_2.g": (d,),
                p + "ln_2.b": (d,),
                p + "mlp.c_fc.w": (d, 4 * d),
                p + "mlp.c_fc.b": (4 * d,),
                p + "mlp.c_proj.w": (4 * d, d),
                p + "mlp.c_proj.b": (d,),
            }
        )
    return shapes


def many_shapes(n_leaves: int, per_leaf: int) -> dict[str, tuple[int, ...]]:
    return {f"p{i:05d}": (per_leaf,) for i in range(n_leaves)}


def make_tree(shapes: dict[str, tuple[int, ...]], dtype: Any, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {k: (0.02 * rng.standard_normal(s, dtype=np.float32)).astype(dtype) for k, s in shapes.items()}


def n_params(shapes: dict[str, tuple[int, ...]]) -> int:
    return sum(math.prod(s) for s in shapes.values())


def decay_mask(params: Any) -> Any:
    """Weight decay on matrices only (biases, LayerNorm gains excluded): the usual GPT-2 recipe."""
    return jax.tree.map(lambda p: jnp.ndim(p) >= 2, params)


def decay_labels(params: Any) -> Any:
    return jax.tree.map(lambda p: "decay" if jnp.ndim(p) >= 2 else "no_decay", params)


# --------------------------------------------------------------------------------------------------------------
# workloads


@dataclass
class Workload:
    name: str
    shapes: dict[str, tuple[int, ...]]
    make_opt: Callable[[Any], Any]  # (optax-like module) -> GradientTransformation
    dtype: Any = np.float32
    torch_step: Callable[[list, list], Callable[[], None]] | None = None  # (params, grads) -> step()
    steps_multiple: int = 1
    notes: list[str] = field(default_factory=list)
    # more gradax columns, timed like the others: name -> (gradax module) -> GradientTransformation
    extra: dict[str, Callable[[Any], Any]] = field(default_factory=dict)


def _torch_adamw(kind: str) -> Callable:
    """torch.optim equivalents; returns a builder (params, grads) -> step callable.

    AdamW and SGD use ``fused=True``, torch's fastest CPU implementation (measured on these machines: about 5x
    faster than ``foreach=True`` and the for-loop); Adafactor has no fused kernel and uses ``foreach=True``."""

    def build(params: list, grads: list) -> Callable[[], None]:
        for p, g in zip(params, grads):
            p.grad = g.clone()
        if kind == "adamw":
            opt = torch.optim.AdamW(params, lr=1e-3, weight_decay=1e-4, fused=True)
        elif kind == "sgd":
            opt = torch.optim.SGD(params, lr=1e-2, momentum=0.9, nesterov=True, fused=True)
        elif kind == "adafactor":
            opt = torch.optim.Adafactor(params, lr=1e-2, foreach=True)
        elif kind == "partition":
            dec = [p for p in params if p.ndim >= 2]
            nod = [p for p in params if p.ndim < 2]
            opt = torch.optim.AdamW(
                [{"params": dec, "weight_decay": 1e-4}, {"params": nod, "weight_decay": 0.0}], lr=1e-3, fused=True
            )
        elif kind == "clip":
            opt = torch.optim.AdamW(params, lr=1e-3, weight_decay=1e-4, fused=True)
            sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 100))

            def step() -> None:
                torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=True)
                opt.step()
                sched.step()

            return step
        elif kind == "accumulate":
            acc = [torch.zeros_like(p) for p in params]
            return lambda: torch._foreach_add_(acc, grads)
        elif kind == "multisteps":
            opt = torch.optim.AdamW(params, lr=1e-3, weight_decay=1e-4, fused=True)
            acc = [torch.zeros_like(p) for p in params]
            counter = [0]

            def step() -> None:  # accumulate into acc; every 4th call: average into .grad, step, zero acc
                torch._foreach_add_(acc, grads)
                counter[0] += 1
                if counter[0] % 4 == 0:
                    for p, a in zip(params, acc):
                        p.grad = a.div_(4)
                    opt.step()
                    acc[:] = [torch.zeros_like(p) for p in params]

            return step
        else:
            raise ValueError(kind)
        return opt.step

    return build


def clip_adamw(o: Any) -> Any:
    """``chain(clip_by_global_norm(1), adamw(warmup_cosine))`` of the optax-like module ``o``: the clip workloads."""
    sched = o.warmup_cosine_decay_schedule(0.0, 1e-3, 100, 10_000, end_value=1e-5)
    return o.chain(o.clip_by_global_norm(1.0), o.adamw(sched, weight_decay=1e-4))


def fused_clip_adamw(o: Any) -> Any:
    """The same optimizer as :func:`clip_adamw` as ``gradax.fused.adamw(..., max_grad_norm=1)``."""
    sched = o.warmup_cosine_decay_schedule(0.0, 1e-3, 100, 10_000, end_value=1e-5)
    return o.fused.adamw(sched, weight_decay=1e-4, max_grad_norm=1.0)


def build_workloads(size: str) -> list[Workload]:
    cfg = SIZES[size]
    gpt = gpt2_shapes(*cfg["gpt"])
    many = many_shapes(*cfg["many"])

    fused_adamw = {FUSED: lambda o: o.fused.adamw(1e-3, weight_decay=1e-4)}
    wl = [
        Workload(
            "adamw_gpt2",
            gpt,
            lambda o: o.adamw(1e-3, weight_decay=1e-4),
            torch_step=_torch_adamw("adamw"),
            extra=fused_adamw,
        ),
        Workload(
            "adamw_many_leaves",
            many,
            lambda o: o.adamw(1e-3, weight_decay=1e-4),
            torch_step=_torch_adamw("adamw"),
            extra={**fused_adamw, FUSED_FLAT: lambda o: o.flatten(o.fused.adamw(1e-3, weight_decay=1e-4))},
        ),
        Workload(
            "clip_adamw_schedule",
            gpt,
            clip_adamw,
            torch_step=_torch_adamw("clip"),
            extra={FUSED: fused_clip_adamw},
        ),
        Workload(
            "sgd_nesterov", gpt, lambda o: o.sgd(1e-2, momentum=0.9, nesterov=True), torch_step=_torch_adamw("sgd")
        ),
        Workload(
            "lion",
            gpt,
            lambda o: o.lion(1e-4, weight_decay=1e-4),
            extra={FUSED: lambda o: o.fused.lion(1e-4, weight_decay=1e-4)},
        ),
        Workload(
            "lion_many_leaves",
            many,
            lambda o: o.lion(1e-4, weight_decay=1e-4),
            extra={
                FUSED: lambda o: o.fused.lion(1e-4, weight_decay=1e-4),
                FUSED_FLAT: lambda o: o.flatten(o.fused.lion(1e-4, weight_decay=1e-4)),
            },
        ),
        Workload(
            "adafactor",
            gpt,
            lambda o: o.adafactor(1e-2),
            extra={FUSED: lambda o: o.fused.adafactor(1e-2)},
            torch_step=_torch_adamw("adafactor") if torch is not None and hasattr(torch.optim, "Adafactor") else None,
            notes=["torch.optim.Adafactor defaults differ (no update clipping/momentum): indicative only"],
        ),
        Workload(
            "partition_decay",
            gpt,
            lambda o: o.partition(
                {"decay": o.adamw(1e-3, weight_decay=1e-4), "no_decay": o.adamw(1e-3, weight_decay=0.0)},
                decay_labels,
            ),
            torch_step=_torch_adamw("partition"),
            # the same two groups as one AdamW whose decay is masked
            extra={FUSED: lambda o: o.fused.adamw(1e-3, weight_decay=1e-4, mask=decay_mask)},
        ),
        Workload(
            "multisteps_adamw",
            gpt,
            lambda o: o.MultiSteps(o.adamw(1e-3, weight_decay=1e-4), every_k_schedule=4),
            torch_step=_torch_adamw("multisteps"),
            steps_multiple=4,
        ),
        Workload(
            "multisteps_micro",
            gpt,
            lambda o: o.MultiSteps(o.adamw(1e-3, weight_decay=1e-4), every_k_schedule=1_000_000),
            torch_step=_torch_adamw("accumulate"),
            notes=["multisteps_micro: torch only accumulates (`_foreach_add_`, 12 B/param): no zero updates to apply"],
        ),
        Workload(
            "adamw_bf16",
            gpt,
            lambda o: o.adamw(1e-3, weight_decay=1e-4),
            dtype=jnp.bfloat16,
            torch_step=_torch_adamw("adamw"),
            extra=fused_adamw,
            notes=["torch keeps bf16 moments for bf16 params (gradax/optax keep float32): fewer bytes for torch"],
        ),
        Workload(
            "adamw_8bit",
            gpt,
            lambda o: o.adamw(1e-3, weight_decay=1e-4, **({"moments": "8bit"} if o is gradax else {})),
            extra={
                "gradax_fp32": lambda o: o.adamw(1e-3, weight_decay=1e-4),
                FUSED: lambda o: o.fused.adamw(1e-3, weight_decay=1e-4, moments="8bit"),
            },
            notes=["the gradax column is adamw(moments='8bit'), the optax column float32 AdamW"],
        ),
    ]
    return wl


# --------------------------------------------------------------------------------------------------------------
# timing helpers


def block(tree: Any) -> None:
    jax.block_until_ready(tree)


def copy_bandwidth(n_bytes: int, repeats: int) -> dict[str, float]:
    """Streaming bandwidth (read + write bytes per second) of a jitted ``x + 1`` and of ``np.copyto``."""
    n = max(n_bytes, 256 << 20) // 4  # >= 256 MiB: well past any last-level cache
    x = jnp.ones((n,), jnp.float32)
    f = jax.jit(lambda a: a + 1.0, donate_argnums=0)
    x = f(x)
    block(x)
    jt = []
    for _ in range(max(repeats, 3) * 3):
        t = time.perf_counter()
        x = f(x)
        block(x)
        jt.append(time.perf_counter() - t)
    a = np.ones((n,), np.float32)
    b = np.empty_like(a)
    nt = []
    for _ in range(max(repeats, 3) * 3):
        t = time.perf_counter()
        np.copyto(b, a)
        nt.append(time.perf_counter() - t)
    del x, a, b
    return {
        "array_bytes": n * 4,
        "jax_add_GBps": 2 * n * 4 / statistics.median(jt) / 1e9,
        "numpy_copy_GBps": 2 * n * 4 / statistics.median(nt) / 1e9,
    }


@dataclass
class JaxRun:
    compiled: Any
    params: Any
    state: Any
    grads: Any
    compile_s: float
    hlo: str


# XLA compile options for every jitted step of both libraries (``--xla-option KEY=VALUE``); empty: XLA's defaults
COMPILER_OPTIONS: dict[str, Any] = {}


def parse_xla_options(items: list[str] | None) -> dict[str, Any]:
    """``["xla_cpu_copy_insertion_use_region_analysis=true"]`` -> ``{"xla_cpu_...": True}`` (ints and bools parsed)."""
    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"--xla-option expects KEY=VALUE, got {item!r}")
        low = raw.strip().lower()
        out[key.strip()] = True if low == "true" else False if low == "false" else int(low) if low.isdigit() else raw
    return out


def add_xla_option_argument(parser: argparse.ArgumentParser) -> None:
    """``--xla-option KEY=VALUE`` (repeatable): an XLA compile option for every jitted step of both libraries."""
    parser.add_argument(
        "--xla-option",
        action="append",
        default=None,
        metavar="KEY=VALUE",
        help="XLA compile option for every step of both libraries (repeatable), e.g. "
        "xla_cpu_copy_insertion_use_region_analysis=true",
    )


def use_xla_options(items: list[str] | None) -> dict[str, Any]:
    """Parse ``--xla-option`` values into :data:`COMPILER_OPTIONS`, which :func:`prepare_jax` compiles with."""
    COMPILER_OPTIONS.clear()
    COMPILER_OPTIONS.update(parse_xla_options(items))
    return COMPILER_OPTIONS


def prepare_jax(wl: Workload, mod: Any, params_np: dict, grads_np: dict, make: Callable | None = None) -> JaxRun:
    opt = (make or wl.make_opt)(mod)
    params = jax.tree.map(jnp.asarray, params_np)
    grads = jax.tree.map(jnp.asarray, grads_np)
    # copied leaf by leaf: some Optax inits hold one buffer in two fields, which a donated step cannot take
    state = jax.tree.map(jnp.copy, jax.jit(opt.init)(params))

    def step(p: Any, s: Any, g: Any) -> tuple[Any, Any]:
        if isinstance(opt, gradax.fused.FusedGradientTransformation):
            return opt.step(p, s, g)  # update and apply in one pass
        u, s = opt.update(g, s, p)
        return mod.apply_updates(p, u), s

    t = time.perf_counter()
    jitted = jax.jit(step, donate_argnums=(0, 1), compiler_options=COMPILER_OPTIONS or None)
    compiled = jitted.lower(params, state, grads).compile()
    compile_s = time.perf_counter() - t
    return JaxRun(compiled, params, state, grads, compile_s, compiled.as_text() or "")


def dispatch_floor(run: JaxRun) -> JaxRun:
    """A donated jitted step that returns its params and state unchanged, over copies of ``run``'s arrays: what any
    step over these arrays pays to cross the ``jit`` boundary (per-array argument handling and output creation)."""
    params, state = jax.tree.map(jnp.copy, (run.params, run.state))
    compiled = jax.jit(lambda p, s, g: (p, s), donate_argnums=(0, 1)).lower(params, state, run.grads).compile()
    return JaxRun(compiled, params, state, run.grads, 0.0, "")


def copy_reference(n_bytes: int) -> JaxRun:
    """A donated jitted ``x + 1`` over at least ``n_bytes`` (and 256 MiB) of float32, run like a step: timed in each
    repeat between the implementations, it gives the copy bandwidth of the same minutes as the steps (the figure
    measured once at the start drifts on a shared VM, between 29 and 86 GB/s here)."""
    n_bytes = max(n_bytes, 256 << 20) if n_bytes >= 1 << 20 else 8 << 20  # --size tiny (CI): it only has to run
    x = jnp.ones((n_bytes // 4,), jnp.float32)
    compiled = jax.jit(lambda p, s, g: (p + 1.0, s), donate_argnums=(0, 1)).lower(x, (), None).compile()
    return JaxRun(compiled, x, (), None, 0.0, "")


def reference_bandwidth(result: dict[str, Any], workload: dict[str, Any]) -> float:
    """Bytes per second of the copy reference timed beside ``workload``'s steps, else of the run's start."""
    ref = workload.get("step_s", {}).get(COPY)
    if ref and workload.get("copy_reference_bytes"):
        return 2 * workload["copy_reference_bytes"] / ref["median"]
    return result["copy_bandwidth"]["jax_add_GBps"] * 1e9


class _NoGC:
    """Python's cyclic GC off while a repeat is timed, after a full collection (as ``timeit`` does): a step over
    thousands of arrays creates thousands of Python objects, and a collection landing in one implementation's repeat
    would be charged to it."""

    def __enter__(self) -> None:
        gc.collect()
        self.enabled = gc.isenabled()
        gc.disable()

    def __exit__(self, *exc: Any) -> None:
        if self.enabled:
            gc.enable()


def time_jax(run: JaxRun, steps: int) -> float:
    p, s = run.params, run.state
    with _NoGC():
        t = time.perf_counter()
        for _ in range(steps):
            p, s = run.compiled(p, s, run.grads)
        block((p, s))
        dt = (time.perf_counter() - t) / steps
    run.params, run.state = p, s
    return dt


def time_torch(step: Callable[[], None], steps: int) -> float:
    with torch.no_grad(), _NoGC():
        t = time.perf_counter()
        for _ in range(steps):
            step()
        return (time.perf_counter() - t) / steps


def summarize(xs: list[float]) -> dict[str, float]:
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


# --------------------------------------------------------------------------------------------------------------
# runners


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
        if n <= 1000:  # flatten's concatenation of every leaf compiles no faster (see RESULTS.md): skip the big trees
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
# report


def fmt_t(s: float) -> str:
    if s >= 1:
        return f"{s:.2f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.2f} ms"
    return f"{s * 1e6:.0f} us"


def spread(d: dict[str, float]) -> str:
    return f"{fmt_t(d['median'])} ({fmt_t(d['min'])}..{fmt_t(d['max'])})"


def ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}x" if a and b else "-"


def markdown(result: dict[str, Any]) -> str:
    bw = result["copy_bandwidth"]["jax_add_GBps"] * 1e9
    lines = [
        f"Copy bandwidth at the start (jitted `x + 1`, read+write): {bw / 1e9:.2f} GB/s; "
        f"NumPy copyto: {result['copy_bandwidth']['numpy_copy_GBps']:.2f} GB/s. The % of copy bandwidth of a step "
        "workload is relative to the same `x + 1` timed in each of its repeats, beside its steps (notes below).",
        "",
        "| workload | params / leaves | B/param | gradax step (median, min..max) | optax step | torch step "
        "| gradax/optax | gradax/torch | % copy BW gradax / optax / torch | compile gradax / optax (ratio) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in result["workloads"].items():
        if r["kind"] != "step":
            continue
        st = r["step_s"]
        med = {k: v["median"] for k, v in st.items()}
        nbytes = r["bytes_per_param"] * r["params"]
        bw = reference_bandwidth(result, r)
        pct = " / ".join(f"{100 * nbytes / med[k] / bw:.0f}%" if k in med else "-" for k in IMPLS)
        c = r["compile_s"]
        lines.append(
            f"| {name} ({DESCRIPTIONS[name]}) | {r['params'] / 1e6:.2f}M / {r['leaves']} | {r['bytes_per_param']} "
            f"| {spread(st['gradax'])} | {spread(st['optax'])} | {spread(st['torch']) if 'torch' in st else '-'} "
            f"| {ratio(med['gradax'], med['optax'])} | {ratio(med['gradax'], med.get('torch'))} | {pct} "
            f"| {fmt_t(c['gradax'])} / {fmt_t(c['optax'])} ({ratio(c['gradax'], c['optax'])}) |"
        )
    fused_rows = [
        (n, k, r)
        for n, r in result["workloads"].items()
        for k in FUSED_COLUMNS
        if r["kind"] == "step" and k in r["step_s"]
    ]
    if fused_rows:
        lines += [
            "",
            "| workload | fused step (median, min..max) | fused/optax | fused/torch | fused/gradax "
            "| % copy BW fused | compile fused / optax |",
            "|---|---|---|---|---|---|---|",
        ]
        for name, k, r in fused_rows:
            med = {c: v["median"] for c, v in r["step_s"].items()}
            nbytes = r["bytes_per_param"] * r["params"]
            bw = reference_bandwidth(result, r)
            c = r["compile_s"]
            label = name if k == FUSED else f"{name} (gradax.flatten)"
            lines.append(
                f"| {label} | {spread(r['step_s'][k])} | {ratio(med[k], med['optax'])} "
                f"| {ratio(med[k], med.get('torch'))} | {ratio(med[k], med['gradax'])} "
                f"| {100 * nbytes / med[k] / bw:.0f}% | {fmt_t(c[k])} / {fmt_t(c['optax'])} "
                f"({ratio(c[k], c['optax'])}) |"
            )
    comp = result["workloads"].get("compile_clip_adamw")
    if comp:
        lines += [
            "",
            "| compile time, clip+AdamW chain | gradax (median, min..max) | optax | gradax/optax "
            "| gradax.flatten(chain) | flatten/optax | gradax.fused.adamw(max_grad_norm=1) | fused/optax "
            "| gradax.flatten(fused) | flatten(fused)/optax |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for n, d in comp["compile_s"].items():
            opt = d.get("optax")

            def cells(x: Any, opt: Any = opt) -> tuple[str, str]:
                """(spread, ratio to Optax) of one column, '-' where it was not run"""
                return (spread(x) if x else "-", ratio(x["median"], opt["median"]) if x and opt else "-")

            g, fl, fu, ff = (cells(d.get(k)) for k in ("gradax", "gradax_flatten", FUSED, FUSED_FLAT))
            row = [f"{n} leaves", g[0], cells(opt)[0], g[1], *fl, *fu, *ff]
            lines.append("| " + " | ".join(row) + " |")
    lb = result["workloads"].get("lbfgs_rosenbrock")
    if lb:
        lines += [
            "",
            f"| L-BFGS Rosenbrock (grad norm < {lb['tol']:g}) | gradax time (iters, f) | optax | scipy L-BFGS-B "
            "| gradax/optax | gradax/scipy | compile gradax / optax |",
            "|---|---|---|---|---|---|---|",
        ]
        for n, d in lb["results"].items():
            cell = {k: f"{spread(v['time_s'])} ({v['iterations']} it, f={v['final_f']:.1e})" for k, v in d.items()}
            m = {k: v["time_s"]["median"] for k, v in d.items()}
            lines.append(
                f"| {n} dims | {cell['gradax']} | {cell['optax']} | {cell['scipy']} | {ratio(m['gradax'], m['optax'])} "
                f"| {ratio(m['gradax'], m['scipy'])} | {fmt_t(d['gradax']['compile_s'])} / "
                f"{fmt_t(d['optax']['compile_s'])} |"
            )
    notes = [f"- {n}: {x}" for n, r in result["workloads"].items() for x in r.get("notes", [])]
    if notes:
        lines += ["", *notes]
    return "\n".join(lines) + "\n"


def environment() -> dict[str, Any]:
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next(line.split(":", 1)[1].strip() for line in fh if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "load_avg": os.getloadavg() if hasattr(os, "getloadavg") else None,
        "python": platform.python_version(),
        "jax": jax.__version__,
        "jax_backend": jax.default_backend(),
        "optax": optax.__version__,
        "torch": torch.__version__ if torch is not None else None,
        "torch_threads": torch.get_num_threads() if torch is not None else None,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", choices=tuple(SIZES), default="small")
    ap.add_argument("--only", action="append", default=None, help="workload name (repeatable, substring match)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--steps", type=int, default=None, help="steps per timed repeat (default per size)")
    ap.add_argument("--out", default="benchmarks/results.json")
    ap.add_argument("--md", default=None, help="also write the markdown table here")
    ap.add_argument("--hlo", default=None, help="directory to write compiled HLO of every jitted step")
    add_xla_option_argument(ap)
    args = ap.parse_args(argv)
    use_xla_options(args.xla_option)
    cfg = SIZES[args.size]
    steps = args.steps or cfg["steps"]

    def wanted(name: str) -> bool:
        return not args.only or any(o in name for o in args.only)

    env = environment()
    env["xla_options"] = dict(COMPILER_OPTIONS)
    print(f"# gradax benchmarks, size={args.size}, repeats={args.repeats}: {json.dumps(env)}", flush=True)
    workloads = build_workloads(args.size)
    biggest = max(n_params(w.shapes) for w in workloads) * 4
    result: dict[str, Any] = {
        "size": args.size,
        "repeats": args.repeats,
        "env": env,
        "copy_bandwidth": copy_bandwidth(biggest, args.repeats),
        "workloads": {},
    }
    print(f"copy bandwidth: {result['copy_bandwidth']}", flush=True)
    for wl in workloads:
        if wanted(wl.name):
            t = time.perf_counter()
            result["workloads"][wl.name] = run_step_workload(wl, args.repeats, steps, args.hlo)
            print(f"{wl.name}: done in {time.perf_counter() - t:.1f} s", flush=True)
    if wanted("compile_clip_adamw"):
        result["workloads"]["compile_clip_adamw"] = run_compile_workload(cfg["compile"], args.repeats)
        print("compile_clip_adamw: done", flush=True)
    if wanted("lbfgs_rosenbrock"):
        result["workloads"]["lbfgs_rosenbrock"] = run_lbfgs(cfg["rosen"], args.repeats)
        print("lbfgs_rosenbrock: done", flush=True)
    # a fresh copy-bandwidth figure at the end shows how much the machine's load drifted during the run
    result["copy_bandwidth_end"] = copy_bandwidth(biggest, args.repeats)
    table = markdown(result)
    result["markdown"] = table
    if args.out:
        os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
        with open(args.out, "w") as fh:
            json.dump(result, fh, indent=1)
    if args.md:
        with open(args.md, "w") as fh:
            fh.write(table)
    print(table, flush=True)
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
