"""Applying updates to parameters, and moving averages of parameter trees."""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from ._base import Params, Updates


def apply_updates(params: Params, updates: Updates) -> Params:
    """``params + updates``, leaf by leaf, keeping each parameter's dtype; ``None`` leaves of params stay ``None``.

    The sum is computed in the promoted dtype and cast back to the parameter's dtype, so that bfloat16 parameters
    stay bfloat16 when the updates are float32.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> gradax.apply_updates({"w": jnp.ones(2)}, {"w": jnp.full(2, -0.5)})["w"]
      Array([0.5, 0.5], dtype=float32)
    """

    def add(p, u):
        if p is None:
            return None
        p = jnp.asarray(p)
        return jnp.asarray(p + u).astype(p.dtype)

    return jax.tree.map(add, params, updates, is_leaf=lambda x: x is None)


def reference_step(update: Callable) -> Callable:
    """``step(params, state, grads)``: ``update`` followed by ``apply_updates`` (what a fused step computes)."""

    def step(params, state, grads):
        updates, state = update(grads, state, params)
        return apply_updates(params, updates), state

    return step


def incremental_update(new_tensors: Params, old_tensors: Params, step_size: ArrayLike) -> Params:
    """Polyak averaging: ``step_size * new + (1 - step_size) * old`` leaf by leaf; ``None`` leaves of
    ``new_tensors`` stay ``None``.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> gradax.incremental_update(jnp.ones(2), jnp.zeros(2), 0.25)
      Array([0.25, 0.25], dtype=float32)
    """

    def average(n, o):
        return None if n is None else step_size * n + (1.0 - step_size) * o

    return jax.tree.map(average, new_tensors, old_tensors, is_leaf=lambda x: x is None)


def periodic_update(new_tensors: Params, old_tensors: Params, steps: ArrayLike, update_period: ArrayLike) -> Params:
    """``new_tensors`` when ``steps`` is a multiple of ``update_period``, else ``old_tensors`` (target networks).

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> gradax.periodic_update(jnp.ones(2), jnp.zeros(2), jnp.asarray(4), 2)
      Array([1., 1.], dtype=float32)
    """
    return jax.lax.cond(jnp.mod(steps, update_period) == 0, lambda _: new_tensors, lambda _: old_tensors, None)
