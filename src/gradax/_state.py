"""Builders of optimizer-state trees shaped like the params.

Every transformation builds the arrays of its state that mirror the params here, so that the rules hold in one place:
  * a leaf may be an array (its sharding is kept, eagerly and under ``jit``), a ``jax.ShapeDtypeStruct`` (abstract
    init) or a Python number (see :func:`gradax._numerics.zeros_for`);
  * moments and accumulators take the state dtype of :func:`gradax._numerics.state_dtype`: the requested dtype when
    given, else float32 for bfloat16/float16 params, else the params' own dtype;
  * every array is a buffer of its own, so that a state can be donated.
"""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from ._numerics import leaf_dtype, state_dtype, zeros_for


def zeros_state_like(params: Any, dtype: Any | None = None) -> Any:
    """Zeros shaped like ``params``, in the state dtype (``dtype`` when given, see :func:`state_dtype`)."""
    return jax.tree.map(lambda p: zeros_for(p, state_dtype(leaf_dtype(p), dtype)), params)


def zeros_like_params(params: Any) -> Any:
    """Zeros shaped like ``params`` in each leaf's own dtype (for state that holds copies or differences of params)."""
    return jax.tree.map(lambda p: zeros_for(p), params)


def full_state_like(params: Any, value: ArrayLike, dtype: Any | None = None) -> Any:
    """Arrays filled with ``value``, shaped like ``params``, in the state dtype (``dtype`` when given).

    Every array is a buffer of its own, never ``value``'s: ``jnp.full`` of a scalar shape returns its fill array
    itself, and a state holding one buffer twice (or the injected hyperparameter's) cannot be donated.
    """

    def leaf(p):
        dt = state_dtype(leaf_dtype(p), dtype)
        if isinstance(p, jax.Array):  # keeps the param's sharding, eagerly and under jit
            return zeros_for(p, dt) + jnp.asarray(value, dt)
        return jnp.full(np.shape(p), jnp.array(value, dt, copy=True))

    return jax.tree.map(leaf, params)
