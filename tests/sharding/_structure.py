"""A comparable description of an optimizer state's tree: container and NamedTuple class names, field names in
order, leaf shapes and dtypes (what a checkpoint records)."""

from __future__ import annotations

import jax
import numpy as np


def describe(tree, path=""):
    """``[(path, what)]`` for every node of ``tree``: ``what`` names a container and its keys, or a leaf's shape and
    dtype."""
    out = []
    if isinstance(tree, tuple) and hasattr(type(tree), "_fields"):
        out.append((path, f"{type(tree).__name__}{tuple(type(tree)._fields)}"))
        for field in type(tree)._fields:
            out += describe(getattr(tree, field), f"{path}.{field}")
    elif isinstance(tree, dict):
        out.append((path, f"dict{tuple(sorted(tree))}"))
        for key in sorted(tree):
            out += describe(tree[key], f"{path}[{key!r}]")
    elif isinstance(tree, (list, tuple)):
        out.append((path, f"{type(tree).__name__}[{len(tree)}]"))
        for i, x in enumerate(tree):
            out += describe(x, f"{path}[{i}]")
    elif tree is None:
        out.append((path, "None"))
    elif hasattr(tree, "shape") and hasattr(tree, "dtype"):
        dtype = tree.dtype
        if jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
            dtype = "key"
        else:
            dtype = np.dtype(dtype).name
        out.append((path, f"{dtype}{tuple(tree.shape)}"))
    else:
        children, treedef = jax.tree_util.tree_flatten(tree, is_leaf=lambda x: x is not tree)
        out.append((path, f"{type(tree).__name__}[{len(children)}]"))
        for i, x in enumerate(children):
            out += describe(x, f"{path}<{i}>")
    return out


def first_difference(a, b):
    """The first ``(path, gradax, optax)`` where two descriptions differ, or None."""
    for (pa, wa), (pb, wb) in zip(a, b):
        if (pa, wa) != (pb, wb):
            return pa or "<root>", wa, wb
    if len(a) != len(b):
        longer = a if len(a) > len(b) else b
        return longer[min(len(a), len(b))][0], len(a), len(b)
    return None
