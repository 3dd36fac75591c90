"""MADGRAD (gradax.contrib.madgrad) against Optax 0.2.8 and the paper's update rule."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradax
from tests._stepping import run
from tests.contrib._common import check_abstract_and_bf16, check_oracle, converges, params_and_grads


@pytest.mark.parametrize("kw", [{}, {"momentum": 0.0}, {"momentum": 0.5, "eps": 1e-3}])
def test_matches_optax(kw):
    check_oracle(gradax.contrib.madgrad(1e-2, **kw), optax.contrib.madgrad(1e-2, **kw))
    check_oracle(gradax.contrib.madgrad(1e-2, weight_decay=0.1), optax.contrib.madgrad(1e-2, weight_decay=0.1))


def test_schedule():
    sched = lambda c: 1e-2 / (1.0 + c)
    check_oracle(gradax.contrib.scale_by_madgrad(sched), optax.contrib.scale_by_madgrad(sched))


def test_paper_rule():
    rng = np.random.default_rng(0)
    grads = [rng.normal(size=3) for _ in range(5)]
    x0 = rng.normal(size=3)
    ups, _, _ = run(
        gradax.contrib.scale_by_madgrad(0.1, momentum=0.9, eps=0.0),
        jnp.asarray(x0, jnp.float32),
        [jnp.asarray(g, jnp.float32) for g in grads],
    )
    x, s, nu = x0.copy(), np.zeros(3), np.zeros(3)
    for k, g in enumerate(grads):
        lam = 0.1 * np.sqrt(k + 1)
        s, nu = s + lam * g, nu + lam * g**2
        z = x0 - s / np.cbrt(nu)
        x_new = 0.1 * z + 0.9 * x
        np.testing.assert_allclose(ups[k], x_new - x, rtol=1e-4, atol=1e-6)
        x = x_new


def test_abstract_init_captures_x0_at_first_update():
    params, grads = params_and_grads()
    tx = gradax.contrib.madgrad(1e-2)
    abstract = jax.tree.map(lambda p: jax.ShapeDtypeStruct(p.shape, p.dtype), params)
    state = tx.init(abstract)
    step = jax.jit(tx.update)
    ref_state = tx.init(params)
    for g in grads[:3]:
        u, state = step(g, state, params)
        ur, ref_state = step(g, ref_state, params)
        np.testing.assert_allclose(u["w"], ur["w"], rtol=1e-6)
    check_abstract_and_bf16(tx)


def test_converges_on_quadratic():
    a = jnp.array([1.0, 10.0, 0.1])
    loss = lambda x: 0.5 * jnp.sum(a * x**2)
    assert converges(gradax.contrib.madgrad(0.1), loss, jnp.array([1.0, -1.0, 2.0]), 500) < 1e-2


def test_errors():
    with pytest.raises(ValueError, match=r"scale_by_madgrad\(momentum=\.\.\.\) must be in \[0, 1\]; got 1\.5"):
        gradax.contrib.madgrad(0.1, momentum=1.5)
    with pytest.raises(ValueError, match=r"scale_by_madgrad\(eps=\.\.\.\) must be >= 0"):
        gradax.contrib.madgrad(0.1, eps=-1.0)
    tx = gradax.contrib.madgrad(0.1)
    with pytest.raises(ValueError, match="params"):
        tx.update(jnp.ones(2), tx.init(jnp.ones(2)))
