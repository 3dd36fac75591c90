"""Argument parsing and the ``train``, ``compare``, ``schedule`` and ``demo`` commands."""

from __future__ import annotations

import argparse
import contextlib
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

from ._checkpoint import Checkpoints, OutputError, RunFolder, find_run, latest_step_in
from ._expr import ExpressionError, parse_optimizer, parse_schedule
from ._leaderboard import LeaderboardError, cmd_compare_multi, cmd_leaderboard
from ._run import EXIT_INTERRUPTED, EXIT_NONFINITE, History, plot_curves, plot_values, train
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
# settings of a new or resumed run
# ----------------------------------------------------------------------------------------------------------------

#: Options fixed when a run starts; ``--resume`` refuses them (the run continues with the settings in its run.json).
FIXED = ("task", "seed", "batch_size", "eval_every", "checkpoint_every", "on_nonfinite", "out")


def _settings(args, command: str) -> tuple[dict, str | None]:
    """The run's settings (``run.json``) and, for ``--resume``, the folder to continue."""
    if args.resume is None:
        task = get_task(args.task or "digits")
        steps = _positive("--steps", args.steps) or task.default_steps
        config = {
            "command": command,
            "task": task.name,
            "steps": steps,
            "batch_size": _positive("--batch-size", args.batch_size) or task.default_batch_size,
            "seed": 0 if args.seed is None else args.seed,
            "eval_every": _positive("--eval-every", args.eval_every) or max(1, steps // 20),
            "checkpoint_every": _positive("--checkpoint-every", args.checkpoint_every) or 100,
            "on_nonfinite": args.on_nonfinite or "stop",
        }
        if command == "train":
            config["optimizer"] = args.optimizer or task.default_optimizer
        else:
            if len(args.optimizers) < 2:
                raise CliError("compare needs at least two optimizer expressions")
            config["optimizers"] = args.optimizers
        return config, None
    given = [f"--{k.replace('_', '-')}" for k in FIXED if getattr(args, k) is not None]
    given += ["--overwrite"] if args.overwrite else []
    given += ["--optimizer"] if command == "train" and args.optimizer is not None else []
    given += ["OPTIMIZER"] if command == "compare" and args.optimizers else []
    if given:
        raise CliError(
            f"--resume continues a run with the settings it started with; got {', '.join(given)}. Drop them (only "
            "--steps and --quiet may be given with --resume)"
        )
    folder, config = find_run(args.resume)
    if config.get("command") != command:
        raise CliError(
            f"--resume {args.resume!r} names a run of `gradax {config.get('command')}`; resume it with that command"
        )
    done = latest_step_in(folder) or 0
    if args.steps is not None:
        config["steps"] = _positive("--steps", args.steps)
    if config["steps"] < done:
        raise CliError(
            f"--steps must be at least {done} (the steps {args.resume!r} has done already); got {config['steps']}"
        )
    return config, args.resume


def _open_folder(config: dict, args, resume: str | None) -> RunFolder:
    if resume is not None:
        folder = RunFolder.resume(resume)
        folder.write_config(config)
        return folder
    folder = RunFolder.create(args.out or _default_out(config["command"], config["task"]), overwrite=args.overwrite)
    folder.write_config(config)
    return folder


def _train_one(task, opt, config, folder: RunFolder, suffix: str, label: str, quiet: bool) -> History:
    checkpoints = Checkpoints(folder.file(f"checkpoints{suffix}"))
    try:
        return train(
            task,
            opt,
            steps=config["steps"],
            batch_size=config["batch_size"],
            seed=config["seed"],
            eval_every=config["eval_every"],
            label=label,
            progress=not quiet,
            metrics_file=folder.file(f"metrics{suffix}.jsonl"),
            checkpoints=checkpoints,
            checkpoint_every=config["checkpoint_every"],
            on_nonfinite=config["on_nonfinite"],
        )
    finally:
        checkpoints.close()


def _interrupted(folder: RunFolder, hist: History, command: str) -> int:
    print(
        f"gradax: interrupted after step {hist.stop_step}; checkpoint written to {folder.work}. Continue with: "
        f"gradax {command} --resume {folder.path}",
        file=sys.stderr,
    )
    return EXIT_INTERRUPTED


def _nonfinite_message(hist: History, what: str) -> str:
    last = hist.last_finite_loss()
    rec = hist.records[-1]
    before = f"the last finite loss was {last[1]:.6g} at step {last[0]}" if last else "no step had a finite loss"
    return (
        f"{what}the loss or a gradient became non-finite at step {hist.stop_step} (loss {rec['loss']}); {before}. "
        "The run stopped there. Try a lower learning rate, gradient clipping (chain(clip_by_global_norm(1.0), ...)) "
        "or skipping such steps with --on-nonfinite skip (wraps the optimizer in apply_if_finite)"
    )


def _status(hist: History) -> dict:
    last = hist.last_finite_loss()
    return {
        "status": hist.status,
        "stop_step": hist.stop_step,
        "last_finite_loss": last[1] if last else None,
        "skipped_steps": hist.skipped,
    }


@contextlib.contextmanager
def _keep_resumable(folder: RunFolder):
    """When training ends by an exception, keep a working folder that holds a checkpoint (and say so)."""
    try:
        yield
    except BaseException:
        folder.abandon()
        if folder.work.exists():
            print(
                f"gradax: the last checkpoint is in {folder.work}; continue with --resume {folder.path}",
                file=sys.stderr,
            )
        raise


# ----------------------------------------------------------------------------------------------------------------
# train
# ----------------------------------------------------------------------------------------------------------------


def cmd_train(args) -> int:
    config, resume = _settings(args, "train")
    task = get_task(config["task"])
    steps, expr = config["steps"], config["optimizer"]
    opt = parse_optimizer(expr).value
    task.sampler(config["seed"], config["batch_size"])  # refuse an impossible batch size before writing anything
    folder = _open_folder(config, args, resume)
    with _keep_resumable(folder):
        _say(f"task: {task.description}")
        _say(f"optimizer: {_short(expr, 200)}")
        _say(f"steps: {steps}, batch size: {config['batch_size']}, seed: {config['seed']}")
        hist = _train_one(task, opt, config, folder, "", "", args.quiet)
        if hist.status == "interrupted":
            return _interrupted(folder, hist, "train")
        plot_curves({_short(expr, 60): hist}, folder.file("curves.png"), f"{task.name}: {_short(expr)}")
        lr_steps, lr = hist.series("learning_rate")
        if lr:
            plot_values(lr_steps, {"learning rate": lr}, folder.file("lr.png"), "learning rate (from optimizer state)")
        summary = {
            "task": task.name,
            "optimizer": expr,
            "steps": steps,
            "batch_size": config["batch_size"],
            "seed": config["seed"],
            **_status(hist),
            "final_train_loss": hist.final("loss"),
            "final_train_accuracy": hist.final("accuracy"),
            "final_test_loss": hist.final("test_loss"),
            "final_test_accuracy": hist.final("test_accuracy"),
            "steps_per_second": hist.steps_per_second,
            "wall_time_s": hist.wall_time,
        }
        folder.file("summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        out = folder.commit()
    if hist.status == "nonfinite":
        print(f"gradax: error: {_nonfinite_message(hist, '')}; files so far are in {out}", file=sys.stderr)
        return EXIT_NONFINITE
    _say(
        f"final: train loss {summary['final_train_loss']:.4f}, train acc {summary['final_train_accuracy']:.4f}, "
        f"test loss {summary['final_test_loss']:.4f}, test acc {summary['final_test_accuracy']:.4f}"
    )
    if hist.skipped:
        _say(f"skipped: {hist.skipped} steps with a non-finite loss or gradient (--on-nonfinite skip)")
    _say(f"speed: {hist.steps_per_second:.1f} steps/s, wall time {hist.wall_time:.1f} s")
    _say(f"run folder: {out}  (metrics.jsonl, curves.png{', lr.png' if lr else ''}, summary.json, checkpoints/)")
    if not lr:
        _say("note: learning rate not found in the optimizer state (wrap the optimizer with inject_hyperparams)")
    return 0


# ----------------------------------------------------------------------------------------------------------------
# compare
# ----------------------------------------------------------------------------------------------------------------


def _ranking_key(row):
    acc = row["final_test_accuracy"]
    loss = row["final_test_loss"]
    stopped = row["status"] == "nonfinite"
    return (stopped, -(acc if math.isfinite(acc) else -1.0), loss if math.isfinite(loss) else float("inf"))


def cmd_compare(args) -> int:
    if (args.seeds or 1) != 1 or args.sweep is not None or args.target is not None:
        if args.resume is None:
            task = get_task(args.task or "digits")
            steps = _positive("--steps", args.steps) or task.default_steps
            batch = _positive("--batch-size", args.batch_size) or task.default_batch_size
            task.sampler(0, batch)
            every = _positive("--eval-every", args.eval_every) or max(1, steps // 20)
            return cmd_compare_multi(args, task, steps, batch, every)
        return cmd_compare_multi(args, None, 0, 0, 0)  # refuses --resume with a message
    config, resume = _settings(args, "compare")
    task = get_task(config["task"])
    steps, batch, exprs = config["steps"], config["batch_size"], config["optimizers"]
    opts = [parse_optimizer(e).value for e in exprs]  # refuse bad expressions before any training
    task.sampler(config["seed"], batch)
    folder = _open_folder(config, args, resume)
    with _keep_resumable(folder):
        _say(f"task: {task.description}; {steps} steps, batch {batch}, seed {config['seed']} (same data order for all)")
        histories, rows = {}, []
        width = len(str(len(exprs)))
        for i, (expr, opt) in enumerate(zip(exprs, opts), start=1):
            name = _short(expr, 60)
            label = f"[{i:>{width}}/{len(exprs)}] "
            hist = _train_one(task, opt, config, folder, f"-{i}", label, args.quiet)
            if hist.status == "interrupted":
                return _interrupted(folder, hist, "compare")
            histories[name if name not in histories else f"{i}: {name}"] = hist
            rows.append(
                {
                    "optimizer": expr,
                    **_status(hist),
                    "final_train_loss": hist.final("loss"),
                    "final_test_loss": hist.final("test_loss"),
                    "final_test_accuracy": hist.final("test_accuracy"),
                    "steps_per_second": hist.steps_per_second,
                    "wall_time_s": hist.wall_time,
                    "metrics_file": f"metrics-{i}.jsonl",
                }
            )
            if hist.status == "nonfinite":
                print(f"gradax: warning: {_nonfinite_message(hist, f'{label}{name}: ')}", file=sys.stderr)
        rows.sort(key=_ranking_key)
        plot_curves(histories, folder.file("compare.png"), f"{task.name}: {len(exprs)} optimizers, {steps} steps")
        table = _table(rows)
        folder.file("results.md").write_text(table + "\n")
        folder.file("results.json").write_text(json.dumps(rows, indent=2) + "\n")
        out = folder.commit()
    _say("ranked by final test accuracy (then test loss; runs stopped on non-finite numbers last):")
    _say(table)
    _say(f"run folder: {out}  (compare.png, results.md, results.json, metrics-*.jsonl, checkpoints-*/)")
    stopped = [r for r in rows if r["status"] == "nonfinite"]
    if stopped:
        print(
            f"gradax: error: {len(stopped)} of {len(rows)} runs stopped on a non-finite loss or gradient (see the "
            "warnings above and the table)",
            file=sys.stderr,
        )
        return EXIT_NONFINITE
    return 0


def _table(rows) -> str:
    head = "| rank | test acc | test loss | train loss | steps/s | optimizer |"
    lines = [head, "|---:|---:|---:|---:|---:|---|"]
    for r, row in enumerate(rows, start=1):
        lines.append(
            f"| {r} | {row['final_test_accuracy']:.4f} | {row['final_test_loss']:.4f} | "
            f"{row['final_train_loss']:.4f} | {row['steps_per_second']:.1f} | `{_short(row['optimizer'], 200)}`"
            + (f" (non-finite at step {row['stop_step']}) |" if row["status"] == "nonfinite" else " |")
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


RUN_HELP = textwrap.dedent(
    """\
    Checkpoints (Orbax: parameters, optimizer state, data position, metrics so far) are written every
    --checkpoint-every steps and at the end, into the run folder. The run works in a hidden folder (.NAME.partial
    beside --out) that is renamed to --out only when the run is finished. Ctrl-C writes a checkpoint after the
    current step and exits with code 130; after Ctrl-C or a kill, --resume RUN_FOLDER continues from the last
    checkpoint with the same numbers an uninterrupted run gives (also to train a finished run for more --steps).
    A non-finite loss or gradient stops the run at that step (exit code 3, files kept); --on-nonfinite skip skips
    such steps instead (apply_if_finite). Exit codes: 0 done, 2 usage error, 3 non-finite, 130 interrupted."""
)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--task", default=None, help=f"dataset/model: {', '.join(TASKS)} (default: digits)")
    p.add_argument("--steps", type=int, default=None, help="training steps (default: per task, 500 / 300)")
    p.add_argument("--batch-size", type=int, default=None, help="batch size (default: per task, 64 / 32)")
    p.add_argument("--seed", type=int, default=None, help="seed for initialisation and data order (default: 0)")
    p.add_argument("--eval-every", type=int, default=None, help="test evaluation period (default: steps/20)")
    p.add_argument("--out", default=None, help="run folder to create (default: runs/<command>-<task>-<time>)")
    p.add_argument("--overwrite", action="store_true", help="replace --out if it exists (only once the run succeeds)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--checkpoint-every", type=int, default=None, help="steps between checkpoints (default: 100)")
    p.add_argument(
        "--on-nonfinite",
        choices=("stop", "skip"),
        default=None,
        help="on a non-finite loss or gradient: stop the run (exit code 3) or skip the step (default: stop)",
    )
    p.add_argument(
        "--resume",
        default=None,
        metavar="RUN_FOLDER",
        help="continue an interrupted run (or a finished one, with a larger --steps) from its last checkpoint",
    )


def _multi_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--seeds",
        type=int,
        default=None,
        help="runs per optimizer with seeds --seed, --seed+1, ...: mean and spread in the table, bands in the plot",
    )
    p.add_argument(
        "--sweep",
        default=None,
        metavar="F1,F2,...",
        help="learning-rate sweep: multiply each optimizer's learning rate (number or schedule) by each factor; "
        "every optimizer compiles once for all factors and seeds (vmap); the best factor is ranked",
    )
    p.add_argument(
        "--target",
        type=float,
        default=None,
        metavar="LOSS",
        help="rank by the first evaluated step where the test loss is at most LOSS (steps-to-target)",
    )


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
    sub = parser.add_subparsers(dest="command", metavar="{train,compare,leaderboard,schedule,demo,bench}")
    sub.required = True

    p = sub.add_parser(
        "train",
        help="train a model on a shipped dataset",
        formatter_class=_Formatter,
        description="Train the digits MLP or the Shakespeare character transformer with one optimizer; writes "
        "metrics.jsonl, curves.png, lr.png, summary.json and checkpoints/ to a run folder.\n\n"
        + RUN_HELP
        + "\n\n"
        + EXPR_HELP,
        epilog=textwrap.dedent(
            """\
            examples:
              gradax train --task digits --steps 300
              gradax train --task digits --optimizer "sgd(learning_rate=0.1, momentum=0.9, nesterov=True)"
              gradax train --task shakespeare --steps 2000 --optimizer \\
                "chain(clip_by_global_norm(1.0), adamw(learning_rate=warmup_cosine_decay_schedule(0.0, 3e-3, 100, 2000), weight_decay=0.1))"
              gradax train --task digits --optimizer "contrib.muon(learning_rate=0.02)" --out runs/muon
              gradax train --task digits --steps 5000 --checkpoint-every 500 --out runs/long   # Ctrl-C, then:
              gradax train --resume runs/long"""
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
        "with all curves (compare.png) and a table ranked by final test accuracy (results.md).\n\n"
        + RUN_HELP
        + "\n\n"
        + EXPR_HELP,
        epilog=textwrap.dedent(
            """\
            examples:
              gradax compare "sgd(0.1)" "adam(1e-3)" "adamw(1e-3, weight_decay=0.01)" --steps 300
              gradax compare --task shakespeare --steps 200 "adam(3e-3)" "chain(clip_by_global_norm(1.0), adam(3e-3))"
              gradax compare --resume runs/compare-digits-20250101-120000"""
        ),
    )
    p.add_argument("optimizers", nargs="*", metavar="OPTIMIZER", help="two or more optimizer expressions")
    _common(p)
    _multi_options(p)
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser(
        "leaderboard",
        help="rank every optimizer on the nanogpt task (steps to AdamW's loss, final loss, time, state bytes)",
        formatter_class=_Formatter,
        description="Train nanoGPT's CPU Shakespeare model with AdamW (nanoGPT's settings) and every optimizer "
        "of gradax's contrib (SOAP, Shampoo, Kron, the Muon family, Scion, MARS, Adam-mini, LaProp, Grams, SPAM, "
        "APOLLO, CAME, cautious AdamW) plus Lion, Adafactor, schedule-free AdamW, Prodigy and Muon; each at its "
        "best learning-rate factor of a sweep compiled once per optimizer. Writes leaderboard.md, results.md, "
        "sweep.md, curves.png, steps_to_target.png and sweep.png. Default: 2,000 steps, 1 seed, factors "
        "0.5,1,2 (about an hour on a 2-core CPU); --quick: 200 steps, factor 1 (a few minutes).",
        epilog=textwrap.dedent(
            """\
            examples:
              gradax leaderboard --quick
              gradax leaderboard                                  # make leaderboard
              gradax leaderboard --only muon,soap,kron --seeds 3 --sweep 0.5,1,2,4"""
        ),
    )
    p.add_argument("--quick", action="store_true", help="200 steps, one learning rate per optimizer")
    p.add_argument("--only", default=None, help="comma-separated leaderboard names to run (AdamW always runs)")
    p.add_argument("--task", default=None, help="nanogpt (default) or nanogpt-tiny, or any task")
    p.add_argument("--steps", type=int, default=None, help="training steps (default 2000, --quick 200)")
    p.add_argument("--seeds", type=int, default=None, help="seeds per optimizer and learning rate (default 1)")
    p.add_argument("--sweep", default=None, help="learning-rate factors (default 0.5,1,2; --quick 1)")
    p.add_argument("--eval-every", type=int, default=None, help="validation period (default steps/40)")
    p.add_argument("--out", default=None, help="run folder (default: runs/leaderboard-<task>-<time>)")
    p.add_argument("--overwrite", action="store_true", help="replace --out if it exists")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=lambda a: cmd_leaderboard(a, get_task))

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
    except (CliError, TaskError, OutputError, LeaderboardError) as e:
        print(f"gradax: error: {e}", file=sys.stderr)
    except KeyboardInterrupt:
        print("gradax: interrupted", file=sys.stderr)
        return 130
    return 2
