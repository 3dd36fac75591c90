"""``gradax schedule``: evaluate a schedule expression at every step, plot it and print its landmarks."""

from __future__ import annotations

import inspect
import os
import tempfile
from pathlib import Path

import numpy as np

from ._checkpoint import OutputError
from ._common import EXIT_OK, RUNS, CliError, positive, short
from ._common import say as _say
from ._expr import Built, parse_schedule
from ._run import plot_values

#: Width (characters) of the expression in the plot's title.
TITLE_WIDTH = 80
#: Width of the landmark labels in the printed table.
LABEL_WIDTH = 28


def _default_of(fn, name: str):
    """The default value of ``fn``'s argument ``name``, or None."""
    try:
        p = inspect.signature(fn).parameters.get(name)
    except (TypeError, ValueError):
        return None
    return None if p is None or p.default is p.empty else p.default


def warmup_end(built: Built) -> int | None:
    """The step where the schedule's warmup ends, when its arguments say so (``warmup_steps``, or one-cycle's
    ``pct_start`` of ``transition_steps``), else None."""
    a = built.arguments
    if "warmup_steps" in a and isinstance(a["warmup_steps"], (int, float)):
        return int(a["warmup_steps"])
    if "pct_start" in a or built.name.endswith("onecycle_schedule"):
        pct = a.get("pct_start", _default_of(built.fn, "pct_start"))
        if isinstance(a.get("transition_steps"), (int, float)) and isinstance(pct, (int, float)):
            return int(pct * a["transition_steps"])
    return None


def _values(built: Built, steps: int) -> np.ndarray:
    import jax
    import jax.numpy as jnp

    try:
        return np.asarray(jax.vmap(built.value)(jnp.arange(steps + 1, dtype=jnp.int32)), np.float64)
    except Exception:  # schedules that do not vmap are evaluated one step at a time
        return np.array([float(built.value(jnp.asarray(s, jnp.int32))) for s in range(steps + 1)])


def _write_plot(out: Path, values: np.ndarray, built: Built, expression: str) -> None:
    """Write the PNG beside ``out`` and rename it: it appears only when complete."""
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.tmp-", suffix=".png", dir=out.parent)
        os.close(fd)
    except OSError as e:
        raise OutputError(f"cannot write {str(out)!r}: {e.strerror or e}") from None
    try:
        name = built.name or "schedule"
        steps = np.arange(len(values))
        plot_values(steps, {name: values}, Path(tmp), short(expression, TITLE_WIDTH), ylabel="value")
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def cmd_schedule(args) -> int:
    steps: int = args.steps  # an int: the option has a default
    positive("--steps", steps)
    built = parse_schedule(args.expression)
    values = _values(built, steps)
    out = Path(args.out) if args.out else RUNS / "schedule.png"
    if out.suffix.lower() != ".png":
        raise CliError(f"--out must name a .png file; got {str(out)!r}")
    _write_plot(out, values, built, args.expression)
    marks = [("step 0", 0)]
    w = warmup_end(built)
    if w is not None and 0 < w < steps:
        marks.append((f"end of warmup (step {w})", w))
    marks.append((f"end (step {steps})", steps))
    for label, s in marks:
        _say(f"{label:>{LABEL_WIDTH}}: {values[s]:.6g}")
    _say(f"{'min / max':>{LABEL_WIDTH}}: {values.min():.6g} / {values.max():.6g}")
    _say(f"plot: {out}")
    return EXIT_OK
