"""MkDocs hook: the pages and pictures generated from the library at build time.

- ``cli.md``: the ``--help`` of ``gradax`` and of each subcommand, from ``gradax.cli._main.build_parser`` (never drifts).
- ``benchmarks.md``: ``benchmarks/RESULTS.md``, the current tables (generated from ``benchmarks/results.json``) with
  the commands that rerun them.
- ``guides/schedule-gallery.md``: every schedule of ``gradax.schedules`` plotted (the build fails on a new schedule
  without an example here).
- ``guides/trajectories.md``: the main optimizers on Rosenbrock, Beale and a saddle.

Nothing is written into ``docs/``: the files are added to the build with ``File.generated`` (so ``mkdocs serve``
does not loop).
"""

from __future__ import annotations

import argparse
import inspect
import io
import os
import pathlib
import re

os.environ.setdefault("JAX_PLATFORMS", "cpu")

from mkdocs.structure.files import File  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
_CACHE: dict[str, str | bytes] = {}


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80, metadata={"Software": None})
    return buf.getvalue()


# --- command line --------------------------------------------------------------------------------------------------


def cli_page() -> str:
    from gradax.cli._main import build_parser

    parser = build_parser()
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    os.environ["COLUMNS"] = "110"
    parts = [
        "# Command line",
        "",
        "`gradax` trains small models, compares optimizers, plots schedules and runs the benchmarks. This page is",
        "generated from the command's own argument parser at build time, so it always matches `gradax --help`.",
        "",
        "```text",
        parser.format_help().rstrip(),
        "```",
        "",
    ]
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    for action in subs:
        for name, sub in action.choices.items():
            parts += [f"## `gradax {name}`", "", "```text", sub.format_help().rstrip(), "```", ""]
    parts += [
        "## Comparison plots",
        "",
        "`gradax compare` writes a plot of the loss curves of each optimizer, like this one on the digits task:",
        "",
        "![gradax compare on digits](img/cli_compare_digits.png)",
        "",
    ]
    return "\n".join(parts)


# --- benchmarks ----------------------------------------------------------------------------------------------------


def benchmarks_page() -> str:
    text = (ROOT / "benchmarks" / "RESULTS.md").read_text()
    body = re.sub(r"(?m)\A# .*\n", "", text, count=1)
    return "\n".join(["# Benchmarks", "", "This page is `benchmarks/RESULTS.md` of the repository.", "", body.strip(), ""])


# --- schedule gallery ----------------------------------------------------------------------------------------------

STEPS = 1000
SCHEDULE_EXAMPLES = {
    "constant_schedule": dict(value=0.5),
    "cosine_decay_schedule": dict(init_value=1.0, decay_steps=800, alpha=0.1),
    "cosine_onecycle_schedule": dict(transition_steps=1000, peak_value=1.0),
    "exponential_decay": dict(init_value=1.0, transition_steps=100, decay_rate=0.7, transition_begin=100),
    "linear_onecycle_schedule": dict(transition_steps=1000, peak_value=1.0),
    "linear_schedule": dict(init_value=1.0, end_value=0.1, transition_steps=600, transition_begin=200),
    "piecewise_constant_schedule": dict(init_value=1.0, boundaries_and_scales={300: 0.5, 600: 0.5, 800: 0.2}),
    "piecewise_interpolate_schedule": dict(
        interpolate_type="cosine", init_value=1.0, boundaries_and_scales={300: 0.5, 600: 0.5, 800: 0.2}
    ),
    "polynomial_schedule": dict(init_value=1.0, end_value=0.0, power=2.0, transition_steps=800),
    "sgdr_schedule": dict(
        cosine_kwargs=[dict(init_value=0.0, peak_value=1.0, warmup_steps=50, decay_steps=d) for d in (200, 300, 500)]
    ),
    "warmup_constant_schedule": dict(init_value=0.0, peak_value=1.0, warmup_steps=200),
    "warmup_cosine_decay_schedule": dict(init_value=0.0, peak_value=1.0, warmup_steps=100, decay_steps=1000),
    "warmup_exponential_decay_schedule": dict(
        init_value=0.0, peak_value=1.0, warmup_steps=100, transition_steps=100, decay_rate=0.7
    ),
}


