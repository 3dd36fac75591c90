"""What every command shares: the usage error, exit codes, defaults, and printing helpers."""

from __future__ import annotations

import time
from pathlib import Path

#: Exit code of a finished command.
EXIT_OK = 0
#: Exit code of a usage error (a bad argument, expression, task or output folder), as argparse gives.
EXIT_USAGE = 2

#: ``--eval-every`` defaults to this many test evaluations over the run (``steps // DEFAULT_EVALUATIONS``).
DEFAULT_EVALUATIONS = 20
#: ``--checkpoint-every`` when not given.
DEFAULT_CHECKPOINT_EVERY = 100
#: Width (characters) an optimizer expression is shortened to in one-line messages and titles.
LINE_WIDTH = 90
#: Folder that run folders go into when ``--out`` is not given (relative to the current folder).
RUNS = Path("runs")


class CliError(Exception):
    """A usage error reported as ``gradax: error: ...`` with exit code :data:`EXIT_USAGE`."""


def say(*a) -> None:
    """Print a line of the command's report (flushed, so that it interleaves with the progress bar)."""
    print(*a, flush=True)


def positive(name: str, value: int | None) -> int | None:
    """``value`` if it is None or at least 1, else a :class:`CliError` naming the option ``name``."""
    if value is None:
        return value
    if value < 1:
        raise CliError(f"{name} must be a positive integer; got {value}")
    return value


def short(expr: str, n: int = LINE_WIDTH) -> str:
    """``expr`` on one line, cut to ``n`` characters with ``...``."""
    expr = " ".join(expr.split())
    return expr if len(expr) <= n else expr[: n - 3] + "..."


def default_out(kind: str, task: str) -> str:
    """``runs/<kind>-<task>-<time>``: the run folder when ``--out`` is not given."""
    return str(RUNS / f"{kind}-{task}-{time.strftime('%Y%m%d-%H%M%S')}")


def default_eval_every(steps: int) -> int:
    """The test-evaluation period when ``--eval-every`` is not given."""
    return max(1, steps // DEFAULT_EVALUATIONS)
