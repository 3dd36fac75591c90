"""Stochastic gradient descent, with optional (Nesterov) momentum."""

from __future__ import annotations

from typing import Any

from jax.typing import ArrayLike

from .._base import GradientTransformationExtraArgs, ScalarOrSchedule, identity
from .._checks import check_decay
from ..transforms._accumulation import trace
from ..transforms._combining import chain
from ..transforms._scaling import scale_by_learning_rate


def sgd(
    learning_rate: ScalarOrSchedule,
    momentum: ArrayLike | None = None,
    nesterov: bool = False,
    accumulator_dtype: Any | None = None,
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
        scale_by_learning_rate(learning_rate),
    )
