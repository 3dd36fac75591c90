"""Adafactor: second-moment estimates factored into row and column statistics."""

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from .. import _kernels
from .._base import (
    GradientTransformation,
    GradientTransformationExtraArgs,
    MaskOrFn,
    Params,
    ScalarOrSchedule,
    identity,
)
from .._checks import check_decay, check_int, check_non_negative, check_positive
from .._hyperparams import as_value, hyperparam_dtype, is_schedule
from .._kernels import kernel_applies as _kernel_applies  # a module name: tests turn it off
from .._kernels import with_reference
from .._maps import map_n
from .._numerics import abs_sq, compute_dtype, leaf_dtype, safe_int32_increment, state_dtype, zeros_for
from ..transforms._accumulation import ema
from ..transforms._adding import add_decayed_weights
from ..transforms._combining import chain
from ..transforms._scaling import scale, scale_by_learning_rate
from ._misc import scale_by_param_block_rms


class FactoredState(NamedTuple):
    """State of :func:`scale_by_factored_rms`.

    For a factored leaf ``v`` is a placeholder of shape ``(1,)``; for a leaf that is not factored ``v_row`` and
    ``v_col`` are placeholders of shape ``(1,)`` (Optax's layout, so checkpoints are interchangeable).
    """

    count: jax.Array  # shape=(), dtype=int32: the number of updates so far
    v_row: Params  # per leaf: the shape without its largest axis (factored), else (1,)
    v_col: Params  # per leaf: the shape without its second-largest axis (factored), else (1,)
    v: Params  # per leaf: the full second moment (not factored), else (1,)


def decay_rate_pow(step: ArrayLike, exponent: ArrayLike = 0.8) -> jax.Array:
    """Adafactor's second-moment decay at (0-based) ``step``: :math:`1 - (step + 1)^{-exponent}`."""
    t = jnp.asarray(step + 1, hyperparam_dtype())
    return 1.0 - t ** (-as_value(exponent))


def factored_dims(shape: tuple[int, ...], factored: bool, min_dim_size_to_factor: int) -> tuple[int, int] | None:
    """``(second_largest_axis, largest_axis)`` of ``shape`` when it is factored, else None.

    A shape is factored when ``factored`` is set, it has rank >= 2 and its second-largest axis has at least
    ``min_dim_size_to_factor`` entries. Ties between axes are broken as ``numpy.argsort`` does (Optax's convention).
    """
    if not factored or len(shape) < 2:
        return None
    order = np.argsort(shape)
    if shape[order[-2]] < min_dim_size_to_factor:
        return None
    return int(order[-2]), int(order[-1])


