"""The one place a hyperparameter (a number, an array or a schedule) becomes a value at a step.

Rules:
  * A *schedule* is a callable that JAX sees as a single leaf (a function, a ``functools.partial``, a lambda). A
    callable that is a pytree with children (an Equinox module, used for example as a mask) is data.
  * Schedules are evaluated at the count before it is incremented (step 0 gives ``schedule(0)``).
  * Values are held in ``hyperparam_dtype()``: float32, or float64 when ``jax_enable_x64`` is on, whatever the
    dtype of the parameters, so that bfloat16 parameters never round ``b2=0.999`` to ``1.0``.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp


def hyperparam_dtype() -> jnp.dtype:
    """float32, or float64 under ``jax_enable_x64``: the dtype hyperparameters are computed in."""
    return jnp.dtype(jnp.float64) if jax.config.jax_enable_x64 else jnp.dtype(jnp.float32)


def is_schedule(x: Any) -> bool:
    """Whether ``x`` is a schedule: a callable that is a single pytree leaf (not an Equinox module or other node)."""
    if not callable(x) or isinstance(x, type):
        return False
    treedef = jax.tree.structure(x)
    return treedef.num_nodes == 1 and treedef.num_leaves == 1


def is_callable_data(x: Any) -> bool:
    """Whether ``x`` is callable but also a pytree node with children (data, not a function)."""
    return callable(x) and not isinstance(x, type) and not is_schedule(x)


def as_value(x: Any, dtype=None) -> jax.Array:
    """``x`` as an array of ``dtype`` (default :func:`hyperparam_dtype`)."""
    return jnp.asarray(x, dtype=dtype if dtype is not None else hyperparam_dtype())


def value_at(hyperparam: Any, count: jax.Array, dtype=None) -> jax.Array:
    """The value of a number, array or schedule at step ``count``, as an array of ``dtype`` (default float32)."""
    value = hyperparam(count) if is_schedule(hyperparam) else hyperparam
    return as_value(value, dtype)


def is_concrete(x: Any) -> bool:
    """Whether ``x`` is a concrete value (not a tracer, not a schedule) that can be checked at construction."""
    if is_schedule(x) or x is None:
        return False
    return not any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree.leaves(x))
