"""Reading and writing values inside optimizer states by name, and mapping functions over their params-shaped parts.

A state is walked as a tree whose nodes are NamedTuples (reached by field, with :class:`NamedTupleKey` path
entries), dicts (``DictKey``) and any other pytree node (its own key entries). A *match* for ``key`` is a NamedTuple
field or dict entry named ``key``, or a NamedTuple whose class is named ``key``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import jax

KeyPath = tuple[Any, ...]

# The field of InjectStatefulHyperparamsState that holds the states of schedules (keyed like the hyperparameters).
_SCHEDULE_STATES_FIELD = "hyperparams_states"


@dataclasses.dataclass(frozen=True)
class NamedTupleKey:
    """A path entry for a NamedTuple field: the class name and the field name (``str`` gives ``"Class.field"``)."""

    tuple_name: str
    name: str

    def __str__(self) -> str:
        return f"{self.tuple_name}.{self.name}"


def _is_namedtuple(x: Any) -> bool:
    return isinstance(x, tuple) and hasattr(type(x), "_fields")


def _children(path: KeyPath, node: Any) -> list[tuple[KeyPath, Any]]:
    """``(path, child)`` one level below ``node``; empty for leaves."""
    if _is_namedtuple(node):
        name = type(node).__name__
        return [((*path, NamedTupleKey(name, f)), getattr(node, f)) for f in node._fields]
    if node is None:
        return []
    pairs, treedef = jax.tree_util.tree_flatten_with_path(node, is_leaf=lambda x: x is not node)
    if treedef.num_nodes == 1 and treedef.num_leaves == 1:
        return []
    return [((*path, *p), child) for p, child in pairs]


def _entry_name(entry: Any) -> Any:
    """The name a path entry stands for: a dict key, a field or attribute name, or a sequence index."""
    if isinstance(entry, NamedTupleKey):
        return entry.name
    if isinstance(entry, jax.tree_util.DictKey):
        return entry.key
    if isinstance(entry, jax.tree_util.GetAttrKey):
        return entry.name
    if isinstance(entry, jax.tree_util.SequenceKey):
        return entry.idx
    if isinstance(entry, jax.tree_util.FlattenedIndexKey):
        return entry.key
    return entry


def _entry_is(entry: Any, key: Any) -> bool:
    """Whether a path entry is a NamedTuple field or a dict key named ``key``."""
    if isinstance(entry, NamedTupleKey):
        return entry.name == key
    if isinstance(entry, jax.tree_util.DictKey):
        return entry.key == key
    return False


def _held(path: KeyPath, node: Any, key: Any) -> list[tuple[KeyPath, Any]]:
    """The matches for ``key`` that ``node`` holds directly: itself when it is a NamedTuple of class ``key``, else
    its child named ``key`` (empty when it holds none)."""
    if _is_namedtuple(node) and type(node).__name__ == key:
        return [(path, node)]
    return [(p, c) for p, c in _children(path, node) if _entry_is(p[-1], key)]


def _walk(path: KeyPath, node: Any, key: Any, out: list) -> None:
    """Appends the matches below ``node`` in Optax's order: first those held by the topmost nodes that hold one (in
    flattening order), then, below each of those nodes in turn, the same search again."""
    holders: list[tuple[KeyPath, Any]] = []

    def find_holders(p: KeyPath, n: Any) -> None:
        if _held(p, n, key):
            holders.append((p, n))
            return
        for child_path, child in _children(p, n):
            find_holders(child_path, child)

    find_holders(path, node)
    for p, n in holders:
        out.extend(_held(p, n, key))
    for p, n in holders:
        for child_path, child in _children(p, n):
            _walk(child_path, child, key, out)


def get_all_with_path(
    tree: Any, key: Any, filtering: Callable[[KeyPath, Any], bool] | None = None
) -> list[tuple[KeyPath, Any]]:
    """Every ``(path, value)`` in ``tree`` whose NamedTuple field, dict key or NamedTuple class name is ``key``.

    The search reaches through every NamedTuple, dict and pytree node (chains, masked and injected states, ...),
    also below a match. Path entries for NamedTuple fields are :class:`NamedTupleKey`. The order is Optax's: the
    matches nearest the root come first (``{"h": {"lr": 1.0}, "lr": 2.0}`` gives ``lr`` before ``h.lr``), then
    those below them.

    Args:
      tree: a pytree, typically an optimizer state.
      key: the field name, dict key or NamedTuple class name to look for.
      filtering: optional ``filtering(path, value) -> bool`` keeping only some matches.

    Returns:
      A list of ``(path, value)`` pairs, in the order of a depth-first walk.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> state = gradax.sgd(0.1, momentum=0.9).init({"w": jnp.zeros(2)})
      >>> [(jax.tree_util.keystr(path), value) for path, value in gradax.tree.get_all_with_path(state, "trace")]
      [('[0]TraceState.trace', {'w': Array([0., 0.], dtype=float32)})]
    """
    found: list[tuple[KeyPath, Any]] = []
    _walk((), tree, key, found)
    if filtering is not None:
        found = [(p, v) for p, v in found if filtering(p, v)]
    return found


def _under_schedule_states(path: KeyPath) -> bool:
    return any(isinstance(e, NamedTupleKey) and e.name == _SCHEDULE_STATES_FIELD for e in path[:-1])


def _relevant(found: list[tuple[KeyPath, Any]]) -> list[tuple[KeyPath, Any]]:
    """Drops matches that are the states of schedules (``hyperparams_states[key]``) when the value itself is also
    found: they are the bookkeeping of an injected schedule, not the hyperparameter."""
    values = [(p, v) for p, v in found if not _under_schedule_states(p)]
    return values if values else found


def _show_path(path: KeyPath) -> str:
    return jax.tree_util.keystr(path) or "<root>"


def get(
    tree: Any, key: Any, default: Any | None = None, filtering: Callable[[KeyPath, Any], bool] | None = None
) -> Any:
    """The single value named ``key`` in ``tree`` (see :func:`get_all_with_path`), or ``default`` when there is none.

    Unlike a plain search, the state that an injected schedule keeps under ``hyperparams_states[key]`` is not
    counted as a second value of ``key``, and the same object reached twice counts once. So
    ``get(state, "learning_rate")`` returns the injected learning rate of
    ``chain(clip_by_global_norm(1.0), inject_hyperparams(adamw)(learning_rate=schedule))``.

    Raises:
      KeyError: when several different values are named ``key`` (e.g. two parameter groups, each with its own
        learning rate); the message lists their paths. Pass ``filtering`` to pick one.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> opt = gradax.inject_hyperparams(gradax.sgd)(learning_rate=0.1)
      >>> gradax.tree.get(opt.init({"w": jnp.zeros(2)}), "learning_rate")
      Array(0.1, dtype=float32)
    """
    found = _relevant(get_all_with_path(tree, key, filtering=filtering))
    distinct: list[tuple[KeyPath, Any]] = []
    for path, value in found:
        if not any(value is v for _, v in distinct):
            distinct.append((path, value))
    if not distinct:
        return default
    if len(distinct) > 1:
        paths = ", ".join(_show_path(p) for p, _ in distinct)
        raise KeyError(
            f"tree.get(key={key!r}) found {len(distinct)} different values, at {paths}. "
            "Pass filtering=lambda path, value: ... to choose one, or use tree.get_all_with_path"
        )
    return distinct[0][1]


def _rebuild(node: Any, new_children: list) -> Any:
    if _is_namedtuple(node):
        return type(node)(*new_children)
    _, treedef = jax.tree_util.tree_flatten(node, is_leaf=lambda x: x is not node)
    return treedef.unflatten(new_children)


def set(tree: Any, filtering: Callable[[KeyPath, Any], bool] | None = None, /, **kwargs: Any) -> Any:  # noqa: A001
    """A copy of ``tree`` where every value named by a keyword (see :func:`get_all_with_path`) is replaced.

    ``set(state, learning_rate=0.01)`` replaces each ``learning_rate`` field or dict entry (for example the one in
    ``InjectHyperparamsState.hyperparams``); a keyword naming a NamedTuple class replaces that whole NamedTuple.
    The states of injected schedules (``hyperparams_states``) are left alone unless they are the only match.
    Container types (OrderedDict, NamedTuples, custom nodes) are kept.

    Args:
      tree: a pytree, typically an optimizer state.
      filtering: optional ``filtering(path, value) -> bool``; only matches it accepts are replaced.
      **kwargs: ``name=new_value`` pairs.

    Raises:
      KeyError: when a keyword matches nothing (after filtering).

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> opt = gradax.inject_hyperparams(gradax.sgd)(learning_rate=0.1)
      >>> state = gradax.tree.set(opt.init({"w": jnp.zeros(2)}), learning_rate=jnp.float32(0.01))
      >>> state.hyperparams["learning_rate"]
      Array(0.01, dtype=float32)
    """
    targets: dict[KeyPath, Any] = {}
    for name, value in kwargs.items():
        found = _relevant(get_all_with_path(tree, name, filtering=filtering))
        if not found:
            how = " matching the filtering" if filtering is not None else ""
            raise KeyError(f"tree.set({name}=...) found no value named {name!r}{how} in the tree. Check the name")
        for path, _ in found:
            targets[path] = value

    def rebuild(path: KeyPath, node: Any) -> Any:
        if path in targets:
            return targets[path]
        kids = _children(path, node)
        if not kids:
            return node
        if not any(t[: len(path)] == path and len(t) > len(path) for t in targets):
            return node
        return _rebuild(node, [rebuild(p, c) for p, c in kids])

    return rebuild((), tree)


class _ParamsMarker:
    """An empty pytree node handed to ``init`` in place of params, to find where a state holds params-shaped trees."""


jax.tree_util.register_pytree_node(_ParamsMarker, lambda m: ((), None), lambda aux, children: _ParamsMarker())


def is_params_marker(params: Any) -> bool:
    """Whether ``init`` was handed the marker :func:`map_params` uses in place of the params.

    A wrapper whose ``init`` needs the params' structure (a mask or label tree that must fit them, or a
    :class:`gradax.LookaheadParams`) passes the marker unchanged to its inner ``init`` instead: the marker stands for
    the whole params tree, wherever the real state holds a params-shaped tree (masked parts included).
    """
    return isinstance(params, _ParamsMarker)


@runtime_checkable
class Initable(Protocol):
    """An object with ``init(params) -> state`` (a :class:`GradientTransformation`)."""

    def init(self, params: Any) -> Any: ...


def map_params(
    initable: Callable[[Any], Any] | Initable,
    f: Callable[..., Any],
    state: Any,
    /,
    *rest: Any,
    transform_non_params: Callable[..., Any] | None = None,
    is_leaf: Callable[[Any], bool] | None = None,
) -> Any:
    """Applies ``f`` to every leaf of the parts of an optimizer state that have the structure of the params.

    The parts are found by calling ``initable.init`` (or ``initable``) on a marker standing for the params, so
    momentum trees are mapped and counters are not. Useful to shard or cast only the params-shaped state.

    Args:
      initable: a transformation (anything with ``init``) or an ``init`` function.
      f: applied to each leaf of each params-shaped subtree (with the matching leaves of ``rest``).
      state: the state to transform (from ``initable``'s ``init``).
      *rest: params-shaped trees whose leaves are passed to ``f`` after the state's leaf.
      transform_non_params: optional function applied to every other leaf of the state.
      is_leaf: passed to ``jax.tree.map`` over the params-shaped subtrees.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> opt = gradax.sgd(0.1, momentum=0.9)
      >>> state = opt.init({"w": jnp.ones(2)})
      >>> gradax.tree.map_params(opt, lambda x: x + 1, state)[0].trace["w"]
      Array([1., 1.], dtype=float32)
    """
    marker = _ParamsMarker()
    init = initable.init if isinstance(initable, Initable) else initable
    layout = init(marker)

    def visit(slot, value):
        if isinstance(slot, _ParamsMarker):
            return jax.tree.map(f, value, *rest, is_leaf=is_leaf)
        if transform_non_params is not None:
            return transform_non_params(value)
        return value

    return jax.tree.map(visit, layout, state, is_leaf=lambda x: isinstance(x, _ParamsMarker))
