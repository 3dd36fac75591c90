"""AdaDelta: steps scaled by the ratio of the RMS of past updates to the RMS of past gradients."""

from typing import NamedTuple

import jax.numpy as jnp
from jax.typing import ArrayLike

from .._base import GradientTransformation, GradientTransformationExtraArgs, MaskOrFn, Params, ScalarOrSchedule
from .._checks import check_decay, check_non_negative
from .._hyperparams import as_value, is_schedule
from .._maps import map_n
from .._numerics import compute_dtype
from .._state import full_state_like
from ..transforms._adding import add_decayed_weights
from ..transforms._combining import chain
from ..transforms._scaling import scale_by_learning_rate


class ScaleByAdaDeltaState(NamedTuple):
    """State of :func:`scale_by_adadelta`."""

    e_g: Params  # like params, float32 for bf16/f16 params: EMA of the squared gradients
    e_x: Params  # like params: EMA of the squared updates


def scale_by_adadelta(rho: ArrayLike = 0.9, eps: ArrayLike = 1e-6) -> GradientTransformation:
    r"""AdaDelta's scaling: the RMS of past updates over the RMS of past gradients.

    .. math::
      E[g^2]_t = \rho E[g^2]_{t-1} + (1 - \rho) g_t^2, \quad
      u_t = \frac{\sqrt{E[u^2]_{t-1} + \epsilon}}{\sqrt{E[g^2]_t + \epsilon}}\, g_t, \quad
      E[u^2]_t = \rho E[u^2]_{t-1} + (1 - \rho) u_t^2.

    Args:
      rho: :math:`\rho \in [0, 1)`, the decay of both moving averages.
      eps: :math:`\epsilon > 0` (with 0 the first update is 0 and stays 0).

    Returns:
      A :class:`GradientTransformation` with state :class:`ScaleByAdaDeltaState`.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> tx = gradax.scale_by_adadelta(rho=0.0, eps=1.0)
      >>> tx.update(jnp.array([0.0]), tx.init(jnp.zeros(1)))[0]
      Array([0.], dtype=float32)

    References:
      Zeiler, 2012, "ADADELTA: An Adaptive Learning Rate Method".
    """
    check_decay("scale_by_adadelta", "rho", rho)
    check_non_negative("scale_by_adadelta", "eps", eps)

    def init(params):
        return ScaleByAdaDeltaState(e_g=full_state_like(params, 0), e_x=full_state_like(params, 0))

    def update(updates, state, params=None):
        del params
        r, e = as_value(rho), as_value(eps)

        def leaf(g, e_g, e_x):
            dtype = compute_dtype(g.dtype)
            gc = g.astype(dtype)
            new_e_g = ((1 - r) * gc**2 + r * e_g.astype(dtype)).astype(e_g.dtype)
            u = (jnp.sqrt(e_x.astype(dtype) + e) / jnp.sqrt(new_e_g.astype(dtype) + e)) * gc
            u = u.astype(g.dtype)
            uc = u.astype(dtype)
            new_e_x = ((1 - r) * uc**2 + r * e_x.astype(dtype)).astype(e_x.dtype)
            return u, new_e_g, new_e_x

        new_updates, e_g, e_x = map_n(3, leaf, updates, state.e_g, state.e_x)
        return new_updates, ScaleByAdaDeltaState(e_g=e_g, e_x=e_x)

    return GradientTransformation(init, update)


def adadelta(
    learning_rate: ScalarOrSchedule | None = None,
    rho: ArrayLike = 0.9,
    eps: ArrayLike = 1e-6,
    weight_decay: ScalarOrSchedule = 0.0,
    weight_decay_mask: MaskOrFn = None,
    *,
    cautious_weight_decay: bool = False,
) -> GradientTransformationExtraArgs:
    r"""AdaDelta, with optional decoupled weight decay added to the gradient first.

    .. math::
      d_t = g_t + \lambda_t \theta_t, \qquad \theta_{t+1} = \theta_t - \eta_t\, \mathrm{adadelta}(d)_t,

    where :math:`\mathrm{adadelta}` is :func:`scale_by_adadelta`.

    Args:
      learning_rate: :math:`\eta`, a number, an array or a schedule; ``None`` means 1 (AdaDelta needs no learning
        rate). The update always descends (Optax 0.2.8 ascends with ``None``; see docs/differences.md).
      rho: :math:`\rho \in [0, 1)`.
      eps: :math:`\epsilon \ge 0`.
      weight_decay: :math:`\lambda \ge 0`, a number, an array or a schedule.
      weight_decay_mask: which parameters get weight decay (a pytree of booleans, a prefix, or a function of the
        params); None decays all.
      cautious_weight_decay: decay only where the update and the parameter have the same sign (Chen et al., 2025).

    Returns:
      A :class:`GradientTransformationExtraArgs`; ``update`` needs ``params``.

    Example:
      >>> import gradax, jax, jax.numpy as jnp
      >>> params = jnp.array([1.0, -2.0])
      >>> opt = gradax.adadelta(learning_rate=10.0)
      >>> state = opt.init(params)
      >>> for _ in range(200):
      ...     grads = jax.grad(lambda p: jnp.sum(p**2))(params)
      ...     updates, state = opt.update(grads, state, params)
      ...     params = gradax.apply_updates(params, updates)
      >>> bool(jnp.all(jnp.abs(params) < 0.5))
      True

    References:
      Zeiler, 2012, "ADADELTA: An Adaptive Learning Rate Method".
    """
    if not is_schedule(weight_decay):
        check_non_negative("adadelta", "weight_decay", weight_decay)
    return chain(
        add_decayed_weights(weight_decay, mask=weight_decay_mask, cautious=cautious_weight_decay),
        scale_by_adadelta(rho=rho, eps=eps),
        scale_by_learning_rate(1.0 if learning_rate is None else learning_rate),
    )
