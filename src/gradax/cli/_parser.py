"""The command line's arguments: one function per subcommand, and the argument groups they share."""

from __future__ import annotations

import argparse
import textwrap

from ._bench import cmd_bench
from ._common import DEFAULT_CHECKPOINT_EVERY, DEFAULT_EVALUATIONS, RUNS
from ._compare import cmd_compare
from ._demo import cmd_demo
from ._expr import SUBMODULES
from ._leaderboard import cmd_leaderboard
from ._mesh import DATA_AXIS
from ._schedule import cmd_schedule
from ._tasks import TASKS, get_task
from ._train import cmd_train

COMMANDS = ("train", "compare", "leaderboard", "schedule", "demo", "bench")

_PREFIXES = [f"{p}." for p in SUBMODULES]
EXPR_HELP = textwrap.dedent(
    f"""\
    Expressions use gradax's public API (as in `import gradax as optax`): calls of public functions, optionally
    under {", ".join(_PREFIXES[:-1])} or {_PREFIXES[-1]}, with literal arguments (numbers, strings, True/False/None,
    tuples, lists, dicts, unary minus) and nested calls. They are parsed with `ast`, never evaluated as Python."""
)

RUN_HELP = textwrap.dedent(
    """\
    Checkpoints (Orbax: parameters, optimizer state, data position, metrics so far) are written every
    --checkpoint-every steps and at the end, into the run folder. The run works in a hidden folder (.NAME.partial
    beside --out) that is renamed to --out only when the run is finished. Ctrl-C writes a checkpoint after the
    current step and exits with code 130; after Ctrl-C or a kill, --resume RUN_FOLDER continues from the last
    checkpoint with the same numbers an uninterrupted run gives (also to train a finished run for more --steps).
    A non-finite loss or gradient stops the run at that step (exit code 3, files kept); --on-nonfinite skip skips
    such steps instead (apply_if_finite). Exit codes: 0 done, 2 usage error, 3 non-finite, 130 interrupted."""
)

MESH_HELP = textwrap.dedent(
    f"""\
    Several devices (--mesh {DATA_AXIS}=8): the params are replicated, each batch is split along the {DATA_AXIS!r}
    axis, and the optimizer state is placed by gradax.sharding.state_shardings: like the params, or with --zero
    split along {DATA_AXIS!r} too (ZeRO-1: each of the N devices holds 1/N of every moment). Without an
    accelerator the CPU is shown to JAX as as many devices as the mesh needs. The run prints the state's bytes per
    device beside the replicated figure (summary.json has the measured ones); --resume keeps the mesh."""
)


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions and examples as written; each option's help states its default itself."""


def _examples(*lines: str) -> str:
    return "examples:\n" + "\n".join(f"  {line}" for line in lines)


def _subcommand(sub, name: str, summary: str, description: str, epilog: str, func) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help=summary, formatter_class=_Formatter, description=description, epilog=epilog)
    p.set_defaults(func=func)
    return p


def _run_options(p: argparse.ArgumentParser) -> None:
    """What every checkpointed ``train``/``compare`` run takes: task, sizes, output folder, checkpoints, resume."""
    p.add_argument("--task", default=None, help=f"dataset/model: {', '.join(TASKS)} (default: digits)")
    p.add_argument(
        "--steps", type=int, default=None, help="training steps (default: the task's own, e.g. 500 for digits)"
    )
    p.add_argument(
        "--batch-size", type=int, default=None, help="batch size (default: the task's own, e.g. 64 for digits)"
    )
    p.add_argument("--seed", type=int, default=None, help="seed for initialisation and data order (default: 0)")
    p.add_argument(
        "--eval-every", type=int, default=None, help=f"test evaluation period (default: steps/{DEFAULT_EVALUATIONS})"
    )
    p.add_argument("--out", default=None, help=f"run folder to create (default: {RUNS}/<command>-<task>-<time>)")
    p.add_argument("--overwrite", action="store_true", help="replace --out if it exists (only once the run succeeds)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument(
        "--checkpoint-every",
        type=int,
        default=None,
        help=f"steps between checkpoints (default: {DEFAULT_CHECKPOINT_EVERY})",
    )
    p.add_argument(
        "--on-nonfinite",
        choices=("stop", "skip"),
        default=None,
        help="on a non-finite loss or gradient: stop the run (exit code 3) or skip the step (default: stop)",
    )
    p.add_argument(
        "--resume",
        default=None,
        metavar="RUN_FOLDER",
        help="continue an interrupted run (or a finished one, with a larger --steps) from its last checkpoint",
    )


