"""Numerically safe scalar and array helpers, and the dtype rules for state and arithmetic.

Dtype rules (one place):
  * ``compute_dtype(dtype)``: arithmetic on a leaf happens in at least float32 (bfloat16 and float16 leaves are
    computed in float32 and cast back); float64 and complex leaves keep their precision; integer and boolean leaves
    (a Python int among the params) are computed in float32 (float64 under x64).
  * ``state_dtype(dtype, requested)``: a moment or accumulator kept in the state takes ``requested`` when given;
    otherwise, under the default ``gradax.state_dtype_policy("gradax")``, float32 for bfloat16/float16 leaves
    (their moments would lose the signal), float32 (float64 under x64) for integer leaves (an integer moment would
    truncate to zero; Optax keeps it int32), and the leaf's dtype for the rest; under ``"optax"``, the leaf's
    dtype (Optax's rule).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from ._dtype_policy import current_state_dtype_policy

_LOW_PRECISION = (jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16))


def compute_dtype(dtype) -> jnp.dtype:
    """The dtype in which per-leaf arithmetic on a leaf of ``dtype`` happens: never below float32."""
    dtype = jnp.dtype(dtype)
    if dtype in _LOW_PRECISION:
        return jnp.dtype(jnp.float32)
    if not jnp.issubdtype(dtype, jnp.inexact):  # int/bool leaves (Python ints in params): float arithmetic
        # pyrefly: ignore[missing-attribute] - jax.config's flags are attributes made at run time
        return jnp.dtype(jnp.float64 if jax.config.jax_enable_x64 else jnp.float32)
    return dtype


def state_dtype(dtype, requested=None) -> jnp.dtype:
    """The dtype of a state array (moment, accumulator) for a leaf of ``dtype``; ``requested`` wins when given."""
    if requested is not None:
        return jnp.dtype(requested)
    if current_state_dtype_policy() == "optax":
        return jnp.dtype(dtype)
    return compute_dtype(dtype)


def leaf_dtype(x: Any) -> jnp.dtype:
    """The dtype of a leaf: an array's or ``ShapeDtypeStruct``'s dtype; for a Python scalar, JAX's dtype for it
    (float32 for a ``float``, int32 for an ``int``; float64/int64 under x64)."""
    dtype = getattr(x, "dtype", None)
    return jnp.dtype(dtype) if dtype is not None else jnp.result_type(x)


def zeros_for(x: Any, dtype=None) -> jax.Array:
    """Zeros shaped like the leaf ``x`` (an array, a tracer, a ``ShapeDtypeStruct`` or a Python scalar) in ``dtype``
    (default: the leaf's dtype).

    For a (possibly traced) array the zeros come from ``jnp.zeros_like``, so they keep ``x``'s sharding, eagerly and
    under ``jit``: optimizer state that mirrors a sharded parameter is sharded like it. Other leaves get plain zeros,
    which is what makes ``init`` work on ``jax.ShapeDtypeStruct`` leaves and on Python numbers.
    """
    dtype = leaf_dtype(x) if dtype is None else jnp.dtype(dtype)
    if isinstance(x, jax.Array):
        return jnp.zeros_like(x, dtype=dtype)
    return jnp.zeros(np.shape(x), dtype)


def abs_sq(x: ArrayLike) -> jax.Array:
    """``|x|^2`` elementwise, real-valued for complex ``x`` (``x * conj(x)``)."""
    x = jnp.asarray(x)
    if jnp.iscomplexobj(x):
        return jnp.real(x) ** 2 + jnp.imag(x) ** 2
    return x * x


def safe_norm(
    x: ArrayLike,
    min_norm: ArrayLike,
    ord: int | float | str | None = None,  # noqa: A002 - the name numpy uses
    axis: int | tuple[int, ...] | None = None,
    keepdims: bool = False,
) -> jax.Array:
    """``max(norm(x), min_norm)`` with a gradient that stays finite where the norm is below ``min_norm``.

    ``norm`` is ``jnp.linalg.norm(x, ord, axis, keepdims)``; where it is at most ``min_norm`` the result is
    ``min_norm`` and the gradient is zero, instead of the NaN that the norm's gradient gives at zero.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> gradax.safe_norm(jnp.zeros(3), 1e-6)
      Array(1.e-06, dtype=float32)
    """
    x = jnp.asarray(x)
    if ord is None and (axis is None or isinstance(axis, int) or len(axis) == 1):
        # the Euclidean norm: guard the sqrt of the sum of squares (one read of x)
        x = x.astype(jnp.result_type(x, float))
        return _safe_sqrt(jnp.sum(abs_sq(x), axis=axis, keepdims=keepdims), min_norm)
    norm = jnp.linalg.norm(x, ord=ord, axis=axis, keepdims=True)
    small = norm <= min_norm
    x_safe = jnp.where(small, jnp.ones_like(x), x)
    safe = jnp.linalg.norm(x_safe, ord=ord, axis=axis, keepdims=True)
    out = jnp.where(small, min_norm, safe)
    if not keepdims:
        out = jnp.squeeze(out, axis=axis) if axis is not None else jnp.squeeze(out)
    return out


def safe_root_mean_squares(x: ArrayLike, min_rms: ArrayLike) -> jax.Array:
    """``max(sqrt(mean(|x|**2)), min_rms)`` with a finite gradient where the RMS is below ``min_rms`` (real for
    complex ``x``).

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> gradax.safe_root_mean_squares(jnp.array([3.0, 4.0]), 1e-6)
      Array(3.535534, dtype=float32)
    """
    mean_sq = jnp.mean(abs_sq(jnp.asarray(x)))
    return _safe_sqrt(mean_sq, min_rms)


def _safe_sqrt(sq: jax.Array, floor: ArrayLike) -> jax.Array:
    """``max(sqrt(sq), floor)`` where ``sq >= 0`` is a reduction of squares: one read of the reduced array, and a
    gradient that is zero (not NaN) where ``sqrt(sq) <= floor``; the sqrt is guarded, not its input array."""
    small = jnp.sqrt(sq) <= floor
    return jnp.where(small, floor, jnp.sqrt(jnp.where(small, jnp.ones_like(sq), sq)))


def at_first_step(first: jax.Array, params: Any, stored: Any) -> Any:
    """``params`` cast to the dtypes of ``stored`` when the scalar ``first`` is true, else ``stored``.

    A ``lax.cond`` rather than a ``where``: after the first step the stored buffers pass through unchanged instead of
    being read and rewritten every step (for states that keep the starting point, captured at the first update so
    that ``init`` also works on ``jax.ShapeDtypeStruct`` leaves).
    """
    return jax.lax.cond(first, lambda: jax.tree.map(lambda p, s: p.astype(s.dtype), params, stored), lambda: stored)


class CountDtypeError(TypeError, ValueError):
    """A counter of a dtype that cannot count (bool, complex): a ``TypeError``, and a ``ValueError`` as Optax raises."""


def safe_increment(count: ArrayLike) -> jax.Array:
    """``count + 1``, saturating at the largest value of ``count``'s dtype (integer or floating).

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> gradax.safe_increment(jnp.asarray(2**31 - 1, jnp.int32))
      Array(2147483647, dtype=int32)
    """
    count = jnp.asarray(count)
    dtype = count.dtype
    if jnp.issubdtype(dtype, jnp.integer):
        top = jnp.iinfo(dtype).max
    elif jnp.issubdtype(dtype, jnp.floating):
        top = jnp.finfo(dtype).max  # jnp.finfo knows bfloat16 and the float8 types
    else:
        raise CountDtypeError(f"safe_increment(count=...) must be an integer or floating array; got dtype {dtype}.")
    top = jnp.asarray(top, dtype)
    return jnp.where(count < top, count + jnp.asarray(1, dtype), top)


def safe_int32_increment(count: ArrayLike) -> jax.Array:
    """``count + 1`` for an int32 counter, saturating at ``2**31 - 1`` instead of wrapping to negative values.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> gradax.safe_int32_increment(jnp.asarray(0, jnp.int32))
      Array(1, dtype=int32)
    """
    count = jnp.asarray(count)
    if count.dtype != jnp.int32:
        raise TypeError(
            f"safe_int32_increment(count=...) must be an int32 array; got dtype {count.dtype}. "
            "Use safe_increment for other dtypes."
        )
    return safe_increment(count)


def global_norm(updates) -> jax.Array:
    """The L2 norm of all the arrays of a pytree taken together: ``sqrt(sum_i sum |x_i|^2)``.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> gradax.global_norm({"a": jnp.array([3.0]), "b": jnp.array([4.0])})
      Array(5., dtype=float32)
    """
    leaves = jax.tree.leaves(updates)
    if not leaves:
        return jnp.zeros((), jnp.float32)
    return jnp.sqrt(sum(jnp.sum(abs_sq(x)) for x in leaves))