def scale_by_factored_rms(
    factored: bool = True,
    decay_rate: ArrayLike = 0.8,
    step_offset: ArrayLike = 0,
    min_dim_size_to_factor: int = 128,
    epsilon: ArrayLike = 1e-30,
    decay_rate_fn: Callable[[ArrayLike, ArrayLike], ArrayLike] = decay_rate_pow,
) -> GradientTransformation:
    r"""Divides updates by a factored estimate of the RMS of past gradients (Adafactor's scaling).

    With :math:`\hat\beta_t` = ``decay_rate_fn(t - step_offset, decay_rate)`` (default :math:`1 - (t+1)^{-0.8}`)
    and :math:`G = |g_t|^2 + \epsilon`, for a matrix-like leaf whose two largest axes are factored:

    .. math::
      R_t = \hat\beta_t R_{t-1} + (1 - \hat\beta_t)\,\mathrm{mean}_{\text{largest axis}}(G), \quad
      C_t = \hat\beta_t C_{t-1} + (1 - \hat\beta_t)\,\mathrm{mean}_{\text{second axis}}(G), \quad
      u_t = \frac{g_t}{\sqrt{R_t C_t / \mathrm{mean}(R_t)}},

    and for other leaves :math:`V_t = \hat\beta_t V_{t-1} + (1 - \hat\beta_t) G`, :math:`u_t = g_t / \sqrt{V_t}`.

    Args:
      factored: factor the second moment of leaves of rank >= 2.
      decay_rate: the exponent of the default decay schedule (> 0).
      step_offset: subtracted from the step before the decay schedule (for fine-tuning).
      min_dim_size_to_factor: factor only when the second-largest axis has at least this many entries.
      epsilon: :math:`\epsilon \ge 0`, added to the squared gradients.
      decay_rate_fn: ``decay_rate_fn(step, decay_rate) -> decay`` for step 0, 1, ...

    Returns:
      A :class:`GradientTransformation` with state :class:`FactoredState`.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> tx = gradax.scale_by_factored_rms(min_dim_size_to_factor=2, epsilon=0.0)
      >>> tx.update(jnp.array([[1.0, 2.0], [2.0, 4.0]]), tx.init(jnp.zeros((2, 2))))[0]
      Array([[1., 1.],
             [1., 1.]], dtype=float32)

    References:
      Shazeer and Stern, 2018, "Adafactor: Adaptive Learning Rates with Sublinear Memory Cost";
      Zhai et al., 2021, "Scaling Vision Transformers".
    """
    api = "scale_by_factored_rms"
    check_int(api, "min_dim_size_to_factor", min_dim_size_to_factor, low=0)
    check_non_negative(api, "epsilon", epsilon)
    if not callable(decay_rate_fn):
        raise TypeError(f"{api}(decay_rate_fn=...) must be callable; got {decay_rate_fn!r}.")

    return _factored_rms(factored, decay_rate, step_offset, min_dim_size_to_factor, epsilon, decay_rate_fn, None)


def without_unit_axes(dims: tuple[int, int], full: tuple, rows: tuple, cols: tuple) -> tuple:
    """A factored leaf's arrays without the axes of length 1 that are not the factored ``dims`` (``(d1, d0)``):
    ``full`` shaped like the leaf, ``rows`` like it without ``d0`` (row statistics), ``cols`` without ``d1``.
    Returns ``(full, rows, cols)`` squeezed, ``dims`` renumbered, and ``restore(*arrays)`` giving arrays (in that
    order, any prefix) their shapes back.

    The arithmetic is the same either way; the speed is not: XLA:CPU runs a reduction of an expression of several
    arrays with a unit axis up to 30x slower than of the same data without it (a ``(1, 8192, 256)`` leaf, or a
    ``1 x 1`` convolution's kernel ``(1, 1, c_in, c_out)``). Adafactor and CAME take their leaves through it."""
    d1, d0 = dims
    drop = tuple(i for i, n in enumerate(full[0].shape) if n == 1 and i not in dims)
    if not drop:
        return full, rows, cols, dims, lambda *xs: xs

    def gone_from(without: int) -> tuple[int, ...]:  # the dropped axes in a statistic that lacks axis `without`
        return tuple(i - (i > without) for i in drop)

    shapes = [x.shape for x in (*full, *rows, *cols)]
    squeezed = (
        tuple(jnp.squeeze(x, drop) for x in full),
        tuple(jnp.squeeze(x, gone_from(d0)) for x in rows),
        tuple(jnp.squeeze(x, gone_from(d1)) for x in cols),
    )
    renumbered = (d1 - sum(i < d1 for i in drop), d0 - sum(i < d0 for i in drop))
    return (*squeezed, renumbered, lambda *xs: tuple(x.reshape(shape) for x, shape in zip(xs, shapes)))