def _mesh_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--mesh",
        default=None,
        metavar="AXIS=N[,AXIS=N]",
        help=f"train data-parallel on a device mesh with a {DATA_AXIS!r} axis, e.g. {DATA_AXIS}=8 (default: one device)",
    )
    p.add_argument(
        "--zero",
        action="store_true",
        help=f"with --mesh: split the optimizer state along {DATA_AXIS!r} too (ZeRO-1)",
    )


def _multi_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--seeds",
        type=int,
        default=None,
        help="runs per optimizer with seeds --seed, --seed+1, ...: mean and spread in the table, bands in the plot",
    )
    p.add_argument(
        "--sweep",
        default=None,
        metavar="F1,F2,...",
        help="learning-rate sweep: multiply each optimizer's learning rate (number or schedule) by each factor; "
        "every optimizer compiles once for all factors and seeds (vmap); the best factor is ranked",
    )
    p.add_argument(
        "--target",
        type=float,
        default=None,
        metavar="LOSS",
        help="rank by the first evaluated step where the test loss is at most LOSS (steps-to-target)",
    )


def _add_train(sub) -> None:
    p = _subcommand(
        sub,
        "train",
        "train a model on a shipped dataset",
        "Train the digits MLP or the Shakespeare character transformer with one optimizer; writes "
        "metrics.jsonl, curves.png, lr.png, summary.json and checkpoints/ to a run folder.\n\n"
        + "\n\n".join((RUN_HELP, MESH_HELP, EXPR_HELP)),
        _examples(
            "gradax train --task digits --steps 300",
            'gradax train --task digits --optimizer "sgd(learning_rate=0.1, momentum=0.9, nesterov=True)"',
            "gradax train --task shakespeare --steps 2000 --optimizer \\",
            '  "chain(clip_by_global_norm(1.0), adamw(learning_rate=warmup_cosine_decay_schedule(0.0, 3e-3, 100, '
            '2000), weight_decay=0.1))"',
            'gradax train --task digits --optimizer "contrib.muon(learning_rate=0.02)" --out runs/muon',
            f"gradax train --task digits --mesh {DATA_AXIS}=8 --zero    # ZeRO-1 over 8 (virtual CPU) devices",
            "gradax train --task digits --steps 5000 --checkpoint-every 500 --out runs/long   # Ctrl-C, then:",
            "gradax train --resume runs/long",
        ),
        cmd_train,
    )
    p.add_argument("--optimizer", default=None, help="optimizer expression (default: per task)")
    _run_options(p)
    _mesh_options(p)


def _add_compare(sub) -> None:
    p = _subcommand(
        sub,
        "compare",
        "compare several optimizers on one task",
        "Train the same model with several optimizers (same seed, same data order); writes one plot "
        "with all curves (compare.png) and a table ranked by final test accuracy (results.md).\n\n"
        + "\n\n".join((RUN_HELP, EXPR_HELP)),
        _examples(
            'gradax compare "sgd(0.1)" "adam(1e-3)" "adamw(1e-3, weight_decay=0.01)" --steps 300',
            'gradax compare --task shakespeare --steps 200 "adam(3e-3)" "chain(clip_by_global_norm(1.0), adam(3e-3))"',
            "gradax compare --resume runs/compare-digits-20250101-120000",
        ),
        cmd_compare,
    )
    p.add_argument("optimizers", nargs="*", metavar="OPTIMIZER", help="two or more optimizer expressions")
    _run_options(p)
    _multi_options(p)


def _add_leaderboard(sub) -> None:
    p = _subcommand(
        sub,
        "leaderboard",
        "rank every optimizer on the nanogpt task (steps to AdamW's loss, final loss, time, state bytes)",
        "Train nanoGPT's CPU Shakespeare model with AdamW (nanoGPT's settings) and every optimizer "
        "of gradax's contrib (SOAP, Shampoo, Kron, the Muon family, Scion, MARS, Adam-mini, LaProp, Grams, SPAM, "
        "APOLLO, CAME, cautious AdamW) plus Lion, Adafactor, schedule-free AdamW, Prodigy and Muon; each at its "
        "best learning-rate factor of a sweep compiled once per optimizer. Writes leaderboard.md, results.md, "
        "sweep.md, curves.png, steps_to_target.png and sweep.png. Default: 500 steps (nanoGPT's schedule "
        "compressed to them), 1 seed, factors 0.5,1,2 (about an hour on a 2-core CPU); --quick: 200 steps, factor 1 (a few minutes).",
        _examples(
            "gradax leaderboard --quick",
            "gradax leaderboard                                  # make leaderboard",
            "gradax leaderboard --only muon,soap,kron --seeds 3 --sweep 0.5,1,2,4",
        ),
        lambda a: cmd_leaderboard(a, get_task),
    )
    p.add_argument("--quick", action="store_true", help="200 steps, one learning rate per optimizer")
    p.add_argument("--only", default=None, help="comma-separated leaderboard names to run (AdamW always runs)")
    p.add_argument("--task", default=None, help="nanogpt (default) or nanogpt-tiny, or any task")
    p.add_argument("--steps", type=int, default=None, help="training steps (default 500, --quick 200)")
    p.add_argument("--seeds", type=int, default=None, help="seeds per optimizer and learning rate (default 1)")
    p.add_argument("--sweep", default=None, help="learning-rate factors (default 0.5,1,2; --quick 1)")
    p.add_argument("--eval-every", type=int, default=None, help="validation period (default steps/25)")
    p.add_argument("--out", default=None, help=f"run folder (default: {RUNS}/leaderboard-<task>-<time>)")
    p.add_argument("--overwrite", action="store_true", help="replace --out if it exists")
    p.add_argument("--quiet", action="store_true", help="no progress bars")


