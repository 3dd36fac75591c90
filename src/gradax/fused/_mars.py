"""gradax.fused.mars: MARS-AdamW whose ``step`` updates and applies in one kernel pass on the CPU."""

from typing import Any

import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from .. import _kernels
from .._base import MaskOrFn, Params, ScalarOrSchedule, Updates
from .._checks import argument_error
from .._numerics import safe_int32_increment
from ..contrib._mars import MarsScalars, ScaleByMarsState
from ..contrib._mars import mars as _mars
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
    """Whether the kernel takes every leaf: params, grads and the three state arrays float32 of one shape."""
    for leaves in zip(*groups, strict=True):
        if not all(getattr(x, "dtype", None) == _F32 for x in leaves):
            return False
        if len({np.shape(x) for x in leaves}) != 1:
            return False
    return True


def mars(
    learning_rate: ScalarOrSchedule = 3e-3,
    b1: ArrayLike = 0.95,
    b2: ArrayLike = 0.99,
    gamma: ArrayLike = 0.025,
    eps: ArrayLike = 1e-8,
    weight_decay: ScalarOrSchedule = 0.0,
    mask: MaskOrFn = None,
    *,
    variant: str = "adamw",
    max_norm: ArrayLike = 1.0,
    mu_dtype: Any | None = None,
    cautious_weight_decay: bool = False,
) -> FusedGradientTransformation:
    r"""MARS-AdamW with a fused ``step`` that updates the params and the state in one pass.

    .. math::
      c_t = \frac{g_t + \gamma \frac{\beta_1}{1-\beta_1} (g_t - g_{t-1})}{\max(1, \lVert \cdot \rVert_2 / C)}, \quad
      m_t = \beta_1 m_{t-1} + (1-\beta_1) c_t, \quad v_t = \beta_2 v_{t-1} + (1-\beta_2) c_t^2, \\
      \theta_t = \theta_{t-1} - \eta_t \left(\frac{m_t / (1-\beta_1^t)}{\sqrt{v_t / (1-\beta_2^t)} + \varepsilon}
      + \lambda_t \theta_{t-1}\right).

    ``init`` and ``update`` are those of ``gradax.contrib.mars(...)`` (same arguments, same state, same updates).
    ``step(params, state, grads)`` returns ``(new_params, new_state)`` (arguments in the order of the results: donate
    them with ``jax.jit(opt.step, donate_argnums=(0, 1))``). On the CPU backend it is one multithreaded C kernel
    call per 32 leaves, taking them in groups that fit in the cache: a read-only pass sums each leaf's squares of
    the corrected gradient (its norm), then the update pass writes the params, both moments and the kept gradient in
    place, reading the gradients the first pass left in the cache: 44 bytes per float32 parameter at most, where
    XLA's passes move 72. It takes trees whose params, grads and state are float32. Its element-wise arithmetic is
    XLA:CPU's, rounding for rounding; the norm is the float32 squares summed in float64 (``update``'s is XLA's
    float32 reduction, in XLA's order), so its results are bit for bit those of ``update`` + ``apply_updates``
    where no leaf is clipped and within float32 rounding where one is. For other dtypes, with
    ``cautious_weight_decay``, on GPU, with several devices under ``jit`` (GSPMD sharding), under
    ``jax_enable_x64`` or without a C compiler ``step`` is ``update`` followed by ``apply_updates``, and so are
    ``vmap`` and autodiff of ``step``.

    Args:
      learning_rate: :math:`\eta`, a number, an array or a schedule of the step count.
      b1: :math:`\beta_1 \in [0, 1)`.
      b2: :math:`\beta_2 \in [0, 1)`.
      gamma: :math:`\gamma \ge 0`, the scale of the variance-reduction term.
      eps: :math:`\varepsilon \ge 0`.
      weight_decay: :math:`\lambda \ge 0`, a number, an array or a schedule.
      mask: which leaves to decay (a tree of booleans or a function of the params); ``None`` decays all.
      variant: ``"adamw"`` (the only one fused; MARS-Lion is ``gradax.contrib.mars(variant="lion")``).
      max_norm: :math:`C > 0`, the bound on the norm of each leaf's corrected gradient.
      mu_dtype: dtype of the momentum (the kernel runs when it is float32).
      cautious_weight_decay: decay only where the update and the parameter have the same sign (``step`` is then
        ``update`` + ``apply_updates``).

    Returns:
      A :class:`FusedGradientTransformation`: ``init``, ``update`` and ``step``.

    Raises:
      ValueError: for ``variant="lion"``, and for the arguments ``gradax.contrib.mars`` refuses.

    Example:
      >>> import gradax, jax, jax.numpy as jnp
      >>> params = {"w": jnp.array([1.0, -2.0])}
      >>> opt = gradax.fused.mars(learning_rate=0.1)
      >>> step = jax.jit(opt.step, donate_argnums=(0, 1))
      >>> params, state = step(params, opt.init(params), {"w": jnp.array([0.3, -0.4])})
      >>> params["w"]
      Array([ 0.9, -1.9], dtype=float32)

    References:
      Yuan et al., 2024, "MARS: Unleashing the Power of Variance Reduction for Training Large Models",
      https://arxiv.org/abs/2411.10438.
    """
    if variant != "adamw":
        raise argument_error(
            "fused.mars", "variant", "'adamw'", variant, "For MARS-Lion use gradax.contrib.mars(variant='lion')"
        )
    tx = _mars(
        learning_rate, b1, b2, gamma, eps, weight_decay, mask,
        variant=variant, max_norm=max_norm, mu_dtype=mu_dtype, cautious_weight_decay=cautious_weight_decay,
    )  # fmt: skip
    tail = DecayAndRate("fused.mars", learning_rate, weight_decay, mask)

    def kernel_step(params: Params, state: Any, grads: Updates) -> tuple[Params, Any]:
        mars_state, decay_state, lr_state = state
        found = matching_leaves(params, grads, mars_state.mu, mars_state.nu, mars_state.last_grad)
        assert found is not None  # kernel_for checked it
        p_leaves, treedef, (g_leaves, m_leaves, v_leaves, l_leaves) = found
        neg_lr, rate, decayed, new_decay, new_lr = tail.at(decay_state, lr_state, params, treedef)
        count = safe_int32_increment(mars_state.count)
        k = MarsScalars.at(b1, b2, gamma, eps, max_norm, count)
        named = dict(b1=k.beta1, one_minus_b1=1 - k.beta1, b2=k.beta2, one_minus_b2=1 - k.beta2)
        named.update(inv_c1=k.inv1, inv_c2=k.inv2, eps=k.eps, scale=k.scale, max_norm=k.bound)
        named.update(weight_decay=rate, neg_lr=neg_lr)
        scalars = jnp.stack([jnp.asarray(named[name], jnp.float32) for name in _kernels.MARS_SCALARS])
        new_p, new_m, new_v, new_l = _kernels.mars_step(
            scalars, jnp.asarray(decayed), p_leaves, g_leaves, m_leaves, v_leaves, l_leaves
        )
        new_mars = ScaleByMarsState(
            count=count, mu=treedef.unflatten(new_m), nu=treedef.unflatten(new_v), last_grad=treedef.unflatten(new_l)
        )
        return treedef.unflatten(new_p), (new_mars, new_decay, new_lr)

    def kernel_for(params: Params, state: Any, grads: Updates) -> Step | None:
        """The kernel step for these arguments, or None (float32 leaves and state, scalar rates, no cautious decay)."""
        if cautious_weight_decay:
            return None
        mars_state = state[0]
        found = matching_leaves(params, grads, mars_state.mu, mars_state.nu, mars_state.last_grad)
        if not (found and found[0] and _covered(found[0], *found[2]) and tail.scalar(*state[1:])):
            return None
        return kernel_step

    return fused_transformation(tx, kernel_for)


# inject_hyperparams(mars)(...) keeps the fused step
fused_factory(mars)
