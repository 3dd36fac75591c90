"""gradax.fused.lion: Lion whose ``step`` updates and applies in one kernel pass on the CPU."""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from .. import _kernels
from .._base import MaskOrFn, Params, ScalarOrSchedule, Updates
from .._hyperparams import hyper_values
from .._numerics import safe_int32_increment
from .._quantization import Blockwise8bit
from ..optimizers._lion import ScaleByLionState
from ..optimizers._lion import lion as _lion
from ._common import (
    DecayAndRate,
    FusedGradientTransformation,
    Step,
    flat_dtype,
    fused_factory,
    fused_transformation,
    leaves_like,
    matching_leaves,
)

# (params and grads dtype, momentum dtype) of the leaves the kernel takes
_KINDS = {
    (jnp.dtype(jnp.float32), jnp.dtype(jnp.float32)),
    (jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float32)),  # lion's default momentum for bfloat16 params
    (jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.bfloat16)),
}


def _covered(params: list, grads: list, mu: list) -> bool:
    """Whether the kernel takes every leaf: params and grads alike, float32 or bfloat16, with a momentum of the
    same shape as in ``_KINDS``."""
    for p, g, m in zip(params, grads, mu, strict=True):
        dtypes = tuple(getattr(x, "dtype", None) for x in (p, g, m))
        if not (dtypes[0] == dtypes[1] and (dtypes[0], dtypes[2]) in _KINDS):
            return False
        if not np.shape(p) == np.shape(g) == np.shape(m):
            return False
    return True


