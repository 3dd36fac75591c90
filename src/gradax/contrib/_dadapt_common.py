"""Pieces shared by the D-Adaptation family (:func:`dadapt_adamw`, :func:`prodigy`): checks and decay constants."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from .._checks import argument_error, check_decay, check_non_negative, check_positive
from .._hyperparams import as_value


def check_dadapt_args(api: str, betas: Any, eps: Any, estim_lr0: Any, weight_decay: Any) -> None:
    """The construction checks both optimizers share: a pair of decays, eps >= 0, d_0 > 0, weight decay >= 0."""
    if not (isinstance(betas, (tuple, list)) and len(betas) == 2):
        raise argument_error(api, "betas", "a pair (b1, b2)", betas, "Pass e.g. betas=(0.9, 0.999)")
    check_decay(api, "betas[0]", betas[0])
    check_decay(api, "betas[1]", betas[1])
    check_non_negative(api, "eps", eps)
    check_positive(api, "estim_lr0", estim_lr0)
    check_non_negative(api, "weight_decay", weight_decay)


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def with_complement(b: Any, dtype=None) -> tuple[jax.Array, jax.Array]:
    """``(b, 1 - b)`` as arrays. For a Python number, ``1 - b`` is computed in float64 and rounded once, as Optax 0.2.8
    does (``1 - float32(0.999)`` is 1.3e-5 relative away from ``float32(0.001)``)."""
    if _is_number(b):
        return as_value(b, dtype), as_value(1.0 - b, dtype)
    value = as_value(b, dtype)
    return value, 1 - value


def sqrt_decay(b: Any, dtype=None) -> Any:
    """``b ** 0.5``, in float64 for a Python number (as Optax 0.2.8), else in ``dtype``."""
    return b**0.5 if _is_number(b) else jnp.sqrt(as_value(b, dtype))


def tensor_vdot(a: jax.Array, b: jax.Array) -> jax.Array:
    """``<a, b>`` of two real arrays as one contraction at full precision (the reduction order of Optax's tree vdot)."""
    return jnp.tensordot(a, b, a.ndim, precision=jax.lax.Precision.HIGHEST)
