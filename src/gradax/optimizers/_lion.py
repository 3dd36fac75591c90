"""Lion: sign of an interpolation between the momentum and the gradient."""

from typing import Any, Literal, NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from .._base import GradientTransformation, GradientTransformationExtraArgs, MaskOrFn, ScalarOrSchedule, Updates
from .._checks import check_decay, check_one_of
from .._hyperparams import as_value, hyper_values
from .._maps import map_n
from .._numerics import compute_dtype, safe_int32_increment
from .._quantization import FIRST_MOMENT, Blockwise8bit, quantized_step, quantized_zeros, resolve_moments
from .._state import zeros_state_like
from ..transforms._adding import add_decayed_weights
from ..transforms._combining import chain
from ..transforms._scaling import scale_by_learning_rate
from ._moments import ema_leaf

_MODES = ("hard", "smooth", "refined")


class ScaleByLionState(NamedTuple):
    """State of :func:`scale_by_lion`."""

    count: jax.Array  # shape=(), dtype=int32: the number of updates so far
    mu: Updates  # like params, dtype=mu_dtype rule: the momentum


def scale_by_lion(
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.99,
    mu_dtype: Any | None = None,
    *,
    mode: Literal["hard", "smooth", "refined"] = "hard",
    smooth_beta: float = 1.0,
    moments: str | Blockwise8bit | None = None,
) -> GradientTransformation:
    r"""Rescales updates with Lion: the sign of an interpolation of momentum and gradient.

    .. math::
      c_t = (1-\beta_1) g_t + \beta_1 m_{t-1}, \quad u_t = \mathrm{sign}(c_t), \quad
      m_t = (1-\beta_2) g_t + \beta_2 m_{t-1}.

    ``mode="smooth"`` uses :math:`\tanh(\text{smooth\_beta}\cdot c_t)` and ``mode="refined"`` uses :math:`c_t` where
    :math:`|c_t| < 1` and its sign elsewhere. The momentum takes ``mu_dtype`` when given, else the params' dtype
    (float32 for bfloat16/float16 params). With ``moments="8bit"`` (not in Optax) the momentum of every floating
    parameter with at least 4096 elements is stored block-wise in 8 bits (a :class:`gradax.BlockQuantized`, about
    0.25x of float32; see :class:`gradax.Blockwise8bit`) and decoded to float32 for each step.

    Args:
      b1: :math:`\beta_1 \in [0, 1)`, the interpolation weight of the momentum in the update.
      b2: :math:`\beta_2 \in [0, 1)`, the decay of the momentum.
      mu_dtype: dtype of the momentum.
      mode: ``"hard"`` (sign), ``"smooth"`` (tanh) or ``"refined"`` (linear near 0, sign beyond).
      smooth_beta: the slope of ``tanh`` in ``"smooth"`` mode.
      moments: None (dense momentum), ``"8bit"`` or a :class:`gradax.Blockwise8bit` (not with ``mu_dtype``).

    Returns:
      A :class:`GradientTransformation` with state :class:`ScaleByLionState`.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> tx = gradax.scale_by_lion()
      >>> tx.update(jnp.array([0.3, -2.0, 0.0]), tx.init(jnp.zeros(3)))[0]
      Array([ 1., -1.,  0.], dtype=float32)

    References:
      Chen et al., 2023, "Symbolic Discovery of Optimization Algorithms";
      Dettmers et al., 2022, "8-bit Optimizers via Block-wise Quantization" (``moments="8bit"``).
    """
    check_decay("scale_by_lion", "b1", b1)
    check_decay("scale_by_lion", "b2", b2)
    check_one_of("scale_by_lion", "mode", mode, _MODES)
    storage = resolve_moments("scale_by_lion", moments, mu_dtype)

    def direction(c):
        if mode == "hard":
            return jnp.sign(c)
        if mode == "smooth":
            return jnp.tanh(as_value(smooth_beta) * c)
        return jnp.where(jnp.abs(c) < 1.0, c, jnp.sign(c))

    def init(params):
        if storage is not None:
            return ScaleByLionState(count=jnp.zeros([], jnp.int32), mu=quantized_zeros(params, storage))
        return ScaleByLionState(count=jnp.zeros([], jnp.int32), mu=zeros_state_like(params, mu_dtype))

    def update(updates, state, params=None):
        del params
        beta1, beta2 = hyper_values(b1, b2)
        one_minus_b1, one_minus_b2 = 1 - beta1, 1 - beta2

        def leaf(g, m):
            gc = g.astype(compute_dtype(g.dtype))
            u = direction(ema_leaf(gc, m, beta1, one_minus_b1))
            m_new = ema_leaf(gc, m, beta2, one_minus_b2)
            return u.astype(g.dtype), m_new.astype(m.dtype)

        if storage is not None:  # 8-bit momentum: the same arithmetic on (num_blocks, block_size) views
            leaf = quantized_step(leaf, ((FIRST_MOMENT, beta2, one_minus_b2),), state.count)
        new_updates, mu = map_n(2, leaf, updates, state.mu)
        return new_updates, ScaleByLionState(count=safe_int32_increment(state.count), mu=mu)

    return GradientTransformation(init, update)


def lion(
    learning_rate: ScalarOrSchedule,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.99,
    mu_dtype: Any | None = None,
    weight_decay: ScalarOrSchedule = 1e-3,
    mask: MaskOrFn = None,
    *,
    moments: str | Blockwise8bit | None = None,
    cautious_weight_decay: bool = False,
) -> GradientTransformationExtraArgs:
    r"""The Lion optimizer: :func:`scale_by_lion`, decoupled weight decay, then a step of size :math:`-\eta_t`.

    .. math::
      \theta_t = \theta_{t-1} - \eta_t \left(\mathrm{sign}((1-\beta_1) g_t + \beta_1 m_{t-1}) + \lambda_t
      \theta_{t-1}\right), \quad m_t = (1-\beta_2) g_t + \beta_2 m_{t-1}.

    Lion's updates have unit magnitude per coordinate: use a learning rate 3-10x smaller than AdamW's and a weight
    decay 3-10x larger.

    Args:
      learning_rate: :math:`\eta`, a number, an array or a schedule of the step count.
      b1: :math:`\beta_1 \in [0, 1)`.
      b2: :math:`\beta_2 \in [0, 1)`.
      mu_dtype: dtype of the momentum.
      weight_decay: :math:`\lambda`, a number, an array or a schedule.
      mask: which parameters to decay (a tree of booleans or a function of the params); None decays all.
      moments: None (dense momentum), ``"8bit"`` or a :class:`gradax.Blockwise8bit`: block-wise 8-bit momentum
        (see :func:`scale_by_lion`; not in Optax).
      cautious_weight_decay: decay only where the update and the parameter have the same sign (Chen et al., 2025).

    Returns:
      A :class:`GradientTransformationExtraArgs`; ``update`` needs ``params``.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> opt = gradax.lion(learning_rate=0.1, weight_decay=0.0)
      >>> params = jnp.ones(2)
      >>> opt.update(jnp.array([0.5, -0.5]), opt.init(params), params)[0]
      Array([-0.1,  0.1], dtype=float32)

    References:
      Chen et al., 2023, "Symbolic Discovery of Optimization Algorithms".
    """
    check_decay("lion", "b1", b1)
    check_decay("lion", "b2", b2)
    resolve_moments("lion", moments, mu_dtype)
    return chain(
        scale_by_lion(b1, b2, mu_dtype, moments=moments),
        add_decayed_weights(weight_decay, mask, cautious=cautious_weight_decay),
        scale_by_learning_rate(learning_rate),
    )
