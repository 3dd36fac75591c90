"""Benchmark suite: the same workloads through gradax, Optax 0.2.8 and torch.optim, in one run.

Run ``python -m benchmarks.run [--size tiny|small|full] [--only NAME] [--repeats N] [--out FILE] [--merge FILE]``
(``make bench`` runs ``--size small``). This module is the command line; the parts live in :mod:`benchmarks.suite`.

What is measured, per workload and implementation:

* compile time: ``jax.jit(step, donate_argnums=(0, 1)).lower(params, state, grads).compile()`` on a fresh function
  (trace + lower + XLA compile), timed separately from steps;
* step time: the compiled step run ``--steps`` times back to back and divided (params and optimizer state donated,
  the gradient tree fixed); repeated ``--repeats`` times with the implementations alternating inside each repeat
  (gradax, optax, torch, gradax, optax, torch, ...) so that drifting machine load hits all of them alike. The
  median and the spread (min..max over repeats) are reported;
* achieved bandwidth: the bytes the step's math must move (documented per workload in
  ``benchmarks.suite.columns.BYTES_PER_PARAM``,
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
import json
import os
import pathlib
import platform
import sys
import time
from typing import Any

import jax
import optax

from .suite.current import merge
from .suite.report import markdown
from .suite.runners import run_compile_workload, run_lbfgs, run_step_workload
from .suite.timing import COMPILER_OPTIONS, add_xla_option_argument, copy_bandwidth, use_xla_options
from .suite.trees import SIZES, n_params
from .suite.workloads import build_workloads, torch


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
    ap.add_argument("--out", default=None, help="write this run's results (JSON) here")
    ap.add_argument(
        "--merge",
        default=None,
        help="merge this run's workloads into a results file of the same size, e.g. benchmarks/results.json (the "
        "current results: then run python -m benchmarks.suite.current)",
    )
    ap.add_argument("--md", default=None, help="also write the markdown table here")
    ap.add_argument("--hlo", default=None, help="directory to write compiled HLO of every jitted step")
    add_xla_option_argument(ap)
    argv = sys.argv[1:] if argv is None else list(argv)
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
    if args.merge:
        current = json.loads(pathlib.Path(args.merge).read_text()) if os.path.exists(args.merge) else {}
        merged = merge(current, result, " ".join(["python -m benchmarks.run", *argv]))
        pathlib.Path(args.merge).write_text(json.dumps(merged, indent=1) + "\n")
    if args.md:
        with open(args.md, "w") as fh:
            fh.write(table)
    print(table, flush=True)
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
