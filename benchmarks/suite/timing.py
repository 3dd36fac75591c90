"""Timing: a donated step compiled once and run back to back, with the copy and dispatch references beside it."""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import gradax

from .workloads import Workload, torch


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


def time_torch(step: Callable[[], None], steps: int, sync: Callable[[], None] | None = None) -> float:
    """Seconds per ``step()``; ``sync`` (e.g. ``torch.cuda.synchronize``) waits for queued device work first."""
    with torch.no_grad(), _NoGC():
        t = time.perf_counter()
        for _ in range(steps):
            step()
        if sync is not None:
            sync()
        return (time.perf_counter() - t) / steps


def summarize(xs: list[float]) -> dict[str, float]:
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}
