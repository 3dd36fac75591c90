"""GaLore: optimizer states in a low-rank subspace of the gradient, refreshed by SVD every few steps."""

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._base import GradientTransformation, MaskOrFn, ScalarOrSchedule
from .._checks import check_int, check_non_negative
from .._hyperparams import as_value
from .._numerics import compute_dtype, safe_int32_increment
from ..optimizers._adam import scale_by_adam
from ..transforms._adding import add_decayed_weights
from ..transforms._combining import chain
from ..transforms._scaling import scale_by_learning_rate


class GaLoreDimensionNumbers(NamedTuple):
    """Which axes of a weight form the rows (``reduction_axis``) and columns (``output_axis``) of its matrix.

    The weight is transposed to ``reduction_axis + output_axis`` and reshaped to ``(prod(rows), prod(cols))`` before
    the projection, and mapped back afterwards. ``(0, 1)`` is a plain 2D weight.
    """

    reduction_axis: Sequence[int] | int = 0
    output_axis: Sequence[int] | int = 1


class GaLoreState(NamedTuple):
    """State of :func:`scale_by_galore`.

    Attributes:
      count: steps taken (int32); the projectors are recomputed when ``count % update_proj_gap == 0``.
      base_optimizer_state: the base optimizer's state, on the projected (low-rank) updates.
      projector: per leaf, the ``(rows, r)`` or ``(cols, r)`` orthonormal projector, or a ``(0, 0)`` placeholder for
        leaves that are not projected.
    """

    count: jax.Array
    base_optimizer_state: Any
    projector: Any


def _axes(a) -> tuple[int, ...]:
    return (a,) if isinstance(a, int) else tuple(a)


def _is_dn(x) -> bool:
    return x is None or isinstance(x, GaLoreDimensionNumbers)


def _dim_numbers(spec, params):
    """A tree of GaLoreDimensionNumbers-or-None with params' structure."""
    if callable(spec) and not isinstance(spec, GaLoreDimensionNumbers):
        spec = spec(params)
    if spec is None:
        return jax.tree.map(lambda p: GaLoreDimensionNumbers() if np.ndim(p) == 2 else None, params)
    if isinstance(spec, GaLoreDimensionNumbers):
        return jax.tree.map(lambda p: spec if np.ndim(p) >= 2 else None, params)
    return jax.tree.map(lambda d, p: d, spec, params, is_leaf=_is_dn)


def _layout(shape, dn):
    """(perm, rows, cols) putting the reduction axes first; None when ``dn`` does not describe ``shape``."""
    nd = len(shape)
    red = tuple(a % nd for a in _axes(dn.reduction_axis))
    out = tuple(a % nd for a in _axes(dn.output_axis))
    if sorted(red + out) != list(range(nd)):
        raise ValueError(
            f"scale_by_galore(weight_dimension_numbers=...) must name every axis of a weight of shape {shape} "
            f"exactly once; got {dn}. Put each axis in reduction_axis or output_axis."
        )
    return red + out, math.prod(shape[a] for a in red), math.prod(shape[a] for a in out)


def _to_matrix(x, perm, rows, cols):
    return jnp.transpose(x, perm).reshape(rows, cols)


def _from_matrix(m, shape, perm):
    inv = [0] * len(perm)
    for i, a in enumerate(perm):
        inv[a] = i
    return jnp.transpose(m.reshape([shape[a] for a in perm]), inv)


