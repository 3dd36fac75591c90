"""CAME: confidence-guided Adafactor (factored second moment, momentum, and a factored instability estimate)."""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from .. import _kernels
from .._base import GradientTransformation, GradientTransformationExtraArgs, MaskOrFn, ScalarOrSchedule
from .._checks import check_decay, check_non_negative, check_positive
from .._hyperparams import hyper_values
from .._kernels import kernel_applies as _kernel_applies  # a module name: tests turn it off
from .._kernels import with_reference
from .._maps import map_n
from .._numerics import abs_sq, compute_dtype, leaf_dtype, safe_int32_increment, state_dtype, zeros_for
from .._state import zeros_state_like
from ..optimizers._adafactor import clip_divisor, without_unit_axes
from ..transforms._adding import add_decayed_weights
from ..transforms._combining import chain
from ..transforms._scaling import scale_by_learning_rate


class ScaleByCameState(NamedTuple):
    """State of :func:`scale_by_came`. Leaves with fewer than 2 dimensions keep a full second moment ``nu`` and
    shape-(1,) placeholders in the factored fields; leaves with 2 or more keep row and column statistics over their
    last two axes and a shape-(1,) placeholder in ``nu``."""

    count: jax.Array  # shape=(), dtype=int32: the number of updates so far
    mu: Any  # like params (mu_dtype; float32 for bf16/f16 params): the momentum of the normalized update
    nu_row: Any  # shape[:-1] per factored leaf: row means of the second moment
    nu_col: Any  # shape[:-2] + shape[-1:] per factored leaf: column means of the second moment
    nu: Any  # like params for unfactored leaves: the second moment
    res_row: Any  # shape[:-1] per factored leaf: row means of the instability (u - m)^2
    res_col: Any  # shape[:-2] + shape[-1:] per factored leaf: column means of the instability


def _factored(shape) -> bool:
    return len(shape) >= 2


