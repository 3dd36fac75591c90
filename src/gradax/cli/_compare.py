"""``gradax compare``: several optimizers on one task, same seed and data order, ranked in one table and one plot.

With ``--seeds``, ``--sweep`` or ``--target`` the comparison is batched instead (:mod:`gradax.cli._leaderboard`).
"""

from __future__ import annotations

import json
import math
import sys

from ._common import EXIT_OK, default_eval_every, positive, short
from ._common import say as _say
from ._expr import parse_optimizer
from ._leaderboard import cmd_compare_multi
from ._run import EXIT_NONFINITE, plot_curves
from ._settings import open_folder, settings
from ._tasks import get_task
from ._train import HEADER_WIDTH, LEGEND_WIDTH, interrupted, keep_resumable, nonfinite_message, status, train_one


def _ranking_key(row):
    acc = row["final_test_accuracy"]
    loss = row["final_test_loss"]
    stopped = row["status"] == "nonfinite"
    return (stopped, -(acc if math.isfinite(acc) else -1.0), loss if math.isfinite(loss) else float("inf"))


def _table(rows) -> str:
    head = "| rank | test acc | test loss | train loss | steps/s | optimizer |"
    lines = [head, "|---:|---:|---:|---:|---:|---|"]
    for r, row in enumerate(rows, start=1):
        lines.append(
            f"| {r} | {row['final_test_accuracy']:.4f} | {row['final_test_loss']:.4f} | "
            f"{row['final_train_loss']:.4f} | {row['steps_per_second']:.1f} | `{short(row['optimizer'], HEADER_WIDTH)}`"
            + (f" (non-finite at step {row['stop_step']}) |" if row["status"] == "nonfinite" else " |")
        )
    return "\n".join(lines)


def _batched(args) -> int:
    """``compare --seeds/--sweep/--target``: one compiled step per optimizer for all its runs."""
    if args.resume is not None:
        return cmd_compare_multi(args, None, 0, 0, 0)  # refuses --resume with a message
    task = get_task(args.task or "digits")
    steps = positive("--steps", args.steps) or task.default_steps
    batch = positive("--batch-size", args.batch_size) or task.default_batch_size
    task.sampler(0, batch)
    every = positive("--eval-every", args.eval_every) or default_eval_every(steps)
    return cmd_compare_multi(args, task, steps, batch, every)


def _row(expr: str, i: int, hist) -> dict:
    return {
        "optimizer": expr,
        **status(hist),
        "final_train_loss": hist.final("loss"),
        "final_test_loss": hist.final("test_loss"),
        "final_test_accuracy": hist.final("test_accuracy"),
        "steps_per_second": hist.steps_per_second,
        "wall_time_s": hist.wall_time,
        "metrics_file": f"metrics-{i}.jsonl",
    }


def cmd_compare(args) -> int:
    if (args.seeds or 1) != 1 or args.sweep is not None or args.target is not None:
        return _batched(args)
    config, resume = settings(args, "compare")
    task = get_task(config["task"])
    steps, batch, exprs = config["steps"], config["batch_size"], config["optimizers"]
    opts = [parse_optimizer(e).value for e in exprs]  # refuse bad expressions before any training
    task.sampler(config["seed"], batch)
    folder = open_folder(config, args, resume)
    with keep_resumable(folder):
        _say(f"task: {task.description}; {steps} steps, batch {batch}, seed {config['seed']} (same data order for all)")
        histories, rows = {}, []
        width = len(str(len(exprs)))
        for i, (expr, opt) in enumerate(zip(exprs, opts), start=1):
            name = short(expr, LEGEND_WIDTH)
            label = f"[{i:>{width}}/{len(exprs)}] "
            hist = train_one(task, opt, config, folder, f"-{i}", label, args.quiet)
            if hist.status == "interrupted":
                return interrupted(folder, hist, "compare")
            histories[name if name not in histories else f"{i}: {name}"] = hist
            rows.append(_row(expr, i, hist))
            if hist.status == "nonfinite":
                print(f"gradax: warning: {nonfinite_message(hist, f'{label}{name}: ')}", file=sys.stderr)
        rows.sort(key=_ranking_key)
        plot_title = f"{task.name}: {len(exprs)} optimizers, {steps} steps"
        plot_curves(histories, folder.file("compare.png"), plot_title)
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
    return EXIT_OK
