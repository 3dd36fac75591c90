"""`gradax train --mesh data=8 --zero`: data-parallel training with ZeRO-1 optimizer state (issue 19, item 6).

The end-to-end run happens in a fresh process (`_mesh_train_script.py`) where the CLI itself shows the CPU to JAX as
8 devices; the option checks run in-process.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import pytest

from gradax.cli import main
from gradax.cli._common import CliError
from gradax.cli._mesh import human_bytes, mesh_text, parse_mesh, placement_for

SCRIPT = Path(__file__).with_name("_mesh_train_script.py")


@pytest.fixture(scope="module")
def mesh_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("mesh")
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}  # no device count given: the CLI asks for 8
    env["JAX_PLATFORMS"] = "cpu"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), str(root)], capture_output=True, text=True, timeout=600, env=env, cwd=root
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads([line for line in proc.stdout.splitlines() if line.startswith("{")][-1])


def test_mesh_run_matches_the_single_device_run(mesh_run):
    assert mesh_run["devices"] == 8  # virtual CPU devices, asked for by the CLI before JAX started
    # the batch mean is reduced in another order over 8 devices: float32 rounding, nothing more
    assert mesh_run["max_diff_zero_vs_single"] <= 1e-5 * max(1.0, mesh_run["max_abs_single"])


def test_mesh_run_keeps_the_state_split(mesh_run):
    assert mesh_run["specs_as_asked"]  # the jitted step returns every state leaf with the sharding asked for
    # AdamW on the MLP: mu and nu of the two weight matrices and of the hidden bias (128) are split along 'data';
    # the output bias (10, not divisible by 8), the count and the injected hyperparameters are not
    assert sorted(mesh_run["split_leaves"]) == sorted(2 * ["(64, 128)", "(128,)", "(128, 10)"])
    s = mesh_run["summary"]
    assert s["mesh"] == "data=8" and s["zero"] is True
    # measured from the addressable shards of the final state: 1/8 of the moments plus the replicated counter
    assert s["state_bytes_per_device"] < s["state_bytes_replicated"] / 7
    out = mesh_run["zero_stdout"]
    assert "mesh data=8 (8 cpu devices); state ZeRO-1, split along 'data'" in out
    assert "optimizer state per device: " in out and "(replicated: " in out
    assert "optimizer state per device (measured)" in out
    assert "held whole on each device (2 state leaves): " in out and "(10,): no dimension is divisible by the 8" in out


def test_mesh_run_resumes_on_the_mesh_bit_for_bit(mesh_run):
    assert mesh_run["run_json"]["mesh"] == "data=8" and mesh_run["run_json"]["zero"] is True
    assert "mesh data=8" in mesh_run["resumed_stdout"]
    assert mesh_run["resumed_identical"]
    assert mesh_run["resumed_summary"]["state_bytes_per_device"] == mesh_run["summary"]["state_bytes_per_device"]


# --- options, in-process ---------------------------------------------------------------------------------------


def test_parse_mesh():
    assert parse_mesh("data=8") == {"data": 8}
    assert parse_mesh(" data=4 , model=2") == {"data": 4, "model": 2}
    assert mesh_text({"data": 4, "model": 2}) == "data=4,model=2"
    for bad, message in [
        ("data", "--mesh must be NAME=SIZE"),
        ("data=0", "with positive sizes; got 'data=0'"),
        ("data=x", "--mesh must be NAME=SIZE"),
        ("data=2,data=2", "--mesh must name each axis once"),
        ("model=8", "--mesh must have a 'data' axis"),
    ]:
        with pytest.raises(CliError, match=message):
            parse_mesh(bad)


def test_placement_checks_the_batch_and_the_devices():
    jax.devices()  # JAX is running: the devices this process has are the ones there are
    with pytest.raises(CliError, match="--batch-size must be divisible by the 3 devices of the 'data' axis"):
        placement_for("data=3", False, 64)
    too_many = len(jax.devices()) + 1
    with pytest.raises(CliError, match=rf"at most the {too_many - 1} cpu device\(s\).*in a fresh process"):
        placement_for(f"data={too_many}", False, too_many * 4)
    one = placement_for("data=1", True, 8)
    assert one.data_size == 1 and "ZeRO-1" in one.describe()


def test_human_bytes():
    assert [human_bytes(n) for n in (5, 1536, 3 * 2**20, 2**40)] == ["5 B", "1.5 KiB", "3.0 MiB", "1.0 TiB"]


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--zero"], "--zero splits the optimizer state over the devices of --mesh; give --mesh"),
        (["--mesh", "data=3"], "--batch-size must be divisible by the 3 devices"),
        (["--mesh", "gpus=2"], "--mesh must have a 'data' axis"),
    ],
)
def test_train_refuses_bad_mesh_options(argv, message, tmp_path, capsys):
    jax.devices()
    assert main(["train", "--steps", "1", *argv, "--out", str(tmp_path / "o")]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_resume_refuses_mesh_options(tmp_path, capsys):
    assert main(["train", "--resume", str(tmp_path), "--mesh", "data=2", "--zero"]) == 2
    assert "got --mesh, --zero. Drop them" in capsys.readouterr().err


def test_help_documents_mesh(capsys):
    assert main(["train", "--help"]) == 0
    out = capsys.readouterr().out
    assert "--mesh AXIS=N[,AXIS=N]" in out and "--zero" in out and "ZeRO-1" in out
    assert "gradax train --task digits --mesh data=8 --zero" in out


def test_too_few_accelerators_points_to_the_cpu(monkeypatch):
    class _Gpu:
        platform = "gpu"

    monkeypatch.setattr(jax, "devices", lambda: [_Gpu()])
    with pytest.raises(CliError, match=r"at most the 1 gpu device\(s\).*with JAX_PLATFORMS=cpu"):
        placement_for("data=8", True, 64)
