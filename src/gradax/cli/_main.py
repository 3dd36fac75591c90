"""Argument parsing and the ``train``, ``compare``, ``schedule`` and ``demo`` commands."""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np

from ._expr import ExpressionError, parse_optimizer, parse_schedule
from ._run import OutputError, RunFolder, plot_curves, plot_values, train
from ._tasks import TASKS, TaskError, get_task


class CliError(Exception):
    """A usage error reported as ``gradax: error: ...`` with exit code 2."""


def _say(*a) -> None:
    print(*a, flush=True)


def _positive(name: str, value: int) -> int:
    if value is None:
        return value
    if value < 1:
        raise CliError(f"{name} must be a positive integer; got {value}")
    return value


def _default_out(kind: str, task: str) -> str:
    return str(Path("runs") / f"{kind}-{task}-{time.strftime('%Y%m%d-%H%M%S')}")


def _short(expr: str, n: int = 90) -> str:
    expr = " ".join(expr.split())
    return expr if len(expr) <= n else expr[: n - 3] + "..."


# ----------------------------------------------------------------------------------------------------------------
# train
# ----------------------------------------------------------------------------------------------------------------


def cmd_train(args) -> int:
    task = get_task(args.task)
    steps = _positive("--steps", args.steps) or task.default_steps
    batch = _positive("--batch-size", args.batch_size) or task.default_batch_size
    _positive("--eval-every", args.eval_every)
    expr = args.optimizer or task.default_optimizer
    opt = parse_optimizer(expr).value
    folder = RunFolder(args.out or _default_out("train", task.name), overwrite=args.overwrite)
    try:
        _say(f"task: {task.description}")
        _say(f"optimizer: {_short(expr, 200)}")
        _say(f"steps: {steps}, batch size: {batch}, seed: {args.seed}")
        hist = train(
            task,
            opt,
            steps=steps,
            batch_size=batch,
            seed=args.seed,
            eval_every=args.eval_every,
            progress=not args.quiet,
            metrics_file=folder.file("metrics.jsonl"),
        )
        plot_curves({_short(expr, 60): hist}, folder.file("curves.png"), f"{task.name}: {_short(expr)}")
        lr_steps, lr = hist.series("learning_rate")
        if lr:
            plot_values(lr_steps, {"learning rate": lr}, folder.file("lr.png"), "learning rate (from optimizer state)")
        summary = {
            "task": task.name,
            "optimizer": expr,
            "steps": steps,
            "batch_size": batch,
            "seed": args.seed,
            "final_train_loss": hist.final("loss"),
            "final_train_accuracy": hist.final("accuracy"),
            "final_test_loss": hist.final("test_loss"),
            "final_test_accuracy": hist.final("test_accuracy"),
            "steps_per_second": hist.steps_per_second,
            "wall_time_s": hist.wall_time,
        }
        folder.file("summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        out = folder.commit()
    except BaseException:
        folder.discard()
        raise
    _say(
        f"final: train loss {summary['final_train_loss']:.4f}, train acc {summary['final_train_accuracy']:.4f}, "
        f"test loss {summary['final_test_loss']:.4f}, test acc {summary['final_test_accuracy']:.4f}"
    )
    _say(f"speed: {hist.steps_per_second:.1f} steps/s, wall time {hist.wall_time:.1f} s")
    _say(f"run folder: {out}  (metrics.jsonl, curves.png{', lr.png' if lr else ''}, summary.json)")
    if not lr:
        _say("note: learning rate not found in the optimizer state (wrap the optimizer with inject_hyperparams)")
    return 0


# ----------------------------------------------------------------------------------------------------------------
# compare
# ----------------------------------------------------------------------------------------------------------------


def _ranking_key(row):
    acc = row["final_test_accuracy"]
    loss = row["final_test_loss"]
    return (-(acc if math.isfinite(acc) else -1.0), loss if math.isfinite(loss) else float("inf"))


def cmd_compare(args) -> int:
    task = get_task(args.task)
    steps = _positive("--steps", args.steps) or task.default_steps
    batch = _positive("--batch-size", args.batch_size) or task.default_batch_size
    _positive("--eval-every", args.eval_every)
    exprs = args.optimizers
    if len(exprs) < 2:
        raise CliError("compare needs at least two optimizer expressions")
    opts = [parse_optimizer(e).value for e in exprs]  # refuse bad expressions before any training
    folder = RunFolder(args.out or _default_out("compare", task.name), overwrite=args.overwrite)
    try:
        _say(f"task: {task.description}; {steps} steps, batch {batch}, seed {args.seed} (same data order for all)")
        histories, rows = {}, []
        width = len(str(len(exprs)))
        for i, (expr, opt) in enumerate(zip(exprs, opts), start=1):
            name = _short(expr, 60)
            label = f"[{i:>{width}}/{len(exprs)}] "
            hist = train(
                task,
                opt,
                steps=steps,
                batch_size=batch,
                seed=args.seed,
                eval_every=args.eval_every,
                label=label,
                progress=not args.quiet,
                metrics_file=folder.file(f"metrics-{i}.jsonl"),
            )
            histories[name if name not in histories else f"{i}: {name}"] = hist
            rows.append(
                {
                    "optimizer": expr,
                    "final_train_loss": hist.final("loss"),
                    "final_test_loss": hist.final("test_loss"),
                    "final_test_accuracy": hist.final("test_accuracy"),
                    "steps_per_second": hist.steps_per_second,
                    "wall_time_s": hist.wall_time,
                    "metrics_file": f"metrics-{i}.jsonl",
                }
            )
        rows.sort(key=_ranking_key)
        plot_curves(histories, folder.file("compare.png"), f"{task.name}: {len(exprs)} optimizers, {steps} steps")
        table = _table(rows)
        folder.file("results.md").write_text(table + "\n")
        folder.file("results.json").write_text(json.dumps(rows, indent=2) + "\n")
        out = folder.commit()
    except BaseException:
        folder.discard()
        raise
    _say("ranked by final test accuracy (then test loss):")
    _say(table)
    _say(f"run folder: {out}  (compare.png, results.md, results.json, metrics-*.jsonl)")
    return 0


def _table(rows) -> str:
    head = "| rank | test acc | test loss | train loss | steps/s | optimizer |"
    lines = [head, "|---:|---:|---:|---:|---:|---|"]
    for r, row in enumerate(rows, start=1):
        lines.append(
            f"| {r} | {row['final_test_accuracy']:.4f} | {row['final_test_loss']:.4f} | "
            f"{row['final_train_loss']:.4f} | {row['steps_per_second']:.1f} | `{_short(row['optimizer'], 200)}` |"
        )
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------------------------
# schedule
# ----------------------------------------------------------------------------------------------------------------


def _warmup_end(built) -> int | None:
    a = built.arguments
    if "warmup_steps" in a and isinstance(a["warmup_steps"], (int, float)):
        return int(a["warmup_steps"])
    if "pct_start" in a or built.name.endswith("onecycle_schedule"):
        pct = a.get("pct_start", 0.3)
        if isinstance(a.get("transition_steps"), (int, float)) and isinstance(pct, (int, float)):
            return int(pct * a["transition_steps"])
    return None


def cmd_schedule(args) -> int:
    steps = _positive("--steps", args.steps)
    built = parse_schedule(args.expression)
    import jax
    import jax.numpy as jnp

    try:
        values = np.asarray(jax.vmap(built.value)(jnp.arange(steps + 1, dtype=jnp.int32)), np.float64)
    except Exception:  # noqa: BLE001 - schedules that do not vmap are evaluated one step at a time
        values = np.array([float(built.value(jnp.asarray(s, jnp.int32))) for s in range(steps + 1)])
    out = Path(args.out) if args.out else Path("runs") / "schedule.png"
    if out.suffix.lower() != ".png":
        raise CliError(f"--out must name a .png file; got {str(out)!r}")
    try:  # write beside the target and rename: the PNG appears only when complete
        out.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.tmp-", suffix=".png", dir=out.parent)
        os.close(fd)
    except OSError as e:
        raise OutputError(f"cannot write {str(out)!r}: {e.strerror or e}") from None
    try:
        name = built.name or "schedule"
        plot_values(np.arange(steps + 1), {name: values}, Path(tmp), _short(args.expression, 80), ylabel="value")
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    marks = [("step 0", 0)]
    w = _warmup_end(built)
    if w is not None and 0 < w < steps:
        marks.append((f"end of warmup (step {w})", w))
    marks.append((f"end (step {steps})", steps))
    for label, s in marks:
        _say(f"{label:>28}: {values[s]:.6g}")
    _say(f"{'min / max':>28}: {values.min():.6g} / {values.max():.6g}")
    _say(f"plot: {out}")
    return 0


# ----------------------------------------------------------------------------------------------------------------
# demo
# ----------------------------------------------------------------------------------------------------------------

DEMO_OPTIMIZERS = [
    "sgd(learning_rate=0.1, momentum=0.9)",
    "adam(learning_rate=1e-3)",
    "adamw(learning_rate=warmup_cosine_decay_schedule(0.0, 3e-3, 50, 600), weight_decay=1e-4)",
]


def cmd_demo(args) -> int:
    root = Path(args.out)
    quiet = ["--quiet"] if args.quiet else []
    _say("== gradax demo 1/2: compare three optimizers on the 8x8 digits (MLP) ==")
    rc = main(
        [
            "compare",
            "--task",
            "digits",
            *DEMO_OPTIMIZERS,
            "--steps",
            str(args.digits_steps),
            "--out",
            str(root / "compare-digits"),
            "--overwrite",
            *quiet,
        ]
    )
    if rc:
        return rc
    _say("\n== gradax demo 2/2: character-level transformer on Shakespeare ==")
    rc = main(
        [
            "train",
            "--task",
            "shakespeare",
            "--steps",
            str(args.lm_steps),
            "--optimizer",
            f"chain(clip_by_global_norm(1.0), adamw(learning_rate=warmup_cosine_decay_schedule(0.0, 3e-3, "
            f"{max(1, args.lm_steps // 10)}, {args.lm_steps}), weight_decay=0.01))",
            "--out",
            str(root / "train-shakespeare"),
            "--overwrite",
            *quiet,
        ]
    )
    if rc:
        return rc
    _say("\npictures:")
    for p in ("compare-digits/compare.png", "train-shakespeare/curves.png", "train-shakespeare/lr.png"):
        _say(f"  {root / p}")
    return 0


# ----------------------------------------------------------------------------------------------------------------
# parser
# ----------------------------------------------------------------------------------------------------------------

EXPR_HELP = textwrap.dedent(
    """\
    Expressions use gradax's public API (as in `import gradax as optax`): calls of public functions, optionally
    under contrib., schedules., transforms., optimizers. or fused., with literal arguments (numbers, strings, True/False/None,
    tuples, lists, dicts, unary minus) and nested calls. They are parsed with `ast`, never evaluated as Python."""
)


class _Formatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    pass


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--task", default="digits", help=f"dataset/model: {', '.join(TASKS)}")
    p.add_argument("--steps", type=int, default=None, help="training steps (default: per task, 500 / 300)")
    p.add_argument("--batch-size", type=int, default=None, help="batch size (default: per task, 64 / 32)")
    p.add_argument("--seed", type=int, default=0, help="seed for initialisation and data order")
    p.add_argument("--eval-every", type=int, default=None, help="test evaluation period (default: steps/20)")
    p.add_argument("--out", default=None, help="run folder to create (default: runs/<command>-<task>-<time>)")
    p.add_argument("--overwrite", action="store_true", help="replace --out if it exists (only once the run succeeds)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gradax",
        description="Train small models, compare optimizers and plot schedules with gradax.\n\n" + EXPR_HELP,
        formatter_class=_Formatter,
        epilog=textwrap.dedent(
            """\
            examples:
              gradax train --task digits --optimizer "adam(learning_rate=1e-3)"
              gradax compare "sgd(0.1, momentum=0.9)" "adam(1e-3)" "lion(1e-4)"
              gradax schedule "warmup_cosine_decay_schedule(0.0, 1e-3, 100, 1000)" --steps 1000
              gradax demo
              gradax bench --size tiny"""
        ),
    )
    sub = parser.add_subparsers(dest="command", metavar="{train,compare,schedule,demo,bench}")
    sub.required = True

    p = sub.add_parser(
        "train",
        help="train a model on a shipped dataset",
        formatter_class=_Formatter,
        description="Train the digits MLP or the Shakespeare character transformer with one optimizer; writes "
        "metrics.jsonl, curves.png, lr.png and summary.json to a run folder.\n\n" + EXPR_HELP,
        epilog=textwrap.dedent(
            """\
            examples:
              gradax train --task digits --steps 300
              gradax train --task digits --optimizer "sgd(learning_rate=0.1, momentum=0.9, nesterov=True)"
              gradax train --task shakespeare --steps 2000 --optimizer \\
                "chain(clip_by_global_norm(1.0), adamw(learning_rate=warmup_cosine_decay_schedule(0.0, 3e-3, 100, 2000), weight_decay=0.1))"
              gradax train --task digits --optimizer "contrib.muon(learning_rate=0.02)" --out runs/muon"""
        ),
    )
    p.add_argument("--optimizer", default=None, help="optimizer expression (default: per task)")
    _common(p)
    p.set_defaults(func=cmd_train)

    p = sub.add_parser(
        "compare",
        help="compare several optimizers on one task",
        formatter_class=_Formatter,
        description="Train the same model with several optimizers (same seed, same data order); writes one plot "
        "with all curves (compare.png) and a table ranked by final test accuracy (results.md).\n\n" + EXPR_HELP,
        epilog=textwrap.dedent(
            """\
            examples:
              gradax compare "sgd(0.1)" "adam(1e-3)" "adamw(1e-3, weight_decay=0.01)" --steps 300
              gradax compare --task shakespeare --steps 200 "adam(3e-3)" "chain(clip_by_global_norm(1.0), adam(3e-3))\""""
        ),
    )
    p.add_argument("optimizers", nargs="+", metavar="OPTIMIZER", help="two or more optimizer expressions")
    _common(p)
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser(
        "schedule",
        help="evaluate and plot a schedule",
        formatter_class=_Formatter,
        description="Evaluate a schedule expression at steps 0..N, write a PNG and print the values at step 0, at "
        "the end of warmup (if the schedule has one) and at the end.\n\n" + EXPR_HELP,
        epilog=textwrap.dedent(
            """\
            examples:
              gradax schedule "warmup_cosine_decay_schedule(0.0, 1e-3, 100, 1000)" --steps 1000
              gradax schedule "exponential_decay(1e-2, transition_steps=100, decay_rate=0.5)" --steps 500 --out lr.png
              gradax schedule "join_schedules([constant_schedule(0.1), linear_schedule(0.1, 0.0, 100)], [50])\""""
        ),
    )
    p.add_argument("expression", help="schedule expression")
    p.add_argument("--steps", type=int, default=1000, help="number of steps N")
    p.add_argument("--out", default=None, help="PNG file to write (default: runs/schedule.png)")
    p.set_defaults(func=cmd_schedule)

    p = sub.add_parser(
        "demo",
        help="compare 3 optimizers on digits and train a small LM (a few minutes on CPU)",
        formatter_class=_Formatter,
        description="Runs `compare` on digits with three optimizers and a short `train` of the Shakespeare "
        "character transformer; pictures go under --out.",
        epilog="example:\n  gradax demo --out runs/demo",
    )
    p.add_argument("--out", default=str(Path("runs") / "demo"), help="folder for the demo runs (replaced)")
    p.add_argument("--digits-steps", type=int, default=600, help="steps per optimizer on digits")
    p.add_argument("--lm-steps", type=int, default=500, help="steps for the language model")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser(
        "bench",
        help="benchmark gradax against Optax and torch.optim (source checkout)",
        formatter_class=_Formatter,
        description="Runs the benchmark suite (benchmarks/run.py of the source checkout): the same optimizer steps "
        "through gradax, Optax and torch.optim, step and compile times, bandwidth. Arguments after `bench` go to "
        "the suite (see `gradax bench -- --help`); results are in benchmarks/RESULTS.md.",
        epilog=textwrap.dedent(
            """\
            examples:
              gradax bench                                   # --size small, as `make bench`
              gradax bench --size tiny --repeats 1
              gradax bench --size full --only adamw_gpt2 --only clip_adamw_schedule"""
        ),
    )
    p.set_defaults(func=cmd_bench)
    return parser


def benchmarks_root() -> Path | None:
    """The source checkout holding ``benchmarks/run.py`` (next to ``src/``), or None for an installed wheel."""
    for root in (Path(__file__).resolve().parents[3], Path.cwd()):
        if (root / "benchmarks" / "run.py").is_file():
            return root
    return None


def cmd_bench(args) -> int:
    root = benchmarks_root()
    if root is None:
        raise CliError(
            "bench runs the benchmark suite of a source checkout (benchmarks/run.py next to src/); none was found "
            "above this package or in the current folder. Clone the repository and run `make bench` there."
        )
    missing = [m for m in ("optax", "scipy") if importlib.util.find_spec(m) is None]
    if missing:
        raise CliError(
            f"bench compares gradax with {' and '.join(missing)}, which is not installed. "
            "Install the benchmark dependencies: pip install -e '.[test,bench]' (or run `make bench`)."
        )
    passthrough = [a for a in args.bench_args if a != "--"]
    return subprocess.run([sys.executable, "-m", "benchmarks.run", *passthrough], cwd=root).returncode


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args, extra = parser.parse_known_args(argv)
        if extra and args.command != "bench":
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        args.bench_args = extra
    except SystemExit as e:  # argparse already printed its message
        return int(e.code or 0)
    try:
        return args.func(args)
    except ExpressionError as e:
        print(f"gradax: error: {e}", file=sys.stderr)
    except (CliError, TaskError, OutputError) as e:
        print(f"gradax: error: {e}", file=sys.stderr)
    except KeyboardInterrupt:
        print("gradax: interrupted", file=sys.stderr)
        return 130
    return 2
