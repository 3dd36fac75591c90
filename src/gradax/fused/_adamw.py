"""gradax.fused.adamw: AdamW whose ``step`` updates and applies in one kernel pass on the CPU."""

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from .. import _kernels
from .._base import MaskOrFn, Params, ScalarOrSchedule, Updates
from .._hyperparams import as_value
from .._numerics import safe_int32_increment
from .._quantization import BlockQuantized, Blockwise8bit
from ..optimizers._adam import AdamScalars, ScaleByAdamState
from ..optimizers._adam import adamw as _adamw
from ..transforms._clipping import clip_by_global_norm, global_norm_f32, global_norm_scale
from ..transforms._combining import chain
from ._common import (
    DecayAndRate,
    FusedGradientTransformation,
    Step,
    flat_dtype,
    fused_factory,
    fused_transformation,
    leaves_like,
    matching_leaves,
    put,
    take,
)

_DENSE = (jnp.dtype(jnp.float32), jnp.dtype(jnp.bfloat16))


class _Plan(NamedTuple):
    """Which kernel takes each leaf: ``dense`` (params and grads float32 or bfloat16, moments float32) and
    ``quantized`` (float32 params and grads, 8-bit moments) hold leaf indices."""

    dense: list[int]
    quantized: list[int]


def _plan(params: list, grads: list, mu: list, nu: list) -> _Plan | None:
    """The kernel of each leaf, or None when some leaf fits neither (the step is then update + apply)."""
    dense, quantized = [], []
    for i, (p, g, m, v) in enumerate(zip(params, grads, mu, nu, strict=True)):
        same = getattr(p, "dtype", None) == getattr(g, "dtype", None) and np.shape(p) == np.shape(g)
        if isinstance(m, BlockQuantized) and isinstance(v, BlockQuantized):
            if same and p.dtype == jnp.float32 and m.codes.dtype == jnp.uint8 and m.codes.ndim == 2:
                quantized.append(i)
                continue
            return None
        moments = all(getattr(x, "dtype", None) == jnp.float32 and np.shape(x) == np.shape(p) for x in (m, v))
        if not (same and moments and p.dtype in _DENSE):
            return None
        dense.append(i)
    return _Plan(dense, quantized)


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
    nu_dtype: Any | None = None,
    moments: str | Blockwise8bit | None = None,
    max_grad_norm: ArrayLike | None = None,
) -> FusedGradientTransformation:
    r"""AdamW (optionally after global-norm clipping) with a fused ``step`` that updates the params in one pass.

    .. math::
      g \leftarrow g \min\!\left(1, \tfrac{c}{\|g\|}\right), \quad
      m_t = \beta_1 m_{t-1} + (1-\beta_1) g, \quad v_t = \beta_2 v_{t-1} + (1-\beta_2) g^2, \\
      \theta_t = \theta_{t-1} - \eta_t \left(\frac{m_t / (1-\beta_1^t)}{\sqrt{v_t / (1-\beta_2^t) + \epsilon_{root}}
      + \epsilon} + \lambda_t \theta_{t-1}\right).

    ``init`` and ``update`` are those of ``gradax.adamw(...)`` (of ``gradax.chain(gradax.clip_by_global_norm(c),
    gradax.adamw(...))`` when ``max_grad_norm`` is given): same state, same updates. ``step(params, state, grads)``
    returns ``(new_params, new_state)`` (arguments in the order of the results: donate them with
    ``jax.jit(opt.step, donate_argnums=(0, 1))``). On the CPU backend it is one multithreaded C kernel over every leaf (plus
    one pass for the clipping norm), writing the params and moments in place when the caller donates them
    (``jax.jit(..., donate_argnums=...)``), for each leaf whose params and grads are float32 or bfloat16 with float32
    moments (the default for both), or float32 with 8-bit moments (``moments="8bit"``). On float32 leaves the
    results are bit for bit those of ``update`` + ``apply_updates`` compiled by XLA:CPU (its roundings, see
    ``docs/differences.md``); with bfloat16 leaves or 8-bit moments they match to float32 rounding: each bfloat16
    rounding of the chain is reproduced, and the 8-bit codes are those of ``scale_by_adam`` with the same stochastic
    rounding. The kernel runs in a single-device process and inside ``shard_map``; with several devices under
    ``jit`` (GSPMD sharding), on GPU, for other dtypes, under ``jax_enable_x64`` or without a C compiler ``step`` is
    ``update`` followed by ``apply_updates``, which XLA partitions and fuses as usual, and so are ``vmap`` and
    autodiff of ``step``. For a tree of thousands of small leaves, ``gradax.flatten(gradax.fused.adamw(...))`` keeps
    each moment as one flat vector (flatten's state) and its ``step`` runs the same kernel on slices of them: a
    jitted step over a third as many arrays (float32 or bfloat16 leaves of one dtype, float32 moments).

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
      nu_dtype: dtype of the second moment (the kernel runs when it is float32).
      moments: None (dense moments), ``"8bit"`` or a :class:`gradax.Blockwise8bit`: block-wise 8-bit moments
        (see :func:`gradax.scale_by_adam`).
      max_grad_norm: :math:`c`: clip the gradients to this global norm first (None: no clipping).

    Returns:
      A :class:`FusedGradientTransformation`: ``init``, ``update`` and ``step``.

    Example:
      >>> import gradax, jax, jax.numpy as jnp
      >>> params = {"w": jnp.array([1.0, -2.0])}
      >>> opt = gradax.fused.adamw(learning_rate=0.1, weight_decay=0.5)
      >>> step = jax.jit(opt.step, donate_argnums=(0, 1))
      >>> params, state = step(params, opt.init(params), {"w": jnp.array([2.0, -4.0])})
      >>> params["w"]
      Array([ 0.85, -1.8 ], dtype=float32)

    References:
      Loshchilov and Hutter, 2019, "Decoupled Weight Decay Regularization";
      Pascanu et al., 2013, "On the difficulty of training recurrent neural networks" (``max_grad_norm``);
      Dettmers et al., 2022, "8-bit Optimizers via Block-wise Quantization" (``moments="8bit"``).
    """
    inner = _adamw(
        learning_rate, b1, b2, eps, eps_root, mu_dtype, weight_decay, mask,
        nesterov=nesterov, nu_dtype=nu_dtype, moments=moments,
    )  # fmt: skip
    tx = inner if max_grad_norm is None else chain(clip_by_global_norm(max_grad_norm), inner)
    tail = DecayAndRate("fused.adamw", learning_rate, weight_decay, mask)
    kernels = _AdamWKernels(b1, b2, eps, eps_root, nesterov, max_grad_norm, tail)
    return fused_transformation(tx, kernels.kernel_for, kernels.flat_kernel_for)


