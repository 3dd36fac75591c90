"""Shampoo with blocks and grafting (Gupta et al., 2018; Anil et al., 2020; Shi et al., 2023): a Kronecker-factored
full-matrix AdaGrad per block of each tensor, its step size taken from a simple first-order optimizer."""

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from .._base import GradientTransformation, MaskOrFn, Params, ScalarOrSchedule
from .._checks import check_decay, check_int, check_interval, check_non_negative, check_one_of
from .._compat import shard_alike
from .._hyperparams import as_value
from .._linear_algebra import matrix_inverse_pth_root
from .._numerics import compute_dtype, leaf_dtype, safe_int32_increment, state_dtype, zeros_for
from ..transforms._adding import add_decayed_weights
from ..transforms._combining import chain
from ..transforms._scaling import scale_by_learning_rate
from ._kronecker import Layout, axis_gram, layout, leaf_dims, mode_product
from ._matrix_shapes import MuonDimensionNumbers, by_groups, default_dims

_GRAFTS = ("sgd", "adagrad", "rmsprop", "adam")
# the exponents the coupled Newton iteration of matrix_inverse_pth_root takes; others use an eigendecomposition
_NEWTON_EXPONENTS = (1, 2, 4, 8)


class ShampooState(NamedTuple):
    """State of :func:`scale_by_shampoo`.

    Per leaf, ``stats`` and ``roots`` hold one ``(blocks, b, b)`` array per axis of the leaf's tensor view (empty for
    scalars and vectors, which are not preconditioned).
    """

    count: jax.Array  # shape=(), int32: the number of updates so far
    momentum: Any  # like params: momentum of the grafted Shampoo direction
    graft_momentum: Any  # like params: momentum of the graft's direction (used before preconditioning starts)
    graft_nu: Any  # like params (None for 'sgd'): the graft's second-moment accumulator
    stats: Any  # per leaf, a tuple: the factor statistics of each axis, per block
    roots: Any  # per leaf, a tuple: their inverse roots, per block


def inverse_root(s: jax.Array, p: int, ridge: ArrayLike) -> jax.Array:
    """``(S + ridge * lambda_max I)^(-1/p)`` of a symmetric PSD ``S``.

    By the coupled Newton iteration of :func:`gradax.matrix_inverse_pth_root` for ``p`` in (1, 2, 4, 8) (more
    accurate than an eigendecomposition in float32, ``tests/contrib/test_shampoo.py``), else by ``eigh``.
    """
    if p in _NEWTON_EXPONENTS:
        return matrix_inverse_pth_root(s, p, ridge_epsilon=ridge, error_tolerance=1e-6)[0].astype(s.dtype)
    w, v = jnp.linalg.eigh(s, symmetrize_input=True)
    w = w + ridge * jnp.maximum(w[-1], 0)
    w = jnp.maximum(w, jnp.finfo(s.dtype).tiny) ** (-1.0 / p)
    return jnp.matmul(v * w, v.T, precision=jax.lax.Precision.HIGHEST)


def _inverse_roots(now: jax.Array, keys: list, stats: list, roots: list, ridge: jax.Array) -> list:
    """``roots`` as they are, or (when ``now``) the inverse roots of ``stats`` (``(n, b, b)`` arrays, the exponent
    first in each's ``key``): one cond for the whole tree, the blocks of one key computed as one batch."""

    def batch(key, blocks):
        p = key[0]

        def one(m):
            return inverse_root(m, p, ridge.astype(m.dtype))

        # the Newton iteration is matmuls, batched; an eigendecomposition goes one block at a time: jaxlib's CPU
        # LAPACK kernels split a batch over XLA's thread pool and block a pool thread on it, which deadlocked inside
        # lax.map/lax.scan loops (see _soap._per_matrix)
        return jax.vmap(one)(blocks) if p in _NEWTON_EXPONENTS else jax.lax.map(one, blocks)

    def compute(ss):
        return [x.astype(r.dtype) for x, r in zip(by_groups(keys, batch, ss), roots)]

    return jax.lax.cond(now, lambda ss, rs: compute(ss), lambda ss, rs: list(rs), list(stats), list(roots))


