"""Training loop (checkpointed, resumable, stopped or skipped on non-finite numbers), progress bar and plots."""

from __future__ import annotations

import json
import math
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import gradax

from ._checkpoint import Checkpoints, write_atomic
from ._common import default_eval_every
from ._mesh import Placement, state_bytes
from ._tasks import Task

#: Without a terminal, the progress bar prints about this many lines per run.
PROGRESS_LINES = 10
#: Loss curves are smoothed over a moving window of 1/SMOOTHING_WINDOWS of the run.
SMOOTHING_WINDOWS = 50
#: Resolution of the PNG plots.
PLOT_DPI = 90


class Progress:
    """A plain-text progress bar on stderr (redraws in place on a terminal, prints ~10 lines otherwise)."""

    def __init__(self, total: int, label: str = "", stream=None, width: int = 24, first: int = 0):
        self.total, self.label, self.width, self.first = total, label, width, first
        self.stream = stream if stream is not None else sys.stderr
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.start = time.perf_counter()
        self.last_line_step = first - 1

    def update(self, step: int, **metrics: Any) -> None:
        done = step / self.total
        filled = int(round(self.width * done))
        elapsed = time.perf_counter() - self.start
        rate = (step - self.first) / elapsed if elapsed > 0 else 0.0
        parts = []
        for k, v in metrics.items():
            if v is None:
                continue
            parts.append(f"{k} {v:.3g}" if k == "lr" else f"{k} {v:.4f}")
        line = (
            f"{self.label}[{'#' * filled}{'.' * (self.width - filled)}] {step}/{self.total} "
            + " ".join(parts)
            + f" | {rate:.1f} it/s"
        )
        if self.tty:
            self.stream.write("\r" + line + "\033[K")
            if step == self.total:
                self.stream.write("\n")
        else:
            every = max(1, self.total // PROGRESS_LINES)
            if step == self.total or step // every != self.last_line_step // every:
                self.stream.write(line + "\n")
                self.last_line_step = step
        self.stream.flush()


def learning_rate_reader(state: Any) -> Callable[[Any], Any] | None:
    """A function from a state of ``state``'s structure to the learning rate its ``inject_hyperparams`` holds (an
    array, not fetched), or None when there is none (or several). Found once per run, not searched every step."""
    try:
        if gradax.tree.get(state, "learning_rate") is None:
            return None
    except Exception:  # several learning rates in this optimizer's state
        return None
    return lambda s: gradax.tree.get(s, "learning_rate")


def read_learning_rate(state: Any) -> float | None:
    """The current learning rate stored in an ``inject_hyperparams`` state, or None if there is none (or several)."""
    reader = learning_rate_reader(state)
    return None if reader is None else float(np.asarray(reader(state)))


#: Exit code of ``gradax train`` / ``compare`` when a loss or gradient became non-finite and the run stopped.
EXIT_NONFINITE = 3
#: Exit code after Ctrl-C (a checkpoint of the last finished step was written first).
EXIT_INTERRUPTED = 130
#: ``apply_if_finite``'s patience under ``--on-nonfinite skip``: never give up and apply a non-finite update.
SKIP_PATIENCE = 2**31 - 2


@dataclass
class History:
    """Per-step records of one run and how it ended.

    ``status`` is ``"complete"``, ``"interrupted"`` (Ctrl-C; checkpoint written at ``stop_step``) or ``"nonfinite"``
    (the loss or a gradient was not finite at ``stop_step``; the run stopped there).
    """

    records: list[dict] = field(default_factory=list)
    steps_per_second: float = 0.0
    wall_time: float = 0.0
    status: str = "complete"
    stop_step: int | None = None
    state_bytes: tuple[int, int] | None = None  # (per device, whole) of the final state, under a placement

    def final(self, key: str) -> float:
        for r in reversed(self.records):
            if key in r:
                return r[key]
        return float("nan")

    def series(self, key: str) -> tuple[list[int], list[float]]:
        pts = [(r["step"], r[key]) for r in self.records if key in r and r[key] is not None]
        return [p[0] for p in pts], [p[1] for p in pts]

    def last_finite_loss(self) -> tuple[int, float] | None:
        for r in reversed(self.records):
            if math.isfinite(r["loss"]) and not r.get("skipped"):
                return r["step"], r["loss"]
        return None

    @property
    def skipped(self) -> int:
        return sum(bool(r.get("skipped")) for r in self.records)


def step_compiler_options() -> dict[str, Any] | None:
    """XLA options for a donated training step: on CPU, region-based copy insertion.

    A step that reads a state buffer in one kernel and overwrites it in place in another (Lion's momentum: the update
    reads the old one, the new one is written over it) gets a full copy of that buffer from XLA:CPU's default copy
    insertion, which cannot prove the read happens first. The region analysis orders the two kernels instead, which
    makes such steps faster on CPU (the documentation's performance notes). Other backends keep their defaults.
    """
    if jax.default_backend() == "cpu":
        return {"xla_cpu_copy_insertion_use_region_analysis": True}
    return None


def make_step_fn(
    task: Task, optimizer: Any, nan_grads_on_nonfinite_loss: bool = False, shardings: tuple[Any, Any] | None = None
) -> Callable:
    """The jitted training step ``(params, opt_state, xb, yb) -> (params, opt_state, loss, accuracy, finite)``.

    ``finite`` says whether the loss and every gradient entry were finite. With ``nan_grads_on_nonfinite_loss`` a
    non-finite loss turns the gradients into NaN, so that an ``apply_if_finite`` optimizer skips that step even when
    the gradients themselves came out finite. Params and state are donated and updated
    in place, compiled with :func:`step_compiler_options`. The batch's loss, gradient and loss function go to every
    transformation that takes them (line searches and L-BFGS: ``value``, ``grad``, ``value_fn``;
    ``reduce_on_plateau``, ``polyak_sgd``: ``value``); the others ignore them. A ``gradax.fused`` optimizer takes its
    one-pass ``step`` instead of ``update`` + ``apply_updates``. With ``shardings``, ``(params shardings, state
    shardings)`` (:class:`~gradax.cli._mesh.Placement`), the step returns params and state placed so, step after step.
    """
    tx = gradax.with_extra_args_support(optimizer)
    fused = isinstance(optimizer, gradax.fused.FusedGradientTransformation)
    out_shardings = None if shardings is None else (*shardings, None, None, None)

    @jax.jit(donate_argnums=(0, 1), compiler_options=step_compiler_options(), out_shardings=out_shardings)
    def step_fn(params, opt_state, xb, yb):
        (loss, acc), grads = jax.value_and_grad(task.loss_and_acc, has_aux=True)(params, xb, yb)
        finite = jnp.isfinite(loss)
        if nan_grads_on_nonfinite_loss:
            grads = jax.tree.map(lambda g: jnp.where(finite, g, jnp.nan).astype(g.dtype), grads)
        for g in jax.tree.leaves(grads):
            finite = finite & jnp.all(jnp.isfinite(g))

        def value_fn(p):
            return task.loss_and_acc(p, xb, yb)[0]

        if fused:
            params, opt_state = optimizer.step(params, opt_state, grads)
            return params, opt_state, loss, acc, finite
        updates, opt_state = tx.update(grads, opt_state, params, value=loss, grad=grads, value_fn=value_fn)
        return gradax.apply_updates(params, updates), opt_state, loss, acc, finite

    return step_fn


class _CtrlC:
    """While active (main thread only), the first Ctrl-C sets :attr:`hit` (the loop checkpoints and stops after the
    current step); a second one raises ``KeyboardInterrupt`` at once."""

    def __init__(self, stream=None):
        self.hit = False
        self.previous: Callable[..., Any] | int | None = None  # the SIGINT handler to put back
        self.stream = stream if stream is not None else sys.stderr

    def _handle(self, signum, frame):
        if self.hit:
            raise KeyboardInterrupt
        self.hit = True
        self.stream.write("\ngradax: Ctrl-C: writing a checkpoint after this step (press Ctrl-C again to stop now)\n")
        self.stream.flush()

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            self.previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *exc):
        if self.previous is not None:
            signal.signal(signal.SIGINT, self.previous)


