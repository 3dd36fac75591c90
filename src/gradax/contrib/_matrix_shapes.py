"""How the matrix optimizers (Muon and its family, PSGD-Kron, Scion, SOAP, Shampoo) see a parameter as matrices.

One mechanism for all of them. A leaf's axes are split into *reduction* (input) axes, *output* axes and *batch* axes
(every other axis) by a :class:`MuonDimensionNumbers`; the leaf is then a batch of matrices of shape
``(prod(reduction dims), prod(output dims))``. Conventions every optimizer keeps:

* the default for a leaf of rank >= 2 is "the last two axes are (input, output), leading axes are stacked layers",
  so a scanned ``(layers, d_in, d_out)`` weight is ``layers`` matrices, each preconditioned on its own;
* a conv kernel ``(h, w, c_in, c_out)`` is named explicitly, e.g. ``MuonDimensionNumbers((0, 1, 2), 3)``: the
  spatial and input axes are merged into one reduction axis;
* a leaf whose dimension numbers are ``None`` (and every scalar and vector under the recipes' default) is not a
  matrix: the recipes send it to a named first-order optimizer;
* :func:`map_matrices` applies a per-matrix function with :func:`jax.lax.map`, so the temporaries of one matrix are
  alive at a time, whatever the number of stacked layers.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ..transforms._masking import MaskedNode


class MuonDimensionNumbers(NamedTuple):
    """Which axes of a weight are its input (reduced) and output axes; every other axis is a batch axis.

    A 3-D stacked (scanned) weight of shape ``(layers, d_in, d_out)`` is
    ``MuonDimensionNumbers(reduction_axis=1, output_axis=2)``: each of the ``layers`` matrices is orthogonalized on
    its own. Several axes may be given as a tuple; they are flattened together.
    """

    reduction_axis: Sequence[int] | int = 0
    output_axis: Sequence[int] | int = 1


def is_dims(x: Any) -> bool:
    """A leaf of a dimension-numbers tree: a :class:`MuonDimensionNumbers`, None, or a masked-out node."""
    return x is None or isinstance(x, (MuonDimensionNumbers, MaskedNode))


def axes(ndim: int, dims: MuonDimensionNumbers) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The reduction and output axes of a rank-``ndim`` leaf, non-negative; raises when they overlap."""
    red = (dims.reduction_axis,) if isinstance(dims.reduction_axis, int) else tuple(dims.reduction_axis)
    out = (dims.output_axis,) if isinstance(dims.output_axis, int) else tuple(dims.output_axis)
    red = tuple(a % ndim for a in red)
    out = tuple(a % ndim for a in out)
    if set(red) & set(out):
        raise ValueError(
            f"MuonDimensionNumbers: reduction axes {red} and output axes {out} must be disjoint for a weight of rank "
            f"{ndim}. Name each axis at most once."
        )
    return red, out


def default_dims(ndim: int, api: str = "scale_by_muon", fix: str | None = None) -> MuonDimensionNumbers:
    """The default dimension numbers of a rank-``ndim`` leaf: the last two axes; raises for scalars and vectors
    (``fix`` replaces the message's last sentence)."""
    if ndim < 2:
        if fix is None:
            fix = (
                "Give weight_dimension_numbers (None for the leaves to leave out) or use gradax.contrib.muon, which "
                "sends non-matrix parameters to AdamW."
            )
        raise ValueError(f"{api}: a parameter of rank {ndim} is not a matrix. {fix}")
    # a stacked weight (..., d_in, d_out): the leading axes are batch axes
    return MuonDimensionNumbers(reduction_axis=ndim - 2, output_axis=ndim - 1)


def fans(shape: Sequence[int], dims: MuonDimensionNumbers) -> tuple[int, int]:
    """``(fan_in, fan_out)``: the number of rows and columns of each matrix of a leaf of this shape."""
    red, out = axes(len(shape), dims)
    return math.prod(shape[a] for a in red), math.prod(shape[a] for a in out)


def matrix_shape(shape: Sequence[int], dims: MuonDimensionNumbers) -> tuple[int, int, int]:
    """``(batch, fan_in, fan_out)`` of a leaf of this shape seen as a batch of matrices."""
    red, out = axes(len(shape), dims)
    batch = math.prod(shape[a] for a in range(len(shape)) if a not in red and a not in out)
    return batch, math.prod(shape[a] for a in red), math.prod(shape[a] for a in out)


