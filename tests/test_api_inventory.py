"""Every name of tests/api_inventory.md (Optax 0.2.8's public API) exists at the same module path in gradax."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

INVENTORY = Path(__file__).with_name("api_inventory.md")


def _parse():
    out = []
    module = None
    for line in INVENTORY.read_text().splitlines():
        head = re.match(r"^## `gradax(?:\.([\w.]+))?`", line)
        if head:
            module = head.group(1) or ""
            continue
        if module is None or ":" not in line:
            continue
        label, _, rest = line.partition(":")
        if label.strip() not in ("Classes and state types", "Functions"):
            continue
        for name in re.findall(r"`([^`]+)`", rest):
            out.append((module, name))
    return out


NAMES = _parse()


def test_inventory_parsed():
    modules = {m for m, _ in NAMES}
    assert {"", "contrib", "losses", "schedules", "tree", "transforms", "microbatching"} <= modules
    assert sum(1 for m, _ in NAMES if m == "") == 212


@pytest.mark.parametrize("module,name", NAMES, ids=[f"{m or 'gradax'}.{n}" for m, n in NAMES])
def test_name_exists(module, name):
    path = "gradax" + ("." + module if module else "")
    mod = importlib.import_module(path)
    assert hasattr(mod, name), f"{path}.{name} is missing"
