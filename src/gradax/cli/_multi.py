"""Several seeds and a learning-rate sweep of one optimizer, batched (``jax.vmap``, or ``lax.map`` for an optimizer
whose update branches) into one compiled step.

``gradax compare --seeds N --sweep F1,F2,...`` and ``gradax leaderboard`` run, for each optimizer expression, one
training step compiled once for all of its runs (seeds x sweep values). The optimizer is built through
``inject_hyperparams`` with its learning rate held in the state as data; before each update the step writes
``factor * schedule(step)`` there (the schedule being whatever the expression gave as ``learning_rate``, evaluated at
the count before the increment as ``inject_hyperparams`` does), so a new learning rate is a new array, not a new
program (the recompile per value that Optax users meet, optax #577, does not happen). Each seed has its own
initialisation and data order, the same for every optimizer and every sweep value.
"""

from __future__ import annotations

import ast
import inspect
import math
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import gradax

from ._common import short
from ._expr import ExpressionError, _Builder, parse, parse_optimizer
from ._run import PLOT_DPI, SMOOTHING_WINDOWS, Progress, _strong, step_compiler_options
from ._tasks import Task


def split_learning_rate(expr: str) -> tuple[str, Any]:
    """``expr`` with its one ``learning_rate`` argument replaced by ``1.0``, and that argument's value.

    The value is a number or a schedule (a callable of the step). Raises :class:`ExpressionError` when the expression
    has no call taking a ``learning_rate`` or more than one.
    """
    src = expr.strip()
    parse(src)  # first: the usual refusals and messages
    tree = ast.parse(src, mode="eval")
    builder = _Builder(src, wrap_lr=False)
    found: list[tuple[ast.Call, ast.keyword | int]] = []  # the call, and the keyword or the position of the rate
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or isinstance(node.func, ast.Call):
            continue
        _, fn = builder.lookup(node.func)
        try:
            names = list(inspect.signature(fn).parameters)
        except (TypeError, ValueError):
            continue
        if "learning_rate" not in names:
            continue
        for kw in node.keywords:
            if kw.arg == "learning_rate":
                found.append((node, kw))
        idx = names.index("learning_rate")
        if len(node.args) > idx:
            found.append((node, idx))
    if len(found) != 1:
        what = "no call takes" if not found else f"{len(found)} calls take"
        raise ExpressionError(
            f"--sweep and --seeds need exactly one learning_rate in the expression; {what} one. Give one optimizer "
            "with a learning_rate (other learning rates, such as muon's adam_learning_rate, are kept as they are)",
            src,
        )
    node, where = found[0]
    value_node = where.value if isinstance(where, ast.keyword) else node.args[where]
    value = parse(ast.unparse(value_node)).value
    if isinstance(where, ast.keyword):
        where.value = ast.Constant(1.0)
    else:
        node.args[where] = ast.Constant(1.0)
    if not (isinstance(value, (int, float)) and not isinstance(value, bool)) and not callable(value):
        raise ExpressionError(f"learning_rate must be a number or a schedule; got {value!r}", src)
    return ast.unparse(tree), value


def _lr_at(schedule: Any, count: jax.Array) -> jax.Array:
    if callable(schedule):
        return jnp.asarray(schedule(count), jnp.float32)
    return jnp.asarray(schedule, jnp.float32)


@dataclass
class MultiResult:
    """The runs of one optimizer expression: ``seeds x factors``, run ``r`` = seed ``r // F``, factor ``r % F``."""

    expr: str
    seeds: list[int]
    factors: list[float]
    base_lr: float | None  # the learning rate at its peak over the run (a number, or the schedule's maximum)
    train_loss: np.ndarray  # [runs, steps]
    eval_steps: np.ndarray  # [evals]
    test_loss: np.ndarray  # [runs, evals]
    test_acc: np.ndarray  # [runs, evals]
    wall_time: float  # seconds for all runs together (batched), first step included
    compile_time: float  # seconds of the first step (tracing and compilation)
    state_bytes: int  # optimizer state of one run
    traces: int  # how many times the step was traced (1: one compilation for every run)
    extra: dict = field(default_factory=dict)

    @property
    def runs(self) -> int:
        return len(self.seeds) * len(self.factors)

    def first_nonfinite(self) -> list[int | None]:
        """Per run, the first step with a non-finite training loss (None if every step was finite)."""
        out = []
        for row in self.train_loss:
            bad = np.flatnonzero(~np.isfinite(row))
            out.append(int(bad[0]) + 1 if bad.size else None)
        return out

    def steps_to_target(self, target: float) -> np.ndarray:
        """Per run, the first evaluated step whose test loss is at most ``target`` (NaN if never)."""
        out = np.full(self.runs, np.nan)
        for r, row in enumerate(self.test_loss):
            hit = np.flatnonzero(np.isfinite(row) & (row <= target))
            if hit.size:
                out[r] = self.eval_steps[hit[0]]
        return out


