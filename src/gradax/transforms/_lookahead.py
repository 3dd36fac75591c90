"""Lookahead (Zhang et al., 2019): k fast steps forward, one slow step back."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from .._base import (
    GradientTransformation,
    GradientTransformationExtraArgs,
    Params,
    check_transformation,
    with_extra_args_support,
)
from .._checks import check_int, check_interval
from .._hyperparams import as_value
from ..tree._state import is_params_marker


class LookaheadState(NamedTuple):
    """State of :func:`lookahead`."""

    fast_state: Any  # the fast optimizer's state
    steps_since_sync: jax.Array  # shape=(), int32: fast steps since the last synchronization, in [0, sync_period)


class LookaheadParams(NamedTuple):
    """The parameters :func:`lookahead` works on: the fast weights (trained) and the slow weights (evaluated)."""

    fast: Params
    slow: Params

    @classmethod
    def init_synced(cls, params: Params) -> LookaheadParams:
        """Fast and slow weights both equal to ``params``."""
        return cls(fast=params, slow=params)


def lookahead(
    fast_optimizer: GradientTransformation,
    sync_period: int,
    slow_step_size: ArrayLike,
    reset_state: bool = False,
) -> GradientTransformationExtraArgs:
    r"""Lookahead: the fast weights take ``sync_period`` steps of ``fast_optimizer``, then the slow weights move a
    fraction of the way towards them and the fast weights restart from the slow ones.

    .. math::
      \phi_{t+1} = \phi_t + \alpha\, (\theta_{t,k} - \phi_t), \qquad \theta_{t+1,0} = \phi_{t+1}.

    Compute the gradients at ``params.fast``; the updates are a :class:`LookaheadParams` to apply to the whole
    :class:`LookaheadParams` (do not change them before applying).

    Args:
      fast_optimizer: the inner optimizer :math:`A`.
      sync_period: :math:`k \ge 1`, fast steps between synchronizations.
      slow_step_size: :math:`\alpha \in [0, 1]`.
      reset_state: re-initialize the fast optimizer's state at each synchronization.

    Returns:
      A :class:`GradientTransformationExtraArgs` with state :class:`LookaheadState`.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> opt = gradax.lookahead(gradax.sgd(0.1), sync_period=2, slow_step_size=0.5)
      >>> params = gradax.LookaheadParams.init_synced(jnp.ones(1))
      >>> state = opt.init(params)
      >>> for _ in range(2):
      ...     updates, state = opt.update(jnp.ones(1), state, params)
      ...     params = gradax.apply_updates(params, updates)
      >>> params.slow, params.fast
      (Array([0.9], dtype=float32), Array([0.9], dtype=float32))

    References:
      Zhang, Lucas, Hinton and Ba, 2019, "Lookahead Optimizer: k steps forward, 1 step back",
      https://arxiv.org/abs/1907.08610.
    """
    api = "lookahead"
    check_transformation(api, "fast_optimizer", fast_optimizer)
    check_int(api, "sync_period", sync_period, low=1)
    check_interval(api, "slow_step_size", slow_step_size, 0.0, 1.0)
    fast_optimizer = with_extra_args_support(fast_optimizer)

    def init(params):
        if is_params_marker(params):  # gradax.tree.map_params: the fast state is shaped like the fast params
            return LookaheadState(fast_state=fast_optimizer.init(params), steps_since_sync=jnp.zeros([], jnp.int32))
        if not isinstance(params, LookaheadParams):
            raise TypeError(
                f"{api}: init(params) must be a LookaheadParams; got {type(params).__name__}. "
                "Use gradax.LookaheadParams.init_synced(params)."
            )
        return LookaheadState(fast_state=fast_optimizer.init(params.fast), steps_since_sync=jnp.zeros([], jnp.int32))

    def update(updates, state, params=None, **extra_args):
        if not isinstance(params, LookaheadParams):
            raise ValueError(
                f"{api}: update(...) needs `params` as a LookaheadParams; got {type(params).__name__}. "
                "Call update(grads_at_fast, state, params)."
            )
        fast_updates, fast_state = fast_optimizer.update(updates, state.fast_state, params.fast, **extra_args)
        sync = state.steps_since_sync == sync_period - 1
        alpha = as_value(slow_step_size)

        def leaf(u, fast, slow):
            candidate = fast + u
            slow_u = jnp.where(sync, alpha * (candidate - slow), 0).astype(jnp.result_type(slow))
            fast_u = jnp.where(sync, slow + slow_u - fast, u).astype(jnp.result_type(u))
            return fast_u, slow_u

        pairs = jax.tree.map(leaf, fast_updates, params.fast, params.slow)
        outer = jax.tree.structure(fast_updates)
        fast_out, slow_out = jax.tree.transpose(outer, jax.tree.structure((0, 0)), pairs)
        if reset_state:
            fresh = fast_optimizer.init(params.fast)
            fast_state = jax.tree.map(lambda f, s: jnp.where(sync, f, s), fresh, fast_state)
        return LookaheadParams(fast=fast_out, slow=slow_out), LookaheadState(
            fast_state=fast_state, steps_since_sync=((state.steps_since_sync + 1) % sync_period).astype(jnp.int32)
        )

    return GradientTransformationExtraArgs(init, update)