def _rsqrt_factors(row: jax.Array, col: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The row and column factors of :math:`1/\\sqrt{\\hat V}`, :math:`\\hat V = r c^\\top / \\mathrm{mean}(r)` over the last
    two axes, shaped to broadcast against the matrix (the matrix itself is never formed)."""
    r = jax.lax.rsqrt(row / jnp.mean(row, axis=-1, keepdims=True))
    return r[..., :, None], jax.lax.rsqrt(col)[..., None, :]


def _own(copies: int, *xs: jax.Array) -> list[tuple[jax.Array, ...]]:
    """``copies`` copies of ``xs``, as values XLA cannot merge with one another nor with ``xs`` (one optimization
    barrier; nothing is copied in memory).

    Each reduction of a step gets its own copy of the arrays it reads: XLA then fuses the elementwise expression
    (and the broadcasts of the row and column factors) into that reduction's single pass, instead of storing a
    shared matrix-sized temporary (XLA:CPU's reductions do not take an expression another kernel also uses).
    """
    out = jax.lax.optimization_barrier(xs * copies)
    return [out[i * len(xs) : (i + 1) * len(xs)] for i in range(copies)]


def _leaf(hyper, g, m, vr, vc, v, rr, rc):
    """One leaf of :func:`scale_by_came`'s update in jnp (``hyper``: b1, b2, b3, eps1, eps2, clip_threshold):
    returns the update and the leaf's new momentum and statistics."""
    beta1, beta2, beta3, e1, e2, d = hyper
    if np.size(g) == 0:  # an empty leaf: its statistics would be means over nothing (0/0); keep them
        return g, m, vr, vc, v, rr, rc
    if _factored(g.shape) and 1 in g.shape[:-2]:  # unit axes slow XLA:CPU's reductions down (see there)
        (g1, m1), (vr1, rr1), (vc1, rc1), _, restore = without_unit_axes(
            (g.ndim - 2, g.ndim - 1), (g, m), (vr, rr), (vc, rc)
        )
        out, m1, vr1, vc1, v, rr1, rc1 = _leaf(hyper, g1, m1, vr1, vc1, v, rr1, rc1)
        out, m1, vr1, rr1, vc1, rc1 = restore(out, m1, vr1, rr1, vc1, rc1)
        return out, m1, vr1, vc1, v, rr1, rc1
    gc = g.astype(compute_dtype(g.dtype))
    if not _factored(g.shape):
        v_new = (beta2 * v + (1 - beta2) * (abs_sq(gc) + e1)).astype(v.dtype)
        u = gc * jax.lax.rsqrt(v_new)
        u = u / clip_divisor(jnp.mean(abs_sq(u)), d)
        m_new = (beta1 * m + (1 - beta1) * u).astype(m.dtype)
        return m_new.astype(g.dtype), m_new, vr, vc, v_new, rr, rc
    # mean(g^2 + eps1) as mean(g^2) + eps1; every reduction below is one pass over what it reads
    row = jnp.mean(abs_sq(gc), axis=-1)
    ((g_col,),) = _own(1, gc)
    col = jnp.mean(abs_sq(g_col), axis=-2)
    vr_new = (beta2 * vr + (1 - beta2) * (row + e1)).astype(vr.dtype)
    vc_new = (beta2 * vc + (1 - beta2) * (col + e1)).astype(vc.dtype)
    r, c = _rsqrt_factors(vr_new, vc_new)
    # the update u = g r c is never stored: sum(u^2) = sum_i r_i^2 sum_j g_ij^2 c_j^2
    ((g_sq, c_sq),) = _own(1, gc, c)
    sum_sq = jnp.sum(jnp.sum(abs_sq(g_sq) * jnp.square(c_sq), axis=-1) * jnp.square(r[..., 0]))
    r = r / clip_divisor(sum_sq / gc.size, d)
    m_new = (beta1 * m + (1 - beta1) * (gc * r * c)).astype(m.dtype)
    # the instability's reductions read the stored new momentum (the old one is overwritten in place);
    # mean((u - m)^2 + eps2) as mean((u - m)^2) + eps2
    (g_row, r_row, c_row), (g_col, r_col, c_col) = _own(2, gc, r, c)
    row = jnp.mean(abs_sq(g_row * r_row * c_row - m_new), axis=-1) + e2
    col = jnp.mean(abs_sq(g_col * r_col * c_col - m_new), axis=-2) + e2
    rr_new = (beta3 * rr + (1 - beta3) * row).astype(rr.dtype)
    rc_new = (beta3 * rc + (1 - beta3) * col).astype(rc.dtype)
    r_res, c_res = _rsqrt_factors(rr_new, rc_new)
    out = m_new * r_res * c_res
    return out.astype(g.dtype), m_new, vr_new, vc_new, v, rr_new, rc_new


def _kernel_takes(g, m, vr, vc, rr, rc) -> bool:
    """Whether the CPU kernel takes this leaf: a non-empty float32 matrix (or batch of matrices) with float32
    momentum and statistics."""
    f32 = jnp.dtype(jnp.float32)
    return np.ndim(g) >= 2 and np.size(g) > 0 and all(jnp.dtype(x.dtype) == f32 for x in (g, m, vr, vc, rr, rc))


def _kernel_rows(rows: list, hyper: tuple, _unused: tuple) -> list:
    """:func:`_leaf` of each ``(g, m, vr, vc, rr, rc)`` of ``rows``, the momentum and statistics by gradax's CPU
    kernel (``fused_factored.c``: two passes per matrix, the second reading the gradient the first just read, where XLA
    takes five), the update from them in jnp (fused by XLA with the rest of the step). Returns
    ``(update, m, vr, vc, rr, rc)`` per row."""
    beta1, beta2, beta3, e1, e2, d = (jnp.asarray(x, jnp.float32) for x in hyper)
    named = dict(b1=beta1, one_minus_b1=1 - beta1, b2=beta2, one_minus_b2=1 - beta2, b3=beta3)
    named.update(one_minus_b3=1 - beta3, eps1=e1, eps2=e2, clip_threshold=d)
    scalars = jnp.stack([named[name] for name in _kernels.CAME_SCALARS])
    new = _kernels.came_matrices(scalars, *(list(group) for group in zip(*rows, strict=True)))
    out = []
    for m, vr, vc, rr, rc in zip(*new, strict=True):
        r_res, c_res = _rsqrt_factors(rr, rc)
        out.append((m * r_res * c_res, m, vr, vc, rr, rc))
    return out


def _reference_rows(rows: list, hyper: tuple, _unused: tuple) -> list:
    """:func:`_kernel_rows` in jnp (:func:`_leaf`): its batching and derivatives."""
    out = []
    for g, m, vr, vc, rr, rc in rows:
        u, m, vr, vc, _, rr, rc = _leaf(hyper, g, m, vr, vc, jnp.zeros((1,), vr.dtype), rr, rc)
        out.append((u, m, vr, vc, rr, rc))
    return out


def _update_leaves(hyper: tuple, updates, state: ScaleByCameState) -> tuple:
    """:func:`_leaf` over the tree: the factored float32 leaves by the CPU kernel where it runs (calls of whole
    leaves, batched and differentiated as the jnp code), every other leaf in jnp. Returns the seven output trees."""
    fields = (state.mu, state.nu_row, state.nu_col, state.nu, state.res_row, state.res_col)
    leaves, treedef = jax.tree.flatten(updates)
    rows = [list(xs) for xs in zip(leaves, *(treedef.flatten_up_to(f) for f in fields), strict=True)]
    outs: list = [None] * len(rows)
    taken = [k for k, (g, m, vr, vc, _, rr, rc) in enumerate(rows) if _kernel_takes(g, m, vr, vc, rr, rc)]
    if taken and _kernel_applies():
        picked = [tuple(rows[k][:4] + rows[k][5:]) for k in taken]
        done = with_reference(_kernel_rows, _reference_rows)(picked, tuple(hyper), ())
        for k, (u, m, vr, vc, rr, rc) in zip(taken, done, strict=True):
            outs[k] = (u, m, vr, vc, rows[k][4], rr, rc)
    for k, row in enumerate(rows):
        if outs[k] is None:
            outs[k] = _leaf(hyper, *row)
    if not outs:
        return tuple(treedef.unflatten([]) for _ in range(7))
    return tuple(treedef.unflatten([o[i] for o in outs]) for i in range(7))


def scale_by_came(
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    b3: ArrayLike = 0.9999,
    eps1: ArrayLike = 1e-30,
    eps2: ArrayLike = 1e-16,
    clip_threshold: ArrayLike = 1.0,
    mu_dtype: Any | None = None,
) -> GradientTransformation:
    r"""Rescales updates with CAME: Adafactor's factored preconditioner, with a momentum whose step is scaled down
    where it disagrees with the current update (its "instability" is large).

    For a matrix leaf (the last two axes; leading axes are batched), with row/column means
    :math:`\bar r(\cdot)`, :math:`\bar c(\cdot)`:

    .. math::
      r_t = \beta_2 r_{t-1} + (1-\beta_2) \bar r(g_t^2 + \epsilon_1), \quad
      c_t = \beta_2 c_{t-1} + (1-\beta_2) \bar c(g_t^2 + \epsilon_1), \quad
      u_t = g_t / \sqrt{r_t c_t^\top / \mathrm{mean}(r_t)}, \\
      u_t \leftarrow u_t / \max(1, \mathrm{RMS}(u_t) / d), \qquad m_t = \beta_1 m_{t-1} + (1-\beta_1) u_t, \\
      U_t = (u_t - m_t)^2 + \epsilon_2, \quad R_t = \beta_3 R_{t-1} + (1-\beta_3) \bar r(U_t), \quad
      C_t = \beta_3 C_{t-1} + (1-\beta_3) \bar c(U_t), \\
      \text{update} = m_t / \sqrt{R_t C_t^\top / \mathrm{mean}(R_t)}.

    Vectors and scalars keep a full second moment and their update is :math:`m_t` (no confidence term). There is
    no bias correction. Use it as a memory-light replacement of Adam (it stores :math:`O(n + m)` statistics per
    matrix, plus the momentum) that is steadier than Adafactor with momentum, e.g. for large language models.

    Args:
      b1: :math:`\beta_1 \in [0, 1)`, decay of the momentum.
      b2: :math:`\beta_2 \in [0, 1)`, decay of the second moment.
      b3: :math:`\beta_3 \in [0, 1)`, decay of the instability.
      eps1: :math:`\epsilon_1 \ge 0`, added to the squared gradient.
      eps2: :math:`\epsilon_2 \ge 0`, added to the instability.
      clip_threshold: :math:`d > 0`, the bound on the RMS of the normalized update.
      mu_dtype: dtype of the momentum.

    Returns:
      A :class:`GradientTransformation` with state :class:`ScaleByCameState`.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> tx = gradax.contrib.scale_by_came()
      >>> tx.update(jnp.array([0.5, -2.0]), tx.init(jnp.zeros(2)))[0]
      Array([ 0.1, -0.1], dtype=float32)

    References:
      Luo et al., 2023, "CAME: Confidence-guided Adaptive Memory Efficient Optimization" (ACL),
      https://arxiv.org/abs/2307.02047.
    """
    api = "scale_by_came"
    check_decay(api, "b1", b1)
    check_decay(api, "b2", b2)
    check_decay(api, "b3", b3)
    check_non_negative(api, "eps1", eps1)
    check_non_negative(api, "eps2", eps2)
    check_positive(api, "clip_threshold", clip_threshold)

    def init(params):
        def stats(p):
            shape, dtype = np.shape(p), state_dtype(leaf_dtype(p))

            # a fresh buffer for every field: state leaves never alias one another (donation must work)
            def small():
                return jnp.zeros((1,), dtype)

            if not _factored(shape):
                return small(), small(), zeros_for(p, dtype), small(), small()
            row, col = shape[:-1], shape[:-2] + shape[-1:]
            return jnp.zeros(row, dtype), jnp.zeros(col, dtype), small(), jnp.zeros(row, dtype), jnp.zeros(col, dtype)

        nu_row, nu_col, nu, res_row, res_col = map_n(5, stats, params)
        return ScaleByCameState(
            count=jnp.zeros([], jnp.int32),
            mu=zeros_state_like(params, mu_dtype),
            nu_row=nu_row,
            nu_col=nu_col,
            nu=nu,
            res_row=res_row,
            res_col=res_col,
        )

    def update(updates, state, params=None):
        del params

        hyper = hyper_values(b1, b2, b3, eps1, eps2, clip_threshold)
        out, mu, nu_row, nu_col, nu, res_row, res_col = _update_leaves(hyper, updates, state)
        return out, ScaleByCameState(
            count=safe_int32_increment(state.count),
            mu=mu,
            nu_row=nu_row,
            nu_col=nu_col,
            nu=nu,
            res_row=res_row,
            res_col=res_col,
        )

    return GradientTransformation(init, update)


def came(
    learning_rate: ScalarOrSchedule = 2e-4,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    b3: ArrayLike = 0.9999,
    eps1: ArrayLike = 1e-30,
    eps2: ArrayLike = 1e-16,
    clip_threshold: ArrayLike = 1.0,
    weight_decay: ScalarOrSchedule = 0.0,
    mask: MaskOrFn = None,
    *,
    mu_dtype: Any | None = None,
    cautious_weight_decay: bool = False,
) -> GradientTransformationExtraArgs:
    r"""The CAME optimizer with decoupled weight decay.

    .. math::
      \theta_t = \theta_{t-1} - \eta_t \left(\text{update}_t + \lambda_t \theta_{t-1}\right),

    with :math:`\text{update}_t` from :func:`scale_by_came`.

    Args:
      learning_rate: :math:`\eta`, a number, an array or a schedule of the step count.
      b1: :math:`\beta_1 \in [0, 1)`.
      b2: :math:`\beta_2 \in [0, 1)`.
      b3: :math:`\beta_3 \in [0, 1)`.
      eps1: :math:`\epsilon_1 \ge 0`.
      eps2: :math:`\epsilon_2 \ge 0`.
      clip_threshold: :math:`d > 0`.
      weight_decay: :math:`\lambda \ge 0`, a number, an array or a schedule.
      mask: which leaves to decay (a tree of booleans or a function of the params); ``None`` decays all.
      mu_dtype: dtype of the momentum.
      cautious_weight_decay: decay only where the update and the parameter have the same sign.

    Returns:
      A :class:`GradientTransformationExtraArgs`.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> opt = gradax.contrib.came(learning_rate=1.0)
      >>> opt.update(jnp.ones((2, 2)), opt.init(jnp.zeros((2, 2))), jnp.zeros((2, 2)))[0]
      Array([[-11.110192, -11.110192],
             [-11.110192, -11.110192]], dtype=float32)

    References:
      Luo et al., 2023, "CAME: Confidence-guided Adaptive Memory Efficient Optimization" (ACL),
      https://arxiv.org/abs/2307.02047.
    """
    return chain(
        scale_by_came(b1, b2, b3, eps1, eps2, clip_threshold, mu_dtype),
        add_decayed_weights(weight_decay, mask, cautious=cautious_weight_decay),
        scale_by_learning_rate(learning_rate),
    )
