"""Complex parameters optimized as pairs of real parameters."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .._base import GradientTransformation


class SplitRealAndImaginaryArrays(NamedTuple):
    """The real and imaginary parts of one complex array, as two real arrays."""

    real: Any
    imaginary: Any


class SplitRealAndImaginaryState(NamedTuple):
    """State of :func:`split_real_and_imaginary`: the inner transformation's state, on the split tree."""

    inner_state: Any


def _is_complex(x: Any) -> bool:
    return x is not None and jnp.issubdtype(jnp.result_type(x), jnp.complexfloating)


def _split_leaf(x: Any) -> Any:
    if not _is_complex(x):
        return x
    if isinstance(x, jax.ShapeDtypeStruct):
        real = jnp.finfo(x.dtype).dtype
        part = jax.ShapeDtypeStruct(x.shape, real, sharding=x.sharding)
        return SplitRealAndImaginaryArrays(part, part)
    return SplitRealAndImaginaryArrays(jnp.real(x), jnp.imag(x))


def _split(tree: Any) -> Any:
    return jax.tree.map(_split_leaf, tree)


def _merge(split: Any, like: Any) -> Any:
    # ``like`` (the incoming updates) tells which leaves were split: its leaves are the split tree's subtrees.
    def leaf(orig, s):
        if not _is_complex(orig):
            return s
        return jax.lax.complex(s.real, s.imaginary).astype(orig.dtype)

    return jax.tree.map(leaf, like, split)


def split_real_and_imaginary(inner: GradientTransformation) -> GradientTransformation:
    r"""Runs ``inner`` on the real and imaginary parts of complex parameters as separate real parameters.

    Each complex leaf :math:`z = x + iy` becomes the pair :math:`(x, y)` of real leaves, ``inner`` transforms the
    real tree, and each transformed pair :math:`(u_x, u_y)` is merged back into :math:`u_x + i u_y`:

    .. math::
      (u_x, u_y) = \mathrm{inner}(\Re g, \Im g), \qquad u = u_x + i\,u_y .

    Real leaves go to ``inner`` unchanged. This makes any real optimizer (Adam's per-coordinate second moment,
    for instance) treat :math:`\Re z` and :math:`\Im z` as independent coordinates rather than using :math:`|g|^2`.

    Args:
      inner: the transformation applied to the split (real) tree.

    Returns:
      A :class:`GradientTransformation` with state :class:`SplitRealAndImaginaryState` ``(inner_state)``.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> tx = gradax.contrib.split_real_and_imaginary(gradax.sign_sgd(1.0))
      >>> tx.update(jnp.array([3.0 - 0.5j]), tx.init(jnp.zeros(1, jnp.complex64)))[0]
      Array([-1.+1.j], dtype=complex64)

    References:
      The real-pair view of complex optimization (CR / Wirtinger calculus): Kreutz-Delgado, 2009, "The Complex
      Gradient Operator and the CR-Calculus" (arXiv:0906.4835).
    """

    def init(params):
        return SplitRealAndImaginaryState(inner_state=inner.init(_split(params)))

    def update(updates, state, params=None, **extra_args):
        split_updates = _split(updates)
        split_params = None if params is None else _split(params)
        out, inner_state = inner.update(split_updates, state.inner_state, split_params, **extra_args)
        return _merge(out, updates), SplitRealAndImaginaryState(inner_state=inner_state)

    return GradientTransformation(init, update)
