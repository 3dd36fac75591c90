"""SOAP's and Shampoo's batched refresh run inside loops of steps (``lax.map`` over stacked states of a
``lax.scan``), where a batched LAPACK call once deadlocked XLA:CPU: jaxlib's CPU kernels split a batch over XLA's
intra-op thread pool and block a pool thread until it is done, and inside a loop the kernel itself runs on a pool
thread. The script runs in a subprocess, so a deadlock fails here after the timeout instead of hanging the suite."""

import os
import pathlib
import subprocess
import sys

import pytest

_SCRIPT = pathlib.Path(__file__).with_name("_refresh_loops_script.py")
_TIMEOUT_S = 600  # a few seconds' compile and run on an idle 2-core machine; a deadlock never ends


def test_soap_and_shampoo_refresh_inside_map_of_scanned_steps():
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    try:
        proc = subprocess.run(
            [sys.executable, str(_SCRIPT), "soap", "shampoo"],
            capture_output=True,
            text=True,
            env=env,
            timeout=_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired as err:
        pytest.fail(f"SOAP/Shampoo under lax.map of lax.scan did not finish in {_TIMEOUT_S} s (a deadlock?): {err}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.split() == ["soap", "ok", "shampoo", "ok"], proc.stdout + proc.stderr
