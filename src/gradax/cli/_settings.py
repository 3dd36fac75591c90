"""The settings of a new or resumed ``train``/``compare`` run (``run.json``) and the run folder they go into."""

from __future__ import annotations

from ._checkpoint import RunFolder, find_run, latest_step_in
from ._common import DEFAULT_CHECKPOINT_EVERY, CliError, default_eval_every, default_out, positive
from ._tasks import get_task

#: Options fixed when a run starts; ``--resume`` refuses them (the run continues with the settings in its run.json).
FIXED = ("task", "seed", "batch_size", "eval_every", "checkpoint_every", "on_nonfinite", "out")
#: Options of ``train`` only that are fixed when a run starts, as :data:`FIXED`.
FIXED_TRAIN = ("optimizer", "mesh")


def _new(args, command: str) -> dict:
    task = get_task(args.task or "digits")
    steps = positive("--steps", args.steps) or task.default_steps
    config = {
        "command": command,
        "task": task.name,
        "steps": steps,
        "batch_size": positive("--batch-size", args.batch_size) or task.default_batch_size,
        "seed": 0 if args.seed is None else args.seed,
        "eval_every": positive("--eval-every", args.eval_every) or default_eval_every(steps),
        "checkpoint_every": positive("--checkpoint-every", args.checkpoint_every) or DEFAULT_CHECKPOINT_EVERY,
        "on_nonfinite": args.on_nonfinite or "stop",
    }
    if command == "train":
        if args.zero and args.mesh is None:
            raise CliError("--zero splits the optimizer state over the devices of --mesh; give --mesh (e.g. data=8)")
        config["optimizer"] = args.optimizer or task.default_optimizer
        config["mesh"] = args.mesh
        config["zero"] = bool(args.zero)
        return config
    if len(args.optimizers) < 2:
        raise CliError("compare needs at least two optimizer expressions")
    config["optimizers"] = args.optimizers
    return config


def _given_with_resume(args, command: str) -> list[str]:
    """The options that ``--resume`` refuses and that were given anyway, as they are spelled on the command line."""
    fixed = FIXED + (FIXED_TRAIN if command == "train" else ())
    given = [f"--{k.replace('_', '-')}" for k in fixed if getattr(args, k) is not None]
    given += ["--overwrite"] if args.overwrite else []
    given += ["--zero"] if command == "train" and args.zero else []
    given += ["OPTIMIZER"] if command == "compare" and args.optimizers else []
    return given


def settings(args, command: str) -> tuple[dict, str | None]:
    """The run's settings (``run.json``) and, for ``--resume``, the folder to continue."""
    if args.resume is None:
        return _new(args, command), None
    given = _given_with_resume(args, command)
    if given:
        raise CliError(
            f"--resume continues a run with the settings it started with; got {', '.join(given)}. Drop them (only "
            "--steps and --quiet may be given with --resume)"
        )
    folder, config = find_run(args.resume)
    if config.get("command") != command:
        raise CliError(
            f"--resume {args.resume!r} names a run of `gradax {config.get('command')}`; resume it with that command"
        )
    done = latest_step_in(folder) or 0
    if args.steps is not None:
        config["steps"] = positive("--steps", args.steps)
    if config["steps"] < done:
        raise CliError(
            f"--steps must be at least {done} (the steps {args.resume!r} has done already); got {config['steps']}"
        )
    return config, args.resume


def open_folder(config: dict, args, resume: str | None) -> RunFolder:
    """The run folder: the resumed one, or a new one at ``--out`` (default ``runs/<command>-<task>-<time>``)."""
    if resume is not None:
        folder = RunFolder.resume(resume)
        folder.write_config(config)
        return folder
    folder = RunFolder.create(args.out or default_out(config["command"], config["task"]), overwrite=args.overwrite)
    folder.write_config(config)
    return folder
