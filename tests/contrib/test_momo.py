"""momo (gradax.contrib) against Optax 0.2.8 and on a quadratic."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradax

A = jnp.array([1.0, 4.0, 0.5])


def _loss(x):
    return 0.5 * jnp.sum(A * x**2) + 0.1


def _run(tx, steps=8):
    x = jnp.array([1.0, -2.0, 0.5])
    state = tx.init(x)
    out = []
    for _ in range(steps):
        v, g = jax.value_and_grad(_loss)(x)
        u, state = tx.update(g, state, x, value=v)
        out.append(np.asarray(u))
        x = x + u
    return np.array(out), state


@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"learning_rate": 0.3, "beta": 0.8, "lower_bound": 0.1, "weight_decay": 0.1},
        {"learning_rate": 0.3, "beta": 0.8, "lower_bound": 0.05, "adapt_lower_bound": True},
    ],
)
def test_matches_optax(kw):
    ug, sg = _run(gradax.contrib.momo(**kw))
    uo, so = _run(optax.contrib.momo(**kw))
    np.testing.assert_allclose(ug, uo, rtol=1e-5, atol=1e-6)
    assert sg._fields == so._fields == ("exp_avg", "barf", "gamma", "lb", "count")


def test_missing_value_and_params():
    tx = gradax.contrib.momo()
    with pytest.raises(ValueError, match=r"momo: update\(...\) needs `value`"):
        tx.update(jnp.ones(2), tx.init(jnp.zeros(2)), jnp.zeros(2))
    with pytest.raises(ValueError, match=r"momo: update\(...\) needs `params`"):
        tx.update(jnp.ones(2), tx.init(jnp.zeros(2)), value=1.0)


def test_converges_with_schedule():
    tx = gradax.contrib.momo(learning_rate=lambda c: 1.0 / (1.0 + 0.01 * c), lower_bound=0.1)
    step = jax.jit(lambda x, s: tx.update(jax.grad(_loss)(x), s, x, value=_loss(x)))
    x = jnp.array([1.0, -2.0, 0.5])
    state = tx.init(x)
    for _ in range(100):
        u, state = step(x, state)
        x = x + u
    assert float(_loss(x)) < 0.11


@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"learning_rate": 0.3, "weight_decay": 0.1, "lower_bound": 0.05},
        {"learning_rate": 0.3, "b1": 0.8, "b2": 0.99, "lower_bound": 0.05, "adapt_lower_bound": True},
        {"learning_rate": 1.0, "lower_bound": 0.1},
    ],
)
def test_momo_adam_matches_optax(kw):
    ug, sg = _run(gradax.contrib.momo_adam(**kw))
    uo, so = _run(optax.contrib.momo_adam(**kw))
    np.testing.assert_allclose(ug, uo, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(sg.lb, so.lb, rtol=1e-5)
    assert sg._fields == so._fields == ("exp_avg", "exp_avg_sq", "barf", "gamma", "lb", "count")


def test_momo_adam_missing_value():
    tx = gradax.contrib.momo_adam()
    with pytest.raises(ValueError, match=r"momo_adam: update\(...\) needs `value`"):
        tx.update(jnp.ones(2), tx.init(jnp.zeros(2)), jnp.zeros(2))
    with pytest.raises(ValueError, match=r"momo_adam: update\(...\) needs `params`"):
        tx.update(jnp.ones(2), tx.init(jnp.zeros(2)), value=1.0)


def test_momo_adam_schedule():
    sched = lambda c: 0.1 / (1.0 + c)  # noqa: E731
    ug, _ = _run(gradax.contrib.momo_adam(learning_rate=sched))
    uo, _ = _run(optax.contrib.momo_adam(learning_rate=sched))
    np.testing.assert_allclose(ug, uo, rtol=1e-4, atol=1e-5)
