"""Two processes on 127.0.0.1 (jax.distributed, gloo CPU collectives, 4 devices each) train with ZeRO-1 state, save a
multi-process Orbax checkpoint, and it resumes in one process on 4 devices and on 1 device (``_multiprocess_script.py``).

The gradient's mean over the batch adds across devices in another order than on one device: the resumed params
match the uninterrupted single-process run within 1e-6 (they differ by a few 1e-8), not bit for bit.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import numpy as np
import pytest

from ._subprocess import ROOT, cpu_env, run_json

SCRIPT = "tests.sharding._multiprocess_script"
TIMEOUT = 180


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _last_json(text: str) -> dict:
    return json.loads([line for line in text.splitlines() if line.startswith("{")][-1])


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    path = tmp_path_factory.mktemp("zero1") / "ckpt"
    port = str(_free_port())
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", SCRIPT, "train", str(i), port, str(path)],
            cwd=ROOT,
            env=cpu_env(4),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    outs = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=TIMEOUT)
            assert proc.returncode == 0, err[-4000:]
            outs.append(_last_json(out))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return path, outs


def test_two_processes_train_with_zero1_state(checkpoint):
    _, outs = checkpoint
    assert [o["devices"] for o in outs] == [8, 8]
    # w1's first moment (8 x 16 float32 = 512 bytes) split over 8 devices: each process holds its 4 devices' eighths
    assert [o["mu_w1_local_bytes"] for o in outs] == [256, 256]


def test_resume_on_4_devices_and_on_1_device(checkpoint):
    path, _ = checkpoint
    four = run_json(SCRIPT, "resume", "4", str(path), devices=4, timeout=TIMEOUT)
    one = run_json(SCRIPT, "resume", "1", str(path), devices=1, timeout=TIMEOUT)
    assert four["placed"] and one["placed"]
    for name, want in one["uninterrupted"].items():
        np.testing.assert_allclose(four["resumed"][name], want, rtol=0, atol=1e-6, err_msg=name)
        np.testing.assert_allclose(one["resumed"][name], want, rtol=0, atol=1e-6, err_msg=name)
