"""Every public name of gradax (top level and public submodules) is registered in the contract battery: either an
``Entry`` (transformations, optimizers) or a ``COVERED`` name with the test file that covers it."""

from __future__ import annotations

import pytest

import gradax

from .._public_names import PUBLIC_MODULES, public_names
from .registry import covered, entries


def _registered():
    return {e.name for e in entries()} | set(covered())


@pytest.mark.parametrize("path", PUBLIC_MODULES, ids=[m or "gradax" for m in PUBLIC_MODULES])
def test_every_public_name_is_registered(path):
    public = list(public_names(path))
    assert public, f"gradax.{path} exports no public name"
    registered = _registered()
    missing = []
    for name, obj in public:
        dotted = f"{path}.{name}" if path else name
        if dotted in registered:
            continue
        # a re-export of a top-level object may be matched by its top-level registration
        if path and name in registered and getattr(gradax, name, None) is obj:
            continue
        missing.append(dotted)
    assert not missing, "public names in neither an Entry nor COVERED of tests/contract/registry/*.py: " + ", ".join(
        missing
    )


def test_registry_names_exist():
    """Every registered name resolves to a gradax object (no stale registrations)."""
    stale = []
    for name in sorted(_registered()):
        obj = gradax
        try:
            for part in name.split("."):
                obj = getattr(obj, part)
        except AttributeError:
            stale.append(name)
    assert not stale, f"registered names that gradax does not have: {stale}"