def lion(
    learning_rate: ScalarOrSchedule,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.99,
    mu_dtype: Any | None = None,
    weight_decay: ScalarOrSchedule = 1e-3,
    mask: MaskOrFn = None,
    *,
    moments: str | Blockwise8bit | None = None,
) -> FusedGradientTransformation:
    r"""Lion with a fused ``step`` that updates the params and momentum in one pass.

    .. math::
      \theta_t = \theta_{t-1} - \eta_t \left(\mathrm{sign}((1-\beta_1) g_t + \beta_1 m_{t-1}) + \lambda_t
      \theta_{t-1}\right), \quad m_t = (1-\beta_2) g_t + \beta_2 m_{t-1}.

    ``init`` and ``update`` are those of ``gradax.lion(...)``: same state, same updates. ``step(params, state,
    grads)`` returns ``(new_params, new_state)`` (arguments in the order of the results: donate them with
    ``jax.jit(opt.step, donate_argnums=(0, 1))``). On the CPU backend it is one multithreaded C kernel over every
    leaf, writing the params and momentum in place when the caller donates them: 20 bytes per float32 parameter,
    where XLA's two passes (new momentum, new params) move 28. It takes trees whose params and grads are float32 or bfloat16 with a float32 momentum (the default for
    both), or bfloat16 params, grads and momentum (``mu_dtype=jnp.bfloat16``), and its results are bit for bit those
    of ``update`` + ``apply_updates`` compiled by XLA:CPU: the same multiply-adds, fused where XLA fuses them on a
    CPU with FMA, and each bfloat16 rounding of the chain (the momentum, the update after the decay and after the
    learning rate, the params). With 8-bit moments, for other dtypes, on GPU, with several devices under ``jit``
    (GSPMD sharding), under ``jax_enable_x64`` or without a C compiler ``step`` is ``update`` followed by
    ``apply_updates``, and so are ``vmap`` and autodiff of ``step``. For a tree of thousands of small leaves,
    ``gradax.flatten(gradax.fused.lion(...))`` keeps the momentum as one flat vector (flatten's state) and its
    ``step`` runs the same kernel on slices of it, the params and grads left as leaves.

    Args:
      learning_rate: :math:`\eta`, a number, an array or a schedule of the step count.
      b1: :math:`\beta_1 \in [0, 1)`.
      b2: :math:`\beta_2 \in [0, 1)`.
      mu_dtype: dtype of the momentum (default: the params' dtype, float32 for bfloat16 params).
      weight_decay: :math:`\lambda`, a number, an array or a schedule of the step count.
      mask: which parameters to decay: a tree of booleans like the params (or a prefix), or a function of the
        params returning one; None decays all.
      moments: None (dense momentum), ``"8bit"`` or a :class:`gradax.Blockwise8bit` (see
        :func:`gradax.scale_by_lion`; ``step`` is then ``update`` + ``apply_updates``).

    Returns:
      A :class:`FusedGradientTransformation`: ``init``, ``update`` and ``step``.

    Example:
      >>> import gradax, jax, jax.numpy as jnp
      >>> params = {"w": jnp.array([1.0, -2.0])}
      >>> opt = gradax.fused.lion(learning_rate=0.1, weight_decay=0.5)
      >>> step = jax.jit(opt.step, donate_argnums=(0, 1))
      >>> params, state = step(params, opt.init(params), {"w": jnp.array([2.0, -4.0])})
      >>> params["w"]
      Array([ 0.85, -1.8 ], dtype=float32)

    References:
      Chen et al., 2023, "Symbolic Discovery of Optimization Algorithms".
    """
    tx = _lion(learning_rate, b1, b2, mu_dtype, weight_decay, mask, moments=moments)
    tail = DecayAndRate("fused.lion", learning_rate, weight_decay, mask)

    def scalars_at(state: Any, mask_params: Any, mask_treedef: Any) -> tuple:
        """The kernels' step scalars, the decay flags (per leaf of ``mask_treedef``) and the new decay and
        learning-rate states."""
        _, decay_state, lr_state = state
        neg_lr, rate, decayed, new_decay, new_lr = tail.at(decay_state, lr_state, mask_params, mask_treedef)
        beta1, beta2 = hyper_values(b1, b2)
        named = dict(b1=beta1, one_minus_b1=1 - beta1, b2=beta2, one_minus_b2=1 - beta2, weight_decay=rate)
        named.update(neg_lr=neg_lr)
        scalars = jnp.stack([jnp.asarray(named[k], jnp.float32) for k in _kernels.LION_SCALARS])
        return scalars, jnp.asarray(decayed), new_decay, new_lr

    def kernel_step(params: Params, state: Any, grads: Updates) -> tuple[Params, Any]:
        lion_state = state[0]
        p_leaves, treedef, (g_leaves, m_leaves) = leaves_like(params, grads, lion_state.mu)
        scalars, decayed, new_decay, new_lr = scalars_at(state, params, treedef)
        new_p, new_m = _kernels.lion_step(scalars, decayed, p_leaves, g_leaves, m_leaves)

        new_lion = ScaleByLionState(count=safe_int32_increment(lion_state.count), mu=treedef.unflatten(new_m))
        return treedef.unflatten(new_p), (new_lion, new_decay, new_lr)

    def flat_kernel_step(params: Params, state: Any, grads: Updates) -> tuple[Params, Any]:
        lion_state = state[0]
        p_leaves, treedef, (g_leaves,) = leaves_like(params, grads)
        # gradax.flatten's inner transformation sees (and masks) one vector
        vector = jax.ShapeDtypeStruct(lion_state.mu.shape, p_leaves[0].dtype)
        scalars, decayed, new_decay, new_lr = scalars_at(state, vector, jax.tree.structure(0))
        decayed = jnp.broadcast_to(decayed, (len(p_leaves),))
        new_p, mu = _kernels.lion_flat_step(scalars, decayed, lion_state.mu, p_leaves, g_leaves)
        new_lion = ScaleByLionState(count=safe_int32_increment(lion_state.count), mu=mu)
        return treedef.unflatten(new_p), (new_lion, new_decay, new_lr)

    def kernel_for(params: Params, state: Any, grads: Updates) -> Step | None:
        """The kernel step for these arguments, or None (dense momentum, leaves of ``_KINDS``, scalar rates)."""
        found = None if moments is not None else matching_leaves(params, grads, state[0].mu)
        if not (found and found[0] and _covered(found[0], *found[2]) and tail.scalar(*state[1:])):
            return None
        return kernel_step

    def flat_kernel_for(params: Params, state: Any, grads: Updates) -> Step | None:
        """The kernel step of ``gradax.flatten(this)``, or None (params and grads of one dtype and a flat momentum
        as in ``_KINDS``): params and grads stay leaves, the momentum is slices of the flat vector."""
        lion_state = state[0]
        dtype = None if moments is not None else flat_dtype(params, grads, [lion_state.mu])
        if not (dtype is not None and (dtype, lion_state.mu.dtype) in _KINDS and tail.scalar(*state[1:])):
            return None
        return flat_kernel_step

    return fused_transformation(tx, kernel_for, flat_kernel_for)


# inject_hyperparams(lion)(...) keeps the fused step
fused_factory(lion)