def factored_moments(gc, v_row, v_col, b, ec, dims):
    """One factored leaf's second moment: ``(new_row, new_col, row_factor, col_factor)``, the new statistics in the
    state's dtypes and the factors in ``gc``'s, for the gradient ``gc`` (in its compute dtype), the decay ``b`` and
    ``ec`` = epsilon in that dtype, and ``dims`` = ``factored_dims(...)``. The update is
    ``gc * expand_dims(row_factor, d0) * expand_dims(col_factor, d1)``, in that order (``gradax.fused.adafactor``
    computes these with the same expressions, so that its kernel starts from XLA's roundings)."""
    d1, d0 = dims
    dtype = gc.dtype
    # Each reduction below spells |g|^2 its own way: XLA would otherwise compute one shared |g|^2 array
    # (a gradient-sized temporary) instead of fusing it into each reduction's single pass over g.
    row_mean = jnp.mean(abs_sq(gc), axis=d0) + ec  # mean(|g|^2 + eps), as mean(|g|^2) + eps
    col_mean = jnp.mean(abs_sq(2.0 * gc) * 0.25, axis=d1) + ec  # (2g)^2 / 4: power-of-two scalings, exact
    new_row = (b * v_row.astype(dtype) + (1.0 - b) * row_mean).astype(v_row.dtype)
    new_col = (b * v_col.astype(dtype) + (1.0 - b) * col_mean).astype(v_col.dtype)
    return (new_row, new_col, *factors_of(new_row, new_col, dtype, dims))


def factors_of(new_row, new_col, dtype, dims):
    """The row and column factors of the update from the new statistics (:func:`factored_moments`)."""
    d1, d0 = dims
    row = new_row.astype(dtype)
    col = new_col.astype(dtype)
    reduced_d1 = d1 - 1 if d1 > d0 else d1
    row_factor = (row / jnp.mean(row, axis=reduced_d1, keepdims=True)) ** -0.5  # the shape without d0
    col_factor = col**-0.5  # the shape without d1
    return row_factor, col_factor


def clip_divisor(mean_sq: jax.Array, tau: jax.Array) -> jax.Array:
    """``max(1, sqrt(mean_sq) / tau)``: what an update of mean square ``mean_sq`` is divided by to keep its RMS at
    most ``tau``."""
    return jnp.maximum(1.0, jnp.sqrt(mean_sq) / tau)


def factored_clip_divisor(gc, row_factor, col_factor, dims, tau):
    """:func:`clip_divisor` of the factored update ``gc * row_factor * col_factor`` (:func:`factored_moments`),
    reduced from ``gc`` and the factors without forming the update:
    ``sum |g r c|^2 = sum_{not d0} r^2 sum_{d0} |g|^2 c^2`` (no broadcast of ``r``, no array shared with the update).
    """
    return clip_divisor(factored_sum_sq(gc, row_factor, col_factor, dims) / gc.size, tau)


def factored_sum_sq(gc, row_factor, col_factor, dims):
    """``sum |g r c|^2`` of the factored update (:func:`factored_clip_divisor`)."""
    d1, d0 = dims
    inner = jnp.sum(jnp.abs(gc) * jnp.expand_dims(jnp.square(col_factor), axis=d1) * jnp.abs(gc), axis=d0)
    return jnp.sum(inner * jnp.square(row_factor))


def kernel_takes(g, v_row, v_col, dims) -> bool:
    """Whether the CPU kernel can take this factored leaf: float32 gradient and statistics, not empty, its factored
    axes its last two."""
    nd = np.ndim(g)
    f32 = jnp.dtype(jnp.float32)
    return (
        dims is not None
        and set(dims) == {nd - 2, nd - 1}
        and np.size(g) > 0
        and all(jnp.dtype(x.dtype) == f32 for x in (g, v_row, v_col))
    )


def _kernel_moments(rows: list, hyper: tuple, dims: tuple) -> list:
    """:func:`factored_moments` and :func:`factored_sum_sq` of each ``(g, v_row, v_col)`` of ``rows`` (float32,
    factored on their last two axes ``dims[i]``), the statistics and the sum by gradax's CPU kernel
    (``fused_factored.c``: one pass over g, where XLA takes three), the factors from them in jnp. Returns
    ``(new_row, new_col, row_factor, col_factor, sum_sq)`` per row."""
    b, ec = (jnp.asarray(x, jnp.float32) for x in hyper)
    scalars = jnp.stack([dict(decay=b, one_minus_decay=1.0 - b, eps=ec)[k] for k in _kernels.FACTORED_SCALARS])
    # the kernel's row statistic is the mean over the last axis: v_row where that axis is d0 (the largest)
    last = [d[1] == np.ndim(g) - 1 for (g, _, _), d in zip(rows, dims, strict=True)]
    per_row = [vr if is_last else vc for (_, vr, vc), is_last in zip(rows, last, strict=True)]
    per_col = [vc if is_last else vr for (_, vr, vc), is_last in zip(rows, last, strict=True)]
    new_r, new_c, sums = _kernels.factored_moments(scalars, last, [g for g, _, _ in rows], per_row, per_col)
    out = []
    for is_last, r, c, total, d in zip(last, new_r, new_c, sums, dims, strict=True):
        new_row, new_col = (r, c) if is_last else (c, r)
        out.append((new_row, new_col, *factors_of(new_row, new_col, jnp.float32, d), total))
    return out


