"""DoG and DoWG (gradax.contrib.dog, dowg) against Optax 0.2.8 and the papers' step sizes."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradax
from tests._stepping import run
from tests.contrib._common import check_abstract_and_bf16, check_oracle, converges, params_and_grads

_SCHED = lambda c: 1.0 / (1.0 + c)


@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"init_step": ("distance", 0.1)},
        {"init_step": ("learning_rate", 0.01), "weight_decay": 0.1},
        {"learning_rate": _SCHED, "eps": 1e-4},
    ],
)
def test_dog_matches_optax(kw):
    check_oracle(gradax.contrib.dog(**kw), optax.contrib.dog(**kw))


@pytest.mark.parametrize("kw", [{}, {"init_estim_sq_dist": 0.1}, {"learning_rate": _SCHED, "weight_decay": 0.1}])
def test_dowg_matches_optax(kw):
    check_oracle(gradax.contrib.dowg(**kw), optax.contrib.dowg(**kw))


def test_dog_paper_rule():
    rng = np.random.default_rng(0)
    grads = [rng.normal(size=3) for _ in range(5)]
    x0 = rng.normal(size=3)
    ups, _, _ = run(
        gradax.contrib.dog(init_step=("distance", 0.5), eps=0.0),
        jnp.asarray(x0, jnp.float32),
        [jnp.asarray(g, jnp.float32) for g in grads],
    )
    x, r, s = x0.copy(), 0.5, 0.0
    for t, g in enumerate(grads):
        r, s = max(r, np.linalg.norm(x - x0)), s + np.sum(g**2)
        np.testing.assert_allclose(ups[t], -r / np.sqrt(s) * g, rtol=1e-5)
        x = x + ups[t]


@pytest.mark.parametrize("make", [lambda: gradax.contrib.dog(), lambda: gradax.contrib.dowg()])
def test_abstract_init_same_updates(make):
    tx = make()
    params, grads = params_and_grads()
    abstract = jax.tree.map(lambda p: jax.ShapeDtypeStruct(p.shape, p.dtype), params)
    step = jax.jit(tx.update)
    sa, sc, p = tx.init(abstract), tx.init(params), params
    for g in grads[:4]:
        ua, sa = step(g, sa, p)
        uc, sc = step(g, sc, p)
        for a, b in zip(jax.tree.leaves(ua), jax.tree.leaves(uc)):
            np.testing.assert_allclose(a, b, rtol=1e-6)
        p = gradax.apply_updates(p, uc)
    check_abstract_and_bf16(tx)


def test_converges_on_quadratic():
    a = jnp.array([1.0, 10.0, 0.1])
    loss = lambda x: 0.5 * jnp.sum(a * (x - 1.0) ** 2)
    # parameter-free methods converge at the O(1/sqrt(T)) rate: 500 steps reduce the loss (5.55) over 100x
    assert converges(gradax.contrib.dog(), loss, jnp.zeros(3), 500) < 5e-2
    assert converges(gradax.contrib.dowg(), loss, jnp.zeros(3), 500) < 5e-2


def test_errors():
    with pytest.raises(ValueError, match=r"scale_by_dog\(init_step\[0\]=\.\.\.\) must be one of 'distance'"):
        gradax.contrib.dog(init_step=("foo", 1.0))
    with pytest.raises(ValueError, match=r"scale_by_dog\(init_step=\.\.\.\) must be a pair \(kind, value\)"):
        gradax.contrib.dog(init_step=1.0)
    with pytest.raises(ValueError, match=r"scale_by_dog\(eps=\.\.\.\) must be >= 0"):
        gradax.contrib.dog(eps=-1.0)
    with pytest.raises(ValueError, match=r"scale_by_dowg\(init_estim_sq_dist=\.\.\.\) must be > 0; got 0\.0"):
        gradax.contrib.dowg(init_estim_sq_dist=0.0)
    with pytest.raises(ValueError, match=r"scale_by_dowg\(eps=\.\.\.\) must be > 0"):
        gradax.contrib.dowg(eps=0.0)
    tx = gradax.contrib.dog()
    with pytest.raises(ValueError, match="params"):
        tx.update(jnp.ones(2), tx.init(jnp.ones(2)))
