"""Which optimizer steps copy a params-sized buffer: XLA ``copy`` ops in the compiled, donated step, per library.

A copy in a donated step means XLA could not prove that a kernel reading an old state buffer runs before the kernel
that overwrites it in place (see ``benchmarks/RESULTS.md``). Counts copies of the two leaves of a small tree for every
optimizer of ``benchmarks.sweep``; ``--xla-option`` as in ``benchmarks.run``::

    .venv/bin/python -m benchmarks.copies [--xla-option xla_cpu_copy_insertion_use_region_analysis=true]
"""

from __future__ import annotations

import argparse
from typing import Any

import jax
import jax.numpy as jnp

import gradax

from .run import parse_xla_options
from .sweep import OPTIMIZERS

try:  # the comparison (benchmarks only)
    import optax
except ImportError:  # pragma: no cover - the bench extra installs it
    optax = None

SHAPES = {"a": (64, 48), "b": (3072,)}


def count_copies(mod: Any, make: Any, options: dict[str, Any] | None = None) -> int:
    """Copies of a params-shaped array in ``make(mod)``'s compiled step (params and state donated)."""
    params = {k: jnp.ones(s, jnp.float32) for k, s in SHAPES.items()}
    opt = make(mod)
    state = jax.tree.map(jnp.copy, opt.init(params))

    def step(p, s, g):
        u, s = opt.update(g, s, p)
        return mod.apply_updates(p, u), s

    jitted = jax.jit(step, donate_argnums=(0, 1), compiler_options=options or None)
    hlo = jitted.lower(params, state, params).compile().as_text()
    dims = [f"[{','.join(map(str, s))}]" for s in SHAPES.values()]
    return sum(1 for line in hlo.splitlines() if " copy(" in line and any(d in line for d in dims))


def main(argv: list[str] | None = None) -> dict[str, tuple[int, int | None]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", default=[], help="optimizer name (repeatable, substring match)")
    parser.add_argument("--xla-option", action="append", default=None, metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    options = parse_xla_options(args.xla_option)
    out = {}
    for name, make in OPTIMIZERS.items():
        if args.only and not any(o in name for o in args.only):
            continue
        ours = count_copies(gradax, make, options)
        theirs = count_copies(optax, make, options) if optax is not None else None
        out[name] = (ours, theirs)
        print(f"{name:32s} gradax {ours}  optax {theirs}", flush=True)
    return out


if __name__ == "__main__":
    main()