def _reference_moments(rows: list, hyper: tuple, dims: tuple) -> list:
    """:func:`_kernel_moments` in jnp: its batching and derivatives."""
    b, ec = hyper
    out = []
    for (g, vr, vc), d in zip(rows, dims, strict=True):
        new_row, new_col, rf, cf = factored_moments(g, vr, vc, b, ec, d)
        out.append((new_row, new_col, rf, cf, factored_sum_sq(g, rf, cf, d)))
    return out


def kernel_second_moments(leaves: list, b, ec) -> list:
    """:func:`factored_moments` and :func:`factored_sum_sq` of each ``(gc, v_row, v_col, dims)`` of ``leaves``
    (each one :func:`kernel_takes`, where :func:`_kernel_applies`), their statistics and sums from the CPU kernel in
    one call for all of them (summed in another order than XLA's: float32 rounding), batched and differentiated as
    the jnp code: ``(new_row, new_col, row_factor, col_factor, sum_sq)`` each (``sum_sq``: of the unclipped update).
    ``update`` and ``gradax.fused.adafactor``'s ``step`` both take their kernel leaves through here."""
    rows = [tuple(leaf[:3]) for leaf in leaves]
    dims = tuple(leaf[3] for leaf in leaves)
    run = with_reference(lambda r, h, _: _kernel_moments(r, h, dims), lambda r, h, _: _reference_moments(r, h, dims))
    return run(rows, (b, ec), ())


