"""The one place a hyperparameter (a number, an array or a schedule) becomes a value at a step.

Rules:
  * A hyperparameter that is callable is a *schedule*, whatever its type: a function, a ``functools.partial``, a
    lambda, or a callable pytree such as an Equinox module or the ``_ClosureConvert`` of
    ``equinox.filter_closure_convert(schedule, 0)`` (Optax's rule too). Classes are not schedules.
  * A callable passed where a mask or a label tree is expected (``mask=``, ``param_labels=``, ``freeze_mask=``) is
    a function of the params, with one exception: a callable pytree that has the params' structure (or a prefix of
    it), such as an Equinox model whose leaves were mapped to booleans, is the mask tree itself (see
    :func:`is_mask_tree`; Optax would call it).
  * Schedules are evaluated at the count before it is incremented (step 0 gives ``schedule(0)``).
  * Values are held in ``hyperparam_dtype()``: float32, or float64 when ``jax_enable_x64`` is on, whatever the
    dtype of the parameters, so that bfloat16 parameters never round ``b2=0.999`` to ``1.0``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeGuard

import jax
import jax.numpy as jnp


def hyperparam_dtype() -> jnp.dtype:
    """float32, or float64 under ``jax_enable_x64``: the dtype hyperparameters are computed in."""
    # pyrefly: ignore[missing-attribute] - jax.config's flags are attributes made at run time
    return jnp.dtype(jnp.float64) if jax.config.jax_enable_x64 else jnp.dtype(jnp.float32)


def is_schedule(x: Any) -> TypeGuard[Callable[..., Any]]:
    """Whether the hyperparameter ``x`` is a schedule: any callable that is not a class (Equinox modules included)."""
    return callable(x) and not isinstance(x, type)


def is_mask_tree(x: Any, params: Any) -> bool:
    """Whether a mask or label argument ``x`` is a tree for ``params`` rather than a function of them.

    Non-callables are trees. A callable is a function, unless it is a pytree with children whose structure is
    ``params``' structure or a prefix of it (an Equinox model mapped to booleans is callable, and is a mask tree).
    """
    if not is_schedule(x):
        return True
    treedef = jax.tree.structure(x)
    if treedef.num_nodes == 1 and treedef.num_leaves == 1:
        return False
    try:
        jax.tree.map(lambda *_: None, x, params)
    except (ValueError, TypeError, KeyError):
        return False
    return True


def as_value(x: Any, dtype=None) -> jax.Array:
    """``x`` as an array of ``dtype`` (default :func:`hyperparam_dtype`)."""
    return jnp.asarray(x, dtype=dtype if dtype is not None else hyperparam_dtype())


def value_at(hyperparam: Any, count: jax.Array, dtype=None) -> jax.Array:
    """The value of a number, array or schedule at step ``count``, as an array of ``dtype`` (default float32)."""
    value = hyperparam(count) if is_schedule(hyperparam) else hyperparam
    return as_value(value, dtype)


def hyper_values(*values: Any) -> tuple[jax.Array, ...]:
    """The hyperparameters as arrays (:func:`as_value`), behind an optimization barrier.

    The barrier keeps XLA from specializing the arithmetic on constant hyperparameters (reassociating or folding
    them), so a step compiled with Python numbers is bit-identical to one with traced values, as under
    ``inject_hyperparams``.
    """
    return jax.lax.optimization_barrier(tuple(as_value(v) for v in values))


def is_concrete(x: Any) -> bool:
    """Whether ``x`` is a concrete value (not a tracer, not a schedule) that can be checked at construction."""
    if is_schedule(x) or x is None:
        return False
    return not any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree.leaves(x))
