"""gradax.fused.adafactor: Adafactor whose ``step`` updates the factored matrices in one kernel pass on the CPU."""

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from .. import _kernels
from .._base import MaskOrFn, Params, ScalarOrSchedule, Updates
from .._hyperparams import as_value, is_concrete
from .._update import apply_updates
from ..optimizers._adafactor import (
    FactoredState,
    clip_divisor,
    decay_rate_pow,
    factored_dims,
    kernel_second_moments,
    kernel_takes,
)
from ..optimizers._adafactor import adafactor as _adafactor
from ..optimizers._misc import scale_by_param_block_rms
from ..transforms._scaling import scale_by_learning_rate
from ._common import (
    FusedGradientTransformation,
    Step,
    fused_factory,
    fused_transformation,
    leaves_like,
    matching_leaves,
    put,
    take,
)


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
) -> FusedGradientTransformation:
    r"""Adafactor with a ``step`` that updates the factored float32 matrices in one kernel pass on the CPU.

    .. math::
      R_t = \hat\beta_t R_{t-1} + (1-\hat\beta_t)\,\mathrm{mean}_{\text{largest axis}}(g^2 + \epsilon), \quad
      C_t = \hat\beta_t C_{t-1} + (1-\hat\beta_t)\,\mathrm{mean}_{\text{second axis}}(g^2 + \epsilon), \\
      u = \frac{g}{\sqrt{R_t C_t / \mathrm{mean}(R_t)}}, \quad
      \theta \leftarrow \theta - \eta_t \max(\mathrm{RMS}(\theta), 10^{-3})\, \frac{u}{\max(1, \mathrm{RMS}(u)/d)}.

    ``init`` and ``update`` are those of ``gradax.adafactor(...)``: same state, same updates.
    ``step(params, state, grads)`` returns ``(new_params, new_state)`` (arguments in the order of the results:
    donate them with ``jax.jit(opt.step, donate_argnums=(0, 1))``). On the CPU backend, the reductions of each
    float32 matrix whose second moment is factored are computed as ``update`` computes them (the row and column
    means and the clipping sum in one pass of the factored-moments kernel, the parameter RMS by XLA), and the final
    element-wise pass (read the gradient and the parameters, write the parameters in place) runs in a C kernel on
    XLA's thread pool, with XLA's roundings and fused multiply-adds. Every other leaf goes through ``update`` itself.
    The results are bit for bit those of ``update`` + ``apply_updates`` compiled by XLA:CPU (``tests/contract/test_extreme_gradients.py``). With
    ``momentum`` or ``weight_decay_rate``, on GPU, under a GSPMD-sharded ``jit``, under ``jax_enable_x64`` or
    without a C compiler ``step`` is ``update`` followed by ``apply_updates``, and so are ``vmap`` and autodiff.

    Args:
      learning_rate: :math:`\eta`, a number, an array or a schedule; None skips it (relative steps only).
      min_dim_size_to_factor: factor a leaf only when its second-largest axis has at least this many entries.
      decay_rate: exponent of the second-moment decay :math:`1 - t^{-\text{decay\_rate}}` (> 0).
      decay_offset: step offset of that decay (for fine-tuning).
      multiply_by_parameter_scale: scale each leaf's update by the RMS of its parameters (at least 1e-3).
      clipping_threshold: :math:`d > 0`, clip each leaf's update RMS to it; None disables clipping.
      momentum: :math:`\beta_1 \in [0, 1)` for a moving average of the updates, or None.
      dtype_momentum: dtype of the momentum.
      weight_decay_rate: :math:`\lambda \ge 0`, a number, an array or a schedule, or None.
      eps: :math:`\epsilon \ge 0`, added to the squared gradients.
      factored: use factored second moments for leaves of rank >= 2.
      weight_decay_mask: which parameters get weight decay (pytree of booleans, prefix or function); None: all.

    Returns:
      A :class:`FusedGradientTransformation`: ``init``, ``update`` and ``step``.

    Example:
      >>> import gradax, jax, jax.numpy as jnp
      >>> params = {"w": jnp.ones((256, 128))}
      >>> opt = gradax.fused.adafactor(learning_rate=0.1)
      >>> step = jax.jit(opt.step, donate_argnums=(0, 1))
      >>> params, state = step(params, opt.init(params), {"w": jnp.full((256, 128), 0.5)})
      >>> params["w"][0, :2]
      Array([0.9, 0.9], dtype=float32)

    References:
      Shazeer and Stern, 2018, "Adafactor: Adaptive Learning Rates with Sublinear Memory Cost".
    """
    tx = _adafactor(
        learning_rate, min_dim_size_to_factor, decay_rate, decay_offset, multiply_by_parameter_scale,
        clipping_threshold, momentum, dtype_momentum, weight_decay_rate, eps, factored, weight_decay_mask,
    )  # fmt: skip
    lr_tx = None if learning_rate is None else scale_by_learning_rate(learning_rate, flip_sign=False)
    # the chain's states: factored RMS, (clipping,) (learning rate,) ...: where the learning rate's state sits
    lr_index = 1 + (clipping_threshold is not None)

    def dims_of(p) -> tuple[int, int] | None:
        return factored_dims(tuple(np.shape(p)), factored, min_dim_size_to_factor)

    def kernel_leaves(p_leaves, g_leaves, rows, cols) -> list[int]:
        """The float32 matrices with factored statistics of the expected shapes: the kernels take these."""
        picked = []
        for i, (p, g, r, c) in enumerate(zip(p_leaves, g_leaves, rows, cols, strict=True)):
            dims = dims_of(p) if np.ndim(p) == 2 else None
            if dims is None or getattr(g, "dtype", None) != jnp.float32 or p.dtype != jnp.float32:
                continue
            d1, d0 = dims
            if np.shape(g) == np.shape(p) and r.shape == (p.shape[1 - d0],) and c.shape == (p.shape[1 - d1],):
                if kernel_takes(g, r, c, dims):
                    picked.append(i)
        return picked

    ps_tx = scale_by_param_block_rms() if multiply_by_parameter_scale else None
    # a learning rate that is a constant of the program: XLA folds it into the parameter scale (or the final -1)
    lr_constant = lr_tx is not None and is_concrete(learning_rate)

    def update_scales(state: Any, dividers: list, param_scales: list) -> list[dict[str, Any]]:
        """Per leaf, the kernel's scalars ``first_scale``, ``second_scale``, ``last_scale`` (s1, s2, s3 of
        ``p - ((u s1) s2) s3``, ``u = (g x) y``) as XLA:CPU's algebraic simplifier groups the chain's factors (the
        clipping's divisor as its reciprocal, the learning rate, the parameters' RMS, a constant learning rate folded
        into the RMS; 1 where absent) and ``y_last``, 1 where there is none at all (XLA then contracts the product by
        ``y`` with the subtraction)."""
        lr = None if lr_tx is None else lr_tx.update(jnp.ones([], jnp.float32), state[lr_index])[0]
        out = []
        for div, ps in zip(dividers, param_scales, strict=True):
            factors = [] if div is None else [1.0 / div]
            if lr is not None and lr_constant and ps is not None:
                factors.append(ps * lr)
            else:
                factors += [x for x in (lr, ps) if x is not None]
            s1, s2, s3 = [1.0] * (3 - len(factors)) + factors
            out.append(dict(first_scale=s1, second_scale=s2, last_scale=s3, y_last=float(not factors)))
        return out

    def kernel_step(picked: list[int], params: Params, state: Any, grads: Updates) -> tuple[Params, Any]:
        fstate = state[0]
        p_leaves, treedef, (g_leaves, rows, cols, vs) = leaves_like(params, grads, fstate.v_row, fstate.v_col, fstate.v)
        kernel_set = set(picked)
        others = [i for i in range(len(p_leaves)) if i not in kernel_set]

        # every other leaf, and the counters and schedules of the chain, through update itself
        sub_state = (FactoredState(fstate.count, *(take(x, others) for x in (rows, cols, vs))), *state[1:])
        sub_updates, new_sub = tx.update(take(g_leaves, others), sub_state, take(p_leaves, others))
        new_p = list(p_leaves)
        put(new_p, others, apply_updates(take(p_leaves, others), sub_updates))
        new_rows, new_cols, new_vs = (list(x) for x in (rows, cols, vs))
        for out, x in zip((new_rows, new_cols, new_vs), new_sub[0][1:], strict=True):
            put(out, others, x)

        # the factored matrices: every reduction as the update computes it (kernel_second_moments, the parameter
        # scale's transformation), so with its roundings, then the element-wise update in one kernel, matrix after
        # matrix
        beta = as_value(decay_rate_pow(fstate.count - decay_offset, decay_rate)).astype(jnp.float32)
        e = as_value(eps).astype(jnp.float32)
        tau = None if clipping_threshold is None else as_value(clipping_threshold)
        per_row, per_col, b_first, dividers = [], [], [], []
        moments = kernel_second_moments(
            [(g_leaves[i], rows[i], cols[i], dims_of(p_leaves[i])) for i in picked], beta, e
        )
        for i, (new_row, new_col, row_factor, col_factor, sum_sq) in zip(picked, moments, strict=True):
            dims = dims_of(p_leaves[i])
            assert dims is not None  # kernel_leaves picked factored leaves only
            new_rows[i], new_cols[i] = new_row, new_col
            new_vs[i] = jnp.zeros((1,), vs[i].dtype)
            # the normalized factor (row_factor) is per column where the statistic it normalizes averages axis 0
            first = dims[1] == 0
            per_row.append(col_factor if first else row_factor)
            per_col.append(row_factor if first else col_factor)
            b_first.append(first)
            dividers.append(None if tau is None else clip_divisor(sum_sq / g_leaves[i].size, tau))
        if ps_tx is None:
            param_scales = [None] * len(picked)
        else:
            ones = [jnp.ones([], jnp.float32)] * len(picked)
            param_scales = ps_tx.update(ones, ps_tx.init(None), take(p_leaves, picked))[0]
        scales = update_scales(state, dividers, param_scales)
        per_leaf = [dict(leaf, b_first=float(first)) for leaf, first in zip(scales, b_first, strict=True)]
        scalars = jnp.stack(
            [jnp.stack([jnp.asarray(r[k], jnp.float32) for k in _kernels.ADAFACTOR_SCALARS]) for r in per_leaf]
        )
        put(
            new_p,
            picked,
            _kernels.adafactor_matrices(scalars, take(p_leaves, picked), take(g_leaves, picked), per_row, per_col),
        )

        new_factored = FactoredState(new_sub[0].count, *(treedef.unflatten(x) for x in (new_rows, new_cols, new_vs)))
        return treedef.unflatten(new_p), (new_factored, *new_sub[1:])

    def kernel_for(params: Params, state: Any, grads: Updates) -> Step | None:
        """The kernel step for these arguments, or None (no momentum or weight decay, some float32 matrix with
        factored statistics, scalar hyperparameters)."""
        fstate = state[0]
        if momentum is not None or weight_decay_rate is not None:
            return None
        found = matching_leaves(params, grads, fstate.v_row, fstate.v_col, fstate.v)
        picked = [] if found is None else kernel_leaves(found[0], *found[2][:3])
        hypers = [decay_rate, decay_offset, eps, *([] if clipping_threshold is None else [clipping_threshold])]
        scalar = all(np.ndim(h) == 0 for h in hypers if not callable(h))
        if lr_tx is not None:
            probe = jax.eval_shape(lambda: lr_tx.update(jnp.ones([], jnp.float32), state[lr_index])[0])
            scalar = scalar and probe.shape == ()
        return functools.partial(kernel_step, picked) if picked and scalar else None

    return fused_transformation(tx, kernel_for)


# inject_hyperparams(adafactor)(...) keeps the fused step
fused_factory(adafactor)
