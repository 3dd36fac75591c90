"""Run folders that are never half-written, and Orbax checkpoints from which a killed run resumes bit for bit.

A run writing ``runs/x`` works in the hidden folder ``runs/.x.partial`` and renames it to ``runs/x`` only when it is
finished, so ``runs/x`` is either absent, the previous complete run, or the new complete run. The working folder
holds the run's settings (``run.json``), its metrics so far and Orbax checkpoints (``checkpoints/<step>/``; one
``checkpoints-<i>/`` per optimizer for ``compare``). A checkpoint holds the parameters, the optimizer state (which
carries any PRNG key an optimizer uses), the data sampler's position (its NumPy generator state), the metrics
records so far and the elapsed time. Orbax writes each checkpoint into a temporary folder and renames it when it is
complete, so a kill at any moment leaves the previous checkpoint readable.

``--resume runs/x`` continues ``runs/.x.partial`` when there is one (an interrupted run), or else copies the complete
``runs/x`` into a fresh working folder to train it further; either way the result replaces ``runs/x`` atomically.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import tempfile
from pathlib import Path
from typing import Any

import jax

FORMAT = 1  # version of the checkpoint layout below
MAX_TO_KEEP = 2


class OutputError(OSError):
    """The output folder cannot be created, replaced or resumed."""


def _partial_of(path: Path) -> Path:
    return path.with_name(f".{path.name}.partial")


def _final_of(path: Path) -> Path:
    """``runs/.x.partial`` -> ``runs/x`` (so that ``--resume`` accepts either); other paths unchanged."""
    name = path.name
    if name.startswith(".") and name.endswith(".partial") and len(name) > len("..partial"):
        return path.with_name(name[1 : -len(".partial")])
    return path


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` beside ``path`` and rename it into place: readers see the old file or the new one."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")
    try:
        with open(tmp, "x") as f:  # mode from the umask, as any other file of the run
            f.write(text)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def find_run(path: str | os.PathLike) -> tuple[Path, dict]:
    """The folder ``--resume path`` continues (the interrupted working folder if there is one) and its settings."""
    final = _final_of(Path(path))
    for folder in (_partial_of(final), final):
        if (folder / "run.json").is_file():
            try:
                return folder, json.loads((folder / "run.json").read_text())
            except (OSError, ValueError) as e:
                raise OutputError(f"cannot read the settings of {str(folder)!r} (run.json): {e}") from None
    raise OutputError(
        f"--resume must name a run folder written by gradax train or compare; got {str(path)!r} (no run.json there "
        f"and no interrupted run in {str(_partial_of(final))!r}). Check the path"
    )


def latest_step_in(folder: Path) -> int | None:
    """The last step checkpointed in ``folder`` (over all its ``checkpoints*`` folders), read without Orbax."""
    steps = [int(p.name) for d in folder.glob("checkpoints*") if d.is_dir() for p in d.iterdir() if p.name.isdigit()]
    return max(steps, default=None)


class RunFolder:
    """The working folder of one run and its atomic ``commit`` into the final path.

    Build it with :meth:`create` (a new run) or :meth:`resume` (an interrupted or finished run, continued).
    """

    def __init__(self, path: Path, work: Path, fresh: bool):
        self.path, self.work, self.fresh = path, work, fresh

    @classmethod
    def create(cls, path: str | os.PathLike, overwrite: bool = False) -> RunFolder:
        path = Path(path)
        work = _partial_of(path)
        if path.exists() and not path.is_dir():
            raise OutputError(f"output path {str(path)!r} exists and is not a folder")
        if path.exists() and not overwrite:
            raise OutputError(f"output folder {str(path)!r} already exists; pass --overwrite or choose --out")
        if work.exists() and not overwrite:
            raise OutputError(
                f"an interrupted run is waiting in {str(work)!r}; continue it with --resume {path} or start over "
                "with --overwrite"
            )
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            if work.exists():
                shutil.rmtree(work)
            work.mkdir()
        except OSError as e:
            raise OutputError(f"cannot write to output folder {str(path)!r}: {e.strerror or e}") from None
        return cls(path, work, fresh=True)

    @classmethod
    def resume(cls, path: str | os.PathLike) -> RunFolder:
        found, _ = find_run(path)
        path = _final_of(Path(path))
        work = _partial_of(path)
        if found == work:
            return cls(path, work, fresh=False)
        try:  # copy, then rename: a kill during the copy leaves no working folder behind the final one
            tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.copy-", dir=path.parent))
            shutil.copytree(path, tmp, dirs_exist_ok=True)
            os.replace(tmp, work)
        except OSError as e:
            raise OutputError(f"cannot resume {str(path)!r}: {e.strerror or e}") from None
        return cls(path, work, fresh=False)

    def file(self, name: str) -> Path:
        return self.work / name

    def write_config(self, config: dict) -> None:
        write_atomic(self.file("run.json"), json.dumps(config, indent=2) + "\n")

    def has_checkpoint(self) -> bool:
        return latest_step_in(self.work) is not None

    def commit(self) -> Path:
        """Rename the working folder to the final path (replacing a previous complete run)."""
        if self.path.exists():
            old = self.path.with_name(f".{self.path.name}.old-{os.getpid()}")
            os.replace(self.path, old)
            os.replace(self.work, self.path)  # a kill between the two renames: --resume finishes from the work folder
        else:
            os.replace(self.work, self.path)
        for old in self.path.parent.glob(f".{self.path.name}.old-*"):  # this one, and any left by a kill
            shutil.rmtree(old, ignore_errors=True)
        return self.path

    def abandon(self) -> None:
        """After an error: remove a new working folder that holds no checkpoint; keep anything resumable."""
        if self.fresh and not self.has_checkpoint():
            shutil.rmtree(self.work, ignore_errors=True)


def _is_key(x: Any) -> bool:
    return hasattr(x, "dtype") and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)


class Checkpoints:
    """Orbax checkpoints of one training run, numbered by step, in ``directory``.

    Parameters and optimizer state are stored as their lists of leaves (typed PRNG keys as their key data) and put
    back into the structure of a template built by the same task and optimizer, so any optimizer state (NamedTuples,
    empty states, ``None`` leaves) round-trips exactly. Saves are synchronous.
    """

    def __init__(self, directory: Path):
        try:
            import orbax.checkpoint as ocp
        except ImportError:
            raise OutputError(
                "checkpoints need the orbax-checkpoint package, which is not installed; install the CLI's "
                "dependencies: pip install 'gradax[cli]'"
            ) from None
        self.ocp = ocp
        self.directory = Path(directory).absolute()
        options = ocp.CheckpointManagerOptions(max_to_keep=MAX_TO_KEEP, create=True, enable_async_checkpointing=False)
        self.manager = ocp.CheckpointManager(self.directory, options=options)

    def latest_step(self) -> int | None:
        return self.manager.latest_step()

    def save(self, step: int, params: Any, opt_state: Any, meta: dict) -> None:
        leaves = {
            "params": [jax.random.key_data(x) if _is_key(x) else x for x in jax.tree.leaves(params)],
            "opt_state": [jax.random.key_data(x) if _is_key(x) else x for x in jax.tree.leaves(opt_state)],
        }
        args = self.ocp.args.Composite(
            state=self.ocp.args.StandardSave(leaves), meta=self.ocp.args.JsonSave({"format": FORMAT, **meta})
        )
        self.manager.save(step, args=args, force=True)
        self.manager.wait_until_finished()

    def restore(self, params_like: Any, state_like: Any, step: int | None = None) -> tuple[Any, Any, dict]:
        """``(params, opt_state, meta)`` of ``step`` (default: the latest), shaped like the two templates."""
        step = self.latest_step() if step is None else step
        templates = {"params": params_like, "opt_state": state_like}

        def abstract(x):
            data = jax.random.key_data(x) if _is_key(x) else x
            return jax.ShapeDtypeStruct(data.shape, data.dtype, sharding=data.sharding)

        target = {k: [abstract(x) for x in jax.tree.leaves(t)] for k, t in templates.items()}
        try:
            got = self.manager.restore(
                step,
                args=self.ocp.args.Composite(
                    state=self.ocp.args.StandardRestore(target), meta=self.ocp.args.JsonRestore()
                ),
            )
            out = []
            for key, template in templates.items():
                leaves = [
                    jax.random.wrap_key_data(v, impl=jax.random.key_impl(t)) if _is_key(t) else v
                    for v, t in zip(got["state"][key], jax.tree.leaves(template), strict=True)
                ]
                out.append(jax.tree.unflatten(jax.tree.structure(template), leaves))
        except Exception as e:  # any failure here means the checkpoint does not fit this run
            raise OutputError(
                f"cannot restore checkpoint {step} from {str(self.directory)!r}: {type(e).__name__}: {e}. It was "
                "written by another optimizer or task, or is damaged"
            ) from None
        return out[0], out[1], dict(got["meta"])

    def close(self) -> None:
        self.manager.close()