def _add_schedule(sub) -> None:
    p = _subcommand(
        sub,
        "schedule",
        "evaluate and plot a schedule",
        "Evaluate a schedule expression at steps 0..N, write a PNG and print the values at step 0, at "
        "the end of warmup (if the schedule has one) and at the end.\n\n" + EXPR_HELP,
        _examples(
            'gradax schedule "warmup_cosine_decay_schedule(0.0, 1e-3, 100, 1000)" --steps 1000',
            'gradax schedule "exponential_decay(1e-2, transition_steps=100, decay_rate=0.5)" --steps 500 --out lr.png',
            'gradax schedule "join_schedules([constant_schedule(0.1), linear_schedule(0.1, 0.0, 100)], [50])"',
        ),
        cmd_schedule,
    )
    p.add_argument("expression", help="schedule expression")
    p.add_argument("--steps", type=int, default=1000, help="number of steps N (default: %(default)s)")
    p.add_argument("--out", default=None, help=f"PNG file to write (default: {RUNS}/schedule.png)")


def _add_demo(sub) -> None:
    p = _subcommand(
        sub,
        "demo",
        "compare 3 optimizers on digits and train a small LM (a few minutes on CPU)",
        "Runs `compare` on digits with three optimizers and a short `train` of the Shakespeare "
        "character transformer; pictures go under --out.",
        "example:\n  gradax demo --out runs/demo",
        cmd_demo,
    )
    p.add_argument(
        "--out", default=str(RUNS / "demo"), help="folder for the demo runs, replaced (default: %(default)s)"
    )
    p.add_argument("--digits-steps", type=int, default=600, help="steps per optimizer on digits (default: %(default)s)")
    p.add_argument("--lm-steps", type=int, default=500, help="steps for the language model (default: %(default)s)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")


def _add_bench(sub) -> None:
    p = _subcommand(
        sub,
        "bench",
        "benchmark gradax against Optax and torch.optim (from a source checkout)",
        "Runs the benchmark suite of a gradax source checkout (benchmarks/run.py; it is not installed with the "
        "package): the same optimizer steps through gradax, Optax and torch.optim, step and compile times, "
        "bandwidth. Arguments after `bench` other than --checkout go to the suite (see `gradax bench -- --help`); "
        "results are in benchmarks/RESULTS.md.",
        _examples(
            "gradax bench                                   # in the checkout; --size small, as `make bench`",
            "gradax bench --size tiny --repeats 1",
            "gradax bench --checkout ~/src/gradax --size full --only adamw_gpt2 --only clip_adamw_schedule",
        ),
        cmd_bench,
    )
    p.allow_abbrev = False  # the suite's own options pass through: none of them may be read as --checkout
    p.add_argument(
        "--checkout",
        default=None,
        metavar="DIR",
        help="the gradax source checkout whose suite to run (default: the current folder)",
    )


def build_parser() -> argparse.ArgumentParser:
    """The ``gradax`` parser: each subcommand's arguments, with ``func`` set to the command to run."""
    parser = argparse.ArgumentParser(
        prog="gradax",
        description="Train small models, compare optimizers and plot schedules with gradax.\n\n" + EXPR_HELP,
        formatter_class=_Formatter,
        epilog=_examples(
            'gradax train --task digits --optimizer "adam(learning_rate=1e-3)"',
            'gradax compare "sgd(0.1, momentum=0.9)" "adam(1e-3)" "lion(1e-4)"',
            'gradax schedule "warmup_cosine_decay_schedule(0.0, 1e-3, 100, 1000)" --steps 1000',
            "gradax demo",
            "gradax bench --size tiny",
        ),
    )
    sub = parser.add_subparsers(dest="command", metavar="{" + ",".join(COMMANDS) + "}")
    sub.required = True
    for add in (_add_train, _add_compare, _add_leaderboard, _add_schedule, _add_demo, _add_bench):
        add(sub)
    return parser
