"""Optimistic gradient methods (for min-max games): optimistic gradient descent and optimistic Adam."""

import warnings
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from .._base import GradientTransformation, GradientTransformationExtraArgs, MaskOrFn, ScalarOrSchedule, Updates
from .._checks import argument_error
from .._hyperparams import hyper_values, is_schedule
from .._maps import map_n
from .._numerics import compute_dtype
from .._state import zeros_state_like
from ..transforms._adding import decoupled_weight_decay
from ..transforms._combining import chain
from ..transforms._scaling import scale_by_learning_rate
from ._adam import check_adam_args, scale_by_adam


class ScaleByOptimisticGradientState(NamedTuple):
    """State of :func:`scale_by_optimistic_gradient`."""

    is_initial_step: jax.Array  # shape=(), dtype=bool: True before the first update
    previous_gradient: Updates  # like params: the last incoming updates


def _no_schedule(api: str, arg: str, value: Any) -> ArrayLike:
    """``value``, checked not to be a schedule."""
    if is_schedule(value):
        raise argument_error(api, arg, "a number or an array", "a callable", "Schedules are not supported here")
    return value


def scale_by_optimistic_gradient(alpha: ArrayLike = 1.0, beta: ArrayLike = 1.0) -> GradientTransformation:
    r"""Computes generalized optimistic gradients: :math:`u_t = (\alpha + \beta) g_t - \beta g_{t-1}`.

    At the first step :math:`g_{0} = g_1`, so the first update is :math:`\alpha g_1`.

    Args:
      alpha: :math:`\alpha`, the weight of the current gradient.
      beta: :math:`\beta`, the weight of the optimistic correction (negative momentum).

    Returns:
      A :class:`GradientTransformation` with state ``ScaleByOptimisticGradientState(is_initial_step,
      previous_gradient)``.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> tx = gradax.scale_by_optimistic_gradient(alpha=1.0, beta=1.0)
      >>> state = tx.init(jnp.zeros(1))
      >>> _, state = tx.update(jnp.array([1.0]), state)
      >>> tx.update(jnp.array([3.0]), state)[0]
      Array([5.], dtype=float32)

    References:
      Mokhtari et al., 2019, "A Unified Analysis of Extra-gradient and Optimistic Gradient Methods for Saddle
      Point Problems: Proximal Point Approach".
    """
    _no_schedule("scale_by_optimistic_gradient", "alpha", alpha)
    _no_schedule("scale_by_optimistic_gradient", "beta", beta)

    def init(params):
        return ScaleByOptimisticGradientState(
            is_initial_step=jnp.array(True), previous_gradient=zeros_state_like(params)
        )

    def update(updates, state, params=None):
        del params
        a, b = hyper_values(alpha, beta)

        def leaf(g, prev):
            gc = g.astype(compute_dtype(g.dtype))
            last = jnp.where(state.is_initial_step, gc, prev.astype(gc.dtype))
            u = (a + b) * gc - b * last
            return u.astype(g.dtype), gc.astype(prev.dtype)

        new_updates, prev = map_n(2, leaf, updates, state.previous_gradient)
        return new_updates, ScaleByOptimisticGradientState(
            is_initial_step=jnp.zeros_like(state.is_initial_step), previous_gradient=prev
        )

    return GradientTransformation(init, update)


def optimistic_gradient_descent(
    learning_rate: ScalarOrSchedule,
    alpha: ScalarOrSchedule = 1.0,
    beta: ScalarOrSchedule = 1.0,
    *,
    weight_decay: ScalarOrSchedule | None = None,
    weight_decay_mask: MaskOrFn = None,
    cautious_weight_decay: bool = False,
) -> GradientTransformationExtraArgs:
    r"""Optimistic gradient descent: :math:`\theta_{t+1} = \theta_t - \eta_t ((\alpha+\beta) g_t - \beta g_{t-1})`.

    Args:
      learning_rate: :math:`\eta`, a number, an array or a schedule of the step count.
      alpha: :math:`\alpha`, a number or an array.
      beta: :math:`\beta`, a number or an array.
      weight_decay: :math:`\lambda \ge 0`, decoupled weight decay added to the update before the learning rate
        (:math:`\theta \leftarrow \theta - \eta_t (u_t + \lambda_t \theta)`): a number, an array or a schedule.
        ``None`` (the default) adds nothing: the chain, its state and its numbers are Optax's.
      weight_decay_mask: which leaves to decay (a tree of booleans or a function of the params); ``None`` decays all.
      cautious_weight_decay: decay only where the update and the parameter have the same sign (Chen et al., 2025).

    Returns:
      A :class:`GradientTransformationExtraArgs`.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> opt = gradax.optimistic_gradient_descent(learning_rate=0.1)
      >>> opt.update(jnp.array([2.0]), opt.init(jnp.zeros(1)))[0]
      Array([-0.2], dtype=float32)

    References:
      Mokhtari et al., 2019, "A Unified Analysis of Extra-gradient and Optimistic Gradient Methods for Saddle
      Point Problems: Proximal Point Approach".
    """
    alpha_value = _no_schedule("optimistic_gradient_descent", "alpha", alpha)
    beta_value = _no_schedule("optimistic_gradient_descent", "beta", beta)
    return chain(
        scale_by_optimistic_gradient(alpha_value, beta_value),
        *decoupled_weight_decay(weight_decay, weight_decay_mask, cautious_weight_decay),
        scale_by_learning_rate(learning_rate),
    )