def _strong(tree: Any) -> Any:
    """The same arrays without weak types, as a restored checkpoint has them (one compilation per run)."""
    return jax.tree.map(lambda x: jax.lax.convert_element_type(x, jnp.result_type(x)), tree)


def _placed_init(optimizer: Any, params: Any, state_shardings: Any) -> Any:
    """``optimizer.init(params)`` created on the devices where ``state_shardings`` puts it (no whole copy first).

    A state leaf that ``jit`` would hand back as a params buffer (a state that starts as a copy of the params) is
    copied, so that the step can donate params and state.
    """
    state = jax.jit(lambda p: _strong(optimizer.init(p)), out_shardings=state_shardings)(params)
    taken = {id(x) for x in jax.tree.leaves(params)}
    return jax.tree.map(lambda x: jnp.copy(x) if id(x) in taken else x, state)


def train(
    task: Task,
    optimizer: Any,
    *,
    steps: int,
    batch_size: int,
    seed: int = 0,
    eval_every: int | None = None,
    label: str = "",
    progress: bool = True,
    metrics_file: Path | None = None,
    checkpoints: Checkpoints | None = None,
    checkpoint_every: int | None = None,
    on_nonfinite: str = "stop",
    placement: Placement | None = None,
) -> History:
    """Train ``task`` with ``optimizer``; returns per-step train metrics and periodic test metrics.

    With ``checkpoints``, a checkpoint is written every ``checkpoint_every`` steps, at the last step, at the step
    where the run stops on a non-finite number (the one before holds the last finite state) and after a Ctrl-C; if ``checkpoints`` already holds one, training continues from it: parameters, optimizer state, data
    position and metrics are restored, ``metrics_file`` is rewritten to the restored records, and the continued run
    is bit-identical to one that was never interrupted. ``on_nonfinite="stop"`` ends the run at the first step whose
    loss or gradient is not finite (``status == "nonfinite"``); ``"skip"`` wraps the optimizer in
    :func:`gradax.apply_if_finite` so such steps (a non-finite loss counts as a non-finite gradient) leave parameters
    and state unchanged (records get ``"skipped"``). With ``placement`` (``--mesh``), params, state and batches live
    on its mesh (:mod:`gradax.cli._mesh`), checkpoints included; ``History.state_bytes`` is then measured at the end.
    """
    if on_nonfinite == "skip":
        optimizer = gradax.apply_if_finite(optimizer, max_consecutive_errors=SKIP_PATIENCE)
    sampler = task.sampler(seed, batch_size)
    params, opt_state, shardings = _initial(task, optimizer, seed, placement)
    eval_every = eval_every or default_eval_every(steps)
    hist = History()
    done, wall_before = 0, 0.0
    if checkpoints is not None and checkpoints.latest_step() is not None:
        params, opt_state, done, wall_before = _restore(checkpoints, params, opt_state, sampler, hist)
    if metrics_file is not None:
        write_atomic(metrics_file, "".join(json.dumps(r) + "\n" for r in hist.records))

    def save(step, status):
        if checkpoints is not None:
            now, ran = time.perf_counter(), step - done
            speed = (ran - 1) / (now - t1) if ran > 1 and now > t1 else hist.steps_per_second
            meta = {
                "step": step,
                "wall_time": wall_before + now - t0,
                "steps_per_second": speed,
                "records": hist.records,
            }
            checkpoints.save(step, params, opt_state, {**meta, "data": sampler.position(), "status": status})

    t0 = t1 = time.perf_counter()
    if done >= steps or hist.status == "nonfinite":
        hist.wall_time = wall_before
        return hist
    step_fn = make_step_fn(task, optimizer, nan_grads_on_nonfinite_loss=on_nonfinite == "skip", shardings=shardings)
    eval_fn = jax.jit(task.loss_and_acc)
    x_test, y_test = (jnp.asarray(a) for a in task.test_data)
    bar = Progress(steps, label, first=done) if progress else None
    lr_of = learning_rate_reader(opt_state)
    out = metrics_file.open("a") if metrics_file is not None else None
    test_acc = None
    try:
        with _CtrlC() as ctrl_c:
            for i in range(done + 1, steps + 1):
                xb, yb = next(sampler)
                if placement is not None:
                    xb, yb = jax.device_put((xb, yb), placement.batch())
                params, opt_state, loss, acc, finite = step_fn(params, opt_state, xb, yb)
                if i == done + 1:
                    loss.block_until_ready()
                    t1 = time.perf_counter()  # steps/s excludes the first step (compilation)
                rec, stop = _record(i, loss, acc, finite, opt_state, on_nonfinite, lr_of)
                if not stop and (i % eval_every == 0 or i == steps):
                    tl, ta = eval_fn(params, x_test, y_test)
                    test_acc = float(ta)
                    rec.update(test_loss=float(tl), test_accuracy=test_acc)
                hist.records.append(rec)
                if out is not None:
                    out.write(json.dumps(rec) + "\n")
                    out.flush()
                if bar is not None:
                    bar.update(i, loss=rec["loss"], acc=rec["accuracy"], test_acc=test_acc, lr=rec["learning_rate"])
                if stop:  # saved to show what happened; the checkpoint before it holds the last finite state
                    hist.status, hist.stop_step = "nonfinite", i
                    save(i, "nonfinite")
                    break
                if i == steps or (checkpoint_every and i % checkpoint_every == 0) or ctrl_c.hit:
                    save(i, "complete" if i == steps else "running")
                if ctrl_c.hit and i < steps:
                    hist.status, hist.stop_step = "interrupted", i
                    break
    finally:
        if out is not None:
            out.close()
    if placement is not None:
        hist.state_bytes = state_bytes(opt_state)
    _timings(hist, done, wall_before, t0, t1)
    return hist