def _state_with_learning_rate(opt: Any, task: Task, expr: str) -> Any:
    """``opt``'s state for ``task`` (abstract), which must hold a ``learning_rate`` (else an ExpressionError)."""
    try:
        probe = jax.eval_shape(opt.init, jax.eval_shape(task.init, jax.random.PRNGKey(0)))
        if gradax.tree.get(probe, "learning_rate") is None:
            raise KeyError("learning_rate")
    except Exception:  # the learning rate cannot be held in the state
        raise ExpressionError(
            "--sweep and --seeds need an optimizer whose learning_rate inject_hyperparams can hold as data; this one "
            "cannot. Run it without --sweep/--seeds",
            expr,
        ) from None
    return probe


def _initial_runs(task: Task, opt: Any, seeds: list[int], n_f: int) -> tuple[Any, Any]:
    """Params and state of every run stacked on a leading axis: seed-major, ``n_f`` factors per seed."""
    keys = jnp.stack([jax.random.PRNGKey(s) for s in seeds])
    params = jax.vmap(task.init)(keys)
    params = _strong(jax.tree.map(lambda x: jnp.repeat(x, n_f, axis=0), params))
    return params, _strong(jax.vmap(opt.init)(params))


def _branches(jaxpr: Any) -> bool:
    """Whether a jaxpr, or one nested in it (a loop's body, a pjit's callee), holds a ``cond``/``switch``."""
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "cond":
            return True
        for value in eqn.params.values():
            for sub in value if isinstance(value, (tuple, list)) else (value,):
                inner = getattr(sub, "jaxpr", sub)  # a ClosedJaxpr holds its Jaxpr
                if hasattr(inner, "eqns") and _branches(inner):
                    return True
    return False


def _sweep_step(task: Task, opt: Any, schedule: Any, lr_dtype: Any, traces: list[int], params: Any, state: Any) -> Any:
    """The jitted step of all runs at once: each writes ``factor * schedule(count)`` into its state's learning rate,
    then takes an ordinary step. ``traces[0]`` counts the traces (one per compilation).

    The runs are batched with ``jax.vmap``, unless the optimizer's update branches (``lax.cond``/``switch``, as SOAP's
    and Shampoo's refresh or Kron's preconditioner update do): ``vmap`` turns a branch on batched state into a select
    that computes every branch on every step, so those run one after another with ``lax.map`` in the same program.
    """

    def one(params, opt_state, xb, yb, factor, count):
        traces[0] += 1
        lr = (factor * _lr_at(schedule, count)).astype(lr_dtype)
        opt_state = gradax.tree.set(opt_state, learning_rate=lr)
        (loss, _), grads = jax.value_and_grad(task.loss_and_acc, has_aux=True)(params, xb, yb)
        updates, opt_state = opt.update(grads, opt_state, params)
        return gradax.apply_updates(params, updates), opt_state, loss

    first = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape[1:], x.dtype), (params, state))
    branching = _branches(jax.make_jaxpr(lambda p, s: opt.update(p, s, p))(*first).jaxpr)

    def batched(params, opt_state, xb, yb, factor, count):
        if not branching:
            return jax.vmap(one, in_axes=(0, 0, 0, 0, 0, None))(params, opt_state, xb, yb, factor, count)
        return jax.lax.map(lambda a: one(a[0], a[1], a[2], a[3], a[4], count), (params, opt_state, xb, yb, factor))

    return jax.jit(batched, donate_argnums=(0, 1), compiler_options=step_compiler_options())


