"""The public namespace of gradax, walked the same way by every check that needs it.

``tests/contract/test_registry.py`` (every public name is in the contract battery's registry),
``tests/test_docs_reference.py`` (every public name has an API reference entry) and
``docs/_scripts/reference_skeleton.py`` (the reference pages' skeleton) all walk it through :func:`public_names`.
"""

from __future__ import annotations
import __future__

import importlib
import inspect
from collections.abc import Iterator
from types import ModuleType

# The public modules: Optax 0.2.8's (tests/api_inventory.md) and gradax's own (fused, sharding); "" is the top level.
PUBLIC_MODULES = (
    "",
    "contrib",
    "losses",
    "schedules",
    "tree_utils",
    "tree",
    "transforms",
    "projections",
    "perturbations",
    "assignment",
    "second_order",
    "microbatching",
    "experimental.aggregating",
    "fused",
    "sharding",
)


def public_module(path: str) -> ModuleType:
    """``gradax`` for ``""``, else ``gradax.<path>``."""
    return importlib.import_module("gradax" + ("." + path if path else ""))


def public_names(path: str) -> Iterator[tuple[str, object]]:
    """``(name, object)`` for each public name of ``gradax.<path>``, sorted: no underscore, no module, no
    ``from __future__`` feature."""
    module = public_module(path)
    for name in sorted(vars(module)):
        if name.startswith("_"):
            continue
        obj = getattr(module, name)
        if inspect.ismodule(obj) or isinstance(obj, __future__._Feature):
            continue
        yield name, obj