def _initial(task: Task, optimizer: Any, seed: int, placement: Placement | None) -> tuple[Any, Any, Any]:
    """``(params, opt_state, shardings)`` at step 0; ``shardings`` is None without a placement."""
    params = _strong(task.init(jax.random.PRNGKey(seed)))
    if placement is None:
        return params, _strong(optimizer.init(params)), None  # distinct buffers, none a params buffer (tests/contract)
    shardings = (placement.params(params), placement.state(optimizer, params))
    params = jax.device_put(params, shardings[0])
    return params, _placed_init(optimizer, params, shardings[1]), shardings


def _restore(checkpoints: Checkpoints, params: Any, opt_state: Any, sampler, hist: History):
    """Continue from the latest checkpoint: ``(params, opt_state, step, wall time so far)``; ``hist`` and ``sampler``
    are set to where the run was."""
    params, opt_state, meta = checkpoints.restore(params, opt_state)
    hist.records, hist.steps_per_second = meta["records"], meta["steps_per_second"]
    sampler.restore(meta["data"])
    if meta["status"] == "nonfinite":  # stopped there before: the same numbers would stop it again
        hist.status, hist.stop_step = "nonfinite", meta["step"]
    return params, opt_state, meta["step"], meta["wall_time"]


def _record(step: int, loss, acc, finite, opt_state: Any, on_nonfinite: str, lr_of) -> tuple[dict, bool]:
    """The metrics record of one step, and whether the run stops there (``on_nonfinite="stop"``, not finite).

    Everything the record needs comes from the device in one transfer."""
    lr = None if lr_of is None else lr_of(opt_state)
    skipped = opt_state.last_finite if on_nonfinite == "skip" else None
    loss, acc, finite, lr, skipped = jax.device_get((loss, acc, finite, lr, skipped))
    rec = {
        "step": step,
        "loss": float(loss),
        "accuracy": float(acc),
        "learning_rate": None if lr is None else float(lr),
    }
    if skipped is not None and not bool(skipped):
        rec["skipped"] = True
    stop = on_nonfinite == "stop" and not bool(finite)
    if stop:
        rec["nonfinite"] = True
    return rec, stop


