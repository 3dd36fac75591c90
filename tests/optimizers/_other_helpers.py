"""Shared helpers for the tests of the non-Adam optimizer families (rms, adagrad, adafactor, sm3, ...)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax  # the test oracle

import gradax
from tests._stepping import run


def random_tree(seed: int = 0, dtype=jnp.float32, shapes=None):
    """A small pytree of random arrays (a matrix, a vector, a scalar and a 3-d array)."""
    shapes = shapes or {"w": (4, 3), "b": (3,), "s": (), "t": (2, 3, 2)}
    keys = jax.random.split(jax.random.key(seed), len(shapes))
    return {name: jax.random.normal(k, shapes[name], dtype) for k, name in zip(keys, sorted(shapes))}


def random_grads(seed: int = 1):
    """``grads(i, params)`` for :func:`tests._stepping.run`: random gradients shaped like ``params`` at step ``i``."""
    return lambda i, params: random_tree(seed + 100 * i, shapes={k: jnp.shape(v) for k, v in params.items()})


def assert_matches_optax(make, params=None, steps: int = 10, rtol: float = 1e-5, atol: float = 1e-6, extra_args=None):
    """``make(lib)`` built with gradax and with optax gives the same updates and state leaves over ``steps`` steps."""
    params = random_tree() if params is None else params
    runs = []
    for lib in (gradax, optax):
        extra = (lambda i, p, g, lib=lib: extra_args(p, g, lib)) if extra_args else None
        runs.append(run(make(lib), params, random_grads(), steps, extra=extra, apply=lib.apply_updates))
    (ours, our_state, _), (theirs, their_state, _) = runs
    for a, b in zip(ours, theirs):
        jax.tree.map(lambda x, y: np.testing.assert_allclose(x, y, rtol=rtol, atol=atol), a, b)
    our_leaves = jax.tree.leaves(our_state)
    their_leaves = jax.tree.leaves(their_state)
    assert len(our_leaves) == len(their_leaves)
    for x, y in zip(our_leaves, their_leaves):
        x, y = _plain(x), _plain(y)
        np.testing.assert_allclose(np.asarray(x, np.float64), np.asarray(y, np.float64), rtol=rtol, atol=atol)
    assert jax.tree.structure(our_state).num_leaves == jax.tree.structure(their_state).num_leaves
    return ours, theirs


def _plain(x):
    """Key data for PRNG key arrays, the array itself otherwise."""
    if isinstance(x, jax.Array) and jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
        return jax.random.key_data(x)
    return x


def converges(opt, steps: int = 200, tol: float = 1e-2, start=(1.5, -2.0), extra=None):
    """Runs ``opt`` on ``f(x) = 0.5 * sum(a * x**2)``; returns whether the final loss is below ``tol``."""
    a = jnp.array([1.0, 3.0])

    def loss(x):
        return 0.5 * jnp.sum(a * x**2)

    params = jnp.array(start)
    state = opt.init(params)

    @jax.jit
    def step(params, state):
        value, grads = jax.value_and_grad(loss)(params)
        kwargs = {"value": value} if extra else {}
        updates, state = opt.update(grads, state, params, **kwargs)
        return gradax.apply_updates(params, updates), state

    for _ in range(steps):
        params, state = step(params, state)
    final = float(loss(params))
    return final < tol, final
