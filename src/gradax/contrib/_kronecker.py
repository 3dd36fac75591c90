"""How the Kronecker-factored optimizers (SOAP, Shampoo) see a parameter: a batch of tensors, one factor per axis.

A leaf is viewed as ``B`` tensors of shape ``dims`` (a :class:`Layout`):

* with :class:`~gradax.contrib.MuonDimensionNumbers` (the one reshape mechanism of the matrix optimizers,
  ``_matrix_shapes``): the batch axes are the leaf's other axes (stacked/scanned layers), and each batch element is the matrix
  ``(prod(reduction axes), prod(output axes))`` (a conv kernel ``(h, w, c_in, c_out)`` with reduction axes
  ``(0, 1, 2)`` becomes one ``(h w c_in, c_out)`` matrix);
* otherwise the leaf is one tensor of its own shape (``B = 1``), optionally with adjacent small axes merged.

Every axis of a tensor gets a ``d x d`` factor or none (identity). The mode products below apply one matrix per
axis, cycling the axes so they come back in their order (Gupta et al., 2018, section 4).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from ..transforms._masking import MaskedNode
from ._matrix_shapes import MuonDimensionNumbers, axes, is_dims

_HIGHEST = jax.lax.Precision.HIGHEST


class Layout(NamedTuple):
    """The static view of one leaf: transpose ``perm``, then ``batch`` leading axes, then a tensor of ``dims``."""

    shape: tuple[int, ...]
    perm: tuple[int, ...]
    batch: tuple[int, ...]
    dims: tuple[int, ...]

    @property
    def size(self) -> int:
        return math.prod(self.batch)

    def to_blocks(self, x: jax.Array) -> jax.Array:
        """``(B, *dims)``: the leaf as a batch of tensors."""
        return jnp.transpose(x, self.perm).reshape((self.size, *self.dims))

    def from_blocks(self, y: jax.Array) -> jax.Array:
        """The inverse of :meth:`to_blocks`."""
        permuted = tuple(self.shape[a] for a in self.perm)
        inverse = tuple(sorted(range(len(self.perm)), key=lambda i: self.perm[i]))
        return jnp.transpose(y.reshape(permuted), inverse)


def merge_small_dims(shape: tuple[int, ...], max_dim: int) -> tuple[int, ...]:
    """Merges adjacent axes while their product stays ``<= max_dim``; a shape that would merge into one axis is kept.

    ``(1, 2, 768, 1, 2048)`` with ``max_dim=1024`` becomes ``(2, 768, 2048)``; ``(3, 3, 16, 32)`` with ``max_dim=512``
    becomes ``(144, 32)``.
    """
    merged: list[int] = []
    product = 1
    for d in shape:
        if product * d > max_dim and product > 1:
            merged.append(product)
            product = d
        else:
            product *= d
    merged.append(product)
    return tuple(merged) if len(merged) > 1 else tuple(shape)


def layout(shape: tuple[int, ...], dims: Any, merge_dims: bool = False, max_dim: int = 0) -> Layout:
    """The :class:`Layout` of a leaf of ``shape`` with dimension numbers ``dims`` (None: the leaf's own axes)."""
    ndim = len(shape)
    if isinstance(dims, MuonDimensionNumbers) and ndim >= 2:
        red, out = axes(ndim, dims)
        batch = tuple(a for a in range(ndim) if a not in red and a not in out)
        return Layout(
            shape,
            batch + red + out,
            tuple(shape[a] for a in batch),
            (math.prod(shape[a] for a in red), math.prod(shape[a] for a in out)),
        )
    own = tuple(shape)
    if merge_dims and ndim > 2:
        own = merge_small_dims(own, max_dim)
    return Layout(tuple(shape), tuple(range(ndim)), (), own)


def leaf_dims(weight_dimension_numbers: Any, tree: Any) -> Any:
    """A tree like ``tree`` of :class:`MuonDimensionNumbers` or None, from one of them, a prefix tree, or a function."""
    dims = weight_dimension_numbers
    if callable(dims) and not isinstance(dims, MuonDimensionNumbers):
        dims = dims(tree)
    if dims is None or isinstance(dims, MuonDimensionNumbers):
        return jax.tree.map(lambda _: dims, tree)
    return jax.tree.map(
        lambda d, sub: jax.tree.map(lambda _: None if isinstance(d, MaskedNode) else d, sub),
        dims,
        tree,
        is_leaf=is_dims,
    )


def mode_product(x: jax.Array, mats: tuple, transpose: bool = False) -> jax.Array:
    """``x`` multiplied along each axis ``i`` by ``mats[i]`` (``x ×_i M_i^T``, or ``x ×_i M_i`` with ``transpose``).

    A None factor leaves its axis as it is. The result has ``x``'s axes in their order.

    Each product contracts its axis where it is (the first as ``M^T x`` or ``M x``, the others as ``x M`` or
    ``x M^T``): cycling the axes through the front instead made XLA:CPU transpose operands and results around every
    product (an 8,192 x 8,192 factor's ``x ×_0 M`` of an 8,192 x 256 matrix: 666 ms, against 114 ms this way).
    """
    k = 1 if transpose else 0
    for i, m in enumerate(mats):
        if m is None:
            continue
        m = m.astype(x.dtype)
        if i == 0:
            x = jnp.tensordot(m, x, axes=((k,), (0,)), precision=_HIGHEST)
        else:
            x = jnp.moveaxis(jnp.tensordot(x, m, axes=((i,), (k,)), precision=_HIGHEST), -1, i)
    return x


def axis_gram(x: jax.Array, axis: int) -> jax.Array:
    """The ``(d, d)`` Gram matrix of ``x`` unfolded along ``axis``: every other axis contracted."""
    others = tuple(a for a in range(x.ndim) if a != axis)
    return jnp.tensordot(x, x, axes=(others, others), precision=_HIGHEST)