def _timings(hist: History, done: int, wall_before: float, t0: float, t1: float) -> None:
    """Set ``hist``'s wall time and steps per second (the first step of this session, which compiles, left out)."""
    now = time.perf_counter()
    hist.wall_time = wall_before + now - t0
    ran = len(hist.records) - done
    rest = now - t1
    if ran > 1 and rest > 0:
        hist.steps_per_second = (ran - 1) / rest
    elif ran:
        hist.steps_per_second = ran / max(now - t0, 1e-9)


def _plt():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _smooth(values: list[float], n: int) -> np.ndarray:
    v = np.asarray(values, np.float64)
    if n <= 1 or len(v) < n:
        return v
    c = np.cumsum(np.insert(v, 0, 0.0))
    head = c[1:n] / np.arange(1, n)
    return np.concatenate([head, (c[n:] - c[:-n]) / n])


def plot_curves(histories: dict[str, History], path: Path, title: str) -> None:
    """Train loss (smoothed) and test accuracy for one or several runs."""
    plt = _plt()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.8))
    for name, h in histories.items():
        steps, loss = h.series("loss")
        line = ax1.plot(steps, _smooth(loss, max(1, len(loss) // SMOOTHING_WINDOWS)), label=name)[0]
        ts, tl = h.series("test_loss")
        ax1.plot(ts, tl, linestyle="--", color=line.get_color(), alpha=0.7)
        ts, ta = h.series("test_accuracy")
        ax2.plot(ts, ta, marker="o", markersize=3, color=line.get_color(), label=name)
    ax1.set(xlabel="step", ylabel="loss", title="loss (train solid, test dashed)", yscale="log")
    ax2.set(xlabel="step", ylabel="accuracy", title="test accuracy")
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
    ax2.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=PLOT_DPI)
    plt.close(fig)


def plot_values(steps, series: dict[str, Any], path: Path, title: str, ylabel: str = "learning rate") -> None:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for name, vals in series.items():
        ax.plot(steps, vals, label=name)
    ax.set(xlabel="step", ylabel=ylabel, title=title)
    ax.grid(alpha=0.3)
    if len(series) > 1:
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=PLOT_DPI)
    plt.close(fig)
