"""Helpers shared by the tests of gradax's CPU kernels: steps taken through ``step`` or through ``update`` +
``apply_updates``, a float32 trajectory of ``update`` + ``apply_updates``, and the check that ``step`` raises
``update``'s own error."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradax


def update_apply(opt, params, state, grads):
    """What a fused ``step`` computes, the unfused way."""
    updates, state = opt.update(grads, state, params)
    return gradax.apply_updates(params, updates), state


def run_steps(opt, params, grads, steps, fused, *, state=None, shrink=0.2):
    """``steps`` jitted steps from ``state`` (``opt.init(params)`` by default), through ``opt.step`` when ``fused``,
    else ``update`` + ``apply_updates``; step k's gradients are ``grads * (1 - shrink * k)`` in their own dtype."""
    state = opt.init(params) if state is None else state
    one = jax.jit(lambda p, s, g: opt.step(p, s, g) if fused else update_apply(opt, p, s, g))
    for k in range(steps):
        params, state = one(params, state, jax.tree.map(lambda x, k=k: (x * (1.0 - shrink * k)).astype(x.dtype), grads))
    return params, state


def trajectory(tx, params, grads, lib=gradax):
    """The params after each of the steps of ``grads`` (a list of trees; float32 arrays), each step one jitted
    ``update`` + ``apply_updates`` of ``lib`` (gradax, or Optax as an oracle): a list of trees of NumPy arrays, and
    the final state."""
    p = jax.tree.map(lambda x: jnp.asarray(x, jnp.float32), params)
    state = tx.init(p)

    @jax.jit
    def step(p, s, g):
        u, s = tx.update(g, s, p)
        return lib.apply_updates(p, u), s

    out = []
    for g in grads:
        p, state = step(p, state, jax.tree.map(lambda x: jnp.asarray(x, jnp.float32), g))
        out.append(jax.tree.map(np.asarray, p))
    return out, state


def check_usual_error(opt):
    """``step`` with grads that do not match the params raises exactly what ``update`` raises."""
    params = {"a": jnp.ones(3), "b": jnp.ones(2)}
    with pytest.raises((ValueError, TypeError)) as fused_err:
        opt.step(params, opt.init(params), {"a": jnp.ones(3)})
    with pytest.raises((ValueError, TypeError)) as update_err:
        opt.update({"a": jnp.ones(3)}, opt.init(params), params)
    assert str(fused_err.value) == str(update_err.value)
