"""Shared helpers for the tests of the Adam family: a pytree with None leaves and a jitted differential runner."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax  # the test oracle

import gradax
from tests._stepping import run


def params_tree(dtype=jnp.float32):
    """A small pytree with a matrix, a vector, a scalar, a tuple and a None leaf."""
    k = jax.random.split(jax.random.key(0), 3)
    return {
        "w": jax.random.normal(k[0], (4, 3), dtype),
        "b": (jax.random.normal(k[1], (3,), dtype), None),
        "s": jax.random.normal(k[2], (), dtype),
    }


def grads_at(params, i: int):
    """Deterministic random gradients shaped like ``params`` for step ``i`` (None leaves stay None)."""
    leaves, treedef = jax.tree.flatten(params)
    keys = jax.random.split(jax.random.key(100 + i), len(leaves))
    return treedef.unflatten([jax.random.normal(k, p.shape, p.dtype) for k, p in zip(keys, leaves)])


def assert_matches_optax(make, steps: int = 10, rtol: float = 1e-5, atol: float = 1e-6, params=None):
    """``make(lib)`` built from gradax and from Optax gives the same updates and state over ``steps`` steps."""
    params = params_tree() if params is None else params
    grads = lambda i, p: grads_at(p, i)
    ours, our_state, _ = run(make(gradax), params, grads, steps, apply=gradax.apply_updates)
    theirs, their_state, _ = run(make(optax), params, grads, steps, apply=optax.apply_updates)
    for a, b in zip(ours, theirs):
        assert jax.tree.structure(a) == jax.tree.structure(b)
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
            assert x.dtype == y.dtype
            np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=rtol, atol=atol)
    assert str(jax.tree.structure(our_state)) == str(jax.tree.structure(their_state))
    for x, y in zip(jax.tree.leaves(our_state), jax.tree.leaves(their_state)):
        assert jnp.shape(x) == jnp.shape(y) and jnp.asarray(x).dtype == jnp.asarray(y).dtype


def quadratic_converges(opt, steps: int = 300, tol: float = 1e-2) -> bool:
    """Whether ``opt`` drives ``0.5 * sum(a * (x - 1)**2)`` close to its minimum at 1."""
    a = jnp.array([1.0, 3.0, 10.0])
    loss = lambda x: 0.5 * jnp.sum(a * (x - 1.0) ** 2)
    x = jnp.zeros(3)
    state = opt.init(x)

    @jax.jit
    def step(x, state):
        u, state = opt.update(jax.grad(loss)(x), state, x)
        return gradax.apply_updates(x, u), state

    for _ in range(steps):
        x, state = step(x, state)
    return bool(jnp.max(jnp.abs(x - 1.0)) < tol)


def traced_equals_concrete(factory, kwargs: dict, steps: int = 3, rtol: float = 0.0):
    """Jitted updates with hyperparameters passed as traced float32 arrays (as inject_hyperparams does) are
    bit-identical to those with Python numbers."""
    params = params_tree()
    names = [k for k, v in kwargs.items() if isinstance(v, float)]
    hp = {k: jnp.asarray(kwargs[k], jnp.float32) for k in names}
    concrete_tx = factory(**kwargs)
    concrete_step = jax.jit(concrete_tx.update)
    traced_step = jax.jit(lambda h, g, s, p: factory(**{**kwargs, **h}).update(g, s, p))
    s1 = s2 = concrete_tx.init(params)
    for i in range(steps):
        g = grads_at(params, i)
        u1, s1 = concrete_step(g, s1, params)
        u2, s2 = traced_step(hp, g, s2, params)
        for x, y in zip(jax.tree.leaves((u1, s1)), jax.tree.leaves((u2, s2))):
            np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=rtol, atol=0)
