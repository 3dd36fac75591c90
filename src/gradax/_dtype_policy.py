"""The process-wide policy for the dtype of optimizer state that no argument of the optimizer sets."""

from __future__ import annotations

from types import TracebackType
from typing import Any

import jax
import jax.numpy as jnp

from ._checks import argument_error

POLICIES = ("gradax", "optax")
_current = ["gradax"]


def current_state_dtype_policy() -> str:
    """The policy in effect: ``"gradax"`` (the default) or ``"optax"`` (Optax 0.2.8's state dtypes)."""
    return _current[0]


def optax_scalar_dtype(params: Any, which: str, default: Any) -> jnp.dtype:
    """The dtype of a scalar state entry: ``default`` under the ``"gradax"`` policy; under ``"optax"``, Optax 0.2.8's
    choice for it, the ``"lowest"`` or ``"highest"`` float dtype among ``params``' leaves or the ``"first"`` leaf's
    (real) dtype."""
    if _current[0] != "optax":
        return jnp.dtype(default)
    dtypes = [jnp.dtype(x.dtype) if hasattr(x, "dtype") else jnp.result_type(x) for x in jax.tree.leaves(params)]
    if not dtypes:
        return jnp.dtype(default)
    if which == "first":
        return jnp.real(jnp.zeros([], dtypes[0])).dtype
    floats = [d for d in dtypes if jnp.issubdtype(d, jnp.floating)] or [jnp.dtype(default)]
    ordered = sorted(floats, key=lambda d: jnp.finfo(d).bits)
    return ordered[0] if which == "lowest" else ordered[-1]


class _Restore:
    """Returned by :func:`state_dtype_policy`; as a context manager, puts the previous policy back on exit."""

    def __init__(self, previous: str):
        self.previous = previous

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        _current[0] = self.previous

    def __repr__(self) -> str:
        return f"state_dtype_policy({_current[0]!r}) (previous: {self.previous!r})"


def state_dtype_policy(policy: str) -> _Restore:
    r"""Sets the dtypes of optimizer state that no argument of the optimizer sets: gradax's, or Optax 0.2.8's.

    When to use: gradax keeps the moments and accumulators of bfloat16/float16 params in float32 (``"gradax"``, the
    default: a bfloat16 second moment loses the small squared gradients), where Optax 0.2.8 keeps the params' dtype.
    Pass ``"optax"`` to get Optax's state dtypes exactly, e.g. for checkpoints that Optax code reads or writes, to
    match Optax's memory footprint, or for code that checks ``state.mu.dtype == params.dtype``. An explicit
    ``mu_dtype=``, ``accumulator_dtype=``, ``state_dtype=``, ... argument always wins over the policy.

    The rule, for a state array that mirrors a param leaf of dtype :math:`d`, with no dtype argument given:

    - ``"gradax"``: float32 for bfloat16/float16 :math:`d`, float32 (float64 under x64) for integer :math:`d`,
      :math:`d` otherwise; scalar state (step sizes, distance estimates, injected hyperparameters) in float32
      (float64 under x64);
    - ``"optax"``: what Optax 0.2.8 keeps: :math:`d` for moments and accumulators, the params' dtype for scalar
      state, float32 for ``MultiSteps``' accumulated gradients.

    Under either policy an update computes in at least float32 and rounds its result to the state's dtype, so with
    ``"optax"`` the state trees (dtypes, checkpoints) equal Optax's, while the values of bfloat16 state can differ
    from those of Optax's bfloat16 arithmetic in the last bits.

    The policy is read when a state is built (``init``, traced or not), so set it before the first ``init`` (and
    before tracing a function that calls ``init``: ``jax.jit`` does not retrace when the policy changes). It is
    process-wide, not per thread.

    Args:
      policy: ``"gradax"`` or ``"optax"``.

    Returns:
      An object that, used as a context manager, puts the previous policy back on exit; the call itself sets the
      policy, so ``gradax.state_dtype_policy("optax")`` alone sets it for the rest of the process.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> params = jnp.zeros(3, jnp.bfloat16)
      >>> gradax.adam(1e-3).init(params)[0].mu.dtype
      dtype('float32')
      >>> with gradax.state_dtype_policy("optax"):
      ...     gradax.adam(1e-3).init(params)[0].mu.dtype
      dtype(bfloat16)

    References:
      Micikevicius et al., 2018, "Mixed Precision Training" (why low-precision training keeps float32 state).
    """
    if policy not in POLICIES:
        raise argument_error(
            "state_dtype_policy",
            "policy",
            "'gradax' or 'optax'",
            policy,
            "Use 'optax' for Optax 0.2.8's state dtypes (the params' dtype), 'gradax' for float32 state of "
            "low-precision params",
        )
    previous = _current[0]
    _current[0] = policy
    return _Restore(previous)
