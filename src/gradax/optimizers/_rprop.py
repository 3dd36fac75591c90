"""Rprop: per-coordinate step sizes adapted from the sign agreement of successive gradients."""

from typing import NamedTuple

import jax.numpy as jnp
from jax.typing import ArrayLike

from .._base import GradientTransformation, GradientTransformationExtraArgs, Params, ScalarOrSchedule
from .._checks import check_interval, check_non_negative, check_positive
from .._hyperparams import as_value, is_schedule, value_at
from .._maps import map_n
from .._numerics import compute_dtype
from .._state import full_state_like, zeros_state_like
from ..transforms._combining import chain
from ..transforms._scaling import scale


class ScaleByRpropState(NamedTuple):
    """State of :func:`scale_by_rprop`."""

    step_sizes: Params  # like params, float32 for bf16/f16 params: the current per-coordinate step sizes
    prev_updates: Params  # like params: the last update, zero where the gradient's sign flipped


def _initial_step(learning_rate):
    """The initial step size: ``learning_rate``, or a schedule's value at step 0."""
    return value_at(learning_rate, jnp.zeros([], jnp.int32)) if is_schedule(learning_rate) else learning_rate


def _check(api, learning_rate, eta_minus, eta_plus, min_step_size, max_step_size):
    if not is_schedule(learning_rate):
        check_positive(api, "learning_rate", learning_rate)
    check_interval(api, "eta_minus", eta_minus, 0.0, 1.0, low_closed=False)
    check_interval(api, "eta_plus", eta_plus, 1.0)
    check_non_negative(api, "min_step_size", min_step_size)
    check_positive(api, "max_step_size", max_step_size)


def scale_by_rprop(
    learning_rate: ScalarOrSchedule,
    eta_minus: ArrayLike = 0.5,
    eta_plus: ArrayLike = 1.2,
    min_step_size: ArrayLike = 1e-6,
    max_step_size: ArrayLike = 50.0,
) -> GradientTransformation:
    r"""Rprop's scaling (iRprop-): a step of adaptive size along the sign of each gradient coordinate.

    With :math:`s_t = g_t\, u_{t-1}` (the sign agreement with the last step):

    .. math::
      \Delta_t = \begin{cases} \min(\eta^+ \Delta_{t-1}, \Delta_{\max}) & s_t > 0 \\
                               \max(\eta^- \Delta_{t-1}, \Delta_{\min}) & s_t < 0 \\
                               \Delta_{t-1} & s_t = 0 \end{cases}, \qquad
      u_t = \begin{cases} 0 & s_t < 0 \\ \Delta_t\, \mathrm{sign}(g_t) & \text{else} \end{cases}

    and :math:`u_t` is returned (to be subtracted) and kept for the next step. The first step moves by
    :math:`\Delta_0` = ``learning_rate`` (Optax 0.2.8 returns the previous step's :math:`u`, hence zeros first; see
    docs/differences.md).

    Args:
      learning_rate: :math:`\Delta_0 > 0`, the initial step size (a schedule is evaluated at step 0: Rprop adapts
        its step sizes itself).
      eta_minus: :math:`\eta^- \in (0, 1]`, the factor applied when the sign flips.
      eta_plus: :math:`\eta^+ \ge 1`, the factor applied when the sign is kept.
      min_step_size: :math:`\Delta_{\min} \ge 0`.
      max_step_size: :math:`\Delta_{\max} > 0`.

    Returns:
      A :class:`GradientTransformation` with state :class:`ScaleByRpropState`.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> tx = gradax.scale_by_rprop(0.1)
      >>> state = tx.init(jnp.zeros(2))
      >>> u, state = tx.update(jnp.array([1.0, -1.0]), state)
      >>> u, state = tx.update(jnp.array([1.0, 1.0]), state)
      >>> u
      Array([0.12, 0.  ], dtype=float32)

    References:
      Riedmiller and Braun, 1993, "A direct adaptive method for faster backpropagation learning: the RPROP
      algorithm"; Igel and Hüsken, 2000, "Improving the Rprop Learning Algorithm".
    """
    _check("scale_by_rprop", learning_rate, eta_minus, eta_plus, min_step_size, max_step_size)
    initial = _initial_step(learning_rate)

    def init(params):
        return ScaleByRpropState(
            step_sizes=full_state_like(params, initial),
            prev_updates=zeros_state_like(params),
        )

    def update(updates, state, params=None):
        del params
        down, up = as_value(eta_minus), as_value(eta_plus)
        lo, hi = as_value(min_step_size), as_value(max_step_size)

        def leaf(g, step, prev):
            dtype = compute_dtype(g.dtype)
            gc = g.astype(dtype)
            agreement = gc * prev.astype(dtype)
            grown = jnp.clip(step.astype(dtype) * jnp.where(agreement > 0, up, down), lo, hi)
            new_step = jnp.where(agreement == 0, step.astype(dtype), grown)
            new_u = jnp.where(agreement < 0, jnp.zeros_like(gc), new_step * jnp.sign(gc))
            return new_u.astype(g.dtype), new_step.astype(step.dtype), new_u.astype(prev.dtype)

        new_updates, steps, prevs = map_n(3, leaf, updates, state.step_sizes, state.prev_updates)
        return new_updates, ScaleByRpropState(step_sizes=steps, prev_updates=prevs)

    return GradientTransformation(init, update)


def rprop(
    learning_rate: ScalarOrSchedule,
    eta_minus: ArrayLike = 0.5,
    eta_plus: ArrayLike = 1.2,
    min_step_size: ArrayLike = 1e-6,
    max_step_size: ArrayLike = 50.0,
) -> GradientTransformationExtraArgs:
    r"""Rprop: :func:`scale_by_rprop` followed by a descent step, :math:`\theta_{t+1} = \theta_t - u_t`.

    Args:
      learning_rate: the initial step size :math:`\Delta_0 > 0` (a schedule is evaluated at step 0).
      eta_minus: :math:`\eta^- \in (0, 1]`.
      eta_plus: :math:`\eta^+ \ge 1`.
      min_step_size: :math:`\Delta_{\min} \ge 0`.
      max_step_size: :math:`\Delta_{\max} > 0`.

    Returns:
      A :class:`GradientTransformationExtraArgs`.

    Example:
      >>> import gradax, jax, jax.numpy as jnp
      >>> params = jnp.array([1.0, -2.0])
      >>> opt = gradax.rprop(learning_rate=0.1)
      >>> state = opt.init(params)
      >>> for _ in range(50):
      ...     grads = jax.grad(lambda p: jnp.sum(p**2))(params)
      ...     updates, state = opt.update(grads, state)
      ...     params = gradax.apply_updates(params, updates)
      >>> bool(jnp.all(jnp.abs(params) < 0.01))
      True

    References:
      Riedmiller and Braun, 1993, "A direct adaptive method for faster backpropagation learning: the RPROP
      algorithm".
    """
    _check("rprop", learning_rate, eta_minus, eta_plus, min_step_size, max_step_size)
    return chain(
        scale_by_rprop(
            learning_rate=learning_rate,
            eta_minus=eta_minus,
            eta_plus=eta_plus,
            min_step_size=min_step_size,
            max_step_size=max_step_size,
        ),
        scale(-1.0),
    )
