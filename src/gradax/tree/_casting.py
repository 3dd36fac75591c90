"""Dtypes of pytrees: casting every leaf, and the dtype of a whole tree."""

from __future__ import annotations

import functools
from typing import Any, TypeVar

import jax
import jax.numpy as jnp
from jax.typing import DTypeLike

T = TypeVar("T")

_HANDLERS = (None, "promote", "highest", "lowest")


def cast(tree: Any, dtype: DTypeLike | None) -> Any:
    """Every leaf cast to ``dtype``; ``dtype=None`` returns the tree unchanged.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> gradax.tree.cast({"a": jnp.ones(2)}, jnp.bfloat16)["a"].dtype
      dtype(bfloat16)
    """
    if dtype is None:
        return tree
    return jax.tree.map(lambda x: x.astype(dtype), tree)


def cast_like(tree: T, other_tree: Any) -> T:
    """Every leaf of ``tree`` cast to the dtype of the matching leaf of ``other_tree`` (leaves without a dtype are
    left as they are).

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> gradax.tree.cast_like([jnp.ones(2)], [jnp.ones(2, jnp.float16)])[0].dtype
      dtype('float16')
    """
    return jax.tree.map(lambda x, o: x.astype(o.dtype) if hasattr(o, "dtype") else x, tree, other_tree)


def _lower(a, b):
    promoted = jnp.promote_types(a, b)
    if promoted == a:
        return b
    if promoted == b:
        return a
    raise ValueError(
        f"tree.dtype(mixed_dtype_handler=...) cannot order dtypes {a} and {b}: neither promotes to the other. "
        "Use mixed_dtype_handler='promote'."
    )


def _higher(a, b):
    return b if _lower(a, b) == a else a


def dtype(tree: Any, mixed_dtype_handler: str | None = None) -> DTypeLike:
    """The dtype of a tree's leaves.

    Args:
      tree: a pytree of arrays (or scalars).
      mixed_dtype_handler: what to do when leaves differ: ``None`` raises; ``"promote"`` returns the dtype JAX
        promotes them all to; ``"highest"``/``"lowest"`` the highest/lowest dtype in promotion order. An empty tree
        gives float32 (float64 under x64).

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> gradax.tree.dtype({"a": jnp.ones(2, jnp.bfloat16), "b": jnp.ones(2)}, "highest")
      dtype('float32')
    """
    if mixed_dtype_handler not in _HANDLERS:
        raise ValueError(
            f"tree.dtype(mixed_dtype_handler=...) must be one of None, 'promote', 'highest', 'lowest'; "
            f"got {mixed_dtype_handler!r}."
        )
    leaves = jax.tree.leaves(tree)
    if not leaves:
        return jnp.asarray(leaves).dtype
    dtypes = [jnp.asarray(x).dtype for x in leaves]
    if mixed_dtype_handler is None:
        paths = jax.tree_util.tree_leaves_with_path(tree)
        wrong = [f"{jax.tree_util.keystr(p)}: {d}" for (p, _), d in zip(paths, dtypes) if d != dtypes[0]]
        if wrong:
            raise ValueError(
                f"tree.dtype(tree=...) leaves must share one dtype ({dtypes[0]}, from the first leaf); got "
                + ", ".join(wrong)
                + ". Pass mixed_dtype_handler='promote', 'highest' or 'lowest'."
            )
        return dtypes[0]
    if mixed_dtype_handler == "promote":
        return functools.reduce(jnp.promote_types, dtypes)
    if mixed_dtype_handler == "highest":
        return functools.reduce(_higher, dtypes)
    return functools.reduce(_lower, dtypes)