def scale_by_galore(
    rank: int = 128,
    update_proj_gap: int = 200,
    scale: float = 1.0,
    base_optimizer: GradientTransformation | None = None,
    weight_dimension_numbers: Any = None,
) -> GradientTransformation:
    r"""Runs ``base_optimizer`` on low-rank projections of the gradients of matrix weights (GaLore).

    For a weight seen as an :math:`m \times n` matrix with gradient :math:`G_t` and :math:`r = \min(\text{rank}, m,
    n)`, every ``update_proj_gap`` steps (at :math:`t \equiv 0`) the projector is refreshed from the SVD
    :math:`G_t = U \Sigma V^\top`: :math:`P = U_{:, :r}` when :math:`m \ge n`, else :math:`P = V_{:, :r}`. Then

    .. math::
      R_t = P^\top G_t \ (m \ge n) \ \text{or} \ G_t P, \qquad N_t = \rho(R_t), \qquad
      u_t = \alpha\, P N_t \ \text{or} \ \alpha\, N_t P^\top,

    with :math:`\rho` the base optimizer (its state lives in the :math:`r`-dimensional space and is kept when the
    projector changes) and :math:`\alpha` = ``scale``. Weights that are not projected go through the base optimizer
    at full size (without :math:`\alpha`). The base optimizer must not need ``params`` (use ``scale_by_adam``, not ``adamw``).

    Args:
      rank: the projection rank (an int >= 1), clipped to the matrix's smaller side.
      update_proj_gap: steps between projector refreshes (an int >= 1).
      scale: :math:`\alpha`, a factor on the final updates.
      base_optimizer: the transformation applied to the projected gradients; ``scale_by_adam()`` when None.
      weight_dimension_numbers: None (project the 2D weights), a :class:`GaLoreDimensionNumbers` for every weight of
        2 or more axes, a tree of them (None leaves: not projected) or a function of params returning that tree.

    Returns:
      A :class:`GradientTransformation` with state :class:`GaLoreState`.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> tx = gradax.contrib.scale_by_galore(rank=1, base_optimizer=gradax.identity())
      >>> g = jnp.array([[3.0, 0.0], [0.0, 1.0]])
      >>> tx.update(g, tx.init(g))[0]
      Array([[3., 0.],
             [0., 0.]], dtype=float32)

    References:
      Zhao et al., 2024, "GaLore: Memory-Efficient LLM Training by Gradient Low-Rank Projection" (ICML),
      https://arxiv.org/abs/2403.03507.
    """
    api = "scale_by_galore"
    check_int(api, "rank", rank, low=1)
    check_int(api, "update_proj_gap", update_proj_gap, low=1)
    base = scale_by_adam() if base_optimizer is None else base_optimizer

    def flat_plan(params):
        leaves, treedef = jax.tree.flatten(params)
        dns = treedef.flatten_up_to(_dim_numbers(weight_dimension_numbers, params))
        plans = []
        for p, dn in zip(leaves, dns):
            if dn is None:
                plans.append(None)
                continue
            perm, m, n = _layout(np.shape(p), dn)
            plans.append((perm, m, n, min(rank, m, n), m >= n))
        return leaves, treedef, plans

    def init(params):
        leaves, treedef, plans = flat_plan(params)
        projectors, low = [], []
        for p, pl in zip(leaves, plans):
            dt = jnp.dtype(p.dtype)
            if pl is None:
                projectors.append(jnp.zeros((0, 0), dt))
                low.append(p)
                continue
            _, m, n, r, left = pl
            projectors.append(jnp.zeros((m if left else n, r), dt))
            low.append(jax.ShapeDtypeStruct((r, n) if left else (m, r), dt))
        low_tree = jax.tree.unflatten(treedef, low)
        return GaLoreState(
            count=jnp.zeros([], jnp.int32),
            base_optimizer_state=base.init(low_tree),
            projector=jax.tree.unflatten(treedef, projectors),
        )

    def update(updates, state, params=None):
        del params
        leaves, treedef, plans = flat_plan(updates)
        old = treedef.flatten_up_to(state.projector)
        refresh = state.count % update_proj_gap == 0
        projectors, low = [], []
        for g, pl, po in zip(leaves, plans, old):
            if pl is None:
                projectors.append(po)
                low.append(g)
                continue
            perm, m, n, r, left = pl
            mat = _to_matrix(g.astype(compute_dtype(g.dtype)), perm, m, n)

            def fresh(mat=mat, left=left, r=r, po=po):
                u, _, vt = jnp.linalg.svd(mat.astype(jnp.float32), full_matrices=False)
                return (u[:, :r] if left else vt[:r].T).astype(po.dtype)

            proj = jax.lax.cond(refresh, fresh, lambda po=po: po)
            projectors.append(proj)
            pc = proj.astype(mat.dtype)
            low.append((pc.T @ mat if left else mat @ pc).astype(g.dtype))
        low_up, base_state = base.update(jax.tree.unflatten(treedef, low), state.base_optimizer_state)
        alpha = as_value(scale)
        out = []
        for g, pl, proj, n_t in zip(leaves, plans, projectors, treedef.flatten_up_to(low_up)):
            nc = n_t.astype(compute_dtype(g.dtype))
            if pl is None:
                out.append(n_t.astype(g.dtype))
                continue
            perm, _, _, _, left = pl
            pc = proj.astype(nc.dtype)
            full = pc @ nc if left else nc @ pc.T
            out.append((alpha * _from_matrix(full, g.shape, perm)).astype(g.dtype))
        new_state = GaLoreState(
            count=safe_int32_increment(state.count),
            base_optimizer_state=base_state,
            projector=jax.tree.unflatten(treedef, projectors),
        )
        return jax.tree.unflatten(treedef, out), new_state

    return GradientTransformation(init, update)


