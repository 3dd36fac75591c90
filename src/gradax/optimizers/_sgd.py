"""Stochastic gradient descent, with optional (Nesterov) momentum."""

from typing import Any

from jax.typing import ArrayLike

from .._base import GradientTransformationExtraArgs, MaskOrFn, ScalarOrSchedule, identity
from .._checks import check_decay
from ..transforms._accumulation import trace
from ..transforms._adding import decoupled_weight_decay
from ..transforms._combining import chain
from ..transforms._scaling import scale_by_learning_rate


def sgd(
    learning_rate: ScalarOrSchedule,
    momentum: ArrayLike | None = None,
    nesterov: bool = False,
    accumulator_dtype: Any | None = None,
    *,
    weight_decay: ScalarOrSchedule | None = None,
    weight_decay_mask: MaskOrFn = None,
    cautious_weight_decay: bool = False,
) -> GradientTransformationExtraArgs:
    r"""Stochastic gradient descent, with optional heavy-ball or Nesterov momentum.

    .. math::
      t_k = g_k + \beta\, t_{k-1}, \qquad
      \theta_{k+1} = \theta_k - \eta_k\, t_k \ \ (\text{or } \eta_k (g_k + \beta t_k) \text{ with Nesterov}).

    Without momentum, :math:`\theta_{k+1} = \theta_k - \eta_k g_k`.

    Args:
      learning_rate: :math:`\eta`, a number or a schedule of the step count.
      momentum: :math:`\beta \in [0, 1)`, or None for plain SGD.
      nesterov: use Nesterov momentum.
      accumulator_dtype: dtype of the momentum (default float32 for bfloat16/float16 params, else the params').
      weight_decay: :math:`\lambda \ge 0`, decoupled weight decay added to the update before the learning rate
        (:math:`\theta \leftarrow \theta - \eta_t (u_t + \lambda_t \theta)`): a number, an array or a schedule.
        ``None`` (the default) adds nothing: the chain, its state and its numbers are Optax's.
      weight_decay_mask: which leaves to decay (a tree of booleans or a function of the params); ``None`` decays all.
      cautious_weight_decay: decay only where the update and the parameter have the same sign (Chen et al., 2025).

    Returns:
      A :class:`GradientTransformationExtraArgs` with state ``(TraceState | EmptyState, ScaleState |
      ScaleByScheduleState)``.

    Example:
      >>> import gradax, jax, jax.numpy as jnp
      >>> params = jnp.array([1.0, -2.0])
      >>> opt = gradax.sgd(learning_rate=0.1, momentum=0.9)
      >>> state = opt.init(params)
      >>> grads = jax.grad(lambda p: jnp.sum(p**2))(params)
      >>> updates, state = opt.update(grads, state)
      >>> gradax.apply_updates(params, updates)
      Array([ 0.8, -1.6], dtype=float32)

    References:
      Robbins and Monro, 1951, "A stochastic approximation method";
      Sutskever et al., 2013, "On the importance of initialization and momentum in deep learning".
    """
    if momentum is not None:
        check_decay("sgd", "momentum", momentum)
    return chain(
        trace(decay=momentum, nesterov=nesterov, accumulator_dtype=accumulator_dtype)
        if momentum is not None
        else identity(),
        *decoupled_weight_decay(weight_decay, weight_decay_mask, cautious_weight_decay),
        scale_by_learning_rate(learning_rate),
    )
