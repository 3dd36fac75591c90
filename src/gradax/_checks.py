"""Validators that build the library's uniform error messages.

Argument errors read ``"<api>(<arg>=...) must be <constraint>; got <value>. <fix>."``. Only concrete values are
checked: schedules and traced values (from ``inject_hyperparams`` or ``jit``) pass through unchecked.
Tree errors name the key path where two trees diverge and what was found there.
"""

from __future__ import annotations

import math
from typing import Any, TypeVar

import jax
import numpy as np

from ._hyperparams import is_concrete

T = TypeVar("T")


def _show(value: Any) -> str:
    if isinstance(value, (jax.Array, np.ndarray)) and np.ndim(value) == 0:
        return repr(np.asarray(value).item())
    return repr(value)


def argument_error(api: str, arg: str, constraint: str, value: Any, fix: str | None = None) -> ValueError:
    """A ``ValueError`` with the library's message format for a bad argument."""
    message = f"{api}({arg}=...) must be {constraint}; got {_show(value)}."
    if fix:
        message += f" {fix.rstrip('.')}."
    return ValueError(message)


def _values(value: Any) -> list[float] | None:
    """The concrete numbers of ``value`` (a scalar or array), or None when it cannot be checked."""
    if not is_concrete(value) or isinstance(value, bool):
        return None
    try:
        arr = np.asarray(value)
    except (TypeError, ValueError):
        return None
    if arr.dtype.kind not in "iuf":
        return None
    return [float(v) for v in arr.reshape(-1)]


def check_interval(
    api: str,
    arg: str,
    value: Any,
    low: float = -math.inf,
    high: float = math.inf,
    *,
    low_closed: bool = True,
    high_closed: bool = True,
    fix: str | None = None,
) -> None:
    """Raises when a concrete ``value`` (scalar or array) is not in the interval from ``low`` to ``high``.

    Example constraint texts: ``in [0, 1)``, ``>= 0``, ``> 0``.
    """
    values = _values(value)
    if values is None:
        return
    if low == -math.inf and high == math.inf:
        constraint = "finite"
    elif high == math.inf:
        constraint = f"{'>=' if low_closed else '>'} {_num(low)}"
    elif low == -math.inf:
        constraint = f"{'<=' if high_closed else '<'} {_num(high)}"
    else:
        constraint = f"in {'[' if low_closed else '('}{_num(low)}, {_num(high)}{']' if high_closed else ')'}"
    for v in values:
        ok = not math.isnan(v)
        ok = ok and (v >= low if low_closed else v > low) and (v <= high if high_closed else v < high)
        if not ok:
            raise argument_error(api, arg, constraint, value, fix or f"Pass a value {constraint}")


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(x)


def check_positive(api: str, arg: str, value: Any, fix: str | None = None) -> None:
    """Raises when a concrete ``value`` is not ``> 0``."""
    check_interval(api, arg, value, 0.0, low_closed=False, fix=fix)


def check_non_negative(api: str, arg: str, value: Any, fix: str | None = None) -> None:
    """Raises when a concrete ``value`` is not ``>= 0``."""
    check_interval(api, arg, value, 0.0, fix=fix)


def check_decay(api: str, arg: str, value: Any) -> None:
    """Raises when a concrete decay rate (``b1``, ``b2``, ``momentum``, ...) is not in ``[0, 1)``."""
    check_interval(api, arg, value, 0.0, 1.0, high_closed=False)