def run_batched(
    task: Task,
    expr: str,
    *,
    seeds: list[int],
    factors: list[float],
    steps: int,
    batch_size: int,
    eval_every: int,
    label: str = "",
    progress: bool = True,
) -> MultiResult:
    """Train ``expr`` on ``task`` for every seed and learning-rate factor at once; see the module docstring."""
    rewritten, schedule = split_learning_rate(expr)
    opt = parse_optimizer(rewritten).value
    n_f = len(factors)
    runs = len(seeds) * n_f
    probe = _state_with_learning_rate(opt, task, expr)
    state_bytes = gradax.sharding.bytes_per_device(probe)
    grid = np.arange(steps, dtype=np.int32)
    base_lr = float(np.max(np.asarray(jax.vmap(lambda c: _lr_at(schedule, c))(grid)))) if steps else None
    params, opt_state = _initial_runs(task, opt, seeds, n_f)
    factor_arr = jnp.asarray(np.tile(np.asarray(factors, np.float32), len(seeds)))
    traces = [0]
    step_fn = _sweep_step(task, opt, schedule, gradax.tree.get(probe, "learning_rate").dtype, traces, params, opt_state)
    eval_fn = jax.jit(jax.vmap(task.loss_and_acc, in_axes=(0, None, None)))
    x_test, y_test = (jnp.asarray(a) for a in task.test_data)
    samplers = [task.sampler(s, batch_size) for s in seeds]
    bar = Progress(steps, label) if progress else None
    losses, eval_steps, test_loss, test_acc = [], [], [], []
    t0 = time.perf_counter()
    compile_time = 0.0
    for i in range(1, steps + 1):
        batches = [next(s) for s in samplers]
        xb = np.repeat(np.stack([b[0] for b in batches]), n_f, axis=0)
        yb = np.repeat(np.stack([b[1] for b in batches]), n_f, axis=0)
        params, opt_state, loss = step_fn(params, opt_state, xb, yb, factor_arr, jnp.int32(i - 1))
        losses.append(loss)
        if i == 1:
            loss.block_until_ready()
            compile_time = time.perf_counter() - t0
        if i % eval_every == 0 or i == steps:
            tl, ta = eval_fn(params, x_test, y_test)
            eval_steps.append(i)
            test_loss.append(np.asarray(tl, np.float64))
            test_acc.append(np.asarray(ta, np.float64))
            if bar is not None:
                bar.update(i, loss=float(np.nanmean(np.asarray(loss))), test_loss=float(np.nanmin(test_loss[-1])))
    train_loss = np.asarray(jnp.stack(losses, axis=1), np.float64) if losses else np.zeros((runs, 0))
    wall = time.perf_counter() - t0
    return MultiResult(
        expr=expr,
        seeds=list(seeds),
        factors=list(factors),
        base_lr=base_lr,
        train_loss=train_loss,
        eval_steps=np.asarray(eval_steps, np.int64),
        test_loss=np.stack(test_loss, axis=1) if test_loss else np.zeros((runs, 0)),
        test_acc=np.stack(test_acc, axis=1) if test_acc else np.zeros((runs, 0)),
        wall_time=wall,
        compile_time=compile_time,
        state_bytes=state_bytes,
        traces=traces[0],
    )


def _finite_or_inf(x: float) -> float:
    return x if math.isfinite(x) else float("inf")


#: The final train loss of a batched run is the mean over its last 1/TRAIN_LOSS_TAIL_PARTS of steps.
TRAIN_LOSS_TAIL_PARTS = 10


