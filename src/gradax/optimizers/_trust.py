"""Layer-wise trust ratios: scale_by_trust_ratio and the optimizers built on it (fromage, lars)."""

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from .._base import EmptyState, GradientTransformation, GradientTransformationExtraArgs, MaskOrFn, ScalarOrSchedule
from .._checks import check_decay, check_needs, check_non_negative, check_positive
from .._hyperparams import as_value, is_schedule, value_at
from .._numerics import compute_dtype, safe_norm
from ..transforms._accumulation import trace
from ..transforms._adding import add_decayed_weights
from ..transforms._combining import chain
from ..transforms._masking import masked
from ..transforms._scaling import scale_by_learning_rate

ScaleByTrustRatioState = EmptyState


def trust_ratio_leaf(update: jax.Array, param: jax.Array, min_norm, trust_coefficient, eps) -> jax.Array:
    """``update`` scaled by ``trust_coefficient * ||param|| / (||update|| + eps)`` (1 where a norm is zero)."""
    dtype = compute_dtype(update.dtype)
    u = update.astype(dtype)
    p = param.astype(compute_dtype(param.dtype))
    param_norm = safe_norm(p, min_norm)
    update_norm = safe_norm(u, min_norm)
    ratio = trust_coefficient * param_norm / (update_norm + eps)
    degenerate = jnp.logical_or(param_norm == 0.0, update_norm == 0.0)
    ratio = jnp.where(degenerate, jnp.ones_like(ratio), ratio)
    return (u * ratio).astype(update.dtype)


def scale_by_trust_ratio(
    min_norm: ArrayLike = 0.0,
    trust_coefficient: ArrayLike = 1.0,
    eps: ArrayLike = 0.0,
) -> GradientTransformation:
    r"""Scales each array of updates by its trust ratio, the ratio of the parameter norm to the update norm.

    For every array (layer) :math:`u` with parameters :math:`\theta`:

    .. math::
      u \leftarrow u \cdot \frac{c\, \max(\|\theta\|, m)}{\max(\|u\|, m) + \epsilon},

    and :math:`u` is left unchanged when either norm is zero (a layer that would otherwise never move).

    Args:
      min_norm: :math:`m \ge 0`, the smallest norm used (0 disables the clipping of norms).
      trust_coefficient: :math:`c`, multiplies the ratio.
      eps: :math:`\epsilon \ge 0`, added to the update norm.

    Returns:
      A :class:`GradientTransformation` with an empty state; ``update`` needs ``params``.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> tx = gradax.scale_by_trust_ratio()
      >>> params = jnp.array([3.0, 4.0])
      >>> tx.update(jnp.array([0.0, 0.5]), tx.init(params), params)[0]
      Array([0., 5.], dtype=float32)

    References:
      You et al., 2017, "Large Batch Training of Convolutional Networks" (LARS);
      You et al., 2020, "Large Batch Optimization for Deep Learning: Training BERT in 76 minutes" (LAMB).
    """
    check_non_negative("scale_by_trust_ratio", "min_norm", min_norm)
    check_non_negative("scale_by_trust_ratio", "eps", eps)

    def init(params):
        del params
        return ScaleByTrustRatioState()

    def update(updates, state, params=None):
        check_needs("scale_by_trust_ratio", "params", params)
        m, c, e = as_value(min_norm), as_value(trust_coefficient), as_value(eps)
        new_updates = jax.tree.map(lambda u, p: trust_ratio_leaf(u, p, m, c, e), updates, params)
        return new_updates, state

    return GradientTransformation(init, update)


