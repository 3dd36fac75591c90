"""gradax.fused.adamw: AdamW whose ``step`` updates and applies in one kernel pass on the CPU."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from .. import _kernels
from .._base import GradientTransformationExtraArgs, MaskOrFn, Params, ScalarOrSchedule, Updates
from .._hyperparams import as_value
from .._numerics import safe_int32_increment
from .._update import apply_updates
from ..optimizers._adam import AdamScalars, FirstMomentHat, ScaleByAdamState
from ..optimizers._adam import adamw as _adamw
from ..optimizers._moments import ema_leaf, ema_sq_leaf
from ..transforms._adding import add_decayed_weights
from ..transforms._clipping import clip_by_global_norm, global_norm_f32, global_norm_scale
from ..transforms._combining import chain
from ..transforms._masking import MaskedState, broadcast_prefix, resolve_mask
from ..transforms._scaling import scale_by_learning_rate

_S = {name: i for i, name in enumerate(_kernels.ADAMW_SCALARS)}


class FusedGradientTransformation(GradientTransformationExtraArgs):
    """A :class:`gradax.GradientTransformationExtraArgs` with a fused ``step``.

    Attributes:
      init: ``init(params) -> state``.
      update: ``update(updates, state, params=None, **extra_args) -> (updates, state)``.
      step: ``step(grads, state, params) -> (new_params, new_state)``: ``update`` and ``apply_updates`` in one
        pass where a fused kernel applies, the two calls otherwise.
    """

    def __new__(cls, init: Callable, update: Callable, step: Callable | None = None):
        self = super().__new__(cls, init, update)
        if step is not None:
            self.__dict__["_fused_step"] = step
        return self

    def __getnewargs__(self):
        return (self.init, self.update, self.__dict__.get("_fused_step"))

    @property
    def step(self) -> Callable:
        """``step(grads, state, params) -> (new_params, new_state)``. A copy made with ``_replace`` (whose
        ``update`` may differ) steps with its own ``update`` and ``apply_updates``."""
        fused = self.__dict__.get("_fused_step")
        if fused is not None:
            return fused
        update = self.update

        def step(grads, state, params):
            updates, state = update(grads, state, params)
            return apply_updates(params, updates), state

        return step


def kernel_status() -> _kernels.KernelStatus:
    """Whether the fused CPU kernels are built and registered in this process (``.available``), and why not
    (``.reason``); builds them on first call.

    Example:
      >>> import gradax
      >>> status = gradax.fused.kernel_status()
      >>> isinstance(status.available, bool)
      True
    """
    return _kernels.load()


# ----------------------------------------------------------------------------------------------------------------
# The arithmetic of one fused AdamW step, given its scalars: the C kernel, and the same math in jnp (used under
# vmap and autodiff, and as the kernel's test oracle).


def adamw_reference(scalars, weight_decay, max_norm, params, grads, mu, nu, *, nesterov: bool = False):
    """The fused AdamW step in jnp: ``(new_params, new_mu, new_nu)`` from the step scalars (see ``_kernels``),
    written with scale_by_adam's own leaf functions.

    ``max_norm`` is None (no clipping) or the clipping threshold; the clipping factor is computed here and
    ``scalars[grad_scale]`` is ignored. A leaf whose weight decay is 0 is not decayed (as the kernel).
    """
    s = {name: scalars[i] for name, i in _S.items()}
    scale = jnp.ones([], jnp.float32)
    if max_norm is not None:
        scale = global_norm_scale(global_norm_f32(grads), max_norm)
    hat = FirstMomentHat(s["b1"], s["one_minus_b1"], s["c1"], s["c1_next"] if nesterov else None)
    out_p, out_m, out_v = [], [], []
    for i, (p, g, m, v) in enumerate(zip(params, grads, mu, nu, strict=True)):
        g = g * scale
        m = ema_leaf(g, m, s["b1"], s["one_minus_b1"])
        v = ema_sq_leaf(g, v, s["b2"], s["one_minus_b2"])
        u = hat(g, m) / (jnp.sqrt(v / s["c2"] + s["eps_root"]) + s["eps"])
        u = jnp.where(weight_decay[i] != 0, u + weight_decay[i] * p, u)
        out_p.append(p + u * s["neg_lr"])
        out_m.append(m)
        out_v.append(v)
    return out_p, out_m, out_v


def _adamw_kernel(scalars, weight_decay, max_norm, params, grads, mu, nu):
    if max_norm is not None:
        norm = jnp.sqrt(jnp.sum(_kernels.sum_squares(grads)))
        scalars = scalars.at[_S["grad_scale"]].set(global_norm_scale(norm, max_norm))
    return _kernels.adamw_step(scalars, weight_decay, params, grads, mu, nu)


@functools.cache
def _fused_adamw_math(clip: bool, nesterov: bool) -> Callable:
    """The kernel, with a vmap rule and a JVP that use :func:`adamw_reference` (the kernel is one unbatched pass)."""

    def split(args):
        scalars, weight_decay, max_norm, params, grads, mu, nu = args
        return scalars, weight_decay, max_norm if clip else None, params, grads, mu, nu

    def reference(*args):
        return adamw_reference(*split(args), nesterov=nesterov)

    @jax.custom_batching.custom_vmap
    def batchable(*args):
        return _adamw_kernel(*split(args))

    @batchable.def_vmap
    def _rule(axis_size, in_batched, *args):
        def full(x, batched):
            return x if batched else jnp.broadcast_to(x, (axis_size, *jnp.shape(x)))

        args = jax.tree.map(full, args, tuple(in_batched))
        out = jax.vmap(reference)(*args)
        return out, jax.tree.map(lambda _: True, out)

    @jax.custom_jvp
    def math(*args):
        return batchable(*args)

    @math.defjvp
    def _jvp(primals, tangents):
        return jax.jvp(reference, primals, tangents)

    return math


# ----------------------------------------------------------------------------------------------------------------
# adamw


def _one_device_view() -> bool:
    """Whether the step sees whole arrays of one device: a single-device process, or inside ``shard_map`` over every
    mesh axis (local shards). Under a GSPMD-partitioned ``jit`` the kernel (an opaque custom call) would make XLA
    gather every operand onto each device, so the step is left to XLA there."""
    if jax.device_count() == 1:
        return True
    mesh = jax.sharding.get_abstract_mesh()
    return not mesh.empty and set(mesh.axis_names) == set(mesh.manual_axes)


def _kernel_applies() -> bool:
    return (
        jax.default_backend() == "cpu"
        and not jax.config.jax_enable_x64
        and _one_device_view()
        and _kernels.load().available
    )


def adamw(
    learning_rate: ScalarOrSchedule,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-8,
    eps_root: ArrayLike = 0.0,
    mu_dtype: Any | None = None,
    weight_decay: ScalarOrSchedule = 1e-4,
    mask: MaskOrFn = None,
    *,
    nesterov: bool = False,
    max_grad_norm: ArrayLike | None = None,
) -> FusedGradientTransformation:
    r"""AdamW (optionally after global-norm clipping) with a fused ``step`` that updates the params in one pass.

    .. math::
      g \leftarrow g \min\!\left(1, \tfrac{c}{\|g\|}\right), \quad
      m_t = \beta_1 m_{t-1} + (1-\beta_1) g, \quad v_t = \beta_2 v_{t-1} + (1-\beta_2) g^2, \\
      \theta_t = \theta_{t-1} - \eta_t \left(\frac{m_t / (1-\beta_1^t)}{\sqrt{v_t / (1-\beta_2^t) + \epsilon_{root}}
      + \epsilon} + \lambda_t \theta_{t-1}\right).

    ``init`` and ``update`` are those of ``gradax.adamw(...)`` (of ``gradax.chain(gradax.clip_by_global_norm(c),
    gradax.adamw(...))`` when ``max_grad_norm`` is given): same state, same updates. ``step(grads, state, params)``
    returns ``(new_params, new_state)``. On the CPU backend with float32 params, grads and moments it is one
    multithreaded C kernel over every leaf (plus one pass for the clipping norm), writing the params and moments in
    place when the caller donates them (``jax.jit(..., donate_argnums=...)``); the results match ``update`` +
    ``apply_updates`` to float32 rounding (the global norm is summed in float64). The kernel runs in a
    single-device process and inside ``shard_map``; with several devices under ``jit`` (GSPMD sharding), on GPU, for
    other dtypes, under ``jax_enable_x64`` or without a C compiler ``step`` is ``update`` followed by
    ``apply_updates``, which XLA partitions and fuses as usual. ``vmap`` and autodiff of ``step`` use the same math
    in jnp.

    Args:
      learning_rate: :math:`\eta`, a number, an array or a schedule of the step count.
      b1: :math:`\beta_1 \in [0, 1)`.
      b2: :math:`\beta_2 \in [0, 1)`.
      eps: :math:`\epsilon \ge 0`.
      eps_root: :math:`\epsilon_{root} \ge 0`.
      mu_dtype: dtype of the first moment (the kernel runs when the moments are float32).
      weight_decay: :math:`\lambda`, a number, an array or a schedule of the step count.
      mask: which parameters to decay: a tree of booleans like the params (or a prefix), or a function of the
        params returning one; None decays all.
      nesterov: use Nesterov momentum (NAdamW).
      max_grad_norm: :math:`c`: clip the gradients to this global norm first (None: no clipping).

    Returns:
      A :class:`FusedGradientTransformation`: ``init``, ``update`` and ``step``.

    Example:
      >>> import gradax, jax, jax.numpy as jnp
      >>> params = {"w": jnp.array([1.0, -2.0])}
      >>> opt = gradax.fused.adamw(learning_rate=0.1, weight_decay=0.5)
      >>> step = jax.jit(opt.step, donate_argnums=(1, 2))
      >>> params, state = step({"w": jnp.array([2.0, -4.0])}, opt.init(params), params)
      >>> params["w"]
      Array([ 0.85, -1.8 ], dtype=float32)

    References:
      Loshchilov and Hutter, 2019, "Decoupled Weight Decay Regularization";
      Pascanu et al., 2013, "On the difficulty of training recurrent neural networks" (``max_grad_norm``).
    """
    inner = _adamw(learning_rate, b1, b2, eps, eps_root, mu_dtype, weight_decay, mask, nesterov=nesterov)
    tx = inner if max_grad_norm is None else chain(clip_by_global_norm(max_grad_norm), inner)
    # the unmasked parts of adamw's chain: run on scalar probes, they give the step's learning rate and decay rate
    # and their own next states, so schedules and counters advance exactly as in ``update``
    lr_tx = scale_by_learning_rate(learning_rate)
    decay_tx = add_decayed_weights(weight_decay)

    def reference_step(grads, state, params):
        updates, state = tx.update(grads, state, params)
        return apply_updates(params, updates), state

    def step(grads: Updates, state: Any, params: Params) -> tuple[Params, Any]:
        if not _kernel_applies():
            return reference_step(grads, state, params)
        adam_state, decay_state, lr_state = state if max_grad_norm is None else state[1]
        decay_inner = decay_state if mask is None else decay_state.inner_state
        p_leaves, treedef = jax.tree.flatten(params)
        try:
            leaves = [p_leaves, *(treedef.flatten_up_to(t) for t in (grads, adam_state.mu, adam_state.nu))]
        except (ValueError, TypeError):
            return reference_step(grads, state, params)  # raises the usual, explicit error
        one, zero = jnp.ones([], jnp.float32), jnp.zeros([], jnp.float32)
        neg_lr, new_lr = lr_tx.update(one, lr_state)  # -lr * 1
        rate, new_decay = decay_tx.update(zero, decay_inner, one)  # 0 + rate * 1
        clip_c = None if max_grad_norm is None else as_value(max_grad_norm)
        scalar = [jnp.ndim(x) == 0 for x in (neg_lr, rate, *([] if clip_c is None else [clip_c]))]
        float32 = all(
            getattr(x, "dtype", None) == jnp.float32 and jnp.shape(x) == jnp.shape(p)
            for group in leaves
            for x, p in zip(group, p_leaves, strict=True)
        )
        if not (p_leaves and float32 and all(scalar)):
            return reference_step(grads, state, params)

        count_inc = safe_int32_increment(adam_state.count)
        a = AdamScalars.at(b1, b2, eps, eps_root, count_inc, nesterov)
        c1_next = a.hat.next_correction if nesterov else a.hat.correction
        values = [a.hat.b1, a.hat.one_minus_b1, a.b2, a.one_minus_b2, a.hat.correction, c1_next, a.correction2]
        values += [a.eps, a.eps_root, neg_lr, one, jnp.asarray(float(nesterov))]
        scalars = jnp.stack([jnp.asarray(v, jnp.float32) for v in values])
        decayed = np.ones(len(p_leaves), np.float32)
        if mask is not None:
            resolved = broadcast_prefix(resolve_mask("fused.adamw", mask, params), params)
            decayed = np.asarray(treedef.flatten_up_to(resolved), np.float32)
        new_p, new_m, new_v = _fused_adamw_math(clip_c is not None, nesterov)(
            scalars, rate * decayed, zero if clip_c is None else clip_c, *leaves
        )

        new_adam = ScaleByAdamState(count=count_inc, mu=treedef.unflatten(new_m), nu=treedef.unflatten(new_v))
        if mask is not None:
            new_decay = MaskedState(inner_state=new_decay)
        new_inner = (new_adam, new_decay, new_lr)
        return treedef.unflatten(new_p), new_inner if max_grad_norm is None else (state[0], new_inner)

    return FusedGradientTransformation(tx.init, tx.update, step)


# inject_hyperparams(adamw)(...) builds a FusedGradientTransformation with the injected step
adamw.__gradax_fused__ = FusedGradientTransformation
