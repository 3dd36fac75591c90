"""Shared argument checks for the loss functions (shapes are static, so they are checked under ``jit`` too)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np


def shape_of(x: Any) -> tuple[int, ...]:
    return tuple(np.shape(x))


def check_same_shape(api: str, arg: str, value: Any, ref_arg: str, ref: Any) -> None:
    """Raises unless ``value`` has exactly the shape of ``ref``."""
    if shape_of(value) != shape_of(ref):
        raise ValueError(
            f"{api}({arg}=...) must have the shape of `{ref_arg}` {shape_of(ref)}; got shape {shape_of(value)}. "
            f"Pass `{arg}` with shape {shape_of(ref)}."
        )


def same_shape_arrays(api: str, ref_arg: str, ref: Any, arg: str, value: Any) -> tuple[jax.Array, jax.Array]:
    """``ref`` and ``value`` as arrays, after checking that ``value`` has the shape of ``ref`` (the usual opening of a
    loss of two same-shaped inputs: ``logits, labels = same_shape_arrays(api, "logits", logits, "labels", labels)``)."""
    ref = jnp.asarray(ref)
    check_same_shape(api, arg, value, ref_arg, ref)
    return ref, jnp.asarray(value)


def check_broadcastable(api: str, arg: str, value: Any, ref_arg: str, ref: Any) -> None:
    """Raises unless ``value`` broadcasts to the shape of ``ref``."""
    try:
        out = jnp.broadcast_shapes(shape_of(value), shape_of(ref))
    except ValueError:
        out = None
    if out != shape_of(ref):
        raise ValueError(
            f"{api}({arg}=...) must broadcast to the shape of `{ref_arg}` {shape_of(ref)}; got shape "
            f"{shape_of(value)}. Pass `{arg}` with a shape that broadcasts to {shape_of(ref)}."
        )


def check_ndim(api: str, arg: str, value: Any, ndim: int | tuple[int, ...], what: str = "") -> None:
    """Raises unless ``value`` has ``ndim`` dimensions (one of them, for a tuple)."""
    allowed = (ndim,) if isinstance(ndim, int) else tuple(ndim)
    got = len(shape_of(value))
    if got not in allowed:
        want = " or ".join(str(n) for n in allowed)
        detail = f" ({what})" if what else ""
        raise ValueError(
            f"{api}({arg}=...) must have {want} dimensions{detail}; got shape {shape_of(value)}. "
            f"Reshape `{arg}` to {want} dimensions."
        )


def check_float(api: str, arg: str, value: Any) -> None:
    """Raises unless ``value`` has a floating dtype."""
    dtype = jnp.result_type(value)
    if not jnp.issubdtype(dtype, jnp.floating):
        raise ValueError(
            f"{api}({arg}=...) must have a floating dtype; got dtype {dtype}. Cast `{arg}` with .astype(jnp.float32)."
        )
