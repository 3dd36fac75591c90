"""gradax train/compare on numbers that go bad: a huge learning rate makes the digits MLP diverge within 3 steps;
the run stops at that step with exit code 3 and a message naming the step, the last finite loss and what to try,
keeping its files, or (``--on-nonfinite skip``) skips such steps through ``apply_if_finite``."""

from __future__ import annotations

import json
import math

import jax
import numpy as np

import gradax
from gradax.cli import main
from gradax.cli._checkpoint import Checkpoints, latest_step_in
from gradax.cli._expr import parse_optimizer
from gradax.cli._run import EXIT_NONFINITE, SKIP_PATIENCE
from gradax.cli._tasks import get_task

DIVERGES = "sgd(1e10)"  # step 1 finite, step 2 a loss of ~1e18, step 3 an infinite loss
ARGS = ["--steps", "6", "--eval-every", "1", "--quiet"]


def _records(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_nonfinite_stops_the_run_at_that_step_and_keeps_its_files(tmp_path, capsys):
    out = tmp_path / "run"
    assert EXIT_NONFINITE == 3
    assert main(["train", "--optimizer", DIVERGES, "--checkpoint-every", "2", *ARGS, "--out", str(out)]) == 3
    err = capsys.readouterr().err
    recs = _records(out / "metrics.jsonl")
    stop = recs[-1]["step"]
    assert stop == 3 and recs[-1]["nonfinite"] is True and not math.isfinite(recs[-1]["loss"])
    assert all(math.isfinite(r["loss"]) for r in recs[:-1])
    last = recs[-2]["loss"]
    assert f"non-finite at step {stop} (loss inf); the last finite loss was {last:.6g} at step {stop - 1}" in err
    for hint in ("lower learning rate", "clip_by_global_norm", "--on-nonfinite skip", "apply_if_finite", str(out)):
        assert hint in err
    assert sorted(p.name for p in out.iterdir()) == [
        "checkpoints",
        "curves.png",
        "lr.png",
        "metrics.jsonl",
        "run.json",
        "summary.json",
    ]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "nonfinite" and summary["stop_step"] == stop and summary["last_finite_loss"] == last
    assert sorted(int(p.name) for p in (out / "checkpoints").iterdir()) == [2, 3]  # the last finite one is kept
    # resuming replays the same numbers and stops at the same step without training again
    assert main(["train", "--resume", str(out), "--quiet"]) == 3
    assert f"non-finite at step {stop}" in capsys.readouterr().err
    assert _records(out / "metrics.jsonl") == recs


def test_on_nonfinite_skip_leaves_params_and_state_unchanged_on_bad_steps(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", "--optimizer", DIVERGES, "--on-nonfinite", "skip", *ARGS, "--out", str(out)]) == 0
    stdout = capsys.readouterr().out
    recs = _records(out / "metrics.jsonl")
    skipped = [r["step"] for r in recs if r.get("skipped")]
    assert skipped == [3, 4, 5, 6] and f"skipped: {len(skipped)} steps" in stdout
    assert json.loads((out / "summary.json").read_text())["skipped_steps"] == 4
    # the parameters after the last applied step (2) never change again: same test metrics, finite parameters
    assert len({(r["test_loss"], r["test_accuracy"]) for r in recs[1:]}) == 1
    task = get_task("digits")
    opt = gradax.apply_if_finite(parse_optimizer(DIVERGES).value, max_consecutive_errors=SKIP_PATIENCE)
    params = task.init(jax.random.PRNGKey(0))
    ckpt = Checkpoints(out / "checkpoints")
    try:
        p, state, _ = ckpt.restore(params, opt.init(params))
    finally:
        ckpt.close()
    assert latest_step_in(out) == 6
    assert all(np.isfinite(np.asarray(x)).all() for x in jax.tree.leaves(p))
    assert int(state.notfinite_count) == 4 and int(state.total_notfinite) == 4 and not bool(state.last_finite)


def test_compare_ranks_a_diverged_optimizer_last_and_exits_3(tmp_path, capsys):
    out = tmp_path / "cmp"
    assert main(["compare", DIVERGES, "sgd(0.1)", *ARGS, "--out", str(out)]) == 3
    captured = capsys.readouterr()
    assert "gradax: warning: [1/2] sgd(1e10): the loss or a gradient became non-finite at step 3" in captured.err
    assert "1 of 2 runs stopped on a non-finite loss or gradient" in captured.err
    rows = json.loads((out / "results.json").read_text())
    assert [r["optimizer"] for r in rows] == ["sgd(0.1)", DIVERGES] and rows[1]["status"] == "nonfinite"
    assert "(non-finite at step 3)" in (out / "results.md").read_text()
