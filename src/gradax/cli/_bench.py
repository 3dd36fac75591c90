"""``gradax bench``: run the benchmark suite of a gradax source checkout (it is not part of the installed package).

The suite (``benchmarks/run.py``) compares gradax with Optax and torch.optim and lives only in the repository, so
the command runs it from the checkout that ``--checkout`` names (default: the current folder); the installed
package never looks for one on its own.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

from ._common import CliError

#: Where the suite lies inside a checkout, and the module that runs it.
SUITE = Path("benchmarks") / "run.py"
SUITE_MODULE = "benchmarks.run"
#: What the suite imports besides gradax (the test oracles it compares against).
SUITE_NEEDS = ("optax", "scipy")


def checkout_root(checkout: str | None) -> Path:
    """The checkout folder that holds :data:`SUITE`: ``checkout``, or the current folder when it is None.

    Raises :class:`CliError` (with what to do) when that folder holds no benchmark suite.
    """
    root = Path(checkout) if checkout is not None else Path.cwd()
    if not (root / SUITE).is_file():
        where = f"--checkout {str(checkout)!r}" if checkout is not None else f"the current folder ({str(root)!r})"
        raise CliError(
            f"--checkout must name a gradax source checkout (a folder holding {SUITE.as_posix()}); {where} holds "
            "none. The benchmark suite is not installed with the package: clone the repository and run `gradax "
            "bench` (or `make bench`) there, or pass --checkout PATH_TO_CHECKOUT"
        )
    return root


def cmd_bench(args) -> int:
    root = checkout_root(args.checkout)
    missing = [m for m in SUITE_NEEDS if importlib.util.find_spec(m) is None]
    if missing:
        raise CliError(
            f"bench compares gradax with {' and '.join(missing)}, which is not installed. "
            "Install the benchmark dependencies: pip install -e '.[test,bench]' (or run `make bench`)."
        )
    passthrough = [a for a in args.bench_args if a != "--"]
    return subprocess.run([sys.executable, "-m", SUITE_MODULE, *passthrough], cwd=root).returncode
