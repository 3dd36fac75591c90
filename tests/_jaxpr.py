"""Walking a traced program: the equations of a jaxpr, with those of the jaxprs nested in it (cond branches, pjit,
custom rules) and, unless told otherwise, of its loops' bodies."""

from collections.abc import Iterator
from typing import Any

_LOOPS = ("scan", "while")


def equations(jaxpr: Any, into_loops: bool = True) -> Iterator[Any]:
    """Every equation of ``jaxpr`` (a ``Jaxpr``) and of the jaxprs in its equations' parameters; a loop's own
    equation is yielded, its body's only with ``into_loops``."""
    for eqn in jaxpr.eqns:
        yield eqn
        if not into_loops and eqn.primitive.name in _LOOPS:
            continue
        for value in eqn.params.values():
            for sub in value if isinstance(value, (tuple, list)) else (value,):
                sub = getattr(sub, "jaxpr", sub)  # a ClosedJaxpr's jaxpr, or a Jaxpr
                if hasattr(sub, "eqns"):
                    yield from equations(sub, into_loops)
