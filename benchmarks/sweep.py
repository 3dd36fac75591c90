"""Every optimizer gradax shares with Optax, one step each, side by side: gradax/Optax step-time ratios.

The suite in ``benchmarks/run.py`` measures a few workloads in depth; this sweep checks the promise that
no gradax optimizer step is slower than Optax's on the same tree. Each optimizer runs with Optax's defaults (and a
learning rate) on the GPT-2-shaped tree, params and state donated, repeats alternating the two libraries.

    .venv/bin/python -m benchmarks.sweep --size small --repeats 5 [--only NAME ...] [--md FILE]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable
from typing import Any

import jax

import gradax

from .suite.timing import add_xla_option_argument, block, prepare_jax, time_jax, use_xla_options
from .suite.trees import SIZES, gpt2_shapes, make_tree, n_params
from .suite.workloads import Workload

try:  # the comparison (benchmarks only)
    import optax
except ImportError:  # pragma: no cover
    optax = None

LR = 1e-3

# name -> (module -> GradientTransformation); optimizers whose update needs only (grads, state, params)
OPTIMIZERS: dict[str, Callable[[Any], Any]] = {
    "adabelief": lambda o: o.adabelief(LR),
    "adadelta": lambda o: o.adadelta(LR),
    "adafactor": lambda o: o.adafactor(LR),
    "adagrad": lambda o: o.adagrad(LR),
    "adam": lambda o: o.adam(LR),
    "adamax": lambda o: o.adamax(LR),
    "adamaxw": lambda o: o.adamaxw(LR),
    "adamw": lambda o: o.adamw(LR),
    "adan": lambda o: o.adan(LR),
    "amsgrad": lambda o: o.amsgrad(LR),
    "fromage": lambda o: o.fromage(LR),
    "lamb": lambda o: o.lamb(LR),
    "lars": lambda o: o.lars(LR),
    "lion": lambda o: o.lion(LR),
    "nadam": lambda o: o.nadam(LR),
    "nadamw": lambda o: o.nadamw(LR),
    "noisy_sgd": lambda o: o.noisy_sgd(LR, key=jax.random.key(0)),
    "novograd": lambda o: o.novograd(LR),
    "optimistic_adam_v2": lambda o: o.optimistic_adam_v2(LR),
    "optimistic_gradient_descent": lambda o: o.optimistic_gradient_descent(LR),
    "radam": lambda o: o.radam(LR),
    "rmsprop": lambda o: o.rmsprop(LR),
    "rprop": lambda o: o.rprop(LR),
    "sgd": lambda o: o.sgd(LR),
    "sgd_momentum": lambda o: o.sgd(LR, momentum=0.9),
    "sign_sgd": lambda o: o.sign_sgd(LR),
    "signum": lambda o: o.signum(LR),
    "sm3": lambda o: o.sm3(LR),
    "yogi": lambda o: o.yogi(LR),
    "contrib.ademamix": lambda o: o.contrib.ademamix(LR),
    "contrib.cocob": lambda o: o.contrib.cocob(),
    "contrib.dadapt_adamw": lambda o: o.contrib.dadapt_adamw(),
    "contrib.dog": lambda o: o.contrib.dog(),
    "contrib.dowg": lambda o: o.contrib.dowg(),
    "contrib.muon": lambda o: o.contrib.muon(LR),
    "contrib.prodigy": lambda o: o.contrib.prodigy(),
    "contrib.schedule_free_adamw": lambda o: o.contrib.schedule_free_adamw(LR),
    "contrib.simplified_ademamix": lambda o: o.contrib.simplified_ademamix(LR),
}


def sweep(size: str, repeats: int, steps: int, only: list[str]) -> list[dict[str, Any]]:
    shapes = gpt2_shapes(*SIZES[size]["gpt"])
    params_np = make_tree(shapes, "float32", seed=0)
    grads_np = make_tree(shapes, "float32", seed=1)
    rows = []
    for name, make in OPTIMIZERS.items():
        if only and not any(o in name for o in only):
            continue
        wl = Workload(name, shapes, make)
        runs = {lib.__name__: prepare_jax(wl, lib, params_np, grads_np) for lib in (gradax, optax)}
        times: dict[str, list[float]] = {k: [] for k in runs}
        for run in runs.values():
            time_jax(run, 1)  # warm-up
        for _ in range(repeats):
            for k, run in runs.items():
                times[k].append(time_jax(run, steps))
        ratios = [a / b for a, b in zip(times["gradax"], times["optax"])]
        row = {
            "name": name,
            "gradax_s": statistics.median(times["gradax"]),
            "optax_s": statistics.median(times["optax"]),
            "ratio": statistics.median(ratios),
            "ratio_min": min(ratios),
            "ratio_max": max(ratios),
            "compile_ratio": runs["gradax"].compile_s / runs["optax"].compile_s,
        }
        rows.append(row)
        print(
            f"{name:32s} gradax {1e3 * row['gradax_s']:8.2f} ms  optax {1e3 * row['optax_s']:8.2f} ms  "
            f"ratio {row['ratio']:.2f}x ({row['ratio_min']:.2f}..{row['ratio_max']:.2f})  "
            f"compile {row['compile_ratio']:.2f}x",
            flush=True,
        )
        del runs
        block(None)
    return rows


def markdown(rows: list[dict[str, Any]], size: str) -> str:
    shapes = gpt2_shapes(*SIZES[size]["gpt"])
    lines = [
        f"GPT-2-shaped tree, `--size {size}`: {n_params(shapes) / 1e6:.2f}M params, {len(shapes)} leaves.",
        "",
        "| optimizer | gradax step | optax step | gradax/optax (min..max) | compile gradax/optax |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['name']} | {1e3 * r['gradax_s']:.2f} ms | {1e3 * r['optax_s']:.2f} ms | "
            f"{r['ratio']:.2f}x ({r['ratio_min']:.2f}..{r['ratio_max']:.2f}) | {r['compile_ratio']:.2f}x |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="small")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=None, help="steps per timed repeat (default per size)")
    parser.add_argument("--only", action="append", default=[], help="optimizer name (repeatable, substring match)")
    parser.add_argument("--md", default=None, help="also write the markdown table here")
    add_xla_option_argument(parser)
    args = parser.parse_args(argv)
    use_xla_options(args.xla_option)
    if optax is None:
        sys.exit("benchmarks.sweep compares with Optax: install the bench extra (pip install -e '.[bench]').")
    rows = sweep(args.size, args.repeats, args.steps or SIZES[args.size]["steps"], args.only)
    if args.md:
        with open(args.md, "w") as f:
            f.write(markdown(rows, args.size))
    return rows


if __name__ == "__main__":
    main()