def to_matrices(x: jax.Array, dims: MuonDimensionNumbers) -> tuple[jax.Array, Callable[[jax.Array], jax.Array]]:
    """``x`` as an array of shape ``(batch, fan_in, fan_out)``, and the function that puts such an array back."""
    red, out = axes(x.ndim, dims)
    batch = tuple(a for a in range(x.ndim) if a not in red and a not in out)
    perm = batch + red + out
    inv = tuple(sorted(range(x.ndim), key=lambda i: perm[i]))
    shape = tuple(x.shape[a] for a in perm)
    flat = x.transpose(perm).reshape(matrix_shape(x.shape, dims))

    def restore(y: jax.Array) -> jax.Array:
        return y.reshape(shape).transpose(inv)

    return flat, restore


def map_matrices(fn: Callable[[jax.Array], jax.Array], x: jax.Array, dims: MuonDimensionNumbers) -> jax.Array:
    """Applies ``fn`` (one ``(fan_in, fan_out)`` matrix to one of the same shape) to every matrix of ``x``."""
    flat, restore = to_matrices(x, dims)
    # jax.lax.map keeps one matrix's temporaries alive at a time, whatever the number of layers
    return restore(jax.lax.map(fn, flat))


def resolve_dims(weight_dimension_numbers: Any, tree: Any, api: str = "scale_by_muon") -> Any:
    """The dimension numbers of every leaf of ``tree``, from a :class:`MuonDimensionNumbers`, a prefix tree of them
    (None and masked nodes allowed), a function of the tree returning either, or None (the default per leaf, which
    raises for a scalar or a vector)."""
    dims = (
        weight_dimension_numbers(tree)
        if callable(weight_dimension_numbers) and not isinstance(weight_dimension_numbers, MuonDimensionNumbers)
        else weight_dimension_numbers
    )
    if dims is None:
        return jax.tree.map(lambda u: default_dims(np.ndim(u), api), tree)
    if isinstance(dims, MuonDimensionNumbers):
        return jax.tree.map(lambda u: dims, tree)
    return jax.tree.map(lambda d, sub: jax.tree.map(lambda u: d, sub), dims, tree, is_leaf=is_dims)


def matrix_dims_tree(user_dims: Any, params: Any) -> Any:
    """The recipes' dimension numbers: ``user_dims`` (as in :func:`resolve_dims`) broadcast over ``params``, or, when
    it is None, the default dimension numbers for 2-D leaves and None (not a matrix) for every other leaf."""
    d = user_dims(params) if callable(user_dims) and not isinstance(user_dims, MuonDimensionNumbers) else user_dims
    if d is None:
        return jax.tree.map(lambda p: MuonDimensionNumbers() if np.ndim(p) == 2 else None, params)
    return jax.tree.map(lambda dd, sub: jax.tree.map(lambda _: dd, sub), d, params, is_leaf=is_dims)


def matrix_labels(user_dims: Any, params: Any, matrix: str, other: str) -> Any:
    """A label tree for :func:`gradax.partition`: ``matrix`` where :func:`matrix_dims_tree` gives dimension numbers,
    ``other`` where it gives None."""
    return jax.tree.map(
        lambda d, sub: jax.tree.map(lambda _: other if d is None else matrix, sub),
        matrix_dims_tree(user_dims, params),
        params,
        is_leaf=is_dims,
    )


def by_groups(keys: Sequence[Any], fn: Callable[..., Any], *batches: Sequence[jax.Array]) -> list[Any]:
    """``fn(key, *stacked)`` once per distinct key, over the ``(n_k, ...)`` arrays of ``batches`` whose index has that
    key, concatenated along axis 0; each result (an array, or a tuple of arrays) is split back to its place. Matrix
    optimizers use it to refresh every factor of one size in a tree with one decomposition call (compile time grows
    with the sizes, not the leaves)."""
    groups: dict[Any, list[int]] = {}
    for k, key in enumerate(keys):
        groups.setdefault(key, []).append(k)
    out: list[Any] = [None] * len(keys)
    for key, ks in groups.items():
        got = fn(key, *(jnp.concatenate([b[k] for k in ks]) if len(ks) > 1 else b[ks[0]] for b in batches))
        ends = np.cumsum([batches[0][k].shape[0] for k in ks])[:-1]
        parts = zip(*(jnp.split(x, ends) for x in got)) if isinstance(got, tuple) else jnp.split(got, ends)
        for k, part in zip(ks, parts):
            out[k] = part
    return out
