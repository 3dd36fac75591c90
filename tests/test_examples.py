"""The scripts in examples/ run (few steps) as they would from the command line."""

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.mark.parametrize("script,steps", [("flax_nnx.py", 20), ("equinox_masks.py", 20), ("orbax_checkpoint.py", 6)])
def test_example_runs(script, steps):
    r = subprocess.run(
        [sys.executable, str(EXAMPLES / script), "--steps", str(steps)], capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "->" in r.stdout or "identical" in r.stdout
