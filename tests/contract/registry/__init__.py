"""The registry of the contract battery: every public transformation and optimizer, with example arguments.

Each family has its own module here (``core.py``, ``optimizers_adam.py``, ...) defining:

* ``ENTRIES``: a list of :class:`Entry`, one per public transformation or optimizer factory;
* ``COVERED``: a dict ``{public_name: "tests/path_of_the_test.py"}`` for public names that are not transformations
  (state classes, schedules, losses, tree utilities, type aliases), naming the test file that covers them.

``tests/contract/test_registry.py`` fails when a public name of gradax (in any public module) is in neither.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from collections.abc import Callable
from typing import Any

ALL_DTYPES = ("float32", "bfloat16", "float16", "float64")


@dataclasses.dataclass(frozen=True)
class Entry:
    """One public transformation factory and how to exercise it.

    Attributes:
      name: dotted path under the library, e.g. ``"adam"``, ``"contrib.muon"``, ``"transforms.freeze"``.
      kwargs: example keyword arguments; the factory is ``<lib>.<name>(**kwargs)`` for ``lib`` gradax or optax.
      make: optional ``make(lib) -> GradientTransformation`` overriding ``name``/``kwargs`` (for wrappers whose
        arguments are themselves transformations, e.g. ``lambda ox: ox.masked(ox.sgd(0.1), mask)``). ``lib`` is the
        gradax module or the optax module, so the same code builds both sides of the differential test.
      needs_params: ``update`` must be given ``params``.
      extra_args: optional ``extra_args(params, grads, lib) -> dict`` of keyword arguments for ``update``
        (``value``, ``value_fn``, ``grad``, ``loss``...).
      oracle: compare numerically with Optax 0.2.8 over 10 steps.
      rtol, atol: tolerances for the oracle comparison in float32.
      dtypes: which parameter dtypes the battery runs it with.
      complex_ok: also run it with complex parameters.
      inject: check ``inject_hyperparams(factory)(**kwargs)`` == ``factory(**kwargs)`` (needs no ``make``).
      skip: ``{check_name: reason}`` for checks that do not apply, each with its reason.
    """

    name: str
    kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    make: Callable[[Any], Any] | None = None
    needs_params: bool = False
    extra_args: Callable[[Any, Any, Any], dict] | None = None
    oracle: bool = True
    rtol: float = 1e-5
    atol: float = 1e-6
    dtypes: tuple[str, ...] = ALL_DTYPES
    complex_ok: bool = False
    inject: bool = True
    skip: dict[str, str] = dataclasses.field(default_factory=dict)

    def factory(self, lib: Any) -> Callable[..., Any]:
        obj = lib
        for part in self.name.split("."):
            obj = getattr(obj, part)
        return obj

    def build(self, lib: Any) -> Any:
        if self.make is not None:
            return self.make(lib)
        return self.factory(lib)(**self.kwargs)

    @property
    def id(self) -> str:
        return self.name + ("" if self.make is None else "[custom]")


def _modules():
    for info in pkgutil.iter_modules(__path__):
        yield importlib.import_module(f"{__name__}.{info.name}")


def entries() -> list[Entry]:
    """Every registered entry, in a stable order."""
    out: list[Entry] = []
    for module in _modules():
        out.extend(getattr(module, "ENTRIES", []))
    return sorted(out, key=lambda e: e.id)


def covered() -> dict[str, str]:
    """Every public non-transformation name and the test file that covers it."""
    out: dict[str, str] = {}
    for module in _modules():
        out.update(getattr(module, "COVERED", {}))
    return out