def summarize(res: MultiResult, target: float | None) -> list[dict]:
    """One row per sweep factor: mean and spread over the seeds of the final losses and of steps-to-target."""
    n_f = len(res.factors)
    bad = res.first_nonfinite()
    tail = max(1, res.train_loss.shape[1] // TRAIN_LOSS_TAIL_PARTS)
    stt = res.steps_to_target(target) if target is not None else None
    rows = []
    for j, f in enumerate(res.factors):
        idx = [s * n_f + j for s in range(len(res.seeds))]
        final = res.test_loss[idx, -1] if res.test_loss.size else np.full(len(idx), np.nan)
        acc = res.test_acc[idx, -1] if res.test_acc.size else np.full(len(idx), np.nan)
        train = np.mean(res.train_loss[idx, -tail:], axis=1) if res.train_loss.size else np.full(len(idx), np.nan)
        diverged = [b for b in (bad[r] for r in idx) if b is not None]
        row = {
            "optimizer": res.expr,
            "lr_factor": f,
            "peak_lr": None if res.base_lr is None else f * res.base_lr,
            "seeds": len(idx),
            "final_test_loss_mean": float(np.mean(final)),
            "final_test_loss_std": float(np.std(final)),
            "final_test_accuracy_mean": float(np.mean(acc)),
            "final_train_loss_mean": float(np.mean(train)),
            "nonfinite_runs": len(diverged),
            "first_nonfinite_step": min(diverged) if diverged else None,
            "wall_time_s": res.wall_time,
            "wall_time_per_run_s": res.wall_time / res.runs,
            "compile_time_s": res.compile_time,
            "state_bytes": res.state_bytes,
        }
        if stt is not None:
            hits = stt[idx]
            reached = hits[np.isfinite(hits)]
            row.update(
                target=target,
                reached=int(reached.size),
                steps_to_target_mean=float(np.mean(reached)) if reached.size else None,
                steps_to_target_std=float(np.std(reached)) if reached.size else None,
            )
        rows.append(row)
    return rows


def best_row(rows: list[dict]) -> dict:
    """The sweep value with the lowest mean final test loss (a run that went non-finite loses)."""
    return min(rows, key=lambda r: (r["nonfinite_runs"] > 0, _finite_or_inf(r["final_test_loss_mean"])))


def ranking_key(row: dict):
    """Reached the target on more seeds, then fewer steps to it, then lower final test loss."""
    stt = row.get("steps_to_target_mean")
    return (
        row["nonfinite_runs"] > 0,
        -row.get("reached", 0),
        stt if stt is not None else float("inf"),
        _finite_or_inf(row["final_test_loss_mean"]),
    )


def _fmt_steps(row: dict) -> str:
    if row.get("steps_to_target_mean") is None:
        return "not reached"
    s = f"{row['steps_to_target_mean']:.0f} ± {row['steps_to_target_std']:.0f}"
    return s + (f" ({row['reached']}/{row['seeds']} seeds)" if row["reached"] < row["seeds"] else "")


#: Widths (characters) of an optimizer expression in the ranked table and in the sweep table.
RANKED_WIDTH, SWEEP_WIDTH = 160, 80


def ranked_table(rows: list[dict], target: float | None) -> str:
    """Markdown: rank, steps to target (if any), final test loss mean ± std, peak lr, time, optimizer."""
    head = "| rank |" + (f" steps to test loss {target:.4g} |" if target is not None else "")
    head += " final test loss (mean ± std) | test acc | peak lr | s/run | optimizer |"
    lines = [head, "|---:|" + ("---:|" if target is not None else "") + "---:|---:|---:|---:|---|"]
    for r, row in enumerate(rows, start=1):
        lr = "" if row["peak_lr"] is None else f"{row['peak_lr']:.3g}"
        cells = [str(r)] + ([_fmt_steps(row)] if target is not None else [])
        loss = f"{row['final_test_loss_mean']:.4f} ± {row['final_test_loss_std']:.4f}"
        if row["nonfinite_runs"]:
            loss += f" ({row['nonfinite_runs']} non-finite from step {row['first_nonfinite_step']})"
        cells += [loss, f"{row['final_test_accuracy_mean']:.4f}", lr, f"{row['wall_time_per_run_s']:.1f}"]
        cells.append(f"`{short(row['optimizer'], RANKED_WIDTH)}`")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def sweep_table(all_rows: list[list[dict]]) -> str:
    """Markdown: every sweep value of every optimizer, its mean final test loss, the chosen one in bold."""
    lines = ["| optimizer | lr factor | peak lr | final test loss (mean ± std) |", "|---|---:|---:|---:|"]
    for rows in all_rows:
        best = best_row(rows)
        for row in rows:
            mark = "**" if row is best else ""
            lr = "" if row["peak_lr"] is None else f"{row['peak_lr']:.3g}"
            lines.append(
                f"| `{short(row['optimizer'], SWEEP_WIDTH)}` | {mark}{row['lr_factor']:g}{mark} | {lr} | "
                f"{mark}{row['final_test_loss_mean']:.4f} ± {row['final_test_loss_std']:.4f}{mark} |"
            )
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------------------------
# plots
# ----------------------------------------------------------------------------------------------------------------


def _plt():
    from ._run import _plt as plt

    return plt()


def _best_runs(res: MultiResult, factor: float) -> list[int]:
    j = res.factors.index(factor)
    return [s * len(res.factors) + j for s in range(len(res.seeds))]


def plot_seed_bands(results: list[tuple[str, MultiResult, float]], path, title: str, target: float | None) -> None:
    """Train loss (smoothed) and test loss per optimizer: the mean over seeds, with a min-max band."""
    from ._run import _smooth

    plt = _plt()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for name, res, factor in results:
        idx = _best_runs(res, factor)
        tr = res.train_loss[idx]
        n = max(1, tr.shape[1] // SMOOTHING_WINDOWS)
        sm = np.stack([_smooth(list(row), n) for row in tr])
        steps = np.arange(1, tr.shape[1] + 1)
        line = ax1.plot(steps, sm.mean(0), label=name)[0]
        ax1.fill_between(steps, sm.min(0), sm.max(0), color=line.get_color(), alpha=0.2)
        te = res.test_loss[idx]
        ax2.plot(res.eval_steps, te.mean(0), color=line.get_color(), marker="o", markersize=2, label=name)
        ax2.fill_between(res.eval_steps, te.min(0), te.max(0), color=line.get_color(), alpha=0.2)
    if target is not None:
        ax2.axhline(target, color="black", linestyle=":", linewidth=1, label=f"target {target:.4g}")
    ax1.set(xlabel="step", ylabel="train loss", title="train loss (mean over seeds, min-max band)", yscale="log")
    ax2.set(xlabel="step", ylabel="test loss", title="test loss (mean over seeds, min-max band)", yscale="log")
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
    ax2.legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=PLOT_DPI)
    plt.close(fig)


def plot_steps_to_target(rows: list[dict], names: list[str], path, title: str) -> None:
    """Horizontal bars: mean steps to the target with the seeds' standard deviation; unreached ones marked."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(rows) + 1.5))
    y = np.arange(len(rows))
    vals = [r["steps_to_target_mean"] or 0.0 for r in rows]
    errs = [r["steps_to_target_std"] or 0.0 for r in rows]
    bars = ax.barh(y, vals, xerr=errs, color="tab:blue", alpha=0.8)
    for b, r in zip(bars, rows):
        if r["steps_to_target_mean"] is None:
            ax.text(0, b.get_y() + b.get_height() / 2, " not reached", va="center", fontsize=8)
    ax.set_yticks(y, names, fontsize=8)
    ax.invert_yaxis()
    ax.set(xlabel="steps to target test loss (fewer is better)", title=title)
    ax.grid(alpha=0.3, axis="x")
    fig.tight_layout()
    fig.savefig(path, dpi=PLOT_DPI)
    plt.close(fig)


def plot_sweep(all_rows: list[list[dict]], names: list[str], path, title: str) -> None:
    """Final test loss against the peak learning rate, one line per optimizer."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4))
    for name, rows in zip(names, all_rows):
        lrs = [r["peak_lr"] if r["peak_lr"] else r["lr_factor"] for r in rows]
        loss = [r["final_test_loss_mean"] for r in rows]
        ax.plot(lrs, loss, marker="o", label=name)
    ax.set(xscale="log", xlabel="peak learning rate", ylabel="final test loss (mean over seeds)", title=title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=PLOT_DPI)
    plt.close(fig)


class LeaderboardError(ValueError):
    """A usage error of ``compare --seeds/--sweep/--target`` or ``leaderboard`` (exit code 2)."""


def parse_factors(text: str) -> list[float]:
    """``"0.5,1,2"`` -> ``[0.5, 1.0, 2.0]`` (positive, finite, distinct)."""
    try:
        vals = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        vals = []
    if not vals or any(not (math.isfinite(v) and v > 0) for v in vals) or len(set(vals)) != len(vals):
        raise LeaderboardError(
            f"--sweep must be distinct positive learning-rate factors separated by commas (e.g. 0.5,1,2); got {text!r}"
        )
    return vals


def warn(msg: str) -> None:
    print(f"gradax: warning: {msg}", file=sys.stderr)
