"""`gradax train --mesh data=8 --zero` in a fresh process (the CLI itself shows the CPU as 8 devices); prints JSON.

Run by tests/cli/test_mesh.py as `python _mesh_train_script.py FOLDER`. Trains the digits MLP with AdamW for a few
steps three ways: on one device, on the mesh with ZeRO-1 state, and on the mesh interrupted halfway and resumed;
then reads the final checkpoints back and compares them.
"""

import contextlib
import io
import json
import sys
from pathlib import Path

from gradax.cli import main

STEPS, HALF = 6, 3
COMMON = ["train", "--task", "digits", "--batch-size", "32", "--eval-every", "3", "--quiet"]
OPTIMIZER = ["--optimizer", "adamw(learning_rate=1e-2, weight_decay=1e-3)"]


def run(*argv: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = main(list(argv))
    assert rc == 0, (argv, rc, out.getvalue())
    return out.getvalue()


def final_state(folder: Path):
    """The final params and optimizer state of a run, restored onto one device, as float64 NumPy leaves."""
    import jax
    import numpy as np

    from gradax.cli._checkpoint import Checkpoints
    from gradax.cli._expr import parse_optimizer
    from gradax.cli._tasks import get_task

    task = get_task("digits")
    params = task.init(jax.random.PRNGKey(0))
    state = parse_optimizer(OPTIMIZER[1]).value.init(params)
    checkpoints = Checkpoints(folder / "checkpoints")
    try:
        got_params, got_state, meta = checkpoints.restore(params, state)
    finally:
        checkpoints.close()
    leaves = [np.asarray(x, np.float64) for x in jax.tree.leaves((got_params, got_state))]
    return leaves, meta["step"]


def placed_step_specs() -> dict:
    """One jitted training step on the mesh: do the state leaves it returns carry the ZeRO-1 shardings asked for?"""
    import jax

    from gradax.cli._expr import parse_optimizer
    from gradax.cli._mesh import placement_for
    from gradax.cli._run import _placed_init, make_step_fn
    from gradax.cli._tasks import get_task

    task = get_task("digits")
    opt = parse_optimizer(OPTIMIZER[1]).value
    placement = placement_for("data=8", True, 32)
    params = task.init(jax.random.PRNGKey(0))
    shardings = (placement.params(params), placement.state(opt, params))
    params = jax.device_put(params, shardings[0])
    state = _placed_init(opt, params, shardings[1])
    step = make_step_fn(task, opt, shardings=shardings)
    xb, yb = jax.device_put(next(task.sampler(0, 32)), placement.batch())
    _, state, *_ = step(params, state, xb, yb)
    wanted = [s.spec for s in jax.tree.leaves(shardings[1])]
    got = [x.sharding.spec for x in jax.tree.leaves(state)]
    split = [str(x.shape) for x in jax.tree.leaves(state) if "data" in str(x.sharding.spec)]
    return {"specs_as_asked": wanted == got, "split_leaves": split, "n_leaves": len(got)}


def main_script(root: Path) -> dict:
    import jax

    # first: JAX starts with this run, and with the 8 devices its --mesh asks for
    zero = run(*COMMON, *OPTIMIZER, "--steps", str(STEPS), "--mesh", "data=8", "--zero", "--out", str(root / "zero"))
    single = run(*COMMON, *OPTIMIZER, "--steps", str(STEPS), "--out", str(root / "single"))
    run(*COMMON, *OPTIMIZER, "--steps", str(HALF), "--checkpoint-every", "1", "--mesh", "data=8", "--zero", "--out",
        str(root / "resumed"))  # fmt: skip
    resumed = run("train", "--resume", str(root / "resumed"), "--steps", str(STEPS), "--quiet")
    (s, s_step), (z, z_step), (r, r_step) = (final_state(root / n) for n in ("single", "zero", "resumed"))
    assert s_step == z_step == r_step == STEPS
    return {
        "devices": len(jax.devices()),
        "zero_stdout": zero,
        "resumed_stdout": resumed,
        "single_stdout": single,
        "max_diff_zero_vs_single": max(float(abs(a - b).max()) for a, b in zip(s, z)),
        "max_abs_single": max(float(abs(a).max()) for a in s),
        "resumed_identical": all((a == b).all() for a, b in zip(z, r)),
        "summary": json.loads((root / "zero" / "summary.json").read_text()),
        "resumed_summary": json.loads((root / "resumed" / "summary.json").read_text()),
        "run_json": json.loads((root / "resumed" / "run.json").read_text()),
        **placed_step_specs(),
    }


if __name__ == "__main__":
    print(json.dumps(main_script(Path(sys.argv[1]))))
