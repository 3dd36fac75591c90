"""Arithmetic on pytrees of arrays: elementwise combinations, reductions, norms and moment updates.

Every function maps a one-array rule over the leaves once. Binary functions take trees of the same structure;
``None`` leaves and empty containers keep their place.
"""

from __future__ import annotations

import builtins
import functools
import operator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike, DTypeLike

from .._hyperparams import as_value
from .._numerics import abs_sq


def _is_none(x: Any) -> bool:
    return x is None


def add(tree_x: Any, tree_y: Any, *other_trees: Any) -> Any:
    """The leafwise sum of two or more trees of the same structure.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> gradax.tree.add({"a": jnp.array([1.0])}, {"a": jnp.array([2.0])}, {"a": jnp.array([3.0])})
      {'a': Array([6.], dtype=float32)}
    """
    return jax.tree.map(lambda x, *ys: functools.reduce(operator.add, ys, x), tree_x, tree_y, *other_trees)


def sub(tree_x: Any, tree_y: Any) -> Any:
    """The leafwise difference ``tree_x - tree_y``.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> gradax.tree.sub([jnp.array([3.0])], [jnp.array([1.0])])
      [Array([2.], dtype=float32)]
    """
    return jax.tree.map(operator.sub, tree_x, tree_y)


def mul(tree_x: Any, tree_y: Any) -> Any:
    """The leafwise product ``tree_x * tree_y``.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> gradax.tree.mul([jnp.array([3.0])], [jnp.array([2.0])])
      [Array([6.], dtype=float32)]
    """
    return jax.tree.map(operator.mul, tree_x, tree_y)


def div(tree_x: Any, tree_y: Any) -> Any:
    """The leafwise quotient ``tree_x / tree_y``.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> gradax.tree.div([jnp.array([3.0])], [jnp.array([2.0])])
      [Array([1.5], dtype=float32)]
    """
    return jax.tree.map(operator.truediv, tree_x, tree_y)


def scale(scalar: ArrayLike, tree: Any) -> Any:
    """Every leaf multiplied by ``scalar``: ``scalar * x``.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> gradax.tree.scale(2.0, {"a": jnp.array([1.0, 2.0])})
      {'a': Array([2., 4.], dtype=float32)}
    """
    return jax.tree.map(lambda x: scalar * x, tree)


def add_scale(tree_x: Any, scalar: ArrayLike, tree_y: Any) -> Any:
    """``tree_x + scalar * tree_y`` leafwise; a ``None`` leaf of ``tree_x`` stays ``None``.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> gradax.tree.add_scale([jnp.array([1.0])], 0.5, [jnp.array([4.0])])
      [Array([3.], dtype=float32)]
    """
    factor = jnp.asarray(scalar)
    return jax.tree.map(lambda x, y: None if x is None else x + factor * y, tree_x, tree_y, is_leaf=_is_none)


def _vdot_leaf(a, b) -> jax.Array:
    a, b = jnp.asarray(a), jnp.asarray(b)
    if a.shape != b.shape:
        raise ValueError(
            f"tree.vdot(tree_x=..., tree_y=...) leaves must have equal shapes; got {a.shape} and {b.shape}."
        )
    return jnp.vdot(a, b, precision=jax.lax.Precision.HIGHEST)  # conjugates a complex ``a``


def vdot(tree_x: Any, tree_y: Any) -> ArrayLike:
    r"""The inner product of two trees: :math:`\sum_i \langle \bar x_i, y_i \rangle` (conjugating ``tree_x``).

    Returns 0 for trees without leaves.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> gradax.tree.vdot({"a": jnp.array([1.0, 2.0])}, {"a": jnp.array([3.0, 4.0])})
      Array(11., dtype=float32)
    """
    products = jax.tree.map(_vdot_leaf, tree_x, tree_y)
    return jax.tree.reduce(operator.add, products, initializer=0)


