"""gradax.cli: commands in-process on tiny settings, expression refusals, exit codes, atomic run folders."""

import json
from pathlib import Path

import pytest

import gradax
from gradax.cli import main
from gradax.cli._expr import ExpressionError, parse, parse_optimizer, parse_schedule
from gradax.cli._run import read_learning_rate
from gradax.cli._tasks import get_task, load_digits, load_text

# --- data --------------------------------------------------------------------------------------------------------


def test_shipped_data():
    images, labels = load_digits()
    assert images.shape == (1797, 8, 8) and images.dtype.name == "uint8"
    assert images.max() == 16 and sorted(set(labels.tolist())) == list(range(10))
    text = load_text()
    assert 250_000 < len(text) < 400_000 and "Hamlet" in text


# --- expression parser: accepted ---------------------------------------------------------------------------------


def test_parse_nested_optimizer_reads_learning_rate():
    import jax.numpy as jnp

    expr = "chain(clip_by_global_norm(1.0), adamw(learning_rate=warmup_cosine_decay_schedule(0.0, 3e-3, 10, 100), weight_decay=0.1))"
    opt = parse_optimizer(expr).value
    params = {"w": jnp.ones((3,))}
    state = opt.init(params)
    _, state = opt.update({"w": jnp.ones((3,))}, state, params)
    assert read_learning_rate(state) == 0.0  # lr used at step 0 of the warmup
    _, state = opt.update({"w": jnp.ones((3,))}, state, params)
    assert read_learning_rate(state) == pytest.approx(3e-4)


def test_parse_literals_and_prefixes():
    assert parse("linear_schedule(-1.0, +2, 10)").arguments == {
        "init_value": -1.0,
        "end_value": 2,
        "transition_steps": 10,
    }
    assert parse("inject_hyperparams(adam)(learning_rate=1e-3)").value is not None
    assert parse_optimizer("contrib.muon(learning_rate=0.02)").value is not None
    sched = parse_schedule("join_schedules([constant_schedule(0.1), constant_schedule(0.2)], [5])").value
    assert float(sched(7)) == pytest.approx(0.2)
    assert parse("adam(1e-3, mu_dtype=None, nesterov=True)").arguments["nesterov"] is True
    assert float(parse_schedule("0.5").value(3)) == 0.5


# --- expression parser: refused (each message, with the caret under the offending part) ----------------------------

REFUSALS = [
    ("adamm(1e-3)", "unknown name 'adamm'.*did you mean 'adam'", "^^^^^"),
    ("__import__('os')", "private or dunder name '__import__'", "^^^^^^^^^^"),
    ("adam(learning_rate=1e-3).init", "Attribute is not allowed|only one level", None),
    ("os.system('ls')", "attribute access on 'os' is not allowed", "^^"),
    ("contrib.nope(1.0)", r"unknown name 'nope' \(not a public function of gradax.contrib\)", None),
    ("adam(learning_rate=lambda s: 1e-3)", "lambda is not allowed", "^" * len("lambda s: 1e-3")),
    ("adam(lr=1e-3)", "adam\\(\\) has no argument 'lr'", "^^^^^^^"),
    ("adam(learning_rate=1e-3, learnin_rate=2)", "did you mean 'learning_rate'", None),
    ("adam(1e-3 * 2)", "arithmetic is not allowed", "^^^^^^^^"),
    ("adam(x)", "unknown name 'x'", "^"),
    ("adam(*[1e-3])", r"\*args unpacking is not allowed", None),
    ("adam(**{'learning_rate': 1e-3})", r"\*\*kwargs unpacking is not allowed", None),
    ("adam(-'a')", "only unary minus or plus on a number", None),
    ("adam(1e-3)[0]", "subscript is not allowed", None),
    ("import os", "syntax error", "^"),
    ("adam(1e-3", "syntax error", None),
    ("", "empty expression", None),
    ("adam(b'x')", "literal of type bytes is not allowed", None),
    ("adam(learning_rate=f'{1}')", "f-string is not allowed", None),
    ("GradientTransformation(1, 2)", "unknown name 'GradientTransformation'", None),
    ("tree.get(1, 'x')", "attribute access on 'tree' is not allowed", None),
    ("adam(1e-3, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9)", r"adam\(\): too many positional arguments", None),
    ("sgd(learning_rate=-1.0, momentum=2.0)", r"sgd\(\.\.\.\) failed|sgd", None),
    # gradax.optimizers holds the implementations of top-level names; it is not a namespace of expressions
    ("optimizers.adam(1e-3)", "attribute access on 'optimizers' is not allowed; known prefixes: contrib, sched", None),
    # *args/**kwargs are not offered as argument names
    ("chain(scale(1.0), foo=1)", r"chain\(\) has no argument 'foo' \(arguments: none\)", "^^^^^"),
]


