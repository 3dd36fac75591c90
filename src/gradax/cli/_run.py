"""Training loop, progress bar, run folders (written atomically) and plots."""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import gradax

from ._tasks import Task


class OutputError(OSError):
    """The output folder cannot be created or replaced."""


class RunFolder:
    """Collects files in a hidden temporary folder next to ``path``; ``commit()`` renames it into place.

    Nothing appears at ``path`` unless the whole run succeeded. An existing ``path`` is refused unless
    ``overwrite`` (then it is replaced only at commit time).
    """

    def __init__(self, path: str | os.PathLike, overwrite: bool = False):
        self.path = Path(path)
        if self.path.exists() and not overwrite:
            raise OutputError(f"output folder {str(self.path)!r} already exists; pass --overwrite or choose --out")
        if self.path.exists() and not self.path.is_dir():
            raise OutputError(f"output path {str(self.path)!r} exists and is not a folder")
        parent = self.path.parent
        try:
            parent.mkdir(parents=True, exist_ok=True)
            self.tmp = Path(tempfile.mkdtemp(prefix=f".{self.path.name}.tmp-", dir=parent))
        except OSError as e:
            raise OutputError(f"cannot write to output folder {str(self.path)!r}: {e.strerror or e}") from None

    def file(self, name: str) -> Path:
        return self.tmp / name

    def commit(self) -> Path:
        if self.path.exists():
            old = self.path.with_name(f".{self.path.name}.old-{os.getpid()}")
            os.replace(self.path, old)
            os.replace(self.tmp, self.path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(self.tmp, self.path)
        return self.path

    def discard(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)


class Progress:
    """A plain-text progress bar on stderr (redraws in place on a terminal, prints ~10 lines otherwise)."""

    def __init__(self, total: int, label: str = "", stream=None, width: int = 24):
        self.total, self.label, self.width = total, label, width
        self.stream = stream if stream is not None else sys.stderr
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.start = time.perf_counter()
        self.last_line_step = -1

    def update(self, step: int, **metrics: Any) -> None:
        done = step / self.total
        filled = int(round(self.width * done))
        elapsed = time.perf_counter() - self.start
        rate = step / elapsed if elapsed > 0 else 0.0
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
            every = max(1, self.total // 10)
            if step == self.total or step // every != self.last_line_step // every:
                self.stream.write(line + "\n")
                self.last_line_step = step
        self.stream.flush()


def read_learning_rate(state: Any) -> float | None:
    """The current learning rate stored in an ``inject_hyperparams`` state, or None if there is none (or several)."""
    try:
        lr = gradax.tree.get(state, "learning_rate")
        return float(np.asarray(lr))
    except Exception:  # noqa: BLE001 - no (unique) learning rate in this optimizer's state
        return None


@dataclass
class History:
    records: list[dict] = field(default_factory=list)
    steps_per_second: float = 0.0
    wall_time: float = 0.0

    def final(self, key: str) -> float:
        for r in reversed(self.records):
            if key in r:
                return r[key]
        return float("nan")

    def series(self, key: str) -> tuple[list[int], list[float]]:
        pts = [(r["step"], r[key]) for r in self.records if key in r and r[key] is not None]
        return [p[0] for p in pts], [p[1] for p in pts]


def step_compiler_options() -> dict[str, Any] | None:
    """XLA options for a donated training step: on CPU, region-based copy insertion.

    A step that reads a state buffer in one kernel and overwrites it in place in another (Lion's momentum: the update
    reads the old one, the new one is written over it) gets a full copy of that buffer from XLA:CPU's default copy
    insertion, which cannot prove the read happens first. The region analysis orders the two kernels instead: Lion,
    Adan, AdaBelief and the optimistic methods take 1.5-2.8x less time per step on CPU (``benchmarks/RESULTS.md``).
    Other backends keep their defaults.
    """
    if jax.default_backend() == "cpu":
        return {"xla_cpu_copy_insertion_use_region_analysis": True}
    return None


def make_step_fn(task: Task, optimizer: Any) -> Callable:
    """The jitted training step ``(params, opt_state, xb, yb) -> (params, opt_state, loss, accuracy)``.

    Params and state are donated and updated in place, compiled with :func:`step_compiler_options`. The batch's loss,
    gradient and loss function go to every transformation that takes them (line searches and L-BFGS: ``value``,
    ``grad``, ``value_fn``; ``reduce_on_plateau``, ``polyak_sgd``: ``value``); the others ignore them. A
    ``gradax.fused`` optimizer takes its one-pass ``step`` instead of ``update`` + ``apply_updates``.
    """
    tx = gradax.with_extra_args_support(optimizer)
    fused = isinstance(optimizer, gradax.fused.FusedGradientTransformation)

    @jax.jit(donate_argnums=(0, 1), compiler_options=step_compiler_options())
    def step_fn(params, opt_state, xb, yb):
        (loss, acc), grads = jax.value_and_grad(task.loss_and_acc, has_aux=True)(params, xb, yb)

        def value_fn(p):
            return task.loss_and_acc(p, xb, yb)[0]

        if fused:
            params, opt_state = optimizer.step(params, opt_state, grads)
            return params, opt_state, loss, acc
        updates, opt_state = tx.update(grads, opt_state, params, value=loss, grad=grads, value_fn=value_fn)
        return gradax.apply_updates(params, updates), opt_state, loss, acc

    return step_fn


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
) -> History:
    """Train ``task`` with ``optimizer``; returns per-step train metrics and periodic test metrics."""
    params = task.init(jax.random.PRNGKey(seed))
    opt_state = optimizer.init(params)  # distinct buffers, none of them a params buffer (tests/contract)
    step_fn = make_step_fn(task, optimizer)
    eval_fn = jax.jit(task.loss_and_acc)
    x_test, y_test = (jnp.asarray(a) for a in task.test_data)
    eval_every = eval_every or max(1, steps // 20)
    bar = Progress(steps, label) if progress else None
    hist = History()
    out = metrics_file.open("w") if metrics_file is not None else None
    t0 = time.perf_counter()
    test_loss = test_acc = None
    t1 = t0
    try:
        for i, (xb, yb) in enumerate(task.batches(seed, steps, batch_size), start=1):
            params, opt_state, loss, acc = step_fn(params, opt_state, xb, yb)
            if i == 1:
                loss.block_until_ready()
                t1 = time.perf_counter()  # steps/s excludes the first step (compilation)
            rec = {
                "step": i,
                "loss": float(loss),
                "accuracy": float(acc),
                "learning_rate": read_learning_rate(opt_state),
            }
            if not math.isfinite(rec["loss"]):
                rec["diverged"] = True
            if i % eval_every == 0 or i == steps:
                tl, ta = eval_fn(params, x_test, y_test)
                test_loss, test_acc = float(tl), float(ta)
                rec.update(test_loss=test_loss, test_accuracy=test_acc)
            hist.records.append(rec)
            if out is not None:
                out.write(json.dumps(rec) + "\n")
            if bar is not None:
                bar.update(i, loss=rec["loss"], acc=rec["accuracy"], test_acc=test_acc, lr=rec["learning_rate"])
    finally:
        if out is not None:
            out.close()
    hist.wall_time = time.perf_counter() - t0
    rest = time.perf_counter() - t1
    hist.steps_per_second = (steps - 1) / rest if steps > 1 and rest > 0 else 1.0 / max(hist.wall_time, 1e-9)
    return hist


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
        line = ax1.plot(steps, _smooth(loss, max(1, len(loss) // 50)), label=name)[0]
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
    fig.savefig(path, dpi=90)
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
    fig.savefig(path, dpi=90)
    plt.close(fig)
