"""gradax.fused.cautious_adamw: ``cautious(adamw)`` whose ``step`` counts, updates and applies in one kernel call on
the CPU."""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from .. import _kernels
from .._base import MaskOrFn, Params, ScalarOrSchedule, Updates
from .._numerics import safe_int32_increment
from .._quantization import Blockwise8bit
from ..optimizers._adam import AdamScalars, ScaleByAdamState
from ..optimizers._adam import adamw as _adamw
from ..transforms._cautious import cautious
from ._common import (
    DecayAndRate,
    FusedGradientTransformation,
    Step,
    fused_factory,
    fused_transformation,
    matching_leaves,
)

_F32 = jnp.dtype(jnp.float32)


def _covered(*groups: list) -> bool:
    """Whether the kernel takes every leaf: params, grads and both moments float32 arrays of one shape."""
    for leaves in zip(*groups, strict=True):
        if not all(getattr(x, "dtype", None) == _F32 for x in leaves):
            return False
        if len({np.shape(x) for x in leaves}) != 1:
            return False
    return True


def cautious_adamw(
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
    cautious_weight_decay: bool = False,
) -> FusedGradientTransformation:
    r"""Cautious AdamW (``gradax.cautious(gradax.adamw(...))``) with a fused ``step``: one kernel call counts, updates
    and applies.

    With :math:`u` AdamW's update (after the weight decay and the learning rate) and :math:`d` the number of elements
    of a leaf:

    .. math::
      u = -\eta_t \left(\frac{m_t / (1-\beta_1^t)}{\sqrt{v_t / (1-\beta_2^t) + \epsilon_{root}} + \epsilon}
      + \lambda_t \theta_{t-1}\right), \quad \phi = \mathbb 1[u \odot g < 0], \quad
      \theta_t = \theta_{t-1} + u \odot \phi\, \frac{d}{\lVert\phi\rVert_0 + 1}.

    ``init`` and ``update`` are those of ``gradax.cautious(gradax.adamw(...))`` with the same arguments: same state,
    same updates. ``step(params, state, grads)`` returns ``(new_params, new_state)`` (arguments in the order of the
    results: donate them with ``jax.jit(opt.step, donate_argnums=(0, 1))``). On the CPU backend it is one
    multithreaded C kernel call per 32 leaves, taking them in groups that fit in the cache: a read-only pass
    recomputes AdamW's update and counts, per leaf, the elements it keeps (an exact integer), then the AdamW pass
    writes the moments and the params in place, each update zeroed or rescaled, reading what the first pass left in
    the cache: 44 bytes per float32 parameter at most, where XLA's passes move 60. It takes trees whose params,
    grads and moments are float32, and its results are bit for bit those of ``update`` + ``apply_updates``
    compiled by XLA:CPU (but for some long vectors, where XLA rounds the first moment otherwise: see
    docs/differences.md). For other dtypes, 8-bit moments, ``cautious_weight_decay``, array-valued (per-element)
    hyperparameters, on GPU, with several devices under ``jit`` (GSPMD sharding), under ``jax_enable_x64`` or
    without a C compiler ``step`` is ``update`` followed by ``apply_updates``, and so are ``vmap`` and autodiff of
    ``step``.

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
      moments: None (dense moments), ``"8bit"`` or a :class:`gradax.Blockwise8bit` (``step`` is then ``update`` +
        ``apply_updates``).
      cautious_weight_decay: decay only where the update and the parameter have the same sign (``step`` is then
        ``update`` + ``apply_updates``).

    Returns:
      A :class:`FusedGradientTransformation`: ``init``, ``update`` and ``step``.

    Example:
      >>> import gradax, jax, jax.numpy as jnp
      >>> params = {"w": jnp.array([1.0, -2.0, 3.0])}
      >>> opt = gradax.fused.cautious_adamw(learning_rate=0.1, weight_decay=0.0)
      >>> step = jax.jit(opt.step, donate_argnums=(0, 1))
      >>> params, state = step(params, opt.init(params), {"w": jnp.array([2.0, -4.0, 0.0])})
      >>> params["w"]
      Array([ 0.9, -1.9,  3. ], dtype=float32)

    References:
      Liang et al., 2024, "Cautious Optimizers: Improving Training with One Line of Code",
      https://arxiv.org/abs/2411.16085;
      Loshchilov and Hutter, 2019, "Decoupled Weight Decay Regularization".
    """
    inner = _adamw(
        learning_rate, b1, b2, eps, eps_root, mu_dtype, weight_decay, mask,
        nesterov=nesterov, nu_dtype=nu_dtype, moments=moments, cautious_weight_decay=cautious_weight_decay,
    )  # fmt: skip
    tail = DecayAndRate("fused.cautious_adamw", learning_rate, weight_decay, mask)

    def kernel_step(params: Params, state: Any, grads: Updates) -> tuple[Params, Any]:
        adam_state, decay_state, lr_state = state
        found = matching_leaves(params, grads, adam_state.mu, adam_state.nu)
        assert found is not None  # kernel_for checked it
        p_leaves, treedef, (g_leaves, m_leaves, v_leaves) = found
        neg_lr, rate, decayed, new_decay, new_lr = tail.at(decay_state, lr_state, params, treedef)
        count = safe_int32_increment(adam_state.count)
        a = AdamScalars.at(b1, b2, eps, eps_root, count, nesterov)
        hat = a.hat
        named: dict[str, Any] = dict(b1=hat.b1, one_minus_b1=hat.one_minus_b1, b2=a.b2, one_minus_b2=a.one_minus_b2)
        named.update(c1=hat.correction, c1_next=hat.next_correction if nesterov else hat.correction)
        named.update(c2=a.correction2, eps=a.eps, eps_root=a.eps_root, weight_decay=rate, neg_lr=neg_lr)
        # XLA divides by the bias corrections in a program of several leaves and multiplies by their reciprocals in
        # a program of one (as for fused.adamw, see fused_adamw.c)
        named.update(nesterov=float(nesterov), divides=float(len(p_leaves) > 1))
        scalars = jnp.stack([jnp.asarray(named[name], jnp.float32) for name in _kernels.CAUTIOUS_ADAMW_SCALARS])
        new_p, new_m, new_v = _kernels.cautious_adamw_step(
            scalars, jnp.asarray(decayed), p_leaves, g_leaves, m_leaves, v_leaves
        )
        new_adam = ScaleByAdamState(count=count, mu=treedef.unflatten(new_m), nu=treedef.unflatten(new_v))
        return treedef.unflatten(new_p), (new_adam, new_decay, new_lr)

    def kernel_for(params: Params, state: Any, grads: Updates) -> Step | None:
        """The kernel step for these arguments, or None (float32 leaves and moments, scalar hyperparameters, no
        cautious weight decay)."""
        if cautious_weight_decay or moments is not None:
            return None
        adam_state = state[0]
        found = matching_leaves(params, grads, adam_state.mu, adam_state.nu)
        if not (found and found[0] and _covered(found[0], *found[2]) and tail.scalar(*state[1:])):
            return None
        adam_scalars = jax.eval_shape(lambda: AdamScalars.at(b1, b2, eps, eps_root, adam_state.count, nesterov))
        if not all(x.shape == () for x in jax.tree.leaves(adam_scalars)):
            return None
        return kernel_step

    return fused_transformation(cautious(inner), kernel_for)


# inject_hyperparams(cautious_adamw)(...) keeps the fused step
fused_factory(cautious_adamw)
