"""compare --seeds/--sweep/--target, the nanogpt task and gradax leaderboard, on tiny settings."""

import json

import numpy as np
import pytest

from gradax.cli import main
from gradax.cli._expr import ExpressionError
from gradax.cli._leaderboard import leaderboard_entries
from gradax.cli._multi import LeaderboardError, parse_factors, run_batched, split_learning_rate
from gradax.cli._nanogpt import NANOGPT, adamw_expression, learning_rate
from gradax.cli._tasks import get_task


@pytest.fixture(scope="module")
def digits():
    return get_task("digits")  # an MLP: compiles in well under a second


def test_nanogpt_task_is_nanogpts_configuration():
    assert (NANOGPT.n_layer, NANOGPT.n_head, NANOGPT.n_embd, NANOGPT.block_size) == (4, 4, 128, 64)
    assert (NANOGPT.batch_size, NANOGPT.max_iters, NANOGPT.warmup_iters) == (12, 2000, 100)
    import jax

    task = get_task("nanogpt")
    n = sum(x.size for x in jax.tree.leaves(jax.eval_shape(task.init, jax.random.PRNGKey(0))))
    assert n == 804_480  # nanoGPT reports 0.80M parameters for this configuration
    assert task.default_batch_size == 12 and task.default_steps == 2000
    assert "path_mask('ln_', invert=True)" in task.default_optimizer
    assert learning_rate(0, NANOGPT) == 0.0 and learning_rate(100, NANOGPT) == pytest.approx(1e-3)
    assert learning_rate(2000, NANOGPT) == pytest.approx(1e-4)


def test_split_learning_rate():
    rewritten, lr = split_learning_rate("chain(clip_by_global_norm(1.0), adamw(3e-3, weight_decay=0.1))")
    assert rewritten == "chain(clip_by_global_norm(1.0), adamw(1.0, weight_decay=0.1))" and lr == 3e-3
    rewritten, lr = split_learning_rate("cautious(sgd(learning_rate=linear_schedule(0.1, 0.0, 10)))")
    assert "learning_rate=1.0" in rewritten and float(lr(5)) == pytest.approx(0.05)
    with pytest.raises(ExpressionError, match="exactly one learning_rate in the expression; no call takes one"):
        split_learning_rate("clip_by_global_norm(1.0)")
    with pytest.raises(ExpressionError, match="exactly one learning_rate in the expression; 2 calls take one"):
        split_learning_rate("chain(adam(1e-3), sgd(1e-2))")


def test_parse_factors():
    assert parse_factors("0.5, 1,2") == [0.5, 1.0, 2.0]
    for bad in ("", "a,b", "1,-2", "1,1", "0"):
        with pytest.raises(LeaderboardError, match="--sweep must be distinct positive learning-rate factors"):
            parse_factors(bad)


def test_sweep_of_four_values_compiles_the_step_once(digits):
    res = run_batched(
        digits,
        "adamw(warmup_cosine_decay_schedule(0.0, 2e-2, 2, 6), weight_decay=0.1)",
        seeds=[0, 1],
        factors=[0.25, 0.5, 1.0, 2.0],
        steps=6,
        batch_size=4,
        eval_every=3,
        progress=False,
    )
    assert res.traces == 1  # one trace, hence one compilation, for 8 runs
    assert res.train_loss.shape == (8, 6) and res.test_loss.shape == (8, 2)
    assert res.base_lr == pytest.approx(2e-2)
    assert len(set(np.round(res.test_loss[:4, -1], 6).tolist())) == 4  # seed 0: each factor its own run
    assert not np.allclose(res.test_loss[:4], res.test_loss[4:])  # seeds differ


def test_sweep_factor_one_matches_the_plain_run(digits):
    from gradax.cli._expr import parse_optimizer
    from gradax.cli._run import train

    expr = "adam(learning_rate=linear_schedule(3e-3, 1e-3, 5))"
    res = run_batched(digits, expr, seeds=[3], factors=[1.0], steps=5, batch_size=4, eval_every=5, progress=False)
    hist = train(digits, parse_optimizer(expr).value, steps=5, batch_size=4, seed=3, progress=False)
    plain = [r["loss"] for r in hist.records]
    np.testing.assert_allclose(res.train_loss[0], plain, rtol=2e-5)
    np.testing.assert_allclose(res.test_loss[0, -1], hist.final("test_loss"), rtol=2e-5)


