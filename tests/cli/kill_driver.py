"""Runs ``gradax`` and kills its own process with SIGKILL at a chosen point (for tests/cli/test_resume.py).

python tests/cli/kill_driver.py step N -- ARGS...        after this process's N-th step is recorded (and
                                                         checkpointed if due), when the next one starts
python tests/cli/kill_driver.py checkpoint N -- ARGS...  while checkpoint N is written, before Orbax renames it
python tests/cli/kill_driver.py commit K -- ARGS...      at the K-th rename of the run folder into place (1 or 2)
"""

import os
import signal
import sys
from pathlib import Path

from gradax.cli import _run, main


def _die():
    sys.stdout.flush()
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def kill_after_step(n):
    make = _run.make_step_fn
    calls = {"n": 0}  # over every optimizer of a compare

    def make_killing(*args, **kwargs):
        step = make(*args, **kwargs)

        def step_fn(*args):
            calls["n"] += 1
            if calls["n"] > n:
                _die()
            return step(*args)

        return step_fn

    _run.make_step_fn = make_killing


def kill_in_checkpoint(n):
    rename = os.rename

    def killing_rename(src, dst, *a, **k):
        if Path(dst).name == str(n) and "orbax-checkpoint-tmp" in Path(src).name:
            _die()
        return rename(src, dst, *a, **k)

    os.rename = killing_rename  # Orbax renames through epath, which calls os.rename


def kill_in_commit(k):
    replace = os.replace
    count = {"n": 0}

    def killing_replace(src, dst, *a, **kw):
        if Path(src).name.endswith(".partial") or ".old-" in Path(dst).name:
            count["n"] += 1
            if count["n"] == k:
                _die()
        return replace(src, dst, *a, **kw)

    os.replace = killing_replace


if __name__ == "__main__":
    mode, arg, sep, *argv = sys.argv[1:]
    assert sep == "--", sys.argv
    {"step": kill_after_step, "checkpoint": kill_in_checkpoint, "commit": kill_in_commit}[mode](int(arg))
    sys.exit(main(argv))