def sum(tree: Any, associative_reduction: bool = False) -> ArrayLike:  # noqa: A001 - the public name
    """The sum of every element of every leaf (0 for a tree without leaves).

    Args:
      tree: a pytree of arrays.
      associative_reduction: add the per-leaf sums in a balanced tree instead of left to right (more parallel,
        rounding may differ slightly).

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> gradax.tree.sum({"a": jnp.array([1.0, 2.0]), "b": jnp.array([3.0])})
      Array(6., dtype=float32)
    """
    sums = jax.tree.leaves(jax.tree.map(jnp.sum, tree))
    if not associative_reduction:
        return functools.reduce(operator.add, sums, 0)
    if not sums:
        return 0
    while len(sums) > 1:
        pairs = [sums[i] + sums[i + 1] for i in range(0, len(sums) - 1, 2)]
        if len(sums) % 2:
            pairs.append(sums[-1])
        sums = pairs
    return sums[0]


def _reduce_nonempty(tree: Any, leaf_fn, combine, initial: float) -> ArrayLike:
    values = [leaf_fn(x) for x in jax.tree.leaves(tree) if np.size(x) > 0]
    return functools.reduce(combine, values, initial)


def max(tree: Any) -> ArrayLike:  # noqa: A001 - the public name
    """The largest element over all leaves (``-inf`` when there is none; empty leaves are skipped).

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> gradax.tree.max({"a": jnp.array([1.0, 5.0]), "b": jnp.array([3.0])})
      Array(5., dtype=float32)
    """
    return _reduce_nonempty(tree, jnp.max, jnp.maximum, -float("inf"))


def min(tree: Any) -> ArrayLike:  # noqa: A001 - the public name
    """The smallest element over all leaves (``inf`` when there is none; empty leaves are skipped).

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> gradax.tree.min({"a": jnp.array([1.0, 5.0]), "b": jnp.array([3.0])})
      Array(1., dtype=float32)
    """
    return _reduce_nonempty(tree, jnp.min, jnp.minimum, float("inf"))


def size(tree: Any) -> int:
    """The total number of elements of all leaves.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> gradax.tree.size({"a": jnp.ones((2, 3)), "b": jnp.ones(4)})
      10
    """
    return builtins.sum(np.size(x) for x in jax.tree.leaves(tree))


def conj(tree: Any) -> Any:
    """The complex conjugate of every leaf (real leaves are unchanged).

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> gradax.tree.conj([jnp.array([1.0 + 2.0j])])
      [Array([1.-2.j], dtype=complex64)]
    """
    return jax.tree.map(jnp.conj, tree)


def real(tree: Any) -> Any:
    """The real part of every leaf.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> gradax.tree.real([jnp.array([1.0 + 2.0j])])
      [Array([1.], dtype=float32)]
    """
    return jax.tree.map(jnp.real, tree)


def norm(tree: Any, ord: int | str | float | None = None, squared: bool = False) -> jax.Array:  # noqa: A002
    r"""The norm of a tree seen as one flat vector.

    ``ord=None`` or ``2``: :math:`\sqrt{\sum |x|^2}`; ``1``: :math:`\sum |x|`; ``inf`` (or ``"inf"``,
    ``"infinity"``): :math:`\max |x|`. With ``squared=True`` the square of that norm is returned.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> gradax.tree.norm({"a": jnp.array([3.0]), "b": jnp.array([-4.0])})
      Array(5., dtype=float32)
      >>> gradax.tree.norm({"a": jnp.array([3.0]), "b": jnp.array([-4.0])}, ord=1)
      Array(7., dtype=float32)
    """
    if ord is None or ord == 2:
        total = sum(jax.tree.map(abs_sq, tree))
        return jnp.array(total if squared else jnp.sqrt(total))
    if ord == 1:
        out = sum(jax.tree.map(jnp.abs, tree))
    elif ord in ("inf", "infinity") or ord == jnp.inf:
        out = max(jax.tree.map(jnp.abs, tree))
    else:
        raise ValueError(f"tree.norm(ord=...) must be one of None, 1, 2, inf, 'inf', 'infinity'; got {ord!r}.")
    return jnp.array(abs_sq(jnp.asarray(out)) if squared else out)


