"""gradax never imports optax or chex."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "gradax"

_SCRIPT = """
import importlib, pkgutil, sys
import gradax
for info in pkgutil.walk_packages(gradax.__path__, "gradax."):
    if info.name.rsplit(".", 1)[-1] != "__main__":  # a __main__ module runs its program when imported
        importlib.import_module(info.name)
leaked = sorted(m for m in sys.modules if m.split(".")[0] in ("optax", "chex"))
print("LEAKED:" + ",".join(leaked))
"""


def test_import_does_not_load_optax_or_chex():
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    proc = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = [x for x in proc.stdout.splitlines() if x.startswith("LEAKED:")][-1]
    assert line == "LEAKED:", f"gradax imported {line[len('LEAKED:') :]}"


def test_source_has_no_optax_or_chex_import():
    pattern = re.compile(r"^\s*(import|from)\s+(optax|chex)\b", re.MULTILINE)
    offenders = [str(p.relative_to(SRC)) for p in SRC.rglob("*.py") if pattern.search(p.read_text())]
    assert not offenders, f"files importing optax/chex: {offenders}"