class _Blocks(NamedTuple):
    """The blocks of a leaf: its :class:`Layout`, then each tensor axis cut into ``n`` blocks of ``b`` (padded)."""

    lay: Layout
    block: tuple[int, ...]
    count: tuple[int, ...]

    @property
    def total(self) -> int:
        return self.lay.size * math.prod(self.count)

    def split(self, x: jax.Array) -> jax.Array:
        """``(total, *block)``: every block of every tensor of the leaf, zero-padded."""
        x = self.lay.to_blocks(x)
        pad = [(0, 0)] + [(0, n * b - d) for n, b, d in zip(self.count, self.block, self.lay.dims)]
        x = jnp.pad(x, pad)
        k = len(self.block)
        x = x.reshape((x.shape[0], *(v for nb in zip(self.count, self.block) for v in nb)))
        x = jnp.transpose(x, (0, *range(1, 2 * k, 2), *range(2, 2 * k + 1, 2)))
        return x.reshape((self.total, *self.block))

    def merge(self, y: jax.Array) -> jax.Array:
        """The inverse of :meth:`split` (padding dropped)."""
        k = len(self.block)
        y = y.reshape((self.lay.size, *self.count, *self.block))
        order = [0]
        for i in range(k):
            order += [1 + i, 1 + k + i]
        y = jnp.transpose(y, order).reshape((self.lay.size, *(n * b for n, b in zip(self.count, self.block))))
        y = y[(slice(None), *(slice(0, d) for d in self.lay.dims))]
        return self.lay.from_blocks(y)


