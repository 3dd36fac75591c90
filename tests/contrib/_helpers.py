"""Shared helpers for the tests of gradax.contrib (part B): differential runs against Optax 0.2.8."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax  # the test oracle

import gradax
from tests._stepping import run


def tree(seed: int = 0, dtype=jnp.float32, shapes=None):
    """A small pytree of random arrays."""
    shapes = shapes or {"w": (4, 3), "b": (3,), "s": ()}
    keys = jax.random.split(jax.random.key(seed), len(shapes))
    return {n: jax.random.normal(k, shapes[n], dtype) for k, n in zip(keys, sorted(shapes))}


def assert_matches_optax(make, params=None, steps=10, rtol=1e-5, atol=1e-6, extra=None, grad_fn=None, state=True):
    """``make(lib)`` from gradax and from optax give the same params (and state leaves) over ``steps`` steps."""
    params = tree() if params is None else params
    shapes = {k: jnp.shape(v) for k, v in params.items()}
    grads = (lambda i, p: grad_fn(p)) if grad_fn else (lambda i, p: tree(100 + i, shapes=shapes))
    extra_at = (lambda i, p, g: extra(i, p)) if extra else None
    _, s1, ours = run(make(gradax), params, grads, steps, extra=extra_at, apply=gradax.apply_updates)
    _, s2, theirs = run(make(optax), params, grads, steps, extra=extra_at, apply=optax.apply_updates)
    for a, b in zip(ours, theirs):
        jax.tree.map(lambda x, y: np.testing.assert_allclose(x, y, rtol=rtol, atol=atol), a, b)
    if state:
        l1, l2 = jax.tree.leaves(s1), jax.tree.leaves(s2)
        assert len(l1) == len(l2)
        for x, y in zip(l1, l2):
            np.testing.assert_allclose(np.asarray(x, np.float64), np.asarray(y, np.float64), rtol=rtol, atol=atol)
    return ours, theirs


def assert_each_leaf_as_if_alone(tx, shapes, steps, seed, rtol=1e-7, atol=1e-5):
    """``tx`` over a tree of leaves shaped ``shapes`` gives each leaf the update it gets as the only leaf, step after
    step: for optimizers that batch work across leaves (one refresh for all factors of one size)."""
    rng = np.random.default_rng(seed)
    grads = [{k: jnp.asarray(rng.normal(size=s).astype(np.float32)) for k, s in shapes.items()} for _ in range(steps)]
    update = jax.jit(tx.update)
    state = tx.init(grads[0])
    alone = {k: tx.init(grads[0][k]) for k in shapes}
    for g in grads:
        u, state = update(g, state)
        for k in shapes:
            uk, alone[k] = update(g[k], alone[k])
            np.testing.assert_allclose(np.asarray(u[k]), np.asarray(uk), rtol=rtol, atol=atol)
