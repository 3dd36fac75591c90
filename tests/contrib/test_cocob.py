"""COCOB-Backprop (gradax.contrib.cocob) against Optax 0.2.8 and the paper's algorithm."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradax
from tests._stepping import run
from tests.contrib._common import check_abstract_and_bf16, check_oracle, converges, params_and_grads


@pytest.mark.parametrize("kw", [{}, {"alpha": 10.0, "eps": 1e-4}, {"learning_rate": 0.5, "weight_decay": 0.1}])
def test_matches_optax(kw):
    check_oracle(gradax.contrib.cocob(**kw), optax.contrib.cocob(**kw))


def test_schedule():
    sched = lambda c: 1.0 / (1.0 + c)
    check_oracle(gradax.contrib.cocob(sched), optax.contrib.cocob(sched))


def test_paper_rule():
    rng = np.random.default_rng(0)
    grads = [rng.normal(size=3) for _ in range(5)]
    w1 = rng.normal(size=3)
    ups, _, _ = run(
        gradax.contrib.scale_by_cocob(alpha=100.0, eps=1e-8),
        jnp.asarray(w1, jnp.float32),
        [jnp.asarray(g, jnp.float32) for g in grads],
    )
    w, big_l, big_g, reward, theta = w1.copy(), np.full(3, 1e-8), np.zeros(3), np.zeros(3), np.zeros(3)
    for t, g in enumerate(grads):
        big_l, big_g = np.maximum(big_l, np.abs(g)), big_g + np.abs(g)
        reward, theta = np.maximum(reward - g * (w - w1), 0), theta - g
        w_new = w1 + theta / (big_l * np.maximum(big_g + big_l, 100 * big_l)) * (big_l + reward)
        np.testing.assert_allclose(ups[t], w_new - w, rtol=1e-4, atol=1e-6)
        w = w_new


def test_abstract_init_same_updates():
    params, grads = params_and_grads()
    tx = gradax.contrib.cocob()
    abstract = jax.tree.map(lambda p: jax.ShapeDtypeStruct(p.shape, p.dtype), params)
    u_abs, _, _ = run_from(tx, tx.init(abstract), params, grads)
    u_con, _, _ = run_from(tx, tx.init(params), params, grads)
    for a, b in zip(jax.tree.leaves(u_abs), jax.tree.leaves(u_con)):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    check_abstract_and_bf16(tx)


def run_from(tx, state, params, grads):
    step = jax.jit(tx.update)
    outs = []
    for g in grads:
        u, state = step(g, state, params)
        params = gradax.apply_updates(params, u)
        outs.append(u)
    return outs, state, params


def test_converges_on_quadratic():
    a = jnp.array([1.0, 10.0, 0.1])
    loss = lambda x: 0.5 * jnp.sum(a * (x - 1.0) ** 2)
    assert converges(gradax.contrib.cocob(), loss, jnp.zeros(3), 500) < 1e-2


def test_errors():
    with pytest.raises(ValueError, match=r"scale_by_cocob\(alpha=\.\.\.\) must be > 0; got 0\.0"):
        gradax.contrib.cocob(alpha=0.0)
    with pytest.raises(ValueError, match=r"scale_by_cocob\(eps=\.\.\.\) must be > 0"):
        gradax.contrib.cocob(eps=-1.0)
    tx = gradax.contrib.scale_by_cocob()
    with pytest.raises(ValueError, match="params"):
        tx.update(jnp.ones(2), tx.init(jnp.ones(2)))


def test_abstract_start_is_filled_at_the_first_update_then_passed_through():
    params = {"w": jnp.arange(6.0).reshape(2, 3), "e": jnp.zeros((0,))}
    tx = gradax.contrib.scale_by_cocob()
    state = tx.init(jax.tree.map(lambda p: jax.ShapeDtypeStruct(p.shape, p.dtype), params))
    assert bool(jnp.all(jnp.isnan(state.init_particles["w"])))
    _, state = jax.jit(tx.update)(jax.tree.map(jnp.ones_like, params), state, params)
    np.testing.assert_array_equal(state.init_particles["w"], params["w"])
    moved = jax.tree.map(lambda p: p + 1.0, params)  # later steps keep the starting point
    _, state = jax.jit(tx.update)(jax.tree.map(jnp.ones_like, params), state, moved)
    np.testing.assert_array_equal(state.init_particles["w"], params["w"])
