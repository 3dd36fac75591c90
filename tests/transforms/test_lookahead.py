"""lookahead (Zhang et al. 2019) and flatten."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradax


def _same(a, b, rtol=1e-6):
    """Leaf-by-leaf comparison of a gradax tree with an Optax one (their NamedTuple classes differ)."""
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    assert len(la) == len(lb)
    for x, y in zip(la, lb):
        np.testing.assert_allclose(x, y, rtol=rtol, atol=1e-7)


P = {"a": jnp.array([1.0, 2.0]), "b": jnp.array([3.0])}


@pytest.mark.parametrize("reset_state", [False, True])
def test_lookahead_matches_optax(reset_state):
    opt = gradax.lookahead(gradax.sgd(0.1, 0.9), sync_period=3, slow_step_size=0.5, reset_state=reset_state)
    ref = optax.lookahead(optax.sgd(0.1, 0.9), sync_period=3, slow_step_size=0.5, reset_state=reset_state)
    p, rp = gradax.LookaheadParams.init_synced(P), optax.LookaheadParams.init_synced(P)
    s, rs = opt.init(p), ref.init(rp)
    for _ in range(10):
        u, s = jax.jit(opt.update)(jax.tree.map(lambda x: 2 * x, p.fast), s, p)
        p = gradax.apply_updates(p, u)
        ru, rs = ref.update(jax.tree.map(lambda x: 2 * x, rp.fast), rs, rp)
        rp = optax.apply_updates(rp, ru)
    _same(tuple(p), tuple(rp), 1e-5)


def test_lookahead_is_the_paper_rule():
    # plain SGD fast weights on f(x) = x^2 / 2 (gradient x): k fast steps multiply by (1 - lr)^k
    lr, k, alpha = 0.1, 4, 0.5
    opt = gradax.lookahead(gradax.sgd(lr), sync_period=k, slow_step_size=alpha)
    p = gradax.LookaheadParams.init_synced(jnp.array([1.0]))
    s = opt.init(p)
    slow = 1.0
    for _ in range(3):
        for _ in range(k):
            u, s = opt.update(p.fast, s, p)
            p = gradax.apply_updates(p, u)
        slow = slow + alpha * (slow * (1 - lr) ** k - slow)
        np.testing.assert_allclose(p.slow, [slow], rtol=1e-6)
        np.testing.assert_allclose(p.fast, [slow], rtol=1e-6)  # fast weights restart from the slow ones


def test_lookahead_errors():
    with pytest.raises(ValueError, match=r"lookahead\(sync_period=\.\.\.\) must be >= 1"):
        gradax.lookahead(gradax.sgd(0.1), 0, 0.5)
    with pytest.raises(ValueError, match=r"lookahead\(slow_step_size=\.\.\.\) must be in \[0, 1\]"):
        gradax.lookahead(gradax.sgd(0.1), 2, 1.5)
    opt = gradax.lookahead(gradax.sgd(0.1), 2, 0.5)
    with pytest.raises(TypeError, match=r"lookahead: init\(params\) must be a LookaheadParams"):
        opt.init(P)
    with pytest.raises(ValueError, match=r"lookahead: update\(\.\.\.\) needs `params` as a LookaheadParams"):
        opt.update(P, opt.init(gradax.LookaheadParams.init_synced(P)))


def test_flatten_matches_unflattened_and_optax():
    params = {"w": jnp.arange(6.0).reshape(2, 3), "b": jnp.array([1.0, -1.0])}
    for make in [lambda ox: ox.sgd(0.1, 0.9), lambda ox: ox.adam(0.1)]:
        flat, plain, ref = gradax.flatten(make(gradax)), make(gradax), optax.flatten(make(optax))
        s, ps, rs = flat.init(params), plain.init(params), ref.init(params)
        for i in range(5):
            g = jax.tree.map(lambda x: jnp.sin(x + i), params)
            u, s = jax.jit(flat.update)(g, s, params)
            pu, ps = jax.jit(plain.update)(g, ps, params)
            ru, rs = ref.update(g, rs, params)
            _same(u, pu)
            _same(u, ru, 1e-5)
        assert jax.tree.leaves(s)[-1].shape == (8,)
    abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), params)
    assert jax.tree.leaves(gradax.flatten(gradax.sgd(0.1, 0.9)).init(abstract))[0].shape == (8,)
