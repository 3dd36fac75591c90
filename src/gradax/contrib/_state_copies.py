"""State that starts as a copy of the parameters (schedule-free's ``z``, Prodigy's ``x0``, Mechanic's ``x0``)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from .._numerics import state_dtype


def copy_leaf(p: Any, requested=None) -> Any:
    """A fresh copy of ``p`` in ``state_dtype(p.dtype, requested)``.

    On a ``jax.ShapeDtypeStruct`` leaf (abstract init) the result is a ``ShapeDtypeStruct`` with the state dtype and
    the same sharding, so that the state's shapes, dtypes and shardings can be planned without values.
    """
    if p is None:
        return None
    dtype = state_dtype(jnp.result_type(p), requested)
    if isinstance(p, jax.ShapeDtypeStruct):
        return jax.ShapeDtypeStruct(p.shape, dtype, sharding=p.sharding)
    return jnp.array(p, dtype=dtype, copy=True)


def copy_tree(params: Any, requested=None) -> Any:
    """:func:`copy_leaf` over a tree."""
    return jax.tree.map(lambda p: copy_leaf(p, requested), params)