def schedule_factories() -> list[str]:
    """The public schedule constructors: the functions of gradax.schedules that return a Schedule."""
    import gradax

    names = []
    for name, obj in sorted(vars(gradax.schedules).items()):
        if name.startswith("_") or not inspect.isfunction(obj):
            continue
        ret = str(inspect.signature(obj).return_annotation)
        if ret.endswith("Schedule") and name not in ("join_schedules",):
            names.append(name)
    return names


def schedule_gallery(add) -> str:
    import jax
    import jax.numpy as jnp
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    import gradax

    names = schedule_factories()
    missing = sorted(set(names) - set(SCHEDULE_EXAMPLES))
    if missing:
        raise RuntimeError(f"docs/_hooks/generate.py: add an example to SCHEDULE_EXAMPLES for {missing}.")
    examples = dict(SCHEDULE_EXAMPLES)
    examples_code = {n: examples[n] for n in names}
    steps = jnp.arange(STEPS)
    lines = [
        "# Schedule gallery",
        "",
        f"Every schedule of `gradax.schedules`, evaluated over {STEPS} steps with the arguments shown. The plots are",
        "drawn at build time from the library itself. `join_schedules` is shown joining a warmup and a cosine decay.",
        "",
    ]
    curves = {n: (lambda n=n: getattr(gradax, n)(**examples_code[n])) for n in names}
    joined = "join_schedules"
    curves[joined] = lambda: gradax.join_schedules(
        [gradax.linear_schedule(0.0, 1.0, 200), gradax.cosine_decay_schedule(1.0, 800)], [200]
    )
    for name, make in curves.items():
        values = jax.jit(jax.vmap(make()))(steps)
        fig, ax = plt.subplots(figsize=(6, 2.4))
        ax.plot(range(STEPS), values, color="#3f51b5")
        ax.set_xlabel("step")
        ax.set_ylabel("value")
        ax.grid(alpha=0.3)
        fig.tight_layout()
        add(f"img/gen/schedule_{name}.png", _png(fig))
        plt.close(fig)
        args = ", ".join(f"{k}={v!r}" for k, v in examples_code.get(name, {}).items())
        call = (
            f"gradax.{name}({args})"
            if name != joined
            else (
                "gradax.join_schedules([gradax.linear_schedule(0.0, 1.0, 200), gradax.cosine_decay_schedule(1.0, 800)], [200])"
            )
        )
        lines += [f"## `{name}`", "", "```python", call, "```", "", f"![{name}](../img/gen/schedule_{name}.png)", ""]
    return "\n".join(lines)


# --- optimizer trajectories ----------------------------------------------------------------------------------------


def _functions():
    import jax.numpy as jnp

    return {
        "Rosenbrock": (
            lambda p: (1 - p[0]) ** 2 + 100 * (p[1] - p[0] ** 2) ** 2,
            (-1.5, 2.0),
            (1.0, 1.0),
            (-2, 2, -1, 3),
        ),
        "Beale": (
            lambda p: (
                (1.5 - p[0] + p[0] * p[1]) ** 2
                + (2.25 - p[0] + p[0] * p[1] ** 2) ** 2
                + (2.625 - p[0] + p[0] * p[1] ** 3) ** 2
            ),
            (1.0, 1.5),
            (3.0, 0.5),
            (-0.5, 4, -1.5, 2),
        ),
        "Saddle": (
            lambda p: p[0] ** 2 - p[1] ** 2 + 0.1 * p[1] ** 4 * jnp.ones(()),
            (-1.5, 1e-3),
            (0.0, 2.236),
            (-2, 2, -3, 3),
        ),
    }