def test_branching_optimizers_run_one_after_another_with_the_plain_numbers(digits):
    """vmap would turn SOAP's refresh ``switch`` into a select computing every branch on every step; such an
    optimizer's runs go through ``lax.map`` in the same compiled step, and each still matches its plain run."""
    import jax

    from gradax.cli._expr import parse_optimizer
    from gradax.cli._multi import _branches
    from gradax.cli._run import train

    params = digits.init(jax.random.PRNGKey(0))

    def has_branch(expr):
        opt = parse_optimizer(expr).value
        return _branches(jax.make_jaxpr(lambda p, s: opt.update(p, s, p))(params, opt.init(params)).jaxpr)

    assert has_branch("contrib.soap(1e-3, precondition_frequency=2)")
    assert has_branch("chain(clip_by_global_norm(1.0), contrib.kron(1e-3))")  # nested in a chain
    assert not has_branch("chain(clip_by_global_norm(1.0), adamw(1e-3))")
    expr = "contrib.soap(learning_rate=3e-3, precondition_frequency=2)"
    res = run_batched(digits, expr, seeds=[0, 1], factors=[1.0], steps=4, batch_size=4, eval_every=4, progress=False)
    assert res.traces == 1
    for i, seed in enumerate((0, 1)):
        hist = train(digits, parse_optimizer(expr).value, steps=4, batch_size=4, seed=seed, progress=False)
        np.testing.assert_allclose(res.train_loss[i], [r["loss"] for r in hist.records], rtol=2e-5)


def test_compare_seeds_sweep_target(tmp_path, capsys):
    out = tmp_path / "c"
    rc = main(
        [
            "compare",
            "--task",
            "digits",
            "--steps",
            "4",
            "--seeds",
            "2",
            "--sweep",
            "1,2",
            "--target",
            "2.2",
            "--eval-every",
            "2",
            "--quiet",
            "--out",
            str(out),
            "adam(1e-3)",
            "sgd(0.5)",
        ]
    )
    assert rc == 0
    text = capsys.readouterr().out
    assert "ranked by steps to the target test loss" in text and "steps to test loss 2.2" in text
    for f in ("results.md", "sweep.md", "results.json", "runs.npz", "curves.png", "sweep.png", "steps_to_target.png"):
        assert (out / f).is_file(), f
    data = json.loads((out / "results.json").read_text())
    assert data["target"] == 2.2 and len(data["ranked"]) == 2 and len(data["all"][0]) == 2
    assert all(r["seeds"] == 2 for r in data["ranked"])


def test_a_failing_optimizer_is_recorded_and_the_others_still_ranked(tmp_path, capsys, monkeypatch):
    import gradax.cli._leaderboard as lb

    real = lb.run_batched

    def flaky(task, expr, **kw):
        if expr.startswith("sgd"):
            raise RuntimeError("out of memory\nsecond line")
        return real(task, expr, **kw)

    monkeypatch.setattr(lb, "run_batched", flaky)
    out = tmp_path / "c"
    argv = ["compare", "--task", "digits", "--steps", "2", "--target", "9", "--eval-every", "1", "--quiet"]
    assert main([*argv, "--out", str(out), "adam(1e-3)", "sgd(0.5)", "adam(2e-3)"]) == 0
    text = capsys.readouterr().out
    assert "sgd(0.5) failed, left out of the ranking: RuntimeError: out of memory" in text
    data = json.loads((out / "results.json").read_text())
    assert [r["optimizer"] for r in data["ranked"]] != [] and len(data["ranked"]) == 2
    assert data["failed"] == [{"name": "sgd(0.5)", "optimizer": "sgd(0.5)", "error": "RuntimeError: out of memory"}]
    assert "Failed, not ranked:" in (out / "results.md").read_text()
    monkeypatch.setattr(lb, "run_batched", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("boom")))
    assert main([*argv, "--out", str(tmp_path / "d"), "adam(1e-3)", "sgd(0.5)"]) == 2
    assert "every optimizer failed: adam(1e-3): RuntimeError: boom" in capsys.readouterr().err
    assert not (tmp_path / "d").exists()