def fromage(learning_rate: ScalarOrSchedule, min_norm: ArrayLike = 1e-6) -> GradientTransformationExtraArgs:
    r"""Fromage: Frobenius-matched gradient descent, a layer-wise relative update with a built-in shrinkage.

    For every array with parameters :math:`\theta` and gradient :math:`g`:

    .. math::
      \theta \leftarrow \frac{1}{\sqrt{1 + \eta^2}}
      \left(\theta - \eta \frac{\|\theta\|}{\|g\|} g\right),

    written as the chain of :func:`scale_by_trust_ratio`, the learning rate :math:`\eta / \sqrt{1 + \eta^2}` and
    a weight decay of :math:`1/\sqrt{1 + \eta^2} - 1`.

    Args:
      learning_rate: :math:`\eta`, a number, an array or a schedule of the step count.
      min_norm: the smallest norm used in the trust ratio (> 0; avoids dividing by zero).

    Returns:
      A :class:`GradientTransformationExtraArgs`; ``update`` needs ``params``.

    Example:
      >>> import gradax, jax, jax.numpy as jnp
      >>> params = jnp.array([1.0, -2.0])
      >>> opt = gradax.fromage(learning_rate=0.1)
      >>> state = opt.init(params)
      >>> updates, state = opt.update(jnp.array([2.0, -4.0]), state, params)
      >>> gradax.apply_updates(params, updates)
      Array([ 0.89553344, -1.7910669 ], dtype=float32)

    References:
      Bernstein et al., 2020, "On the distance between two neural networks and the stability of learning".
    """
    check_positive("fromage", "min_norm", min_norm)
    if not is_schedule(learning_rate):
        check_non_negative("fromage", "learning_rate", learning_rate)

    def shrink(count):
        lr = value_at(learning_rate, count)
        return 1 / (1 + lr**2) ** 0.5

    if is_schedule(learning_rate):
        step = lambda count: shrink(count) * value_at(learning_rate, count)
        decay = lambda count: shrink(count) - 1
    else:
        mult = 1 / (1 + as_value(learning_rate) ** 2) ** 0.5
        step, decay = as_value(learning_rate) * mult, mult - 1
    return chain(scale_by_trust_ratio(min_norm), scale_by_learning_rate(step), add_decayed_weights(decay))


def lars(
    learning_rate: ScalarOrSchedule,
    weight_decay: ScalarOrSchedule = 0.0,
    weight_decay_mask: MaskOrFn = True,
    trust_coefficient: ArrayLike = 0.001,
    eps: ArrayLike = 0.0,
    trust_ratio_mask: MaskOrFn = True,
    momentum: ArrayLike = 0.9,
    nesterov: bool = False,
    *,
    cautious_weight_decay: bool = False,
) -> GradientTransformationExtraArgs:
    r"""LARS: SGD with momentum where each layer's step is scaled by its trust ratio.

    .. math::
      d = g + \lambda \theta, \qquad
      s = \eta\, c \frac{\|\theta\|}{\|d\| + \epsilon}\, d, \qquad
      m_t = s + \beta m_{t-1}, \qquad \theta \leftarrow \theta - m_t,

    with the weight decay applied where ``weight_decay_mask`` is True and the trust ratio where
    ``trust_ratio_mask`` is True.

    Args:
      learning_rate: :math:`\eta`, a number, an array or a schedule of the step count.
      weight_decay: :math:`\lambda`, a number, an array or a schedule.
      weight_decay_mask: which parameters get weight decay (a pytree of booleans, a prefix of it, or a function of
        the params).
      trust_coefficient: :math:`c`, multiplies the trust ratio.
      eps: :math:`\epsilon \ge 0`, added to the update norm.
      trust_ratio_mask: which parameters get the trust-ratio scaling.
      momentum: :math:`\beta \in [0, 1)`.
      nesterov: use Nesterov momentum.
      cautious_weight_decay: decay only where the update and the parameter have the same sign (Chen et al., 2025).

    Returns:
      A :class:`GradientTransformationExtraArgs`; ``update`` needs ``params``.

    Example:
      >>> import gradax, jax, jax.numpy as jnp
      >>> params = jnp.array([1.0, -2.0])
      >>> opt = gradax.lars(learning_rate=0.1, trust_coefficient=0.1)
      >>> state = opt.init(params)
      >>> updates, state = opt.update(jnp.array([2.0, -4.0]), state, params)
      >>> gradax.apply_updates(params, updates)
      Array([ 0.99, -1.98], dtype=float32)

    References:
      You et al., 2017, "Large Batch Training of Convolutional Networks".
    """
    check_decay("lars", "momentum", momentum)
    check_non_negative("lars", "eps", eps)
    if not is_schedule(weight_decay):
        check_non_negative("lars", "weight_decay", weight_decay)
    return chain(
        add_decayed_weights(weight_decay, mask=weight_decay_mask, cautious=cautious_weight_decay),
        masked(scale_by_trust_ratio(trust_coefficient=trust_coefficient, eps=eps), mask=trust_ratio_mask),
        scale_by_learning_rate(learning_rate),
        trace(decay=momentum, nesterov=nesterov),
    )
