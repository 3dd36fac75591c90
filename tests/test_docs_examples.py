"""The ```python blocks of the documentation pages run (```py blocks are illustrations that need a mesh or a
model, and are not run). A failing example in a guide fails here, like a failing doctest in src/."""

from __future__ import annotations

import contextlib
import io
import pathlib
import re

import pytest

DOCS = pathlib.Path(__file__).resolve().parents[1] / "docs"
PAGES = sorted(p for p in [*DOCS.glob("*.md"), *DOCS.glob("guides/*.md")] if p.name != "CONTRIBUTING.md")
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.M | re.S)


def _blocks():
    for page in PAGES:
        for i, m in enumerate(_BLOCK.finditer(page.read_text())):
            yield pytest.param(m.group(1), id=f"{page.relative_to(DOCS)}:{i}")


@pytest.mark.parametrize("code", list(_blocks()))
def test_docs_example_runs(code):
    with contextlib.redirect_stdout(io.StringIO()):
        exec(compile(code, "<docs>", "exec"), {"__name__": "__docs__"})
