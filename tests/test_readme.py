"""The README's ```python blocks run (its figures are checked against the results file in test_benchmarks.py)."""

from __future__ import annotations

import pathlib
import re

import pytest

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"
_BLOCKS = re.findall(r"^```python\n(.*?)^```", README.read_text(), re.M | re.S)


@pytest.mark.parametrize("code", _BLOCKS, ids=[f"block{i}" for i in range(len(_BLOCKS))])
def test_readme_example_runs(code):
    exec(compile(code, "<README.md>", "exec"), {"__name__": "__readme__"})


def test_readme_links_point_to_files_in_the_repository():
    root = README.parent
    targets = re.findall(r"\]\(([^)#:]+)\)", README.read_text())
    assert targets
    for target in targets:
        assert (root / target).exists(), target
