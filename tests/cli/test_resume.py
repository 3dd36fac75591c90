"""gradax train/compare: runs killed with SIGKILL (real subprocesses, at seeded random points: after a step, inside a
checkpoint write, between the renames of the run folder), stopped with SIGINT, and resumed, give the metrics and the
final parameters of an uninterrupted run bit for bit; the run folder is the old complete one or none; the errors of
--resume."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import jax
import numpy as np
import pytest

from gradax.cli import _run, main
from gradax.cli._checkpoint import Checkpoints, latest_step_in
from gradax.cli._expr import parse_optimizer
from gradax.cli._tasks import get_task
from tests._compiles import backend_compiles

DRIVER = str(Path(__file__).with_name("kill_driver.py"))
OPT = "chain(clip_by_global_norm(1.0), adamw(learning_rate=warmup_cosine_decay_schedule(0.0, 3e-3, 4, 14)))"
STEPS = 14
ARGS = ["--steps", str(STEPS), "--batch-size", "32", "--checkpoint-every", "3", "--eval-every", "4", "--quiet"]
TIMINGS = ("steps_per_second", "wall_time_s")
RNG = random.Random(23)  # kill points: seeded, so CI runs the same cases every time


def _env():
    return {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(Path(__file__).parents[2] / "src")}


def _driver(mode: str, arg: int, argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    cmd = [sys.executable, DRIVER, mode, str(arg), "--", *argv]
    return subprocess.run(cmd, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=120)


def _final_params(folder: Path, expr: str = OPT, suffix: str = "", step: int | None = None):
    task = get_task("digits")
    opt = parse_optimizer(expr).value
    params = task.init(jax.random.PRNGKey(0))
    ckpt = Checkpoints(folder / f"checkpoints{suffix}")
    try:
        return ckpt.restore(params, opt.init(params), step)
    finally:
        ckpt.close()


def _assert_same_run(got: Path, ref: Path, summary: str = "summary.json", suffixes=("",), exprs=(OPT,)):
    for suffix, expr in zip(suffixes, exprs):
        assert (got / f"metrics{suffix}.jsonl").read_text() == (ref / f"metrics{suffix}.jsonl").read_text()
        p1, s1, m1 = _final_params(got, expr, suffix)
        p2, s2, m2 = _final_params(ref, expr, suffix)
        for a, b in zip(jax.tree.leaves((p1, s1)), jax.tree.leaves((p2, s2)), strict=True):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))  # bit for bit (NaN == NaN)
        assert m1["records"] == m2["records"] and m1["data"] == m2["data"]
    a, b = (json.loads((f / summary).read_text()) for f in (got, ref))
    strip = lambda d: [{k: v for k, v in r.items() if k not in TIMINGS} for r in (d if isinstance(d, list) else [d])]
    assert strip(a) == strip(b)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The uninterrupted run, in-process (one compilation of the step)."""
    out = tmp_path_factory.mktemp("ref") / "ref"
    made = []
    make = _run.make_step_fn

    def capture(*a, **k):
        made.append(make(*a, **k))
        return made[-1]

    _run.make_step_fn = capture
    try:
        with backend_compiles() as compiled:
            assert main(["train", "--optimizer", OPT, *ARGS, "--out", str(out)]) == 0
    finally:
        _run.make_step_fn = make
    assert len(made) == 1 and compiled.count("jit(step_fn)") == 1
    assert latest_step_in(out) == STEPS
    return out


def test_sigkill_after_a_step_inside_a_checkpoint_and_in_the_commit_then_resume(reference, tmp_path):
    out = tmp_path / "run"
    # 1. killed after a seeded random step (before or after the first checkpoint at step 3)
    a = RNG.randint(1, 8)
    r = _driver("step", a, ["train", "--optimizer", OPT, *ARGS, "--out", str(out)], tmp_path)
    assert r.returncode == -signal.SIGKILL, r.stderr
    assert not out.exists()
    partial = tmp_path / ".run.partial"
    done = latest_step_in(partial) or 0
    assert done == a // 3 * 3
    # 2. resumed (from the start when no checkpoint was written yet), killed while a later checkpoint is written:
    #    Orbax has written it into a temporary folder and not renamed it
    c = RNG.choice([s for s in range(done + 3, STEPS, 3)])
    r = _driver("checkpoint", c, ["train", "--resume", str(out), "--quiet"], tmp_path)
    assert r.returncode == -signal.SIGKILL, r.stderr
    assert latest_step_in(partial) == c - 3 and (partial / "checkpoints" / f"{c}.orbax-checkpoint-tmp").is_dir()
    # 3. resumed to the end, killed when the finished folder is renamed into place: no run folder
    r = _driver("commit", 1, ["train", "--resume", str(out), "--quiet"], tmp_path)
    assert r.returncode == -signal.SIGKILL, r.stderr
    assert not out.exists() and latest_step_in(partial) == STEPS
    # 4. resumed in-process: nothing left to train, the folder is finished and renamed
    assert main(["train", "--resume", str(out), "--quiet"]) == 0
    assert not partial.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["run"]
    _assert_same_run(out, reference)


def _wait_for_lines(path: Path, n: int, proc: subprocess.Popen, timeout: float = 90.0) -> None:
    t = time.monotonic()
    while time.monotonic() - t < timeout and proc.poll() is None:
        if path.exists() and path.read_text().count("\n") >= n:
            return
        time.sleep(0.02)
    raise AssertionError(f"the run did not reach {n} steps: {proc.poll()}")


