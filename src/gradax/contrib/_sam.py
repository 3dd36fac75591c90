"""Sharpness-Aware Minimization (SAM) as a wrapper of two transformations."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .._base import GradientTransformation, GradientTransformationExtraArgs
from .._checks import check_int, check_needs
from .._update import apply_updates
from ._state_copies import copy_leaf


class SAMState(NamedTuple):
    """State of :func:`sam`."""

    steps_since_sync: jax.Array  # position inside the current period (transparent mode)
    opt_state: Any  # state of the outer optimizer
    adv_state: Any  # state of the adversarial optimizer
    cache: Any  # the parameters at the start of the period (None in opaque mode)


def _select(cond: jax.Array, if_true: Any, if_false: Any) -> Any:
    """Leafwise choice that never mixes in the other branch's values (a NaN in it stays out)."""
    return jax.tree.map(lambda a, b: jnp.where(cond, a, b).astype(jnp.result_type(b)), if_true, if_false)


def sam(
    optimizer: GradientTransformation,
    adv_optimizer: GradientTransformation,
    sync_period: int = 2,
    reset_state: bool = True,
    opaque_mode: bool = False,
    batch_axis_name: str | None = None,
) -> GradientTransformationExtraArgs:
    r"""Sharpness-Aware Minimization: step along an adversarial ascent, then descend from the original point.

    With :math:`\theta` the parameters at the start of a period of ``sync_period`` steps, the adversarial optimizer
    (typically ``chain(normalize(), sgd(rho))``, giving :math:`\rho\, g / \|g\|`) moves ``sync_period - 1`` times
    *up* the loss, and the last gradient :math:`g_{adv}`, taken at the perturbed point, drives the outer optimizer
    from :math:`\theta`:

    .. math::
      \tilde\theta = \theta + \rho \frac{\nabla L(\theta)}{\|\nabla L(\theta)\|}, \qquad
      \theta \leftarrow \theta + \mathrm{opt}\big(\nabla L(\tilde\theta)\big).

    Transparent mode (default) does one of these sub-steps per ``update`` call: the returned updates move the
    parameters to the next adversarial point, and at the end of the period back to :math:`\theta` plus the outer
    step. Opaque mode does a whole period per call, calling ``grad_fn(params, i)`` for the adversarial gradients.
    Branches are selected with ``where``, so a non-finite value in the unused branch does not leak into the result.

    Args:
      optimizer: the outer optimizer (its updates are applied once per period).
      adv_optimizer: the adversarial optimizer; its updates are negated (ascent).
      sync_period: sub-steps per period (int >= 1): ``sync_period - 1`` adversarial steps, then one outer step.
      reset_state: re-initialize ``adv_optimizer``'s state at the end of each period.
      opaque_mode: do a whole period per ``update`` call, with ``update(..., grad_fn=grad_fn)``.
      batch_axis_name: in opaque mode, average the adversarial gradients over this ``pmap``/``shard_map`` axis.

    Returns:
      A :class:`GradientTransformationExtraArgs` with state :class:`SAMState`; it needs ``params``.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> adv = gradax.chain(gradax.contrib.normalize(), gradax.sgd(0.1))
      >>> tx = gradax.contrib.sam(gradax.sgd(0.5), adv)
      >>> p = jnp.array([3.0, 4.0])
      >>> u, state = tx.update(p, tx.init(p), p)  # adversarial sub-step: +0.1 * g / |g|
      >>> u.round(4)
      Array([0.06, 0.08], dtype=float32)

    References:
      Foret et al., 2021, "Sharpness-Aware Minimization for Efficiently Improving Generalization" (ICLR).
    """
    api = "sam"
    check_int(api, "sync_period", sync_period, low=1)

    def init(params):
        return SAMState(
            steps_since_sync=jnp.zeros([], jnp.int32),
            opt_state=optimizer.init(params),
            adv_state=adv_optimizer.init(params),
            cache=None if opaque_mode else jax.tree.map(lambda p: copy_leaf(p, jnp.result_type(p)), params),
        )

    def negate(tree):
        return jax.tree.map(lambda x: -x, tree)

    def transparent_update(updates, state, params=None, *, grad_fn=None, **extra_args):
        del grad_fn, extra_args
        check_needs(api, "params", params)
        first = state.steps_since_sync == 0
        last = state.steps_since_sync == sync_period - 1
        adv_updates, adv_state = adv_optimizer.update(updates, state.adv_state, params)
        adv_updates = negate(adv_updates)
        opt_updates, opt_state = optimizer.update(updates, state.opt_state, state.cache)
        opt_updates = jax.tree.map(
            lambda c, p, u: (c - p + u).astype(jnp.result_type(u)), state.cache, params, opt_updates
        )
        out = _select(last, opt_updates, adv_updates)
        cache = _select(first, params, state.cache)
        adv_reset = adv_optimizer.init(params) if reset_state else state.adv_state
        return out, SAMState(
            steps_since_sync=(state.steps_since_sync + 1) % sync_period,
            opt_state=_select(last, opt_state, state.opt_state),
            adv_state=_select(last, adv_reset, adv_state),
            cache=cache,
        )

    def opaque_update(updates, state, params=None, *, grad_fn: Callable | None = None, **extra_args):
        del extra_args
        grad_fn = check_needs(api, "grad_fn", grad_fn, "(opaque_mode=True computes the adversarial gradients with it)")
        check_needs(api, "params", params)
        adv_params, grads, adv_state = params, updates, state.adv_state
        for i in range(sync_period - 1):
            step, adv_state = adv_optimizer.update(grads, adv_state, adv_params)
            adv_params = apply_updates(adv_params, negate(step))
            grads = grad_fn(adv_params, i)
            if batch_axis_name is not None:
                grads = jax.lax.pmean(grads, axis_name=batch_axis_name)
        if reset_state:
            adv_state = adv_optimizer.init(params)
        out, opt_state = optimizer.update(grads, state.opt_state, params)
        return out, SAMState(
            steps_since_sync=jnp.zeros([], jnp.int32), opt_state=opt_state, adv_state=adv_state, cache=None
        )

    return GradientTransformationExtraArgs(init, opaque_update if opaque_mode else transparent_update)
