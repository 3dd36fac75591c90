"""The benchmark suite runs end to end at ``--size tiny`` and produces its table (timings never gate tests)."""

from __future__ import annotations

import json

import pytest
from benchmarks import run
from benchmarks.suite import columns, trees
from benchmarks.suite.workloads import build_workloads

# two of the step workloads (one with a torch reference and the copy-bandwidth columns, one with a gradax-only
# variant) and the two others: every step workload runs through the same harness, and all of them are built below
STEP_WORKLOADS = ["adamw_gpt2", "adamw_8bit"]


def test_every_step_workload_is_built_with_its_byte_count():
    assert {w.name for w in build_workloads("tiny")} == set(columns.BYTES_PER_PARAM)


def test_tiny_suite_runs_and_writes_table(tmp_path):
    out = tmp_path / "results.json"
    md = tmp_path / "table.md"
    only = [a for name in (*STEP_WORKLOADS, "compile_clip_adamw", "lbfgs_rosenbrock") for a in ("--only", name)]
    result = run.main(["--size", "tiny", "--repeats", "1", "--out", str(out), "--md", str(md), *only])

    saved = json.loads(out.read_text())
    assert saved["size"] == "tiny"
    step_workloads = [name for name, r in saved["workloads"].items() if r["kind"] == "step"]
    assert sorted(step_workloads) == sorted(STEP_WORKLOADS)
    for name in step_workloads:
        r = saved["workloads"][name]
        assert {"gradax", "optax"} <= set(r["step_s"]) and r["step_s"]["gradax"]["median"] > 0
        # the copy bandwidth its % figures use is timed in every repeat, beside the steps
        assert r["step_s"][columns.COPY]["median"] > 0 and r["copy_reference_bytes"] > 0
        assert r["compile_s"]["gradax"] > 0 and r["compile_s"]["optax"] > 0
    assert set(saved["workloads"]["compile_clip_adamw"]["compile_s"]) == {
        str(n) for n in trees.SIZES["tiny"]["compile"]
    }
    lbfgs = saved["workloads"]["lbfgs_rosenbrock"]["results"]
    for res in lbfgs.values():  # every solver reached the Rosenbrock minimum (f = 0 at x = 1)
        assert all(v["final_f"] < 1e-6 for v in res.values())

    table = md.read_text()
    assert table == result["markdown"]
    assert "| gradax/optax | gradax/torch | % copy BW" in table
    for name in step_workloads:
        assert f"| {name} (" in table
    assert saved["copy_bandwidth"]["jax_add_GBps"] > 0


def test_gpt2_full_shape_is_gpt2_small():
    shapes = trees.gpt2_shapes(*trees.SIZES["full"]["gpt"])
    assert len(shapes) == 148
    assert 124e6 < trees.n_params(shapes) < 125e6


def test_sweep_runs_and_every_optimizer_exists_in_both_libraries(tmp_path):
    import optax
    from benchmarks import sweep

    import gradax

    for name, make in sweep.OPTIMIZERS.items():  # each entry builds on both sides (no compile)
        assert make(gradax) is not None and make(optax) is not None, name
    md = tmp_path / "sweep.md"
    rows = sweep.main(["--size", "tiny", "--repeats", "1", "--steps", "1", "--only", "adafactor", "--md", str(md)])
    assert [r["name"] for r in rows] == ["adafactor"] and rows[0]["ratio"] > 0
    assert "| adafactor |" in md.read_text()


def test_xla_options_parse_and_reject_bad_input():
    from benchmarks.suite.timing import parse_xla_options

    assert parse_xla_options(["xla_cpu_copy_insertion_use_region_analysis=true", "a=3", "b=False", "c=x"]) == {
        "xla_cpu_copy_insertion_use_region_analysis": True,
        "a": 3,
        "b": False,
        "c": "x",
    }
    assert parse_xla_options(None) == {}
    with pytest.raises(SystemExit, match="KEY=VALUE, got 'nonsense'"):
        parse_xla_options(["nonsense"])


def test_copies_counts_state_copies_per_library():
    from benchmarks import copies

    out = copies.main(["--only", "lion", "--xla-option", "xla_cpu_copy_insertion_use_region_analysis=true"])
    assert out == {"lion": (0, 0)}  # region analysis orders Lion's read of the old momentum before its overwrite