def _factored_rms(factored, decay_rate, step_offset, min_dim_size_to_factor, epsilon, decay_rate_fn, clip):
    """:func:`scale_by_factored_rms`, followed by :func:`clip_by_block_rms` ``(clip)`` in the same pass when ``clip``
    is not None (Adafactor's first two steps).

    Written so that XLA never materializes a gradient-sized temporary: the row and column means, the clipping RMS and
    the update are each one fused pass over the gradient. Each reduction gets its own expression of the squared
    gradient (XLA would otherwise share one materialized array between the reductions and the update), and the
    squared update is reduced as ``g**2 * (row factor * column factor)**2`` instead of from the update itself.
    """

    def init(params):
        def leaf(p):
            shape, dtype = tuple(np.shape(p)), state_dtype(leaf_dtype(p))
            dims = factored_dims(shape, factored, min_dim_size_to_factor)
            if dims is None:  # placeholders for the row and column statistics (distinct buffers: donation-safe)
                return jnp.zeros((1,), dtype), jnp.zeros((1,), dtype), zeros_for(p, dtype)
            d1, d0 = dims
            without = lambda axis: tuple(n for i, n in enumerate(shape) if i != axis)
            return jnp.zeros(without(d0), dtype), jnp.zeros(without(d1), dtype), jnp.zeros((1,), dtype)

        v_row, v_col, v = map_n(3, leaf, params)
        return FactoredState(count=jnp.zeros([], jnp.int32), v_row=v_row, v_col=v_col, v=v)

    def update(updates, state, params=None):
        del params
        beta = as_value(decay_rate_fn(state.count - step_offset, decay_rate))
        e = as_value(epsilon)
        tau = None if clip is None else as_value(clip)

        def clipped(u, mean_u_sq):
            return u if tau is None else u / clip_divisor(mean_u_sq(), tau)

        def leaf(g, v_row, v_col, v):
            dtype = compute_dtype(g.dtype)
            gc = g.astype(dtype)
            b = beta.astype(dtype) if jnp.issubdtype(dtype, jnp.floating) else beta
            ec = e.astype(dtype)
            dims = factored_dims(tuple(g.shape), factored, min_dim_size_to_factor)
            if dims is None:
                new_v = (b * v.astype(dtype) + (1.0 - b) * (abs_sq(gc) + ec)).astype(v.dtype)
                inv = new_v.astype(dtype) ** -0.5
                out = clipped(gc * inv, lambda: jnp.mean(abs_sq(gc) * (inv * inv)))
                return out.astype(g.dtype), jnp.zeros((1,), v_row.dtype), jnp.zeros((1,), v_col.dtype), new_v
            (gs,), (rs,), (cs,), dims, restore = without_unit_axes(dims, (gc,), (v_row,), (v_col,))
            d1, d0 = dims
            new_row, new_col, row_factor, col_factor = factored_moments(gs, rs, cs, b, ec, dims)
            out = gs * jnp.expand_dims(row_factor, axis=d0) * jnp.expand_dims(col_factor, axis=d1)
            if tau is not None:
                out = out / factored_clip_divisor(gs, row_factor, col_factor, dims, tau)
            out, new_row, new_col = restore(out, new_row, new_col)
            return out.astype(g.dtype), new_row, new_col, jnp.zeros((1,), v.dtype)

        def by_kernel(g, v, dims, moments):
            new_row, new_col, row_factor, col_factor, sum_sq = moments
            d1, d0 = dims
            out = g * jnp.expand_dims(row_factor, axis=d0) * jnp.expand_dims(col_factor, axis=d1)
            if tau is not None:
                out = out / clip_divisor(sum_sq / g.size, tau)
            return out, new_row, new_col, jnp.zeros((1,), v.dtype)

        leaves, treedef = jax.tree.flatten(updates)
        rows = [list(x) for x in zip(leaves, *(treedef.flatten_up_to(t) for t in (state.v_row, state.v_col, state.v)))]
        dims = [factored_dims(tuple(np.shape(g)), factored, min_dim_size_to_factor) for g in leaves]
        picked = [k for k, (g, vr, vc, _) in enumerate(rows) if kernel_takes(g, vr, vc, dims[k])]
        outs: list = [None] * len(rows)
        if picked and _kernel_applies():
            f32 = jnp.float32
            moments = kernel_second_moments([(*rows[k][:3], dims[k]) for k in picked], beta.astype(f32), e.astype(f32))
            for k, m in zip(picked, moments, strict=True):
                outs[k] = by_kernel(rows[k][0], rows[k][3], dims[k], m)
        outs = [leaf(*row) if o is None else o for o, row in zip(outs, rows, strict=True)]
        new_updates, v_row, v_col, v = (treedef.unflatten([o[i] for o in outs]) for i in range(4))
        count = safe_int32_increment(state.count)
        return new_updates, FactoredState(count=count, v_row=v_row, v_col=v_col, v=v)

    return GradientTransformation(init, update)


