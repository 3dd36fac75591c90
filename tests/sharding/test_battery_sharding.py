"""gradax.sharding over the whole contract registry, in one subprocess with 8 host CPU devices (see
``_battery_script.py``): every entry's state is placed by ``state_shardings(..., zero_axis="data")``, kept by jitted
init and updates, split 8 ways where it has a param's shape, and matches the unsharded run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def test_every_registry_entry_is_placed():
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ)
    env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
    env["JAX_PLATFORMS"] = "cpu"
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    env["PYTHONPATH"] = str(root) + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run(
        [sys.executable, "-m", "tests.sharding._battery_script"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["checked"] > 100
    assert report["canary"], "the check passed an optimizer whose moment it cannot place"
    assert not report["failures"], "entries whose state gradax.sharding could not place or keep:\n" + "\n".join(
        f"  {k}: {v}" for k, v in report["failures"].items()
    )