def galore(
    learning_rate: ScalarOrSchedule,
    rank: int = 128,
    update_proj_gap: int = 200,
    scale: float = 1.0,
    base_optimizer: GradientTransformation | None = None,
    weight_decay: ScalarOrSchedule = 0.0,
    mask: MaskOrFn = None,
    weight_dimension_numbers: Any = None,
    *,
    cautious_weight_decay: bool = False,
) -> GradientTransformation:
    r"""The GaLore optimizer: :func:`scale_by_galore`, decoupled weight decay, then a step of :math:`-\eta_t`.

    .. math::
      \theta_t = \theta_{t-1} - \eta_t\left(\alpha\, P\,\rho(P^\top G_t) + \lambda\, \theta_{t-1}\right)

    (or :math:`\alpha\,\rho(G_t P) P^\top` for wide matrices; see :func:`scale_by_galore`). The weight decay acts in
    the full parameter space.

    Args:
      learning_rate: :math:`\eta`, a number, an array or a schedule of the step count.
      rank: projection rank (int >= 1).
      update_proj_gap: steps between projector refreshes (int >= 1).
      scale: :math:`\alpha`.
      base_optimizer: transformation in the low-rank space (``scale_by_adam()`` when None); must not need params.
      weight_decay: :math:`\lambda \ge 0`, decoupled weight decay.
      mask: which params get weight decay (a tree of bools or a function of params).
      weight_dimension_numbers: see :func:`scale_by_galore`.
      cautious_weight_decay: decay only where the update and the parameter have the same sign (Chen et al., 2025).

    Returns:
      A :class:`GradientTransformation` (``update`` needs ``params`` when ``weight_decay`` is not 0).

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> opt = gradax.contrib.galore(learning_rate=0.1, rank=1)
      >>> w = jnp.ones((3, 2))
      >>> opt.update(w, opt.init(w), w)[0].shape
      (3, 2)

    References:
      Zhao et al., 2024, "GaLore: Memory-Efficient LLM Training by Gradient Low-Rank Projection" (ICML),
      https://arxiv.org/abs/2403.03507.
    """
    check_non_negative("galore", "weight_decay", weight_decay)
    return chain(
        scale_by_galore(
            rank=rank,
            update_proj_gap=update_proj_gap,
            scale=scale,
            base_optimizer=base_optimizer,
            weight_dimension_numbers=weight_dimension_numbers,
        ),
        add_decayed_weights(weight_decay, mask, cautious=cautious_weight_decay),
        scale_by_learning_rate(learning_rate),
    )
