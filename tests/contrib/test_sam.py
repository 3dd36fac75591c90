"""SAM (gradax.contrib.sam) against Optax 0.2.8 and its definition."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradax
from tests.contrib._common import assert_trees_close, check_oracle, converges


def _make(lib, **kw):
    return lib.contrib.sam(lib.adam(1e-2), lib.chain(lib.contrib.normalize(), lib.adam(0.05)), **kw)


@pytest.mark.parametrize("kw", [{}, {"sync_period": 3}, {"reset_state": False}])
def test_matches_optax(kw):
    check_oracle(_make(gradax, **kw), _make(optax, **kw))


def test_opaque_mode_matches_optax():
    loss = lambda p: jnp.sum(jnp.sin(p) * p**2)
    grad_fn = lambda p, i: jax.grad(loss)(p)
    outs = []
    for lib in (gradax, optax):
        tx = _make(lib, sync_period=3, opaque_mode=True)
        p = jnp.array([0.5, -1.0, 2.0])
        state = tx.init(p)
        for _ in range(5):
            u, state = tx.update(jax.grad(loss)(p), state, p, grad_fn=grad_fn)
            p = p + u
        outs.append(p)
    assert_trees_close(outs[0], outs[1])


def test_zero_gradient_finite_where_optax_gives_nan():
    """Optax 0.2.8's normalize divides 0 by 0 and its sam mixes branches arithmetically (docs/differences.md)."""
    p = jnp.array([1.0, 2.0])
    for lib, finite in ((gradax, True), (optax, False)):
        tx = lib.contrib.sam(lib.sgd(0.1), lib.chain(lib.contrib.normalize(), lib.sgd(0.05)))
        state = tx.init(p)
        u1, state = tx.update(jnp.zeros(2), state, p)
        u2, state = tx.update(jnp.zeros(2), state, p + u1)
        assert bool(np.isfinite(np.asarray(u2)).all()) is finite


def test_paper_rule_one_period():
    g = lambda p: 2.0 * p
    tx = gradax.contrib.sam(gradax.sgd(0.1), gradax.chain(gradax.contrib.normalize(), gradax.sgd(0.05)))
    p = jnp.array([3.0, 4.0])
    state = tx.init(p)
    u, state = tx.update(g(p), state, p)
    p_adv = p + u
    np.testing.assert_allclose(p_adv, p + 0.05 * np.array([0.6, 0.8]), rtol=1e-6)
    u, state = tx.update(g(p_adv), state, p_adv)
    np.testing.assert_allclose(p_adv + u, p - 0.1 * g(p_adv), rtol=1e-6)


def test_abstract_init():
    tx = _make(gradax)
    abstract = {"w": jax.ShapeDtypeStruct((2, 3), jnp.bfloat16)}
    s_abs, s_con = tx.init(abstract), tx.init({"w": jnp.zeros((2, 3), jnp.bfloat16)})
    assert jax.tree.structure(s_abs) == jax.tree.structure(s_con)
    for a, c in zip(jax.tree.leaves(s_abs), jax.tree.leaves(s_con)):
        assert a.shape == c.shape and a.dtype == c.dtype


def test_converges_on_quadratic():
    a = jnp.array([1.0, 10.0, 0.1])
    loss = lambda x: 0.5 * jnp.sum(a * x**2)
    tx = gradax.contrib.sam(gradax.sgd(0.05), gradax.chain(gradax.contrib.normalize(), gradax.sgd(0.01)))
    assert converges(tx, loss, jnp.array([1.0, -1.0, 2.0]), 2000) < 1e-3


def test_errors():
    with pytest.raises(ValueError, match=r"sam\(sync_period=\.\.\.\) must be >= 1"):
        _make(gradax, sync_period=0)
    tx = _make(gradax, opaque_mode=True)
    with pytest.raises(ValueError, match=r"sam: update\(...\) needs `grad_fn`"):
        tx.update(jnp.ones(2), tx.init(jnp.zeros(2)), jnp.zeros(2))
    tx = _make(gradax)
    with pytest.raises(ValueError, match=r"sam: update\(...\) needs `params`"):
        tx.update(jnp.ones(2), tx.init(jnp.zeros(2)))