def test_results_md_and_readme_show_results_json():
    """RESULTS.md's tables and the README's highlights are generated from benchmarks/results.json, the one source."""
    from benchmarks.suite import current

    assert current.main(["--check"]) == 0, "run python -m benchmarks.suite.current"


def test_readme_and_docs_show_the_published_leaderboard():
    """The README's leaderboard is generated from benchmarks/leaderboard/leaderboard.md, which the docs page
    includes, and the plots it shows are there."""
    from benchmarks import leaderboard

    assert leaderboard.main(["--check"]) == 0, "run python -m benchmarks.leaderboard RUN_FOLDER"
    page = (leaderboard.ROOT / "docs" / "guides" / "leaderboard.md").read_text()
    assert '--8<-- "benchmarks/leaderboard/leaderboard.md"' in page
    for plot in leaderboard.PLOTS:
        assert (leaderboard.IMAGES / plot).is_file() and f"img/leaderboard/{plot}" in page


def test_merge_replaces_the_workloads_of_a_run_and_keeps_the_others():
    from benchmarks.suite import current

    old = {"size": "full", "workloads": {"a": {"x": 1}, "b": {"x": 2}}}
    run = {"size": "full", "repeats": 5, "env": {"date": "D"}, "copy_bandwidth": {}, "workloads": {"b": {"x": 3}}}
    merged = current.merge(old, run, "python -m benchmarks.run --only b")
    assert merged["workloads"]["a"] == {"x": 1}
    assert merged["workloads"]["b"]["x"] == 3 and merged["workloads"]["b"]["run"]["command"].endswith("--only b")
    assert current.merge({}, run, "c")["workloads"]["b"]["x"] == 3
    with pytest.raises(SystemExit, match="holds --size small results and this run is --size full"):
        current.merge({"size": "small", "workloads": {}}, run, "c")
    with pytest.raises(SystemExit, match="README.md has no generated part"):
        current.replace_generated("no markers", "x", "README.md")


def test_beyond_quick_times_gradax_its_torch_reference_and_adamw(tmp_path):
    from benchmarks import beyond

    out, md = tmp_path / "beyond.json", tmp_path / "beyond.md"
    beyond.main(["--quick", "--only", "muon,laprop", "--out", str(out), "--md", str(md)])
    saved = json.loads(out.read_text())
    assert saved["size"] == "tiny" and set(saved["optimizers"]) == {"muon", "laprop"}
    for name, row in saved["optimizers"].items():
        assert row["step_s"]["gradax"]["median"] > 0 and row["step_s"][beyond.ADAMW]["median"] > 0, name
        assert row["compile_s"] > 0 and row["state_bytes"] > 0
        assert ("torch" in row["step_s"]) != ("torch_missing" in row), name
        assert f"| {name} |" in md.read_text()
    with pytest.raises(SystemExit, match="unknown optimizer"):
        beyond.main(["--quick", "--only", "nope"])


def test_beyond_times_the_fused_step_beside_a_copy_reference(tmp_path):
    from benchmarks import beyond

    out, md = tmp_path / "beyond.json", tmp_path / "beyond.md"
    beyond.main(["--quick", "--only", "mars", "--out", str(out), "--md", str(md)])
    row = json.loads(out.read_text())["optimizers"]["mars"]
    assert row["step_s"][beyond.FUSED]["median"] > 0 and row["step_s"][beyond.COPY]["median"] > 0
    assert row["fused_bytes_per_param"] == 44 and row["copy_reference_bytes"] > 0 and row["params"] > 0
    assert "% of copy bandwidth" in md.read_text() and "| mars |" in beyond.fused_table(json.loads(out.read_text()))


def test_beyond_every_optimizer_builds_in_gradax_and_its_reference():
    import jax
    import numpy as np
    from benchmarks import beyond
    from benchmarks.suite.workloads import torch

    import gradax

    shapes = trees.gpt2_shapes(*trees.SIZES["tiny"]["gpt"])
    params = trees.make_tree(shapes, np.float32, 0)
    assert len(beyond.specs()) == 19  # 15 optimizers, the Muon family also with bfloat16 products
    for spec in beyond.specs():
        state = jax.eval_shape(spec.make(gradax, {"width": 16, "heads": 2}).init, params)
        assert jax.tree.leaves(state), spec.name
        if torch is not None:
            step, why = beyond._torch_step(spec, params, params, {"width": 16, "heads": 2})
            assert step is not None, f"{spec.name}: {why}"