def batch_shape(tree: Any, shape: tuple[int, ...] = ()) -> Any:
    """Every leaf broadcast to ``(*shape, *leaf.shape)``: adds leading batch dimensions.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> gradax.tree.batch_shape({"a": jnp.ones(3)}, (2,))["a"].shape
      (2, 3)
    """
    return jax.tree.map(lambda x: jnp.broadcast_to(x, (*shape, *np.shape(x))), tree)


def zeros_like(tree: Any, dtype: DTypeLike | None = None) -> Any:
    """Zeros shaped like each leaf, of ``dtype`` (default: the leaf's dtype).

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> gradax.tree.zeros_like({"a": jnp.ones(2)})
      {'a': Array([0., 0.], dtype=float32)}
    """
    return jax.tree.map(lambda x: jnp.zeros_like(x, dtype=dtype), tree)


def ones_like(tree: Any, dtype: DTypeLike | None = None) -> Any:
    """Ones shaped like each leaf, of ``dtype`` (default: the leaf's dtype).

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> gradax.tree.ones_like({"a": jnp.zeros(2)})
      {'a': Array([1., 1.], dtype=float32)}
    """
    return jax.tree.map(lambda x: jnp.ones_like(x, dtype=dtype), tree)


def full_like(tree: Any, fill_value: ArrayLike, dtype: DTypeLike | None = None) -> Any:
    """``fill_value`` shaped like each leaf, of ``dtype`` (default: the leaf's dtype).

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> gradax.tree.full_like({"a": jnp.zeros(2)}, 7.0)
      {'a': Array([7., 7.], dtype=float32)}
    """
    return jax.tree.map(lambda x: jnp.full_like(x, fill_value, dtype=dtype), tree)


def clip(tree: Any, min_value: ArrayLike | None = None, max_value: ArrayLike | None = None) -> Any:
    """Every element clipped to ``[min_value, max_value]`` (a ``None`` bound is not applied).

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> gradax.tree.clip([jnp.array([-2.0, 0.5, 2.0])], -1.0, 1.0)
      [Array([-1. ,  0.5,  1. ], dtype=float32)]
    """
    return jax.tree.map(lambda x: jnp.clip(x, min_value, max_value), tree)


def where(condition, tree_x, tree_y):
    """``jnp.where(condition, x, y)`` for each pair of leaves; ``condition`` is one boolean (array) for all.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> gradax.tree.where(jnp.array(False), [jnp.array([1.0])], [jnp.array([2.0])])
      [Array([2.], dtype=float32)]
    """
    return jax.tree.map(lambda x, y: jnp.where(condition, x, y), tree_x, tree_y)


def allclose(a: Any, b: Any, rtol: ArrayLike = 1e-05, atol: ArrayLike = 1e-08, equal_nan: bool = False):
    """Whether every pair of leaves satisfies ``jnp.allclose(x, y, rtol, atol, equal_nan)``.

    Returns ``True`` (a Python bool) for trees without leaves, otherwise a boolean array.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> bool(gradax.tree.allclose([jnp.array([1.0])], [jnp.array(1.0 + 1e-7)]))
      True
    """
    checks = jax.tree.leaves(
        jax.tree.map(lambda x, y: jnp.allclose(x, y, rtol=rtol, atol=atol, equal_nan=equal_nan), a, b)
    )
    return functools.reduce(operator.and_, checks, True)


def _power(g: jax.Array, order: Any, of_magnitude: bool) -> jax.Array:
    """``g**order``, or :math:`|g|^{order}` (a real array) for a complex ``g`` when ``of_magnitude``."""
    if not (of_magnitude and jnp.iscomplexobj(g)):
        return g**order
    half = order / 2
    if float(half).is_integer():
        half = int(half)
    return abs_sq(g) ** half


def _moment_map(rule, updates: Any, moments: Any) -> Any:
    """``rule(g, m)`` for each leaf of ``updates`` and the matching ``moments`` subtree; a ``None`` update stays
    ``None`` (whatever ``moments`` holds there)."""
    return jax.tree.map(lambda g, m: None if g is None else rule(g, m), updates, moments, is_leaf=_is_none)


