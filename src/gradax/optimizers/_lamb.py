"""LAMB: Adam's step rescaled per layer by a trust ratio."""

from jax.typing import ArrayLike

from .._base import GradientTransformationExtraArgs, MaskOrFn, ScalarOrSchedule
from ..transforms._adding import add_decayed_weights
from ..transforms._combining import chain
from ..transforms._scaling import scale_by_learning_rate
from ._adam import check_adam_args, scale_by_adam
from ._trust import scale_by_trust_ratio


def lamb(
    learning_rate: ScalarOrSchedule,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-6,
    eps_root: ArrayLike = 0.0,
    weight_decay: ScalarOrSchedule = 0.0,
    mask: MaskOrFn = None,
    *,
    cautious_weight_decay: bool = False,
) -> GradientTransformationExtraArgs:
    r"""The LAMB optimizer: Adam's step plus decoupled weight decay, rescaled per layer by the trust ratio.

    For every array (layer) with parameters :math:`\theta`:

    .. math::
      r_t = \frac{\hat m_t}{\sqrt{\hat v_t + \epsilon_{root}} + \epsilon} + \lambda_t \theta_{t-1}, \quad
      \theta_t = \theta_{t-1} - \eta_t \frac{\|\theta_{t-1}\|}{\|r_t\|} r_t

    (the ratio is 1 when either norm is zero; see :func:`scale_by_trust_ratio`).

    Args:
      learning_rate: :math:`\eta`, a number, an array or a schedule of the step count.
      b1: :math:`\beta_1 \in [0, 1)`.
      b2: :math:`\beta_2 \in [0, 1)`.
      eps: :math:`\epsilon \ge 0`.
      eps_root: :math:`\epsilon_{root} \ge 0`.
      weight_decay: :math:`\lambda`, a number, an array or a schedule.
      mask: which parameters to decay (a tree of booleans or a function of the params); None decays all.
      cautious_weight_decay: decay only where the update and the parameter have the same sign (Chen et al., 2025).

    Returns:
      A :class:`GradientTransformationExtraArgs`; ``update`` needs ``params``.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> opt = gradax.lamb(learning_rate=0.1, eps=0.0)
      >>> params = jnp.array([3.0, 4.0])
      >>> opt.update(jnp.array([1.0, -1.0]), opt.init(params), params)[0]
      Array([-0.35355338,  0.35355338], dtype=float32)

    References:
      You et al., 2020, "Large Batch Optimization for Deep Learning: Training BERT in 76 minutes".
    """
    check_adam_args("lamb", b1, b2, eps, eps_root)
    return chain(
        scale_by_adam(b1, b2, eps, eps_root),
        add_decayed_weights(weight_decay, mask, cautious=cautious_weight_decay),
        scale_by_trust_ratio(),
        scale_by_learning_rate(learning_rate),
    )
