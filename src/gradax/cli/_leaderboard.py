"""``gradax compare --seeds/--sweep/--target`` and ``gradax leaderboard``: ranked, multi-seed, swept comparisons.

Both drive :func:`gradax.cli._multi.run_batched` (one compilation per optimizer for all its seeds and sweep values)
and write a run folder with ``results.md`` (the ranked table), ``sweep.md``, ``results.json``, ``runs.npz`` (every
run's curves), ``curves.png`` (loss curves with seed bands), ``steps_to_target.png`` and ``sweep.png``.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Literal, NamedTuple

import numpy as np

from ._checkpoint import RunFolder
from ._common import default_out, short
from ._common import say as _say
from ._multi import (
    LeaderboardError,
    best_row,
    parse_factors,
    plot_seed_bands,
    plot_steps_to_target,
    plot_sweep,
    ranked_table,
    ranking_key,
    run_batched,
    split_learning_rate,
    summarize,
    sweep_table,
)
from ._nanogpt import NANOGPT, adamw_expression, for_steps

#: Width (characters) of an optimizer expression used as a run's name in progress lines and legends.
NAME_WIDTH = 40


def _name(expr: str, n: int = NAME_WIDTH) -> str:
    return short(expr, n)


def run_many(
    task,
    exprs: list[str],
    names: list[str],
    *,
    seeds: list[int],
    factors: list[float],
    steps: int,
    batch_size: int,
    eval_every: int,
    target: float | Literal["first"] | None,
    out: str,
    overwrite: bool,
    quiet: bool,
    title: str,
    config: dict,
) -> tuple[Path, list[dict], float | None]:
    """Train every expression (batched over seeds x factors), rank them and write the run folder.

    ``target`` is a test loss, None (rank by final test loss) or ``"first"``: the best mean final test loss of the
    first expression (the leaderboard's AdamW). Returns the folder, the ranked best rows and the target used.
    """
    for e in exprs:  # refuse a bad expression before any training
        split_learning_rate(e)
    folder = RunFolder.create(out, overwrite=overwrite)
    try:
        folder.write_config(config)
        results, all_rows, failed = [], [], []
        kept_exprs, kept_names = [], []
        for i, (expr, name) in enumerate(zip(exprs, names), start=1):
            label = f"[{i}/{len(exprs)}] {name} "
            if quiet:
                _say(f"{label}...")
            try:
                res = run_batched(
                    task,
                    expr,
                    seeds=seeds,
                    factors=factors,
                    steps=steps,
                    batch_size=batch_size,
                    eval_every=eval_every,
                    label=label,
                    progress=not quiet,
                )
            except (LeaderboardError, KeyboardInterrupt):
                raise
            except Exception as e:  # one optimizer's failure must not lose the others' runs
                reason = f"{type(e).__name__}: {e}".splitlines()[0][:300]
                _say(f"{label}failed, left out of the ranking: {reason}")
                failed.append({"name": name, "optimizer": expr, "error": reason})
                continue
            results.append(res)
            all_rows.append(summarize(res, None))
            kept_exprs.append(expr)
            kept_names.append(name)
        if not results:
            raise LeaderboardError("every optimizer failed: " + "; ".join(f"{f['name']}: {f['error']}" for f in failed))
        exprs, names = kept_exprs, kept_names
        if target == "first":
            first = best_row(all_rows[0])["final_test_loss_mean"]
            target = first if math.isfinite(first) else None
        best = []
        for i, (res, name) in enumerate(zip(results, names)):
            all_rows[i] = rows = summarize(res, target)
            row = best_row(rows)
            row["name"] = name
            best.append((row, res, name))
        best.sort(key=lambda b: ranking_key(b[0]))
        table = ranked_table([b[0] for b in best], target)
        if failed:
            table += "\n\nFailed, not ranked:\n\n" + "\n".join(f"- `{f['optimizer']}`: {f['error']}" for f in failed)
        folder.file("results.md").write_text(table + "\n")
        folder.file("sweep.md").write_text(sweep_table(all_rows) + "\n")
        folder.file("results.json").write_text(
            json.dumps({"target": target, "ranked": [b[0] for b in best], "all": all_rows, "failed": failed}, indent=2)
            + "\n"
        )
        np.savez_compressed(
            folder.file("runs.npz"),
            **{f"{k}_{i}": getattr(r, k) for i, r in enumerate(results, 1) for k in ("train_loss", "test_loss")},
            **{f"eval_steps_{i}": r.eval_steps for i, r in enumerate(results, 1)},
        )
        plot_seed_bands([(n, res, row["lr_factor"]) for row, res, n in best], folder.file("curves.png"), title, target)
        if target is not None:
            plot_steps_to_target([b[0] for b in best], [b[2] for b in best], folder.file("steps_to_target.png"), title)
        plot_sweep(all_rows, names, folder.file("sweep.png"), f"{title}: learning-rate sweep")
        path = folder.commit()
    except BaseException:
        folder.abandon()
        raise
    return path, [b[0] for b in best], target


def cmd_compare_multi(args, task, steps: int, batch_size: int, eval_every: int) -> int:
    """``gradax compare`` with ``--seeds``, ``--sweep`` or ``--target``."""
    if args.resume is not None:
        raise LeaderboardError(
            "--resume continues a one-seed compare without --sweep; runs with --seeds, --sweep or --target are not "
            "checkpointed. Run the command again"
        )
    exprs = args.optimizers
    if len(exprs) < 2:
        raise LeaderboardError("compare needs at least two optimizer expressions")
    n = args.seeds or 1
    if n < 1:
        raise LeaderboardError(f"--seeds must be a positive integer; got {n}")
    seed = 0 if args.seed is None else args.seed
    factors = parse_factors(args.sweep) if args.sweep else [1.0]
    out = args.out or str(Path("runs") / f"compare-{task.name}-{time.strftime('%Y%m%d-%H%M%S')}")
    config = {
        "command": "compare",
        "task": task.name,
        "steps": steps,
        "batch_size": batch_size,
        "seeds": list(range(seed, seed + n)),
        "sweep": factors,
        "target": args.target,
        "optimizers": exprs,
    }
    _say(
        f"task: {task.description}; {steps} steps, batch {batch_size}, seeds {seed}..{seed + n - 1}, "
        f"learning-rate factors {factors} (one compilation per optimizer)"
    )
    path, rows, target = run_many(
        task,
        exprs,
        [_name(e) for e in exprs],
        seeds=list(range(seed, seed + n)),
        factors=factors,
        steps=steps,
        batch_size=batch_size,
        eval_every=eval_every,
        target=args.target,
        out=out,
        overwrite=args.overwrite,
        quiet=args.quiet,
        title=f"{task.name}: {len(exprs)} optimizers, {n} seeds, {steps} steps",
        config=config,
    )
    how = "steps to the target test loss, then " if target is not None else ""
    _say(f"ranked by {how}mean final test loss over {n} seed(s), each at its best learning-rate factor:")
    _say(ranked_table(rows, target))
    if len(factors) > 1:
        _say(f"sweep: {path / 'sweep.md'}")
    _say(
        f"run folder: {path}  (results.md, sweep.md, results.json, runs.npz, curves.png, sweep.png"
        + (", steps_to_target.png)" if target is not None else ")")
    )
    return 0


# ----------------------------------------------------------------------------------------------------------------
# leaderboard
# ----------------------------------------------------------------------------------------------------------------


#: Every leaderboard schedule decays to this fraction of its peak, as nanoGPT's (1e-3 to 1e-4).
FINAL_LR_FRACTION = NANOGPT.min_lr / NANOGPT.learning_rate
#: The validation loss is evaluated this many times over a leaderboard run (``--eval-every`` when not given); one
#: evaluation of the 200 validation windows costs about five training steps.
EVALUATIONS = 25


def _sched(peak: float, warmup: int, steps: int) -> str:
    return f"warmup_cosine_decay_schedule(0.0, {peak:g}, {warmup}, {steps}, {peak * FINAL_LR_FRACTION:g})"


def leaderboard_entries(steps: int, warmup: int) -> list[tuple[str, str]]:
    """(name, expression) of every leaderboard optimizer; AdamW (nanoGPT's settings) first, it sets the target.

    Every one gets the same gradient clipping and warmup + cosine schedule (peak learning rate from its paper or
    reference implementation, then the sweep), except schedule-free AdamW (its own warmup, no schedule).
    """

    def s(peak):
        return _sched(peak, warmup, steps)

    def clip(opt):
        return f"chain(clip_by_global_norm(1.0), {opt})"

    wd = "mask=path_mask('ln_', invert=True)"
    return [
        ("adamw", adamw_expression(NANOGPT, steps)),
        ("lion", clip(f"lion({s(1e-4)}, b1=0.9, b2=0.99, weight_decay=1.0, {wd})")),
        ("adafactor", clip(f"adafactor({s(1e-2)})")),
        ("schedule_free_adamw", clip(f"contrib.schedule_free_adamw(3e-3, warmup_steps={warmup}, b2=0.99)")),
        ("prodigy", clip(f"contrib.prodigy({s(1.0)}, weight_decay=0.1)")),
        ("muon", clip(f"contrib.muon({s(0.02)}, adam_learning_rate={s(1e-3)})")),
        ("normuon", clip(f"contrib.normuon({s(0.02)})")),
        ("adamuon", clip(f"contrib.adamuon({s(0.02)})")),
        ("muon_clip", clip(f"contrib.muon_clip({s(0.02)})")),
        ("scion", clip(f"contrib.scion({s(0.01)})")),
        ("soap", clip(f"contrib.soap({s(3e-3)}, b2=0.99)")),
        ("shampoo", clip(f"contrib.shampoo({s(1e-3)})")),
        ("kron", clip(f"contrib.kron({s(1e-3)})")),
        ("cautious_adamw", clip(f"cautious(adamw({s(1e-3)}, b2=0.99, weight_decay=0.1, {wd}))")),
        ("mars", clip(f"contrib.mars({s(3e-3)})")),
        ("adam_mini", clip(f"contrib.adam_mini({s(1e-3)}, b2=0.99, n_heads={NANOGPT.n_head})")),
        ("laprop", clip(f"contrib.laprop({s(1e-3)})")),
        ("grams", clip(f"contrib.grams({s(1e-3)})")),
        ("spam", clip(f"contrib.spam({s(1e-3)})")),
        ("apollo", clip(f"contrib.apollo({s(1e-2)})")),
        ("came", clip(f"contrib.came({s(2e-4)})")),
    ]


class _Preset(NamedTuple):
    steps: int
    seeds: int
    sweep: str


#: What ``gradax leaderboard`` runs by default and with ``--quick``. A training step of the nanoGPT model costs about
#: 0.09 s per run on a 2-core CPU, so nanoGPT's 2,000 iterations for 21 optimizers x 3 learning rates would take
#: over three hours; the default keeps the three-point sweep and cuts the budget to 500 steps (about an hour).
FULL = _Preset(steps=500, seeds=1, sweep="0.5,1,2")
QUICK = _Preset(steps=200, seeds=1, sweep="1")


def cmd_leaderboard(args, get_task) -> int:
    preset = QUICK if args.quick else FULL
    task = get_task(args.task or "nanogpt")
    steps = args.steps or preset.steps
    n = args.seeds or preset.seeds
    if steps < 1 or n < 1:
        raise LeaderboardError(f"--steps and --seeds must be positive integers; got {steps} and {n}")
    factors = parse_factors(args.sweep or preset.sweep)
    warmup = for_steps(NANOGPT, steps).warmup_iters
    entries = leaderboard_entries(steps, warmup)
    if args.only:
        wanted = [w.strip() for w in args.only.split(",") if w.strip()]
        known = [e[0] for e in entries]
        unknown = [w for w in wanted if w not in known]
        if unknown:
            raise LeaderboardError(f"--only must name leaderboard optimizers ({', '.join(known)}); got {unknown}")
        entries = [e for e in entries if e[0] in wanted or e[0] == "adamw"]  # AdamW sets the target
    eval_every = args.eval_every or max(1, steps // EVALUATIONS)
    out = args.out or default_out("leaderboard", task.name)
    config = {
        "command": "leaderboard",
        "task": task.name,
        "steps": steps,
        "batch_size": task.default_batch_size,
        "seeds": list(range(n)),
        "sweep": factors,
        "eval_every": eval_every,
        "optimizers": dict(entries),
    }
    _say(
        f"leaderboard: {task.description}\n  {len(entries)} optimizers, {steps} steps, batch "
        f"{task.default_batch_size}, seeds 0..{n - 1}, learning-rate factors {factors}, test loss every "
        f"{eval_every} steps; target: AdamW's final validation loss"
    )
    path, rows, target = run_many(
        task,
        [e[1] for e in entries],
        [e[0] for e in entries],
        seeds=list(range(n)),
        factors=factors,
        steps=steps,
        batch_size=task.default_batch_size,
        eval_every=eval_every,
        target="first",
        out=out,
        overwrite=args.overwrite,
        quiet=args.quiet,
        title=f"{task.name}: {steps} steps, {n} seed(s)",
        config=config,
    )
    md = leaderboard_table(rows, target, steps, n, factors, task)
    (path / "leaderboard.md").write_text(md + "\n")
    _say(md)
    _say(f"run folder: {path}  (leaderboard.md, results.md, sweep.md, curves.png, steps_to_target.png, sweep.png)")
    return 0


def leaderboard_table(rows: list[dict], target, steps: int, n: int, factors: list[float], task) -> str:
    """The leaderboard in markdown, with the settings that produced it stated above the table."""
    t = "not reached by AdamW" if target is None else f"{target:.4f}"
    lines = [
        f"Task: {task.description}. {steps} steps, {n} seed(s), learning-rate factors {factors} around each "
        f"optimizer's default peak (best kept). Target: AdamW's final validation loss ({t}).",
        "",
        "| rank | optimizer | steps to AdamW's final loss | final val loss | peak lr | wall s/run | state bytes |",
        "|---:|---|---:|---:|---:|---:|---:|",
    ]
    for r, row in enumerate(rows, start=1):
        stt = row.get("steps_to_target_mean")
        stt = "not reached" if stt is None else f"{stt:.0f}"
        lr = "" if row["peak_lr"] is None else f"{row['peak_lr']:.3g}"
        loss = f"{row['final_test_loss_mean']:.4f}"
        if n > 1:
            loss += f" ± {row['final_test_loss_std']:.4f}"
        if row["nonfinite_runs"]:
            loss += " (non-finite)"
        lines.append(
            f"| {r} | {row['name']} | {stt} | {loss} | {lr} | {row['wall_time_per_run_s']:.1f} | "
            f"{row['state_bytes']:,} |"
        )
    return "\n".join(lines)