def update_moment(updates: Any, moments: Any, decay: ArrayLike, order: int) -> Any:
    r"""The exponential moving average of the ``order``-th power of the updates, for every array of a tree.

    .. math::
      m \leftarrow (1 - \beta)\, g^{k} + \beta\, m.

    Also public as ``gradax.update_moment`` (one function, as in Optax). ``None`` leaves of ``updates`` stay
    ``None``.

    Args:
      updates: a tree of arrays :math:`g`.
      moments: a tree with the structure of ``updates``: the previous averages :math:`m`.
      decay: :math:`\beta`, the weight of the previous average.
      order: :math:`k`, the power of the updates that is averaged.

    Returns:
      The tree of new averages.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> gradax.tree.update_moment([jnp.array([2.0])], [jnp.array([0.0])], 0.5, 2)
      [Array([2.], dtype=float32)]
    """
    return _moment_map(lambda g, m: (1 - decay) * _power(g, order, False) + decay * m, updates, moments)


def update_moment_per_elem_norm(updates: Any, moments: Any, decay: ArrayLike, order: int) -> Any:
    r"""Like :func:`update_moment` on the magnitude of each element: :math:`m \leftarrow (1-\beta)|g|^k + \beta m`.

    For real arrays this equals :func:`update_moment`; for complex arrays the average is of :math:`|g|^k`, a real
    quantity. Also public as ``gradax.update_moment_per_elem_norm``. ``None`` leaves of ``updates`` stay ``None``.

    Args:
      updates: a tree of arrays :math:`g` (real or complex).
      moments: a tree with the structure of ``updates``: the previous averages.
      decay: :math:`\beta`, the weight of the previous average.
      order: :math:`k`.

    Returns:
      The tree of new averages.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> gradax.tree.update_moment_per_elem_norm([jnp.array([3.0 + 4.0j])], [jnp.array([0.0])], 0.0, 2)
      [Array([25.], dtype=float32)]
    """
    return _moment_map(lambda g, m: (1 - decay) * _power(g, order, True) + decay * m, updates, moments)


def update_infinity_moment(updates: Any, moments: Any, decay: ArrayLike, eps: ArrayLike) -> Any:
    r"""The exponentially weighted infinity norm of the updates (Adamax): :math:`u \leftarrow \max(|g| + \epsilon,
    \beta u)`.

    Also public as ``gradax.update_infinity_moment``. ``None`` leaves of ``updates`` stay ``None``.

    Args:
      updates: a tree of arrays :math:`g`.
      moments: a tree with the structure of ``updates``: the previous values :math:`u`.
      decay: :math:`\beta`, the decay of the previous value.
      eps: :math:`\epsilon`, added to :math:`|g|`.

    Returns:
      The tree of new values.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> gradax.tree.update_infinity_moment([jnp.array([-1.0, 0.0])], [jnp.array([0.0, 4.0])], 0.5, 0.0)
      [Array([1., 2.], dtype=float32)]
    """
    return _moment_map(lambda g, m: jnp.maximum(jnp.abs(g) + eps, decay * m), updates, moments)


@functools.partial(jax.jit, inline=True)
def bias_correction(moment: Any, decay: ArrayLike, count: ArrayLike) -> Any:
    r"""Divides every array of a moving-average tree by :math:`1 - \beta^t`, undoing the bias of a zero start.

    The factor is computed in float32 (float64 under x64), then cast to each array's dtype for the division, so
    bfloat16 moments stay bfloat16 without :math:`\beta^t` rounding to 1. Compiled (inlined into an enclosing
    ``jit``), as in Optax. Also public as ``gradax.bias_correction``.

    Args:
      moment: a tree of moving averages.
      decay: :math:`\beta`, the decay of the average.
      count: :math:`t \ge 1`, the number of steps averaged so far.

    Returns:
      The bias-corrected tree.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> gradax.tree.bias_correction([jnp.array([0.1])], 0.9, 1)
      [Array([1.], dtype=float32)]
    """
    factor = 1 - as_value(decay) ** count
    return jax.tree.map(lambda m: m / factor.astype(m.dtype), moment)