class _AdamWKernels(NamedTuple):
    """The kernel steps of one ``fused.adamw``: its hyperparameters, and its state as ``(adam, decay, learning
    rate)`` states, after the clipping's state when ``max_grad_norm`` is given."""

    b1: Any
    b2: Any
    eps: Any
    eps_root: Any
    nesterov: bool
    max_grad_norm: Any
    tail: DecayAndRate

    def parts(self, state: Any) -> tuple:
        """``(adam_state, decay_state, lr_state)``."""
        return state if self.max_grad_norm is None else state[1]

    def new_state(self, state: Any, count: jax.Array, mu: Any, nu: Any, new_decay: Any, new_lr: Any) -> Any:
        new_inner = (ScaleByAdamState(count=count, mu=mu, nu=nu), new_decay, new_lr)
        return new_inner if self.max_grad_norm is None else (state[0], new_inner)

    def scalar(self, state: Any) -> bool:
        """Whether this step's learning rate, decay rate and clipping threshold are scalars (what kernels take)."""
        _, decay_state, lr_state = self.parts(state)
        scalar = self.tail.scalar(decay_state, lr_state)
        if self.max_grad_norm is not None:
            scalar = scalar and jax.eval_shape(lambda: as_value(self.max_grad_norm)).shape == ()
        return scalar

    def grad_scale(self, g_leaves: list) -> jax.Array:
        """clip_by_global_norm's factor, from its own norm (XLA's float32 reduction, as in ``update``)."""
        if self.max_grad_norm is None:
            return jnp.ones([], jnp.float32)
        return global_norm_scale(global_norm_f32(g_leaves), as_value(self.max_grad_norm))

    def scalars_at(self, state: Any, g_leaves: list, mask_params: Any, mask_treedef: Any, divides: bool) -> tuple:
        """The kernels' step scalars, the decay rates (per leaf of ``mask_treedef``), the new step count and the
        new decay and learning-rate states. ``divides``: whether XLA divides by the bias corrections rather than
        multiplying by their reciprocals (it does in a tree of several leaves; see ``fused_adamw.c``)."""
        adam_state, decay_state, lr_state = self.parts(state)
        neg_lr, rate, decayed, new_decay, new_lr = self.tail.at(decay_state, lr_state, mask_params, mask_treedef)
        count_inc = safe_int32_increment(adam_state.count)
        a = AdamScalars.at(self.b1, self.b2, self.eps, self.eps_root, count_inc, self.nesterov)
        hat = a.hat
        named: dict[str, Any] = dict(b1=hat.b1, one_minus_b1=hat.one_minus_b1, b2=a.b2, one_minus_b2=a.one_minus_b2)
        named.update(c1=hat.correction, c1_next=hat.next_correction if self.nesterov else hat.correction)
        named.update(c2=a.correction2, eps=a.eps, eps_root=a.eps_root, neg_lr=neg_lr)
        named.update(grad_scale=self.grad_scale(g_leaves), nesterov=float(self.nesterov))
        named.update(divides=float(divides), second_products=float(self.max_grad_norm is not None))
        scalars = jnp.stack([jnp.asarray(named[k], jnp.float32) for k in _kernels.ADAMW_SCALARS])
        return scalars, rate * decayed, count_inc, new_decay, new_lr  # the kernel decays where the rate is not 0

    def kernel_step(self, plan: _Plan, params: Params, state: Any, grads: Updates) -> tuple[Params, Any]:
        adam_state = self.parts(state)[0]
        p_leaves, treedef, (g_leaves, m_leaves, v_leaves) = leaves_like(params, grads, adam_state.mu, adam_state.nu)
        divides = len(p_leaves) > 1
        scalars, rates, count_inc, new_decay, new_lr = self.scalars_at(state, g_leaves, params, treedef, divides)
        new_p, new_m, new_v = list(p_leaves), list(m_leaves), list(v_leaves)
        # scale_by_adam's dither seed (dither_pair: one hash for both moments)
        seed = jnp.reshape(2 * count_inc, (1,))
        calls: list[tuple[list[int], Callable[..., tuple], tuple]] = [
            (plan.dense, _kernels.adamw_step, ()),
            (plan.quantized, _kernels.adamw8_step, (seed,)),
        ]
        for index, call, extra in calls:
            if not index:
                continue
            leaves = [take(x, index) for x in (p_leaves, g_leaves, m_leaves, v_leaves)]
            results = call(scalars, rates[np.asarray(index)], *extra, *leaves)
            for out, group in zip((new_p, new_m, new_v), results, strict=True):
                put(out, index, group)
        mu, nu = treedef.unflatten(new_m), treedef.unflatten(new_v)
        return treedef.unflatten(new_p), self.new_state(state, count_inc, mu, nu, new_decay, new_lr)

    def flat_kernel_step(self, params: Params, state: Any, grads: Updates) -> tuple[Params, Any]:
        adam_state = self.parts(state)[0]
        p_leaves, treedef, (g_leaves,) = leaves_like(params, grads)
        # gradax.flatten's inner transformation sees (and masks) one vector: XLA's program has one leaf
        vector = jax.ShapeDtypeStruct(adam_state.mu.shape, p_leaves[0].dtype)
        scalars, rates, count_inc, new_decay, new_lr = self.scalars_at(
            state, g_leaves, vector, jax.tree.structure(0), divides=False
        )
        rates = jnp.broadcast_to(rates, (len(p_leaves),))
        new_p, mu, nu = _kernels.adamw_flat_step(scalars, rates, adam_state.mu, adam_state.nu, p_leaves, g_leaves)
        return treedef.unflatten(new_p), self.new_state(state, count_inc, mu, nu, new_decay, new_lr)

    def kernel_for(self, params: Params, state: Any, grads: Updates) -> Step | None:
        """The kernel step for these arguments, or None (float32 or bfloat16 leaves with float32 or 8-bit moments,
        scalar hyperparameters)."""
        adam_state = self.parts(state)[0]
        found = matching_leaves(params, grads, adam_state.mu, adam_state.nu)
        plan = None if found is None else _plan(found[0], *found[2])
        if not (found and found[0] and plan is not None and self.scalar(state)):
            return None
        return functools.partial(self.kernel_step, plan)

    def flat_kernel_for(self, params: Params, state: Any, grads: Updates) -> Step | None:
        """The kernel step of ``gradax.flatten(this)``, or None (leaves of one dtype, float32 or bfloat16, and two
        float32 flat moments)."""
        adam_state = self.parts(state)[0]
        dtype = flat_dtype(params, grads, [adam_state.mu, adam_state.nu])
        float32_moments = dtype is not None and adam_state.mu.dtype == adam_state.nu.dtype == jnp.float32
        if not (float32_moments and dtype in _DENSE and self.scalar(state)):
            return None
        return self.flat_kernel_step


# inject_hyperparams(adamw)(...) keeps the fused step
fused_factory(adamw)