TRAJECTORY_STEPS = 1000
OPTIMIZERS = {
    "sgd(1e-3, momentum=0.9)": lambda g: g.sgd(1e-3, momentum=0.9),
    "adam(0.05)": lambda g: g.adam(0.05),
    "adamw(0.05, weight_decay=1e-4)": lambda g: g.adamw(0.05, weight_decay=1e-4),
    "lion(0.01)": lambda g: g.lion(0.01),
    "rmsprop(0.01)": lambda g: g.rmsprop(0.01),
    "adagrad(0.3)": lambda g: g.adagrad(0.3),
}


def trajectories(add) -> str:
    import jax
    import jax.numpy as jnp
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    import gradax

    lines = [
        "# Optimizer trajectories",
        "",
        f"The main optimizers for {TRAJECTORY_STEPS} steps from the same start on three classic 2-D test functions",
        "(Rosenbrock's valley, Beale's function and a saddle with a quartic wall), drawn at build time from gradax",
        "itself. The star marks the minimum. Learning rates are not tuned per function: the pictures show how each",
        "method moves, not which is best.",
        "",
        "```python",
        "opt = gradax.adam(0.05)",
        "state = opt.init(p)",
        "for _ in range(steps):",
        "    g = jax.grad(f)(p)",
        "    updates, state = opt.update(g, state, p)",
        "    p = gradax.apply_updates(p, updates)",
        "```",
        "",
    ]
    for fname, (f, start, minimum, box) in _functions().items():

        def run(opt, f=f, start=start):
            p0 = jnp.array(start, jnp.float32)

            def step(carry, _):
                p, state = carry
                g = jax.grad(f)(p)
                updates, state = opt.update(g, state, p)
                p = gradax.apply_updates(p, updates)
                return (p, state), p

            _, path = jax.lax.scan(step, (p0, opt.init(p0)), None, length=TRAJECTORY_STEPS)
            return jnp.concatenate([p0[None], path])

        fig, ax = plt.subplots(figsize=(6.5, 5))
        x0, x1, y0, y1 = box
        xs, ys = np.meshgrid(np.linspace(x0, x1, 200), np.linspace(y0, y1, 200))
        zs = np.asarray(jax.vmap(f)(jnp.stack([jnp.asarray(xs.ravel()), jnp.asarray(ys.ravel())], 1)))
        zs = zs.reshape(xs.shape)
        ax.contour(xs, ys, np.log1p(zs - zs.min()), levels=25, cmap="Greys", linewidths=0.6)
        for label, make in OPTIMIZERS.items():
            path = np.asarray(run(make(gradax)))
            ax.plot(path[:, 0], path[:, 1], lw=1.4, label=label)
        ax.plot(*minimum, "r*", ms=12)
        ax.set_xlim(x0, x1)
        ax.set_ylim(y0, y1)
        ax.set_title(fname)
        ax.legend(fontsize=7, loc="best")
        fig.tight_layout()
        add(f"img/gen/trajectory_{fname.lower()}.png", _png(fig))
        plt.close(fig)
        lines += [f"## {fname}", "", f"![{fname}](../img/gen/trajectory_{fname.lower()}.png)", ""]
    return "\n".join(lines)


# --- the hook ------------------------------------------------------------------------------------------------------


def _generate() -> dict[str, str | bytes]:
    if _CACHE:
        return _CACHE
    out: dict[str, str | bytes] = {}

    def add(path, content):
        out[path] = content

    out["cli.md"] = cli_page()
    out["benchmarks.md"] = benchmarks_page()
    out["guides/schedule-gallery.md"] = schedule_gallery(add)
    out["guides/trajectories.md"] = trajectories(add)
    _CACHE.update(out)
    return out


def on_files(files, config):
    for path, content in _generate().items():
        existing = files.get_file_from_path(path)
        if existing is not None:
            files.remove(existing)
        files.append(File.generated(config, path, content=content))
    return files