def adafactor(
    learning_rate: ScalarOrSchedule | None = None,
    min_dim_size_to_factor: int = 128,
    decay_rate: ArrayLike = 0.8,
    decay_offset: ArrayLike = 0,
    multiply_by_parameter_scale: bool = True,
    clipping_threshold: ArrayLike | None = 1.0,
    momentum: ArrayLike | None = None,
    dtype_momentum: Any = jnp.float32,
    weight_decay_rate: ScalarOrSchedule | None = None,
    eps: ArrayLike = 1e-30,
    factored: bool = True,
    weight_decay_mask: MaskOrFn = None,
    *,
    cautious_weight_decay: bool = False,
) -> GradientTransformationExtraArgs:
    r"""Adafactor: factored second moments, update clipping, relative step sizes, optional momentum and decay.

    The chain, each part optional as its argument says:

    .. math::
      u = \frac{g}{\sqrt{\hat V}} \ (\text{factored RMS}) \;\to\; \frac{u}{\max(1, \mathrm{RMS}(u)/d)} \;\to\;
      \eta_t u \;\to\; \max(\mathrm{RMS}(\theta), 10^{-3})\, u \;\to\; \mathrm{EMA}_{\beta_1}(u) \;\to\;
      u + \lambda_t \theta \;\to\; \theta \leftarrow \theta - u.

    Args:
      learning_rate: :math:`\eta`, a number, an array or a schedule; None skips it (relative steps only).
      min_dim_size_to_factor: factor a leaf only when its second-largest axis has at least this many entries.
      decay_rate: exponent of the second-moment decay :math:`1 - t^{-\text{decay\_rate}}` (> 0).
      decay_offset: step offset of that decay (for fine-tuning).
      multiply_by_parameter_scale: scale each leaf's update by the RMS of its parameters (at least 1e-3).
      clipping_threshold: :math:`d > 0`, clip each leaf's update RMS to it; None disables clipping.
      momentum: :math:`\beta_1 \in [0, 1)` for a (not debiased) moving average of the updates, or None.
      dtype_momentum: dtype of the momentum.
      weight_decay_rate: :math:`\lambda \ge 0`, a number, an array or a schedule (added after the learning rate,
        not multiplied by it), or None.
      eps: :math:`\epsilon \ge 0`, added to the squared gradients.
      factored: use factored second moments for leaves of rank >= 2.
      weight_decay_mask: which parameters get weight decay (pytree of booleans, prefix or function); None: all.
      cautious_weight_decay: decay only where the update and the parameter have the same sign (Chen et al., 2025).

    Returns:
      A :class:`GradientTransformationExtraArgs`; ``update`` needs ``params`` when
      ``multiply_by_parameter_scale`` or ``weight_decay_rate`` is used.

    Example:
      >>> import gradax, jax, jax.numpy as jnp
      >>> params = jnp.array([1.0, -2.0])
      >>> opt = gradax.adafactor(learning_rate=0.1)
      >>> state = opt.init(params)
      >>> for _ in range(100):
      ...     grads = jax.grad(lambda p: jnp.sum(p**2))(params)
      ...     updates, state = opt.update(grads, state, params)
      ...     params = gradax.apply_updates(params, updates)
      >>> bool(jnp.all(jnp.abs(params) < 0.2))
      True

    References:
      Shazeer and Stern, 2018, "Adafactor: Adaptive Learning Rates with Sublinear Memory Cost".
    """
    api = "adafactor"
    check_int(api, "min_dim_size_to_factor", min_dim_size_to_factor, low=0)
    check_positive(api, "decay_rate", decay_rate)
    check_non_negative(api, "eps", eps)
    if clipping_threshold is not None:
        check_positive(api, "clipping_threshold", clipping_threshold)
    if momentum is not None:
        check_decay(api, "momentum", momentum)
    if weight_decay_rate is not None and not is_schedule(weight_decay_rate):
        check_non_negative(api, "weight_decay_rate", weight_decay_rate)
    if clipping_threshold is None:
        parts = [scale_by_factored_rms(factored, decay_rate, decay_offset, min_dim_size_to_factor, eps)]
    else:
        # the clipping runs inside the first transformation's pass; its own slot (an empty state, as
        # clip_by_block_rms has) keeps the state layout of the unfused chain
        parts = [
            _factored_rms(
                factored, decay_rate, decay_offset, min_dim_size_to_factor, eps, decay_rate_pow, clipping_threshold
            ),
            identity(),
        ]
    if learning_rate is not None:
        parts.append(scale_by_learning_rate(learning_rate, flip_sign=False))
    if multiply_by_parameter_scale:
        parts.append(scale_by_param_block_rms())
    if momentum is not None:
        parts.append(ema(momentum, debias=False, accumulator_dtype=dtype_momentum))
    if weight_decay_rate is not None:
        parts.append(add_decayed_weights(weight_decay_rate, mask=weight_decay_mask, cautious=cautious_weight_decay))
    parts.append(scale(-1))
    return chain(*parts)