def scale_by_shampoo(
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    matrix_eps: ArrayLike = 1e-6,
    diagonal_eps: ArrayLike = 1e-10,
    block_size: int = 256,
    inverse_exponent: int | None = None,
    start_preconditioning_step: int = 10,
    preconditioning_compute_steps: int = 10,
    statistics_compute_steps: int = 1,
    graft_type: str = "adam",
    *,
    nesterov: bool = True,
    merge_dims: bool = False,
    weight_dimension_numbers: MuonDimensionNumbers | Params | Callable[[Params], Any] | None = None,
) -> GradientTransformation:
    r"""Shampoo's direction, blocked and grafted.

    For each block :math:`G` (a ``b x b`` tile of a matrix; a tensor has one factor per axis) at step :math:`t`:

    .. math::
        L_t &= \beta_2 L_{t-1} + (1 - \beta_2) G G^\top, \quad R_t = \beta_2 R_{t-1} + (1 - \beta_2) G^\top G,
            \quad L_0 = R_0 = \epsilon I, \\
        P_t &= \tilde L^{-1/p} G \tilde R^{-1/p}, \quad \tilde L = L + \epsilon \lambda_{\max}(L) I
            \ \text{(recomputed every ``preconditioning_compute_steps``)}, \\
        S_t &= \frac{\|D_t\|}{\|P_t\| + 10^{-16}} P_t \quad \text{(grafting, per parameter)}, \quad
        m_t = \beta_1 m_{t-1} + S_t, \quad u_t = \beta_1 m_t + S_t \ \text{(Nesterov)},

    with :math:`p` twice the number of preconditioned axes (or ``inverse_exponent``) and :math:`D_t` the graft's
    direction: ``'sgd'`` :math:`g`, ``'adagrad'`` :math:`g / (\sqrt{\sum g^2} + \epsilon_d)`, ``'rmsprop'``
    :math:`g / (\sqrt{v_t} + \epsilon_d)` with :math:`v_t = \beta_2 v_{t-1} + (1 - \beta_2) g^2`, ``'adam'`` the
    same with :math:`v_t / (1 - \beta_2^t)`. Before step ``start_preconditioning_step`` the update is the graft's
    own momentum (the Shampoo momentum accumulates meanwhile). With :math:`\beta_2 = 1` the statistics are sums.

    Shapes: blocks of at most ``block_size`` per axis (a 50,000-row embedding is 50,000 / ``block_size`` row blocks,
    never a 50,000 x 50,000 factor: statistics memory is about twice the parameter's per axis); a leaf with
    :class:`MuonDimensionNumbers` is a batch of matrices (stacked layers, conv kernels); by default a leaf of rank
    >= 2 is its last two axes with leading axes stacked (``merge_dims=True``: one tensor, adjacent axes merged while
    their product is at most ``block_size``); scalars and vectors get the graft alone (with its momentum).

    Args:
      b1: momentum in :math:`[0, 1)`.
      b2: decay of the statistics and of the graft's second moment, in :math:`[0, 1]`.
      matrix_eps: :math:`\epsilon >= 0`: initial statistics and relative ridge of the inverse roots.
      diagonal_eps: :math:`\epsilon_d >= 0` of the AdaGrad/RMSProp/Adam grafts.
      block_size: the largest block side (an int >= 1).
      inverse_exponent: :math:`p` (an int >= 1); None for twice the number of preconditioned axes.
      start_preconditioning_step: the first step (1-based) that uses Shampoo's direction.
      preconditioning_compute_steps: steps between inverse-root computations.
      statistics_compute_steps: steps between statistics updates.
      graft_type: ``'sgd'``, ``'adagrad'``, ``'rmsprop'`` or ``'adam'``.
      nesterov: Nesterov momentum.
      merge_dims: see Shapes.
      weight_dimension_numbers: a :class:`MuonDimensionNumbers`, a tree of them, or a function of the updates.

    Returns:
      A :class:`GradientTransformation` with state :class:`ShampooState`.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> tx = gradax.contrib.scale_by_shampoo(block_size=2, start_preconditioning_step=1,
      ...                                      preconditioning_compute_steps=1)
      >>> s = tx.init(jnp.zeros((3, 4)))
      >>> [x.shape for x in s.stats]  # (3, 4) in 2 x 2 blocks, the last row block padded
      [(4, 2, 2), (4, 2, 2)]
      >>> u, s = tx.update(jnp.ones((3, 4)), s)
      >>> u.shape
      (3, 4)

    References:
      Gupta et al., `Shampoo: Preconditioned Stochastic Tensor Optimization <https://arxiv.org/abs/1802.09568>`_,
      2018; Anil et al., `Scalable Second Order Optimization for Deep Learning <https://arxiv.org/abs/2002.09018>`_,
      2020; Shi et al., `A Distributed Data-Parallel PyTorch Implementation of the Distributed Shampoo Optimizer
      <https://arxiv.org/abs/2309.06497>`_, 2023.
    """
    api = "scale_by_shampoo"
    check_decay(api, "b1", b1)
    check_interval(api, "b2", b2, 0.0, 1.0)
    check_non_negative(api, "matrix_eps", matrix_eps)
    check_non_negative(api, "diagonal_eps", diagonal_eps)
    check_int(api, "block_size", block_size, low=1)
    if inverse_exponent is not None:
        check_int(api, "inverse_exponent", inverse_exponent, low=1)
    check_int(api, "start_preconditioning_step", start_preconditioning_step, low=0)
    check_int(api, "preconditioning_compute_steps", preconditioning_compute_steps, low=1)
    check_int(api, "statistics_compute_steps", statistics_compute_steps, low=1)
    check_one_of(api, "graft_type", graft_type, _GRAFTS)

    def blocks_of(shape, dims) -> _Blocks:
        if dims is None and len(shape) >= 2 and not merge_dims:
            dims = default_dims(len(shape))
        lay = layout(tuple(shape), dims, merge_dims, block_size)
        if len(lay.dims) < 2:
            return _Blocks(lay, (), ())
        block = tuple(max(1, min(block_size, d)) for d in lay.dims)  # a zero-size axis: zero blocks
        return _Blocks(lay, block, tuple(-(-d // b) for d, b in zip(lay.dims, block)))

    def init(params):
        def leaf(p, dims):
            bl = blocks_of(np.shape(p), dims)
            sd = state_dtype(leaf_dtype(p))
            eps = as_value(matrix_eps, sd)
            stats = tuple(jnp.zeros((bl.total, b, b), sd) + eps * jnp.eye(b, dtype=sd) for b in bl.block)
            roots = tuple(jnp.zeros((bl.total, b, b), sd) + jnp.eye(b, dtype=sd) for b in bl.block)
            nu = None if graft_type == "sgd" else zeros_for(p, sd)
            return zeros_for(p, sd), zeros_for(p, sd), nu, stats, roots

        flat, treedef = jax.tree.flatten(params)
        outs = [leaf(p, d) for p, d in zip(flat, treedef.flatten_up_to(leaf_dims(weight_dimension_numbers, params)))]
        parts = (treedef.unflatten([o[k] for o in outs]) for k in range(5))
        return ShampooState(jnp.zeros([], jnp.int32), *parts)

    def update(updates, state, params=None):
        del params
        beta1, beta2 = as_value(b1), as_value(b2)
        t = safe_int32_increment(state.count)
        weight = jnp.where(beta2 == 1, jnp.ones_like(beta2), 1 - beta2)
        correction = 1 - beta2 ** t.astype(beta2.dtype)  # the Adam graft's bias correction
        add_stats = t % statistics_compute_steps == 0
        new_roots = t % preconditioning_compute_steps == 0
        preconditioning = t >= start_preconditioning_step

        ridge = as_value(matrix_eps, compute_dtype(beta2.dtype))

        def gather(g, mom, gnu, stats, dims):
            """A leaf's graft direction, its blocks and their new statistics."""
            bl = blocks_of(g.shape, dims)
            gc = g.astype(compute_dtype(jnp.result_type(g, mom)))
            if graft_type == "sgd":
                direction, gnu_new = gc, None
            else:
                sq = jnp.square(gc)
                nu = (
                    gnu.astype(gc.dtype) + sq
                    if graft_type == "adagrad"
                    else beta2 * gnu.astype(gc.dtype) + (1 - beta2) * sq
                )
                shown = nu / correction.astype(gc.dtype) if graft_type == "adam" else nu
                direction = gc / (jnp.sqrt(shown) + as_value(diagonal_eps, gc.dtype))
                gnu_new = nu.astype(gnu.dtype)
            if not bl.block:
                return bl, direction, gnu_new, None, stats
            x = bl.split(gc)

            def accumulate(stats):
                return tuple(
                    beta2 * s + weight * jax.vmap(axis_gram, (0, None))(x, i).astype(s.dtype)
                    for i, s in enumerate(stats)
                )

            # every step by default; else the Gram matrices only on the steps that add them
            stats = (
                accumulate(stats)
                if statistics_compute_steps == 1
                else jax.lax.cond(add_stats, accumulate, lambda s: s, stats)
            )
            return bl, direction, gnu_new, x, stats

        def finish(g, mom, gmom, direction, bl, x, roots):
            cd = compute_dtype(jnp.result_type(g, mom))
            if bl.block:
                pre = bl.merge(jax.vmap(mode_product)(x, tuple(r.astype(cd) for r in roots)))
                pre = pre * (jnp.linalg.norm(direction) / (jnp.linalg.norm(pre) + 1e-16))
            else:
                pre = direction
            mom_new = beta1 * mom.astype(cd) + pre
            gmom_new = beta1 * gmom.astype(cd) + direction
            out = jnp.where(preconditioning, mom_new, gmom_new)
            if nesterov:
                out = beta1 * out + jnp.where(preconditioning, pre, direction)
            mom_new, _ = shard_alike(mom_new.astype(mom.dtype), g)
            return out.astype(g.dtype), mom_new, gmom_new.astype(gmom.dtype)

        flat, treedef = jax.tree.flatten(updates)
        dims = treedef.flatten_up_to(leaf_dims(weight_dimension_numbers, updates))
        nus = treedef.flatten_up_to(state.graft_nu) if graft_type != "sgd" else [None] * len(flat)
        moms, gmoms = (treedef.flatten_up_to(x) for x in (state.momentum, state.graft_momentum))
        old_roots = treedef.flatten_up_to(state.roots)
        gathered = [gather(*args) for args in zip(flat, moms, nus, treedef.flatten_up_to(state.stats), dims)]
        # every inverse root of the tree in one cond, blocks of one size and exponent as one batch
        where, keys = [], []
        for i, (bl, *_, stats) in enumerate(gathered):
            p = inverse_exponent if inverse_exponent is not None else 2 * len(bl.block)
            for j, s in enumerate(stats if bl.block else ()):
                where.append((i, j))
                keys.append((p, s.shape[-1], s.dtype))
        if where:
            new = _inverse_roots(
                new_roots, keys, [gathered[i][4][j] for i, j in where], [old_roots[i][j] for i, j in where], ridge
            )
            found = dict(zip(where, new))
        else:
            found = {}
        roots = [tuple(found.get((i, j), r) for j, r in enumerate(rs)) for i, rs in enumerate(old_roots)]
        outs = [finish(g, m, gm, o[1], o[0], o[3], r) for g, m, gm, o, r in zip(flat, moms, gmoms, gathered, roots)]
        new_u, mom, gmom = (treedef.unflatten([o[k] for o in outs]) for k in range(3))
        gnu = treedef.unflatten([o[2] for o in gathered]) if graft_type != "sgd" else state.graft_nu
        stats = treedef.unflatten([o[4] for o in gathered])
        return new_u, ShampooState(t, mom, gmom, gnu, stats, treedef.unflatten(roots))

    return GradientTransformation(init, update)


def shampoo(
    learning_rate: ScalarOrSchedule,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    matrix_eps: ArrayLike = 1e-6,
    diagonal_eps: ArrayLike = 1e-10,
    weight_decay: ScalarOrSchedule = 0.0,
    mask: MaskOrFn = None,
    block_size: int = 256,
    inverse_exponent: int | None = None,
    start_preconditioning_step: int = 10,
    preconditioning_compute_steps: int = 10,
    statistics_compute_steps: int = 1,
    graft_type: str = "adam",
    *,
    nesterov: bool = True,
    merge_dims: bool = False,
    weight_dimension_numbers: MuonDimensionNumbers | Params | Callable[[Params], Any] | None = None,
) -> GradientTransformation:
    r"""Shampoo with grafting and decoupled weight decay: :func:`scale_by_shampoo`, the decay, the learning rate.

    .. math::
        \theta_{t+1} = \theta_t - \eta_t (u_t + \lambda \theta_t).

    Args:
      learning_rate: :math:`\eta`, a number or a schedule.
      weight_decay: :math:`\lambda >= 0`, a number or a schedule; ``mask`` selects the decayed leaves.
      b1, b2, matrix_eps, diagonal_eps, block_size, inverse_exponent, start_preconditioning_step,
        preconditioning_compute_steps, statistics_compute_steps, graft_type, nesterov, merge_dims,
        weight_dimension_numbers: see :func:`scale_by_shampoo`.

    Returns:
      A :class:`GradientTransformation`.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> opt = gradax.contrib.shampoo(0.1, start_preconditioning_step=1, preconditioning_compute_steps=1)
      >>> params = {"w": jnp.ones((3, 2)), "b": jnp.zeros(2)}
      >>> u, state = opt.update(params, opt.init(params), params)
      >>> u["w"].shape, u["b"].shape
      ((3, 2), (2,))

    References:
      Gupta et al., 2018; Anil et al., 2020; Shi et al., 2023 (see :func:`scale_by_shampoo`).
    """
    check_non_negative("shampoo", "learning_rate", learning_rate)
    check_non_negative("shampoo", "weight_decay", weight_decay)
    return chain(
        scale_by_shampoo(
            b1,
            b2,
            matrix_eps,
            diagonal_eps,
            block_size,
            inverse_exponent,
            start_preconditioning_step,
            preconditioning_compute_steps,
            statistics_compute_steps,
            graft_type,
            nesterov=nesterov,
            merge_dims=merge_dims,
            weight_dimension_numbers=weight_dimension_numbers,
        ),
        add_decayed_weights(weight_decay, mask),
        scale_by_learning_rate(learning_rate),
    )
