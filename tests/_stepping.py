"""The one loop the tests use to step a transformation: ``run`` applies ``tx`` under jit over a series of gradients."""

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax

import gradax


class Trajectory(NamedTuple):
    """What :func:`run` returns."""

    updates: list  # the updates of each step
    state: Any  # the state after the last step
    params: list  # the params after each step


def run(
    tx: Any,
    params: Any,
    grads: Sequence[Any] | Callable[[int, Any], Any],
    steps: int | None = None,
    *,
    extra: dict | Callable[[int, Any, Any], dict] | None = None,
    apply: Callable[[Any, Any], Any] | None = gradax.apply_updates,
) -> Trajectory:
    """Runs ``tx.update`` (jitted once) step by step and applies each update to the params.

    Args:
      tx: a gradax or Optax transformation.
      params: the initial params.
      grads: the gradient of each step: a sequence of trees, or a function ``grads(i, params)`` of the step index and
        the current params, called for ``i`` in ``range(steps)``.
      steps: the number of steps (default: ``len(grads)``).
      extra: extra keyword arguments of ``update``: a dict (fixed, closed over: it may hold functions), or a function
        ``extra(i, params, grads)`` that returns arrays for step ``i`` (passed through ``jit``).
      apply: how updates change the params (``optax.apply_updates`` for an Optax run); None keeps them fixed.

    Returns:
      The :class:`Trajectory`: the updates and the params of every step and the final state.
    """
    if steps is None:
        steps = len(grads)
    grad_at = grads if callable(grads) else (lambda i, _: grads[i])
    fixed = extra if isinstance(extra, dict) else {}
    step = jax.jit(lambda g, s, p, e: tx.update(g, s, p, **fixed, **e))
    state = tx.init(params)
    updates, history = [], []
    for i in range(steps):
        g = grad_at(i, params)
        e = extra(i, params, g) if callable(extra) else {}
        u, state = step(g, state, params, e)
        if apply is not None:
            params = apply(params, u)
        updates.append(u)
        history.append(params)
    return Trajectory(updates, state, history)