def test_sigkill_from_outside_and_ctrl_c_then_resume(reference, tmp_path):
    # SIGKILL from another process once the run has done a seeded random number of steps (it may be a little
    # further when the signal lands: any point must do), then Ctrl-C (SIGINT) on the resumed run, then resume again
    out, partial = tmp_path / "run", tmp_path / ".run.partial"
    argv = [sys.executable, "-m", "gradax.cli", "train", "--optimizer", OPT, *ARGS, "--out", str(out)]
    proc = subprocess.Popen(argv, cwd=tmp_path, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for_lines(partial / "metrics.jsonl", RNG.randint(4, 7), proc)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    done = latest_step_in(partial)
    assert done is not None and not out.exists()

    (partial / "metrics.jsonl").unlink()  # resuming rebuilds it from the checkpoint's records (and we wait on it)
    argv = [sys.executable, "-m", "gradax.cli", "train", "--resume", str(out), "--quiet"]
    proc = subprocess.Popen(argv, cwd=tmp_path, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for_lines(partial / "metrics.jsonl", done + 2, proc)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    if proc.returncode == 0:  # the run finished before the signal arrived; nothing left to test here
        pytest.skip("the resumed run ended before Ctrl-C")
    assert proc.returncode == 130, err
    assert "Ctrl-C: writing a checkpoint after this step" in err
    stopped = int(err.split("interrupted after step ")[1].split(";")[0])
    assert latest_step_in(partial) == stopped > done  # the checkpoint of the last finished step
    assert f"--resume {out}" in err and not out.exists()
    assert main(["train", "--resume", str(partial), "--quiet"]) == 0  # the working folder's name works too
    _assert_same_run(out, reference)


def test_resume_a_finished_run_for_more_steps_is_atomic(reference, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(reference, out)
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    # killed between the two renames that replace the finished run: the old one is moved aside, the new one not yet
    # in place, so there is no run folder; --resume finishes from the working folder
    r = _driver("commit", 2, ["train", "--resume", str(out), "--steps", "16", "--quiet"], tmp_path)
    assert r.returncode == -signal.SIGKILL, r.stderr
    assert not out.exists() and latest_step_in(tmp_path / ".run.partial") == 16
    # killed at the first rename: the old complete folder is untouched
    shutil.copytree(reference, out)
    shutil.rmtree(tmp_path / ".run.partial")
    r = _driver("commit", 1, ["train", "--resume", str(out), "--steps", "16", "--quiet"], tmp_path)
    assert r.returncode == -signal.SIGKILL, r.stderr
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert main(["train", "--resume", str(out), "--quiet"]) == 0
    recs = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in recs] == list(range(1, 17))
    assert (out / "metrics.jsonl").read_text().startswith((reference / "metrics.jsonl").read_text())
    assert json.loads((out / "run.json").read_text())["steps"] == 16
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_compare_killed_in_its_second_optimizer_then_resumed(tmp_path):
    exprs = ["sgd(0.1, momentum=0.9)", "adam(1e-2)"]
    args = ["--steps", "5", "--batch-size", "16", "--checkpoint-every", "2", "--quiet"]
    ref, out = tmp_path / "ref", tmp_path / "cmp"
    assert main(["compare", *exprs, *args, "--out", str(ref)]) == 0
    kill = RNG.randint(6, 9)  # after step 1..4 of the second optimizer
    r = _driver("step", kill, ["compare", *exprs, *args, "--out", str(out)], tmp_path)
    assert r.returncode == -signal.SIGKILL, r.stderr
    assert main(["compare", "--resume", str(out), "--quiet"]) == 0
    _assert_same_run(out, ref, "results.json", ("-1", "-2"), exprs)


# --- errors of --resume and of the run folder ---------------------------------------------------------------------


def test_resume_errors(reference, tmp_path, capsys):
    def error(argv):
        assert main(argv) == 2
        return capsys.readouterr().err

    assert "--resume must name a run folder written by gradax train or compare" in error(
        ["train", "--resume", str(tmp_path / "nothing")]
    )
    err = error(["train", "--resume", str(reference), "--seed", "3", "--optimizer", "sgd(0.1)"])
    assert "--resume continues a run with the settings it started with; got --seed, --optimizer" in err
    assert "got OPTIMIZER" in error(["compare", "--resume", str(reference), "adam(1e-3)"])
    assert "names a run of `gradax train`; resume it with that command" in error(
        ["compare", "--resume", str(reference)]
    )
    assert f"--steps must be at least {STEPS}" in error(["train", "--resume", str(reference), "--steps", "5"])
    assert "--checkpoint-every must be a positive integer; got 0" in error(["train", "--checkpoint-every", "0"])
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "run.json").write_text("{not json")
    assert "cannot read the settings of" in error(["train", "--resume", str(bad)])
    # an interrupted run is never replaced by accident
    (tmp_path / ".busy.partial").mkdir()
    err = error(["train", "--steps", "1", "--out", str(tmp_path / "busy")])
    assert "an interrupted run is waiting in" in err and "--resume" in err
    # a checkpoint that does not fit the run's optimizer
    other = tmp_path / "other"
    shutil.copytree(reference, other)
    settings = json.loads((other / "run.json").read_text())
    (other / "run.json").write_text(json.dumps({**settings, "optimizer": "adam(1e-3)"}))
    assert "cannot restore checkpoint 14" in error(["train", "--resume", str(other), "--steps", "15", "--quiet"])


def test_missing_orbax_is_reported(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "orbax.checkpoint", None)
    assert main(["train", "--steps", "1", "--out", str(tmp_path / "r"), "--quiet"]) == 2
    assert "checkpoints need the orbax-checkpoint package" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())  # nothing resumable was written, so nothing is kept