@pytest.mark.parametrize("expr,message,caret", REFUSALS)
def test_refusals(expr, message, caret):
    with pytest.raises(ExpressionError, match=message) as info:
        parse_optimizer(expr)
    text = str(info.value)
    lines = text.splitlines()
    assert len(lines) == 3 and lines[1].strip() == " ".join(expr.split()).strip()
    if caret is not None:
        assert lines[2].strip() == caret


def test_refusal_caret_position():
    with pytest.raises(ExpressionError) as info:
        parse("chain(clip_by_global_norm(1.0), adam(lr=1e-3))")
    assert info.value.col == len("chain(clip_by_global_norm(1.0), adam(")


def test_kind_mismatch():
    with pytest.raises(ExpressionError, match="not an optimizer"):
        parse_optimizer("constant_schedule(0.1)")
    with pytest.raises(ExpressionError, match="is an optimizer, not a schedule"):
        parse_schedule("adam(1e-3)")


# --- commands in-process ------------------------------------------------------------------------------------------


def test_train_digits(tmp_path, capsys):
    out = tmp_path / "run"
    rc = main(
        [
            "train",
            "--task",
            "digits",
            "--steps",
            "12",
            "--eval-every",
            "4",
            "--out",
            str(out),
            "--optimizer",
            "chain(clip_by_global_norm(1.0), adamw(learning_rate=warmup_cosine_decay_schedule(0.0, 3e-3, 4, 12)))",
        ]
    )
    assert rc == 0
    assert sorted(p.name for p in out.iterdir()) == [
        "checkpoints",
        "curves.png",
        "lr.png",
        "metrics.jsonl",
        "run.json",
        "summary.json",
    ]
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["12"]  # the final one (default: every 100)
    recs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in recs] == list(range(1, 13))
    assert recs[0]["learning_rate"] == 0.0 and recs[4]["learning_rate"] == pytest.approx(3e-3)
    assert sum("test_accuracy" in r for r in recs) == 3
    summary = json.loads((out / "summary.json").read_text())
    assert 0.0 <= summary["final_test_accuracy"] <= 1.0 and summary["steps_per_second"] > 0
    stdout = capsys.readouterr().out
    assert "final: train loss" in stdout and "steps/s" in stdout and str(out) in stdout
    assert not list(tmp_path.glob(".*"))  # no temp folder left behind


def test_train_shakespeare_tiny(tmp_path, capsys):
    out = tmp_path / "lm"
    rc = main(["train", "--task", "lm", "--steps", "3", "--batch-size", "4", "--out", str(out), "--quiet"])
    assert rc == 0 and (out / "curves.png").exists()


def test_train_without_readable_lr(tmp_path, capsys):
    out = tmp_path / "r"
    rc = main(
        ["train", "--steps", "2", "--out", str(out), "--quiet", "--optimizer", "chain(scale_by_adam(), scale(-1e-3))"]
    )
    assert rc == 0 and not (out / "lr.png").exists()
    assert "learning rate not found" in capsys.readouterr().out


def test_compare_same_data_order(tmp_path, capsys):
    out = tmp_path / "cmp"
    rc = main(["compare", "--steps", "6", "--out", str(out), "--quiet", "sgd(0.1)", "adam(1e-3)", "sgd(0.1)"])
    assert rc == 0
    rows = json.loads((out / "results.json").read_text())
    assert len(rows) == 3 and (out / "compare.png").exists()
    accs = [r["final_test_accuracy"] for r in rows]
    assert accs == sorted(accs, reverse=True)
    m1, m3 = ((out / f"metrics-{i}.jsonl").read_text() for i in (1, 3))
    strip = lambda s: [{k: v for k, v in json.loads(x).items() if k != "learning_rate"} for x in s.splitlines()]
    assert strip(m1) == strip(m3)  # same seed, same data order: identical runs
    assert "| rank |" in capsys.readouterr().out


def test_schedule(tmp_path, capsys):
    png = tmp_path / "s.png"
    rc = main(["schedule", "warmup_cosine_decay_schedule(0.0, 1e-3, 10, 100)", "--steps", "100", "--out", str(png)])
    assert rc == 0 and png.stat().st_size > 0
    out = capsys.readouterr().out
    assert "step 0: 0" in out and "end of warmup (step 10): 0.001" in out and "end (step 100): 0" in out
    rc = main(["schedule", "cosine_onecycle_schedule(100, 0.1)", "--steps", "100", "--out", str(png)])
    assert rc == 0 and "end of warmup (step 30)" in capsys.readouterr().out