def test_compare_multi_refusals(tmp_path, capsys):
    assert main(["compare", "--seeds", "2", "--task", "digits", "adam(1e-3)"]) == 2
    assert "compare needs at least two optimizer expressions" in capsys.readouterr().err
    assert main(["compare", "--sweep", "1,x", "adam(1e-3)", "sgd(0.1)", "--out", str(tmp_path / "a")]) == 2
    assert "--sweep must be distinct positive" in capsys.readouterr().err
    assert main(["compare", "--seeds", "2", "--resume", str(tmp_path)]) == 2
    assert "runs with --seeds, --sweep or --target are not checkpointed" in capsys.readouterr().err
    assert main(["compare", "--seeds", "-1", "adam(1e-3)", "sgd(0.1)", "--out", str(tmp_path / "b")]) == 2
    assert "--seeds must be a positive integer; got -1" in capsys.readouterr().err
    assert main(["compare", "--seeds", "2", "clip(1.0)", "sgd(0.1)", "--out", str(tmp_path / "c")]) == 2
    assert "exactly one learning_rate" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())  # nothing written


def test_leaderboard_entries_build():
    from gradax.cli._expr import parse_optimizer

    entries = leaderboard_entries(100, 5)
    names = [n for n, _ in entries]
    assert names[0] == "adamw" and len(set(names)) == len(names)
    for need in ("lion", "adafactor", "schedule_free_adamw", "prodigy", "muon", "soap", "shampoo", "kron"):
        assert need in names
    assert entries[0][1] == adamw_expression(NANOGPT, 100)
    import gradax
    from gradax.cli._multi import _state_with_learning_rate

    task = get_task("nanogpt-tiny")
    for _, expr in entries:
        rewritten, _ = split_learning_rate(expr)  # one learning rate each, every expression builds
        parse_optimizer(expr)
        # and holds its learning rate in the state, as the sweep needs (Muon's ns_steps made static for it)
        probe = _state_with_learning_rate(parse_optimizer(rewritten).value, task, expr)
        assert gradax.sharding.bytes_per_device(probe) > 0  # APOLLO's state holds a typed PRNG key


def test_an_optimizer_without_a_learning_rate_in_its_state_is_refused_before_training(digits):
    from gradax.cli._expr import parse_optimizer
    from gradax.cli._multi import _state_with_learning_rate

    with pytest.raises(ExpressionError, match="--sweep and --seeds need an optimizer whose learning_rate"):
        _state_with_learning_rate(parse_optimizer("clip_by_global_norm(1.0)").value, digits, "clip_by_global_norm(1.0)")


def test_muon_sweeps_with_its_loop_length_static(digits):
    res = run_batched(
        digits,
        "contrib.muon(learning_rate=0.02)",
        seeds=[0],
        factors=[0.5, 1.0],
        steps=2,
        batch_size=4,
        eval_every=2,
        progress=False,
    )
    assert res.traces == 1 and np.all(np.isfinite(res.train_loss))


def test_leaderboard_quick(tmp_path, capsys):
    out = tmp_path / "lb"
    rc = main(
        [
            "leaderboard",
            "--quick",
            "--task",
            "nanogpt-tiny",
            "--steps",
            "4",
            "--only",
            "lion",
            "--quiet",
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    text = capsys.readouterr().out
    assert "steps to AdamW's final loss" in text and "| adamw |" in text and "| lion |" in text
    for f in ("leaderboard.md", "results.md", "curves.png", "steps_to_target.png", "sweep.png"):
        assert (out / f).is_file(), f
    assert main(["leaderboard", "--only", "nope", "--out", str(tmp_path / "x")]) == 2
    assert "--only must name leaderboard optimizers" in capsys.readouterr().err
