"""Euclidean projections of a pytree onto convex sets (and spheres), the tree taken as one flat vector.

Each function returns :math:`\\arg\\min_{y \\in C} \\|y - x\\|_2` for its set :math:`C`, differentiable almost
everywhere (gradients flow through the sorting of the simplex projection).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from jax.typing import ArrayLike

from .._checks import tree_mismatch_error


def _vdot(a: Any, b: Any) -> jax.Array:
    parts = jax.tree.leaves(jax.tree.map(lambda x, y: jnp.sum(x * y), a, b))
    return sum(parts[1:], parts[0]) if parts else jnp.zeros([])


def _like(api: str, arg: str, tree: Any, value: Any) -> Any:
    """``value`` as a tree of the structure of ``tree``: a tree of that structure, or one leaf broadcast to all."""
    if jax.tree.structure(value) == jax.tree.structure(tree):
        return value
    if len(jax.tree.leaves(value)) == 1 and jax.tree.structure(value).num_nodes == 1:
        return jax.tree.map(lambda _: value, tree)
    raise tree_mismatch_error(api, arg, tree, value, fix="Pass a scalar or a tree with the structure of `tree`")


def projection_non_negative(tree: Any) -> Any:
    r"""Projection onto the non-negative orthant.

    .. math::
        \mathrm{proj}(x) = \max(x, 0)

    Args:
      tree: the point (a pytree of arrays).

    Returns:
      The projected tree.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> gradax.projections.projection_non_negative(jnp.array([-1.0, 2.0]))
      Array([0., 2.], dtype=float32)
    """
    return jax.tree.map(jax.nn.relu, tree)


def projection_box(tree: Any, lower: Any, upper: Any) -> Any:
    r"""Projection onto the box :math:`\{y : l \le y \le u\}`.

    .. math::
        \mathrm{proj}(x) = \min(\max(x, l), u)

    Args:
      tree: the point.
      lower: lower bounds: a scalar or a tree with the structure of ``tree`` (leaves broadcast to the leaves).
      upper: upper bounds, same forms.

    Returns:
      The projected tree.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> gradax.projections.projection_box(jnp.array([-1.0, 0.5, 2.0]), 0.0, 1.0)
      Array([0. , 0.5, 1. ], dtype=float32)
    """
    lower = _like("projection_box", "lower", tree, lower)
    upper = _like("projection_box", "upper", tree, upper)
    return jax.tree.map(jnp.clip, tree, lower, upper)


def projection_hypercube(tree: Any, scale: Any = 1) -> Any:
    r"""Projection onto the hypercube :math:`[0, s]^n`.

    .. math::
        \mathrm{proj}(x) = \min(\max(x, 0), s)

    Args:
      tree: the point.
      scale: the side ``s > 0`` (a scalar or a tree like ``tree``).

    Returns:
      The projected tree.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> gradax.projections.projection_hypercube(jnp.array([-1.0, 0.5, 2.0]))
      Array([0. , 0.5, 1. ], dtype=float32)
    """
    return projection_box(tree, lower=0, upper=scale)


def projection_linf_ball(tree: Any, scale: ArrayLike = 1) -> Any:
    r"""Projection onto the :math:`\ell_\infty` ball of radius ``s``.

    .. math::
        \mathrm{proj}(x) = \min(\max(x, -s), s)

    Args:
      tree: the point.
      scale: the radius ``s > 0``.

    Returns:
      The projected tree.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> gradax.projections.projection_linf_ball(jnp.array([-3.0, 0.5]), 2.0)
      Array([-2. ,  0.5], dtype=float32)
    """
    scale = _like("projection_linf_ball", "scale", tree, scale)
    return projection_box(tree, jax.tree.map(jnp.negative, scale), scale)


def _simplex_flat(z: jax.Array, scale: ArrayLike) -> jax.Array:
    """Projection of a 1-D vector onto ``{y >= 0, sum y = scale}`` (sort-based, Held et al. / Duchi et al.)."""
    z_sorted = jnp.flip(jnp.sort(z))
    cumsum = jnp.cumsum(z_sorted) - scale
    ranks = jnp.arange(1, z.shape[0] + 1, dtype=z.dtype)
    support = z_sorted - cumsum / ranks > 0
    rho = jnp.sum(support) - 1
    tau = cumsum[rho] / (rho + 1).astype(z.dtype)
    return jnp.maximum(z - tau, 0.0)


def _on_flat(tree: Any, project: Callable[[jax.Array], jax.Array]) -> Any:
    """Applies ``project`` to the tree taken as one flat float vector (integer leaves become float32) and returns the
    result with the structure of the tree; a tree without elements comes back unchanged."""
    tree_f = jax.tree.map(
        lambda x: x if jnp.issubdtype(jnp.result_type(x), jnp.floating) else jnp.asarray(x, jnp.float32), tree
    )
    flat, unravel = ravel_pytree(tree_f)
    if flat.size == 0:
        return tree
    return unravel(project(flat))


def projection_simplex(tree: Any, scale: ArrayLike = 1) -> Any:
    r"""Projection onto the (scaled) probability simplex, the whole tree as one vector.

    .. math::
        \mathrm{proj}(x) = \arg\min_{y \ge 0,\ \sum_i y_i = s} \|y - x\|_2 = \max(x - \tau, 0)

    with the threshold :math:`\tau` found by sorting (:math:`O(n \log n)`).

    Args:
      tree: the point (all leaves together form the vector).
      scale: the sum ``s > 0``.

    Returns:
      The projected tree (float leaves).

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> gradax.projections.projection_simplex(jnp.array([0.5, 1.0, -1.0]))
      Array([0.25, 0.75, 0.  ], dtype=float32)

    References:
      Duchi et al., `Efficient Projections onto the l1-Ball for Learning in High Dimensions
      <https://stanford.edu/~jduchi/projects/DuchiShSiCh08.pdf>`_, 2008.
    """
    return _on_flat(tree, lambda flat: _simplex_flat(flat, scale))


def projection_l1_sphere(tree: Any, scale: ArrayLike = 1) -> Any:
    r"""Projection onto the :math:`\ell_1` sphere :math:`\{y : \|y\|_1 = s\}`.

    .. math::
        \mathrm{proj}(x) = \mathrm{sign}(x) \odot \mathrm{proj}_{\Delta_s}(|x|)

    where a zero coordinate takes the sign ``+`` (any sign is optimal there). Optax 0.2.8 uses ``sign(0) = 0``, which
    drops the mass the simplex projection puts on zero coordinates, so its result is off the sphere (for example
    ``[0, 1] -> [0, 1.5]`` for ``s = 2``; gradax gives ``[0.5, 1.5]``; see ``docs/differences.md``).

    Args:
      tree: the point.
      scale: the radius ``s > 0``.

    Returns:
      The projected tree.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> gradax.projections.projection_l1_sphere(jnp.array([0.5, -1.0]), 2.0)
      Array([ 0.75, -1.25], dtype=float32)
    """

    def project(flat):
        signs = jnp.where(flat < 0, -1.0, 1.0).astype(flat.dtype)
        return signs * _simplex_flat(jnp.abs(flat), scale)

    return _on_flat(tree, project)


def projection_l1_ball(tree: Any, scale: ArrayLike = 1) -> Any:
    r"""Projection onto the :math:`\ell_1` ball :math:`\{y : \|y\|_1 \le s\}`.

    .. math::
        \mathrm{proj}(x) = \begin{cases} x & \|x\|_1 \le s \\
        \mathrm{sign}(x) \odot \mathrm{proj}_{\Delta_s}(|x|) & \text{otherwise} \end{cases}

    Args:
      tree: the point.
      scale: the radius ``s > 0``.

    Returns:
      The projected tree.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> gradax.projections.projection_l1_ball(jnp.array([0.5, -1.0]), 1.0)
      Array([ 0.25, -0.75], dtype=float32)
    """

    def project(flat):
        inside = jnp.sum(jnp.abs(flat)) <= scale
        return jnp.where(inside, flat, jnp.sign(flat) * _simplex_flat(jnp.abs(flat), scale))

    return _on_flat(tree, project)


def _l2_norm(tree: Any) -> jax.Array:
    return jnp.sqrt(_vdot(tree, tree))


def projection_l2_sphere(tree: Any, scale: ArrayLike = 1) -> Any:
    r"""Projection onto the :math:`\ell_2` sphere :math:`\{y : \|y\|_2 = s\}`.

    .. math::
        \mathrm{proj}(x) = s \, x / \|x\|_2

    Undefined (``nan``) at ``x = 0``, as in Optax.

    Args:
      tree: the point (non-zero).
      scale: the radius ``s > 0``.

    Returns:
      The projected tree.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> gradax.projections.projection_l2_sphere(jnp.array([3.0, 4.0]))
      Array([0.6, 0.8], dtype=float32)
    """
    factor = scale / _l2_norm(tree)
    return jax.tree.map(lambda x: (x * factor).astype(jnp.result_type(x, factor)), tree)


def projection_l2_ball(tree: Any, scale: ArrayLike = 1) -> Any:
    r"""Projection onto the :math:`\ell_2` ball :math:`\{y : \|y\|_2 \le s\}`.

    .. math::
        \mathrm{proj}(x) = \frac{s}{\max(\|x\|_2, s)} \, x

    Args:
      tree: the point.
      scale: the radius ``s > 0``.

    Returns:
      The projected tree.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> gradax.projections.projection_l2_ball(jnp.array([3.0, 4.0]), 2.5)
      Array([1.5, 2. ], dtype=float32)
    """
    sq_norm = jnp.real(_vdot(tree, tree))
    inside = sq_norm <= jnp.square(scale)
    # the square root only outside the ball (sq_norm > 0 there): the gradient at 0 is the identity, not nan
    factor = scale / jnp.sqrt(jnp.where(inside, 1.0, sq_norm))
    return jax.tree.map(lambda x: jnp.where(inside, x, x * factor), tree)


def projection_hyperplane(x: Any, a: Any, b: ArrayLike) -> Any:
    r"""Projection onto the hyperplane :math:`\{y : \langle a, y \rangle = b\}`.

    .. math::
        \mathrm{proj}(x) = x - \frac{\langle a, x \rangle - b}{\|a\|^2} a

    Args:
      x: the point.
      a: the normal (non-zero), a tree with the structure of ``x``.
      b: the offset (scalar).

    Returns:
      The projected tree.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> gradax.projections.projection_hyperplane(jnp.array([1.0, 1.0]), jnp.array([1.0, 0.0]), 3.0)
      Array([3., 1.], dtype=float32)
    """
    _check_same_tree("projection_hyperplane", x, a)
    step = (_vdot(a, x) - b) / _vdot(a, a)
    return jax.tree.map(lambda xi, ai: xi - step * ai, x, a)


def projection_halfspace(x: Any, a: Any, b: ArrayLike) -> Any:
    r"""Projection onto the half-space :math:`\{y : \langle a, y \rangle \le b\}`.

    .. math::
        \mathrm{proj}(x) = x - \frac{\max(\langle a, x \rangle - b, 0)}{\|a\|^2} a

    Args:
      x: the point.
      a: the normal (non-zero), a tree with the structure of ``x``.
      b: the offset (scalar).

    Returns:
      The projected tree.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> gradax.projections.projection_halfspace(jnp.array([5.0, 1.0]), jnp.array([1.0, 0.0]), 3.0)
      Array([3., 1.], dtype=float32)
    """
    _check_same_tree("projection_halfspace", x, a)
    step = jax.nn.relu(_vdot(a, x) - b) / _vdot(a, a)
    return jax.tree.map(lambda xi, ai: xi - step * ai, x, a)


def projection_vector(x: Any, a: Any) -> Any:
    r"""Projection onto the line spanned by ``a``.

    .. math::
        \mathrm{proj}(x) = \frac{\langle a, x \rangle}{\|a\|^2} a

    Args:
      x: the point.
      a: the direction (non-zero), a tree with the structure of ``x``.

    Returns:
      The projected tree (with the structure of ``a``).

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> gradax.projections.projection_vector(jnp.array([1.0, 3.0]), jnp.array([0.0, 2.0]))
      Array([0., 3.], dtype=float32)
    """
    _check_same_tree("projection_vector", x, a)
    coef = _vdot(a, x) / _vdot(a, a)
    return jax.tree.map(lambda ai: coef * ai, a)


def _check_same_tree(api: str, x: Any, a: Any) -> None:
    if jax.tree.structure(x) != jax.tree.structure(a):
        raise tree_mismatch_error(api, "a", x, a, fix="Pass `a` with the structure of `x`")
    for xi, ai in zip(jax.tree.leaves(x), jax.tree.leaves(a)):
        if np.shape(xi) != np.shape(ai):
            raise ValueError(
                f"{api}(a=...) must have the leaf shapes of `x`; got shape {np.shape(ai)} where `x` has "
                f"{np.shape(xi)}. Pass `a` with the shapes of `x`."
            )