def test_demo_tiny(tmp_path, capsys):
    rc = main(["demo", "--out", str(tmp_path / "demo"), "--digits-steps", "3", "--lm-steps", "2", "--quiet"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "compare.png" in out and (tmp_path / "demo" / "train-shakespeare" / "lr.png").exists()


# --- errors and exit codes ----------------------------------------------------------------------------------------

ERRORS = [
    (["train", "--task", "imagenet"], "unknown task 'imagenet'; choose one of: digits, shakespeare"),
    (["train", "--steps", "0"], "--steps must be a positive integer; got 0"),
    (["train", "--batch-size", "-3"], "--batch-size must be a positive integer; got -3"),
    (["train", "--eval-every", "0"], "--eval-every must be a positive integer"),
    (["train", "--steps", "2", "--batch-size", "100000"], "--batch-size must be at most 1437 for digits"),
    (["train", "--optimizer", "adam(lr=1)"], "adam\\(\\) has no argument 'lr'"),
    (["compare", "adam(1e-3)"], "compare needs at least two optimizer expressions"),
    (["compare", "adam(1e-3)", "evil.x()"], "attribute access on 'evil' is not allowed"),
    (["schedule", "constant_schedule(1.0)", "--steps", "-1"], "--steps must be a positive integer"),
    (["schedule", "constant_schedule(1.0)", "--out", "x.txt"], "--out must name a .png file"),
    (["schedule", "adam(1e-3)"], "not a schedule"),
]


@pytest.mark.parametrize("argv,message", ERRORS)
def test_errors_exit_2(argv, message, tmp_path, capsys):
    rc = main([*argv, *(["--out", str(tmp_path / "o")] if argv[0] != "schedule" or "--out" not in argv else [])])
    assert rc == 2
    err = capsys.readouterr().err
    assert err.startswith("gradax: error: ")
    import re

    assert re.search(message, err), err
    assert not (tmp_path / "o").exists() and not list(tmp_path.glob(".*"))


def test_existing_and_unwritable_output(tmp_path, capsys):
    out = tmp_path / "exists"
    out.mkdir()
    assert main(["train", "--steps", "1", "--out", str(out)]) == 2
    assert "already exists; pass --overwrite" in capsys.readouterr().err
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert main(["train", "--steps", "1", "--out", str(blocker / "run")]) == 2
    assert "cannot write to output folder" in capsys.readouterr().err


def test_argparse_errors_and_help(capsys):
    assert main([]) == 2
    assert main(["train", "--steps", "many"]) == 2
    for cmd in ("train", "compare", "schedule", "demo"):
        assert main([cmd, "--help"]) == 0
        assert "example" in capsys.readouterr().out


def test_module_entry_point():
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "gradax.cli", "schedule", "adam(1e-3)"], capture_output=True, text=True)
    assert r.returncode == 2 and "not a schedule" in r.stderr
    assert hasattr(gradax, "adam") and callable(get_task("digits").init)


ROOT = Path(__file__).resolve().parents[2]


def test_bench_runs_the_suite_of_the_checkout(tmp_path, capsys):
    out = tmp_path / "bench.json"
    argv = ["bench", "--checkout", str(ROOT), "--size", "tiny", "--repeats", "1", "--only", "sgd_nesterov"]
    rc = main([*argv, "--out", str(out)])
    assert rc == 0
    saved = json.loads(out.read_text())
    assert set(saved["workloads"]) == {"sgd_nesterov"}


def test_bench_outside_a_checkout_says_what_to_do(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # the default: the current folder, which holds no benchmarks/run.py
    assert main(["bench"]) == 2
    err = capsys.readouterr().err
    assert "--checkout must name a gradax source checkout (a folder holding benchmarks/run.py)" in err
    assert "the current folder" in err and "clone the repository" in err
    assert main(["bench", "--checkout", str(tmp_path / "nowhere"), "--size", "tiny"]) == 2
    assert "--checkout '" in capsys.readouterr().err


def test_bench_passes_the_suites_options_through():
    from gradax.cli._parser import build_parser

    args, extra = build_parser().parse_known_args(["bench", "--check", "x", "--checkout", "/src", "--size", "tiny"])
    assert args.checkout == "/src" and extra == ["--check", "x", "--size", "tiny"]  # no abbreviation of --checkout
