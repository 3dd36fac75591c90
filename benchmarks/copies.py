"""Which optimizer steps copy a params-sized buffer: XLA ``copy`` ops in the compiled, donated step, per library.

A copy in a donated step means XLA could not prove that a kernel reading an old state buffer runs before the kernel
that overwrites it in place (see ``docs/performance.md``). Counts copies of the two leaves of a small tree in the
step :func:`benchmarks.suite.timing.prepare_jax` compiles, for every optimizer of ``benchmarks.sweep``; ``--xla-option`` as
in ``benchmarks.run``::

    .venv/bin/python -m benchmarks.copies [--xla-option xla_cpu_copy_insertion_use_region_analysis=true]
"""

from __future__ import annotations

import argparse
from typing import Any

import gradax

from .suite.timing import add_xla_option_argument, prepare_jax, use_xla_options
from .suite.trees import make_tree
from .suite.workloads import Workload
from .sweep import OPTIMIZERS

try:  # the comparison (benchmarks only)
    import optax
except ImportError:  # pragma: no cover - the bench extra installs it
    optax = None

SHAPES = {"a": (64, 48), "b": (3072,)}


def count_copies(mod: Any, wl: Workload) -> int:
    """Copies of a params-shaped array in the compiled step of ``wl`` for library ``mod``."""
    run = prepare_jax(wl, mod, make_tree(SHAPES, "float32", 0), make_tree(SHAPES, "float32", 1))
    dims = [f"[{','.join(map(str, s))}]" for s in SHAPES.values()]
    return sum(1 for line in run.hlo.splitlines() if " copy(" in line and any(d in line for d in dims))


def main(argv: list[str] | None = None) -> dict[str, tuple[int, int | None]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", default=[], help="optimizer name (repeatable, substring match)")
    add_xla_option_argument(parser)
    args = parser.parse_args(argv)
    use_xla_options(args.xla_option)
    out = {}
    for name, make in OPTIMIZERS.items():
        if args.only and not any(o in name for o in args.only):
            continue
        wl = Workload(name, SHAPES, make)
        ours = count_copies(gradax, wl)
        theirs = count_copies(optax, wl) if optax is not None else None
        out[name] = (ours, theirs)
        print(f"{name:32s} gradax {ours}  optax {theirs}", flush=True)
    return out


if __name__ == "__main__":
    main()
