"""COCOB-Backprop: learning-rate-free optimization by coin betting."""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from .._base import GradientTransformation, MaskOrFn, ScalarOrSchedule, Updates
from .._checks import check_needs, check_positive
from .._hyperparams import hyper_values
from .._maps import map_n
from .._numerics import compute_dtype, leaf_dtype, state_dtype, zeros_for
from .._state import full_state_like
from ..transforms._adding import add_decayed_weights
from ..transforms._combining import chain
from ..transforms._scaling import scale_by_learning_rate


class COCOBState(NamedTuple):
    """State of :func:`scale_by_cocob` (all like params; float32 for bfloat16/float16 params)."""

    init_particles: Updates  # w_1, the starting point (captured at the first nonzero gradient of each coordinate)
    cumulative_gradients: Updates  # theta: the sum of negative gradients
    scale: Updates  # L: the largest gradient magnitude seen (at least eps)
    subgradients: Updates  # G: the sum of gradient magnitudes
    reward: Updates  # the reward (wealth gained), at least 0


def _fill_start(p0: jax.Array, params: jax.Array) -> jax.Array:
    """The starting point, with the NaN entries that an abstract ``init`` left taken from ``params``.

    A ``lax.cond`` on the first entry: once filled, the starting point passes through without being read and
    rewritten every step (a ``where`` over it would also make XLA copy the buffer before the step overwrites it).
    """
    if p0.size == 0 or not jnp.issubdtype(p0.dtype, jnp.inexact):
        return p0
    return jax.lax.cond(jnp.isnan(p0.ravel()[0]), lambda: jnp.where(jnp.isnan(p0), params, p0), lambda: p0)


def scale_by_cocob(alpha: ArrayLike = 100.0, eps: ArrayLike = 1e-8) -> GradientTransformation:
    r"""COCOB-Backprop's step as an update (new params minus current params).

    Per coordinate, with :math:`c_t` the incoming update (the gradient):

    .. math::
      L_t = \max(L_{t-1}, |c_t|), \ G_t = G_{t-1} + |c_t|, \ R_t = \max(R_{t-1} - c_t (w_t - w_1), 0), \
      \theta_t = \theta_{t-1} - c_t,

    .. math::
      w_{t+1} = w_1 + \frac{\theta_t}{L_t \max(G_t + L_t, \alpha L_t)} (L_t + R_t), \qquad u_t = w_{t+1} - w_t,

    with :math:`L_0 = \varepsilon`. The starting point :math:`w_1` is a copy of the params made by ``init`` (as in
    Optax 0.2.8). ``init`` also works on ``jax.ShapeDtypeStruct`` leaves: the starting point is then NaN until the
    first update, which takes it from the params it is given.

    Args:
      alpha: :math:`\alpha > 0`, bounds the fraction of wealth bet early on.
      eps: :math:`\varepsilon > 0`, the initial :math:`L`.

    Returns:
      A :class:`GradientTransformation` with state :class:`COCOBState`; ``update`` needs ``params``.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> tx = gradax.contrib.scale_by_cocob()
      >>> tx.update(jnp.array([1.0, -2.0]), tx.init(jnp.zeros(2)), jnp.zeros(2))[0]
      Array([-0.01,  0.01], dtype=float32)

    References:
      Orabona and Tommasi, 2017, "Training Deep Networks without Learning Rates Through Coin Betting" (NeurIPS).
    """
    api = "scale_by_cocob"
    check_positive(api, "alpha", alpha)
    check_positive(api, "eps", eps)

    def init(params):
        def leaf(p):
            dtype = state_dtype(leaf_dtype(p))
            zeros = lambda: zeros_for(p, dtype)
            if isinstance(p, jax.ShapeDtypeStruct):  # not known yet: NaN marks it, the first update fills it in
                start = jnp.full(np.shape(p), jnp.nan if jnp.issubdtype(dtype, jnp.inexact) else 0, dtype)
            else:
                start = jnp.array(p, dtype, copy=True)
            return start, zeros(), full_state_like(p, eps), zeros(), zeros()

        return COCOBState(*map_n(5, leaf, params))

    def update(updates, state, params=None):
        check_needs(api, "params", params)
        (a,) = hyper_values(alpha)

        def leaf(c, p, p0, theta, big_l, big_g, reward):
            cc = c.astype(compute_dtype(c.dtype))
            pc = p.astype(p0.dtype)
            p0 = _fill_start(p0, pc)
            big_l = jnp.maximum(big_l, jnp.abs(cc))
            big_g = big_g + jnp.abs(cc)
            reward = jnp.maximum(reward - cc * (pc - p0), 0)
            theta = theta - cc
            w = p0 + theta / (big_l * jnp.maximum(big_g + big_l, a * big_l)) * (big_l + reward)
            u = w - pc
            dt = p0.dtype
            return u.astype(c.dtype), p0, theta.astype(dt), big_l.astype(dt), big_g.astype(dt), reward.astype(dt)

        out, *fields = map_n(
            6,
            leaf,
            updates,
            params,
            state.init_particles,
            state.cumulative_gradients,
            state.scale,
            state.subgradients,
            state.reward,
        )
        return out, COCOBState(*fields)

    return GradientTransformation(init, update)


def cocob(
    learning_rate: ScalarOrSchedule = 1.0,
    alpha: ArrayLike = 100.0,
    eps: ArrayLike = 1e-8,
    weight_decay: ScalarOrSchedule = 0.0,
    mask: MaskOrFn = None,
    *,
    cautious_weight_decay: bool = False,
) -> GradientTransformation:
    r"""COCOB-Backprop: weight decay, the gradient scaled by ``learning_rate`` (no sign flip), then COCOB's step.

    .. math::
      c_t = \eta_t (g_t + \lambda w_t), \qquad w_{t+1} = w_1 + \frac{\theta_t}{L_t \max(G_t + L_t, \alpha L_t)}
      (L_t + R_t).

    COCOB needs no learning rate; ``learning_rate`` (default 1) only rescales the gradients it sees.

    Args:
      learning_rate: :math:`\eta`, a number, an array or a schedule of the step count.
      alpha: :math:`\alpha > 0`.
      eps: :math:`\varepsilon > 0`.
      weight_decay: :math:`\lambda`, a number, an array or a schedule.
      mask: which parameters to decay.
      cautious_weight_decay: decay only where the update and the parameter have the same sign (Chen et al., 2025).

    Returns:
      A :class:`GradientTransformation`; ``update`` needs ``params``.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> opt = gradax.contrib.cocob()
      >>> opt.update(jnp.array([1.0]), opt.init(jnp.zeros(1)), jnp.zeros(1))[0]
      Array([-0.01], dtype=float32)

    References:
      Orabona and Tommasi, 2017, "Training Deep Networks without Learning Rates Through Coin Betting" (NeurIPS).
    """
    return chain(
        add_decayed_weights(weight_decay, mask, cautious=cautious_weight_decay),
        scale_by_learning_rate(learning_rate, flip_sign=False),
        scale_by_cocob(alpha, eps),
    )