def check_int(api: str, arg: str, value: Any, low: int | None = None) -> None:
    """Raises unless ``value`` is a Python int (not bool), at least ``low`` when given."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{api}({arg}=...) must be an int; got {_show(value)} of type {type(value).__name__}.")
    if low is not None and value < low:
        raise argument_error(api, arg, f">= {low}", value, f"Pass an int >= {low}")


def check_callable_or_none(api: str, arg: str, value: Any) -> None:
    """Raises unless ``value`` is callable or None."""
    if value is not None and not callable(value):
        raise TypeError(f"{api}({arg}=...) must be callable or None; got {_show(value)}.")


def check_one_of(api: str, arg: str, value: Any, choices: tuple) -> None:
    """Raises unless ``value`` is one of ``choices``."""
    if value not in choices:
        raise argument_error(api, arg, f"one of {', '.join(map(repr, choices))}", value)


class MissingArgumentError(ValueError, TypeError):
    """An argument that ``update`` needs is missing: a ``ValueError``, and also the ``TypeError`` Python (and so
    Optax, whose ``value``/``grad``/``value_fn`` are required keyword-only arguments) raises for it."""


def check_needs(api: str, arg: str, value: T | None, what: str = "") -> T:
    """Raises when an argument ``update`` needs (``params``, ``value``, ``grad``, ...) is missing (None); else returns
    it (not None, for the type checker)."""
    if value is None:
        detail = f" {what}" if what else ""
        raise MissingArgumentError(
            f"{api}: update(...) needs `{arg}`{detail}; got None. Call update(updates, state, {arg}={arg})"
            if arg != "params"
            else f"{api}: update(...) needs `params`{detail}; got None. Call update(updates, state, params)."
        )
    return value


# --- trees --------------------------------------------------------------------------------------------------------


def _children(node: Any) -> list[tuple[Any, Any]] | None:
    """The (key, child) pairs one level below ``node``, or None when ``node`` is a leaf."""
    if node is None:
        return []
    pairs, treedef = jax.tree_util.tree_flatten_with_path(node, is_leaf=lambda x: x is not node)
    if treedef.num_nodes == 1 and treedef.num_leaves == 1:
        return None
    return [(path[0], child) for path, child in pairs]


def _describe(node: Any) -> str:
    kids = _children(node)
    if kids is None:
        if hasattr(node, "shape") and hasattr(node, "dtype"):
            return f"a leaf of shape {tuple(node.shape)} and dtype {node.dtype}"
        return f"a leaf {_show(node)}"
    name = type(node).__name__
    keys = ", ".join(jax.tree_util.keystr((k,)) for k, _ in kids[:8])
    more = ", ..." if len(kids) > 8 else ""
    return f"a {name} with children [{keys}{more}]"


def find_divergence(expected: Any, got: Any, prefix_ok: bool = False) -> tuple[tuple, str] | None:
    """Where tree ``got`` departs from tree ``expected``: ``(key_path, description)``, or None when they fit.

    With ``prefix_ok``, a leaf of ``got`` may stand for a whole subtree of ``expected`` (prefix trees: masks and
    labels).
    """

    def walk(e, g, path):
        g_kids = _children(g)
        if g_kids is None and prefix_ok:
            return None
        e_kids = _children(e)
        if e_kids is None and g_kids is None:
            return None
        if e_kids is None or g_kids is None or type(e) is not type(g) and not _same_kind(e, g):
            return path, f"expected {_describe(e)}, found {_describe(g)}"
        e_keys = [k for k, _ in e_kids]
        g_keys = [k for k, _ in g_kids]
        if e_keys != g_keys:
            words = " (Dict key mismatch)" if isinstance(e, dict) and isinstance(g, dict) else ""  # JAX's words
            return path, f"expected {_describe(e)}, found {_describe(g)}{words}"
        for (k, ec), (_, gc) in zip(e_kids, g_kids):
            found = walk(ec, gc, path + (k,))
            if found is not None:
                return found
        return None

    return walk(expected, got, ())


def _same_kind(a: Any, b: Any) -> bool:
    return isinstance(a, dict) and isinstance(b, dict)


def tree_mismatch_error(
    api: str, arg: str, expected: Any, got: Any, prefix_ok: bool = False, fix: str = ""
) -> ValueError:
    """A ``ValueError`` naming the key path where ``got`` (argument ``arg``) departs from ``expected``."""
    found = find_divergence(expected, got, prefix_ok=prefix_ok)
    if found is None:
        where, what = (), "the tree structures differ"
    else:
        where, what = found
    path = jax.tree_util.keystr(where) or "<root>"
    shape = "the params tree or a prefix of it" if prefix_ok else "the same structure as the params"
    message = f"{api}({arg}=...) must have {shape}; at {path}: {what}."
    if fix:
        message += f" {fix.rstrip('.')}."
    return ValueError(message)