def _optimistic_adam_chain(api, learning_rate, alpha, beta, b1, b2, eps, eps_root, mu_dtype, nesterov, nu_dtype):
    """Adam's step :math:`a_t`, made optimistic (:func:`scale_by_optimistic_gradient` with ``alpha``, ``beta``), then a
    step of size ``-learning_rate``; the Adam hyperparameters are checked first, under the recipe's name ``api``."""
    check_adam_args(api, b1, b2, eps, eps_root)
    return chain(
        scale_by_adam(b1, b2, eps, eps_root, mu_dtype, nesterov=nesterov, nu_dtype=nu_dtype),
        scale_by_optimistic_gradient(alpha=alpha, beta=beta),
        scale_by_learning_rate(learning_rate),
    )


def optimistic_adam(
    learning_rate: ArrayLike,
    optimism: ArrayLike | None = None,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-8,
    eps_root: ArrayLike = 0.0,
    mu_dtype: Any | None = None,
    *,
    nesterov: bool = True,
    nu_dtype: Any | None = None,
) -> GradientTransformationExtraArgs:
    r"""Optimistic Adam (deprecated: use :func:`optimistic_adam_v2`, which accepts schedules).

    With :math:`a_t` Adam's (Nesterov) step from :func:`scale_by_adam`:

    .. math::
      \theta_{t+1} = \theta_t - ((\eta + o)\, a_t - o\, a_{t-1}), \quad o = \text{optimism (default } \eta).

    Args:
      learning_rate: :math:`\eta`, a number or an array (no schedule).
      optimism: :math:`o`, the weight of the optimistic correction; None uses ``learning_rate``.
      b1: :math:`\beta_1 \in [0, 1)`.
      b2: :math:`\beta_2 \in [0, 1)`.
      eps: :math:`\epsilon \ge 0`.
      eps_root: :math:`\epsilon_{root} \ge 0`.
      mu_dtype: dtype of the first moment.
      nesterov: use Nesterov momentum in the Adam step.
      nu_dtype: dtype of the second moment.

    Returns:
      A :class:`GradientTransformationExtraArgs`.

    Example:
      >>> import warnings, gradax, jax.numpy as jnp
      >>> with warnings.catch_warnings():
      ...     warnings.simplefilter("ignore")
      ...     opt = gradax.optimistic_adam(learning_rate=0.1)
      >>> opt.update(jnp.array([2.0]), opt.init(jnp.zeros(1)))[0].shape
      (1,)

    References:
      Daskalakis et al., 2018, "Training GANs with Optimism".
    """
    warnings.warn(
        "optimistic_adam is deprecated; use `optimistic_adam_v2` instead, which also accepts schedules.",
        DeprecationWarning,
        stacklevel=2,
    )
    if is_schedule(learning_rate):
        raise argument_error(
            "optimistic_adam",
            "learning_rate",
            "a number or an array",
            "a callable",
            "Use optimistic_adam_v2 for learning-rate schedules",
        )
    if optimism is None:
        optimism = learning_rate
    return _optimistic_adam_chain(
        "optimistic_adam", 1.0, learning_rate, optimism, b1, b2, eps, eps_root, mu_dtype, nesterov, nu_dtype
    )


def optimistic_adam_v2(
    learning_rate: ScalarOrSchedule,
    *,
    alpha: ArrayLike = 1.0,
    beta: ArrayLike = 1.0,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-8,
    eps_root: ArrayLike = 0.0,
    mu_dtype: Any | None = None,
    nesterov: bool = True,
    nu_dtype: Any | None = None,
) -> GradientTransformationExtraArgs:
    r"""Optimistic Adam: Adam's step :math:`a_t`, made optimistic, then a step of size :math:`-\eta_t`.

    .. math::
      \theta_{t+1} = \theta_t - \eta_t ((\alpha + \beta)\, a_t - \beta\, a_{t-1}).

    Args:
      learning_rate: :math:`\eta`, a number, an array or a schedule of the step count.
      alpha: :math:`\alpha`, the weight of the current Adam step.
      beta: :math:`\beta`, the weight of the optimistic correction.
      b1: :math:`\beta_1 \in [0, 1)`.
      b2: :math:`\beta_2 \in [0, 1)`.
      eps: :math:`\epsilon \ge 0`.
      eps_root: :math:`\epsilon_{root} \ge 0`.
      mu_dtype: dtype of the first moment.
      nesterov: use Nesterov momentum in the Adam step.
      nu_dtype: dtype of the second moment.

    Returns:
      A :class:`GradientTransformationExtraArgs`.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> opt = gradax.optimistic_adam_v2(learning_rate=0.1)
      >>> opt.update(jnp.array([2.0]), opt.init(jnp.zeros(1)))[0].shape
      (1,)

    References:
      Daskalakis et al., 2018, "Training GANs with Optimism".
    """
    return _optimistic_adam_chain(
        "optimistic_adam_v2", learning_rate, alpha, beta, b1, b2, eps, eps_root, mu_dtype, nesterov, nu_dtype
    )
