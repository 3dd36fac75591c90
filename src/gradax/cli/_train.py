"""``gradax train``, and what it shares with ``gradax compare``: one checkpointed run and how it is reported."""

from __future__ import annotations

import contextlib
import json
import math
import sys

from ._checkpoint import Checkpoints, RunFolder
from ._common import EXIT_OK, short
from ._common import say as _say
from ._expr import parse_optimizer
from ._mesh import Placement, human_bytes, parse_mesh, placement_for, request_devices
from ._run import EXIT_INTERRUPTED, EXIT_NONFINITE, History, plot_curves, plot_values, train
from ._settings import open_folder, settings
from ._tasks import get_task

#: Widths (characters) of an optimizer expression in the run's header line, in plot legends and in plot titles.
HEADER_WIDTH, LEGEND_WIDTH = 200, 60


def train_one(
    task, opt, config, folder: RunFolder, suffix: str, label: str, quiet: bool, placement: Placement | None = None
) -> History:
    """Train one optimizer with the run's settings; metrics and checkpoints go to ``folder`` (names end in ``suffix``)."""
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
            placement=placement,
        )
    finally:
        checkpoints.close()


def interrupted(folder: RunFolder, hist: History, command: str) -> int:
    """Say where the checkpoint of a Ctrl-C'd run is and how to continue it; the exit code."""
    print(
        f"gradax: interrupted after step {hist.stop_step}; checkpoint written to {folder.work}. Continue with: "
        f"gradax {command} --resume {folder.path}",
        file=sys.stderr,
    )
    return EXIT_INTERRUPTED


def nonfinite_message(hist: History, what: str) -> str:
    """Why a run stopped on a non-finite number, and what to try."""
    last = hist.last_finite_loss()
    rec = hist.records[-1]
    before = f"the last finite loss was {last[1]:.6g} at step {last[0]}" if last else "no step had a finite loss"
    return (
        f"{what}the loss or a gradient became non-finite at step {hist.stop_step} (loss {rec['loss']}); {before}. "
        "The run stopped there. Try a lower learning rate, gradient clipping (chain(clip_by_global_norm(1.0), ...)) "
        "or skipping such steps with --on-nonfinite skip (wraps the optimizer in apply_if_finite)"
    )


def status(hist: History) -> dict:
    """How a run ended, for ``summary.json`` and ``results.json``."""
    last = hist.last_finite_loss()
    return {
        "status": hist.status,
        "stop_step": hist.stop_step,
        "last_finite_loss": last[1] if last else None,
        "skipped_steps": hist.skipped,
    }


@contextlib.contextmanager
def keep_resumable(folder: RunFolder):
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


#: At most this many of the state leaves that stay whole on every device are named in the run's header.
FALLBACKS_SHOWN = 3


def _state_memory(placement: Placement, opt, task, seed: int) -> list[str]:
    """The optimizer state's bytes per device under ``placement`` beside the replicated figure (from shapes only),
    and the leaves that could not be split as asked."""
    import jax

    import gradax

    params = jax.eval_shape(task.init, jax.random.PRNGKey(seed))
    state = jax.eval_shape(opt.init, params)
    mine = gradax.sharding.bytes_per_device(state, placement.state(opt, params))
    whole = gradax.sharding.bytes_per_device(state, jax.tree.map(lambda _: placement.replicated(), state))
    lines = [f"optimizer state per device: {human_bytes(mine)} (replicated: {human_bytes(whole)})"]
    if placement.zero:
        kept = placement.fallbacks(opt, params)
        named = "; ".join(f"{f.path} {f.shape}: {f.reason}" for f in kept[:FALLBACKS_SHOWN])
        more = f"; and {len(kept) - FALLBACKS_SHOWN} more" if len(kept) > FALLBACKS_SHOWN else ""
        if kept:
            lines.append(f"held whole on each device ({len(kept)} state leaves): {named}{more}")
    return lines


def _summary(task, expr: str, config: dict, hist: History) -> dict:
    summary = {
        "task": task.name,
        "optimizer": expr,
        "steps": config["steps"],
        "batch_size": config["batch_size"],
        "seed": config["seed"],
        **status(hist),
        "final_train_loss": hist.final("loss"),
        "final_train_accuracy": hist.final("accuracy"),
        "final_test_loss": hist.final("test_loss"),
        "final_test_accuracy": hist.final("test_accuracy"),
        "steps_per_second": hist.steps_per_second,
        "wall_time_s": hist.wall_time,
    }
    if hist.state_bytes is not None:
        summary.update(
            mesh=config["mesh"],
            zero=config["zero"],
            state_bytes_per_device=hist.state_bytes[0],
            state_bytes_replicated=hist.state_bytes[1],
        )
    return summary


def _report(summary: dict, hist: History, out, lr_plotted: bool) -> None:
    _say(
        f"final: train loss {summary['final_train_loss']:.4f}, train acc {summary['final_train_accuracy']:.4f}, "
        f"test loss {summary['final_test_loss']:.4f}, test acc {summary['final_test_accuracy']:.4f}"
    )
    if hist.skipped:
        _say(f"skipped: {hist.skipped} steps with a non-finite loss or gradient (--on-nonfinite skip)")
    if hist.state_bytes is not None:
        mine, whole = hist.state_bytes
        _say(f"optimizer state per device (measured): {human_bytes(mine)} (replicated: {human_bytes(whole)})")
    _say(f"speed: {hist.steps_per_second:.1f} steps/s, wall time {hist.wall_time:.1f} s")
    _say(
        f"run folder: {out}  (metrics.jsonl, curves.png{', lr.png' if lr_plotted else ''}, summary.json, checkpoints/)"
    )
    if not lr_plotted:
        _say("note: learning rate not found in the optimizer state (wrap the optimizer with inject_hyperparams)")


def cmd_train(args) -> int:
    config, resume = settings(args, "train")
    mesh = config.get("mesh")
    if mesh is not None:  # before anything starts JAX's backends: the CPU can still become several devices
        request_devices(math.prod(parse_mesh(mesh).values()))
    task = get_task(config["task"])
    steps, expr = config["steps"], config["optimizer"]
    opt = parse_optimizer(expr).value
    task.sampler(config["seed"], config["batch_size"])  # refuse an impossible batch size before writing anything
    placement = placement_for(mesh, config.get("zero", False), config["batch_size"])
    folder = open_folder(config, args, resume)
    with keep_resumable(folder):
        _say(f"task: {task.description}")
        _say(f"optimizer: {short(expr, HEADER_WIDTH)}")
        _say(f"steps: {steps}, batch size: {config['batch_size']}, seed: {config['seed']}")
        if placement is not None:
            _say(placement.describe())
            for line in _state_memory(placement, opt, task, config["seed"]):
                _say(line)
        hist = train_one(task, opt, config, folder, "", "", args.quiet, placement)
        if hist.status == "interrupted":
            return interrupted(folder, hist, "train")
        plot_curves({short(expr, LEGEND_WIDTH): hist}, folder.file("curves.png"), f"{task.name}: {short(expr)}")
        lr_steps, lr = hist.series("learning_rate")
        if lr:
            plot_values(lr_steps, {"learning rate": lr}, folder.file("lr.png"), "learning rate (from optimizer state)")
        summary = _summary(task, expr, config, hist)
        folder.file("summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        out = folder.commit()
    if hist.status == "nonfinite":
        print(f"gradax: error: {nonfinite_message(hist, '')}; files so far are in {out}", file=sys.stderr)
        return EXIT_NONFINITE
    _report(summary, hist, out, bool(lr))
    return EXIT_OK
