"""Running an inner transformation only when a condition holds: ``apply_if_finite``, ``conditionally_mask``,
``conditionally_transform``.

Each wrapper runs the inner update inside a ``lax.cond``: when the condition fails the inner state is left exactly as
it was and the inner update is not computed. Both branches keep the dtypes of the updates and of the inner state.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol

import jax
import jax.numpy as jnp

from .._base import (
    GradientTransformation,
    GradientTransformationExtraArgs,
    check_transformation,
    with_extra_args_support,
)
from .._checks import check_int
from .._numerics import safe_int32_increment
from ._multisteps import _same_types, _strong


class ConditionFn(Protocol):
    """``fn(step, **extra_args) -> bool scalar``: whether to run the inner transformation at ``step`` (int32)."""

    def __call__(self, step: jax.Array, **extra_args: Any) -> jax.Array: ...


def _check_inner(api: str, inner: Any) -> GradientTransformationExtraArgs:
    check_transformation(api, "inner", inner)
    return with_extra_args_support(inner)


def _run_if(condition, inner, updates, inner_state, params, extra_args, otherwise):
    """``inner.update(...)`` when ``condition`` holds, else ``(otherwise(updates), inner_state)``, via ``lax.cond``."""

    def run(updates, inner_state):
        new_updates, new_state = inner.update(updates, inner_state, params, **extra_args)
        return _same_types(new_updates, updates), _same_types(new_state, inner_state)

    def skip(updates, inner_state):
        return _strong(otherwise(updates)), inner_state

    return jax.lax.cond(jnp.asarray(condition, bool), run, skip, updates, _strong(inner_state))


class ApplyIfFiniteState(NamedTuple):
    """State of :func:`apply_if_finite`."""

    notfinite_count: Any  # shape=(), int32: consecutive non-finite updates (reset to 0 by a finite one; stops at
    # max_consecutive_errors + 1, the value at which the wrapper has given up)
    last_finite: Any  # shape=(), bool: whether the last update was finite
    total_notfinite: Any  # shape=(), int32: non-finite updates since init (never reset; saturates at 2**31 - 1)
    inner_state: Any  # the inner transformation's state


def _all_finite(tree: Any) -> jax.Array:
    leaves = jax.tree.leaves(tree)
    if not leaves:
        return jnp.ones([], bool)
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in leaves]))


def apply_if_finite(inner: GradientTransformation, max_consecutive_errors: int) -> GradientTransformationExtraArgs:
    r"""Skips updates that contain a NaN or an infinity: the update is zero and the inner state is left unchanged.

    After more than ``max_consecutive_errors`` consecutive non-finite updates the wrapper gives up and applies them
    (the non-finite values then reach the inner state and the params). Once it has given up, ``notfinite_count``
    stops counting: it stays at ``max_consecutive_errors + 1`` (Optax 0.2.8 keeps incrementing it) until a finite
    update resets it to 0; ``total_notfinite`` counts every non-finite update.

    .. math::
      c_t = \begin{cases} 0 & g_t \text{ finite} \\ \min(c_{t-1} + 1,\ \text{max\_consecutive\_errors} + 1)
      & \text{otherwise} \end{cases}, \qquad
      \text{apply } \mathrm{inner}(g_t) \iff g_t \text{ finite or } c_t > \text{max\_consecutive\_errors}.

    Args:
      inner: the transformation to protect.
      max_consecutive_errors: how many consecutive non-finite updates to skip (an int >= 0).

    Returns:
      A :class:`GradientTransformationExtraArgs` with state :class:`ApplyIfFiniteState`.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> tx = gradax.apply_if_finite(gradax.sgd(1.0), max_consecutive_errors=2)
      >>> state = tx.init(jnp.zeros(1))
      >>> u, state = tx.update(jnp.array([jnp.nan]), state)
      >>> u, state.notfinite_count, state.total_notfinite
      (Array([0.], dtype=float32), Array(1, dtype=int32), Array(1, dtype=int32))
    """
    api = "apply_if_finite"
    inner = _check_inner(api, inner)
    check_int(api, "max_consecutive_errors", max_consecutive_errors, low=0)

    def init(params):
        return ApplyIfFiniteState(
            notfinite_count=jnp.zeros([], jnp.int32),
            last_finite=jnp.ones([], bool),
            total_notfinite=jnp.zeros([], jnp.int32),
            inner_state=inner.init(params),
        )

    def update(updates, state, params=None, **extra_args):
        finite = _all_finite(updates)
        given_up = jnp.minimum(safe_int32_increment(state.notfinite_count), max_consecutive_errors + 1)
        count = jnp.where(finite, 0, given_up).astype(jnp.int32)
        total = jnp.where(finite, state.total_notfinite, safe_int32_increment(state.total_notfinite))
        apply = jnp.logical_or(finite, count > max_consecutive_errors)
        new_updates, inner_state = _run_if(
            apply, inner, updates, state.inner_state, params, extra_args, lambda u: jax.tree.map(jnp.zeros_like, u)
        )
        return new_updates, ApplyIfFiniteState(
            notfinite_count=count, last_finite=finite, total_notfinite=total, inner_state=inner_state
        )

    return GradientTransformationExtraArgs(init, update)


class ConditionallyMaskState(NamedTuple):
    """State of :func:`conditionally_mask`."""

    step: jax.Array  # shape=(), int32: calls to update so far
    inner_state: Any  # the inner transformation's state


class ConditionallyTransformState(NamedTuple):
    """State of :func:`conditionally_transform`."""

    inner_state: Any  # the inner transformation's state
    step: jax.Array  # shape=(), int32: calls to update so far


def _condition(api, should_transform_fn, step, forward_extra_args, extra_args):
    value = should_transform_fn(step, **extra_args) if forward_extra_args else should_transform_fn(step)
    value = jnp.asarray(value)
    if value.shape != () or value.dtype.kind not in "biu":
        raise TypeError(
            f"{api}(should_transform_fn=...) must return a boolean scalar; got shape {value.shape} and dtype "
            f"{value.dtype}. Return e.g. `step >= 100`."
        )
    return value.astype(bool)


def _conditional(api, inner, should_transform_fn, forward_extra_args, otherwise, state_cls):
    inner = _check_inner(api, inner)
    if not callable(should_transform_fn):
        raise TypeError(
            f"{api}(should_transform_fn=...) must be a function of the step count; got {should_transform_fn!r:.60}."
        )

    def init(params):
        return state_cls(step=jnp.zeros([], jnp.int32), inner_state=inner.init(params))

    def update(updates, state, params=None, **extra_args):
        go = _condition(api, should_transform_fn, state.step, forward_extra_args, extra_args)
        new_updates, inner_state = _run_if(go, inner, updates, state.inner_state, params, extra_args, otherwise)
        return new_updates, state_cls(step=safe_int32_increment(state.step), inner_state=inner_state)

    return GradientTransformationExtraArgs(init, update)


def conditionally_mask(
    inner: GradientTransformation, should_transform_fn: ConditionFn, forward_extra_args: bool = False
) -> GradientTransformationExtraArgs:
    r"""Runs ``inner`` only at the steps where ``should_transform_fn(step)`` is True; other steps give zero updates
    and leave the inner state unchanged.

    Args:
      inner: the transformation.
      should_transform_fn: a function of the step count (int32 scalar, starting at 0) returning a boolean scalar.
      forward_extra_args: also pass the extra keyword arguments of ``update`` to ``should_transform_fn``.

    Returns:
      A :class:`GradientTransformationExtraArgs` with state :class:`ConditionallyMaskState`.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> tx = gradax.conditionally_mask(gradax.sgd(1.0), lambda step: step >= 1)
      >>> state = tx.init(jnp.zeros(1))
      >>> tx.update(jnp.ones(1), state)[0]
      Array([0.], dtype=float32)
    """
    return _conditional(
        "conditionally_mask",
        inner,
        should_transform_fn,
        forward_extra_args,
        lambda u: jax.tree.map(jnp.zeros_like, u),
        ConditionallyMaskState,
    )


def conditionally_transform(
    inner: GradientTransformation, should_transform_fn: ConditionFn, forward_extra_args: bool = False
) -> GradientTransformationExtraArgs:
    r"""Runs ``inner`` only at the steps where ``should_transform_fn(step)`` is True; other steps pass the updates
    through unchanged and leave the inner state unchanged.

    Args:
      inner: the transformation.
      should_transform_fn: a function of the step count (int32 scalar, starting at 0) returning a boolean scalar.
      forward_extra_args: also pass the extra keyword arguments of ``update`` to ``should_transform_fn``.

    Returns:
      A :class:`GradientTransformationExtraArgs` with state :class:`ConditionallyTransformState`.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> tx = gradax.conditionally_transform(gradax.scale(-1.0), lambda step: step >= 1)
      >>> state = tx.init(jnp.zeros(1))
      >>> tx.update(jnp.ones(1), state)[0]
      Array([1.], dtype=float32)
    """
    return _conditional(
        "conditionally_transform",
        inner,
        should_transform_fn,
        forward_extra_args,
        lambda u: u,
        ConditionallyTransformState,
    )
