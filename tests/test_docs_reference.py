"""Every public name of gradax has a place in the API reference: a ``::: gradax.<path>`` entry in one of the committed
pages ``docs/reference/*.md`` (the grouping a user reads). The public names are walked by ``tests/_public_names.py``,
as in the contract battery's registry test."""

from __future__ import annotations

import pathlib
import re

import pytest

import gradax

from ._public_names import PUBLIC_MODULES, public_names

ROOT = pathlib.Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "docs" / "reference"
_ENTRY = re.compile(r"^::: (gradax(?:\.\w+)+)\s*$", re.M)


def _entries() -> list[str]:
    return [m.group(1) for page in sorted(REFERENCE.glob("*.md")) for m in _ENTRY.finditer(page.read_text())]


def _resolve(dotted: str):
    obj = gradax
    for part in dotted.split(".")[1:]:
        obj = getattr(obj, part)
    return obj


def _documented() -> dict[str, list[object]]:
    """Final name -> the objects documented under that name."""
    out: dict[str, list[object]] = {}
    for dotted in _entries():
        try:
            out.setdefault(dotted.rsplit(".", 1)[-1], []).append(_resolve(dotted))
        except AttributeError:
            pass
    return out


@pytest.mark.parametrize("path", PUBLIC_MODULES, ids=[m or "gradax" for m in PUBLIC_MODULES])
def test_every_public_name_is_in_the_reference(path):
    entries = set(_entries())
    documented = _documented()
    missing = []
    for name, obj in public_names(path):
        dotted = f"gradax.{path}.{name}" if path else f"gradax.{name}"
        if dotted in entries:
            continue
        # the same object documented under the same name elsewhere (a top-level re-export, gradax.tree_utils)
        if any(o is obj for o in documented.get(name, [])):
            continue
        missing.append(dotted)
    assert not missing, (
        "public names with no `::: gradax.<name>` entry in docs/reference/*.md: "
        + ", ".join(missing)
        + ". Add each under the right heading (`.venv/bin/python docs/_scripts/reference_skeleton.py --missing` "
        "suggests one)."
    )


def test_reference_entries_exist_and_are_unique():
    entries = _entries()
    stale = []
    for dotted in entries:
        try:
            _resolve(dotted)
        except AttributeError:
            stale.append(dotted)
    assert not stale, f"docs/reference entries that gradax does not have: {stale}"
    dupes = sorted({e for e in entries if entries.count(e) > 1})
    assert not dupes, f"docs/reference entries listed twice: {dupes}"


def test_every_reference_page_is_in_the_nav():
    nav = (ROOT / "mkdocs.yml").read_text()
    missing = [p.name for p in REFERENCE.glob("*.md") if f"reference/{p.name}" not in nav]
    assert not missing, f"reference pages not in mkdocs.yml's nav: {missing}"
