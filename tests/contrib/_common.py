"""Shared helpers of the contrib tests (part A): run gradax and Optax side by side."""

import jax
import jax.numpy as jnp
import numpy as np

from tests._stepping import run


def params_and_grads(dtype=jnp.float32, steps=10, seed=0):
    """Small params tree and a list of gradient trees."""
    rng = np.random.default_rng(seed)
    params = {"w": jnp.asarray(rng.normal(size=(3, 2)), dtype), "b": jnp.asarray(rng.normal(size=(2,)), dtype)}
    grads = [jax.tree.map(lambda p: jnp.asarray(rng.normal(size=p.shape), dtype), params) for _ in range(steps)]
    return params, grads


def assert_trees_close(a, b, rtol=1e-5, atol=1e-6):
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    assert len(la) == len(lb)
    for x, y in zip(la, lb):
        if jnp.issubdtype(jnp.asarray(x).dtype, jax.dtypes.prng_key):
            np.testing.assert_array_equal(jax.random.key_data(x), jax.random.key_data(y))
            continue
        np.testing.assert_allclose(np.asarray(x, np.float64), np.asarray(y, np.float64), rtol=rtol, atol=atol)


def _shape_of(state):
    """Class names and fields of every NamedTuple in a state (gradax and Optax classes are different objects)."""
    out = []

    def visit(x):
        if isinstance(x, tuple) and hasattr(x, "_fields"):
            out.append((type(x).__name__, x._fields))
        if isinstance(x, (tuple, list)):
            for y in x:
                visit(y)

    visit(state)
    return out


def check_oracle(gx, ox, params=None, grads=None, rtol=1e-5, atol=1e-6, extra=None, state=True):
    """gradax and Optax give the same updates (and states) over 10 steps."""
    if params is None:
        params, grads = params_and_grads()
    ug, sg, _ = run(gx, params, grads, extra=extra)
    uo, so, _ = run(ox, params, grads, extra=extra)
    assert_trees_close(ug, uo, rtol, atol)
    if state:
        assert _shape_of(sg) == _shape_of(so)
        assert_trees_close(sg, so, rtol, atol)


def check_abstract_and_bf16(tx, extra=None, needs_params=True):
    """init from ShapeDtypeStruct equals init shapes; bf16 params keep state dtypes under jit and MultiSteps."""
    import gradax

    params, grads = params_and_grads(jnp.bfloat16, steps=3)
    abstract = jax.tree.map(lambda p: jax.ShapeDtypeStruct(p.shape, p.dtype), params)
    s_abs = tx.init(abstract)
    s_con = tx.init(params)
    assert jax.tree.structure(s_abs) == jax.tree.structure(s_con)
    for a, c in zip(jax.tree.leaves(s_abs), jax.tree.leaves(s_con)):
        assert a.shape == c.shape and a.dtype == c.dtype
        if jnp.issubdtype(c.dtype, jnp.floating):
            assert c.dtype != jnp.bfloat16, "bf16 state"
    dtypes = [leaf.dtype for leaf in jax.tree.leaves(s_con)]
    for wrapped in (tx, gradax.MultiSteps(tx, every_k_schedule=2)):
        state = wrapped.init(params)
        step = jax.jit(lambda g, s, p, w=wrapped: w.update(g, s, p, **(extra or {})))
        p = params
        for g in grads:
            u, state = step(g, state, p)
            for a, b in zip(jax.tree.leaves(u), jax.tree.leaves(g)):
                assert a.dtype == b.dtype
            p = gradax.apply_updates(p, u)
        if wrapped is tx:
            assert [leaf.dtype for leaf in jax.tree.leaves(state)] == dtypes
    return s_con


def converges(tx, loss, params, steps, extra_fn=None):
    """Runs ``tx`` on ``loss`` and returns the final loss."""
    import gradax

    state = tx.init(params)

    @jax.jit
    def step(p, s):
        g = jax.grad(loss)(p)
        extra = extra_fn(p) if extra_fn else {}
        u, s = tx.update(g, s, p, **extra)
        return gradax.apply_updates(p, u), s

    for _ in range(steps):
        params, state = step(params, state)
    return float(loss(params))
