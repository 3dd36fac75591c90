"""Sophia (gradax.contrib.sophia) vs Optax 0.2.8."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradax
from tests.contrib._common import assert_trees_close

_A = {"w": jnp.array([[1.0, 0.5], [2.0, 0.1], [0.3, 3.0]]), "b": jnp.array([0.7, 1.5])}


def f(p):
    return 0.5 * sum(jnp.sum(_A[k] * p[k] ** 2) for k in p) + 0.1 * jnp.sum(p["w"] ** 3)


def _params():
    rng = np.random.default_rng(0)
    return {
        "w": jnp.asarray(rng.normal(size=(3, 2)), jnp.float32),
        "b": jnp.asarray(rng.normal(size=(2,)), jnp.float32),
    }


def _run(tx, steps=12):
    p = _params()
    state = tx.init(p)
    step = jax.jit(lambda s, p: tx.update(jax.grad(f)(p), s, p, obj_fn=f))
    outs = []
    for _ in range(steps):
        u, state = step(state, p)
        p = jax.tree.map(lambda x, d: x + d, p, u)
        outs.append(u)
    return outs, state, p


@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"update_interval": 3, "gamma": 0.05, "weight_decay": 1e-2},
        {"clip_threshold": None, "b1": 0.9, "b2": 0.95, "update_interval": 1},
    ],
)
def test_matches_optax_same_key_same_probes(kw):
    key = jax.random.key(4)
    g = gradax.contrib.sophia(1e-2, hessian_diagonal_fn=gradax.contrib.hutchinson_estimator_diag_hessian(key), **kw)
    o = optax.contrib.sophia(1e-2, hessian_diagonal_fn=optax.contrib.hutchinson_estimator_diag_hessian(key), **kw)
    ug, sg, pg = _run(g)
    uo, so, po = _run(o)
    assert_trees_close(ug, uo, rtol=1e-5, atol=1e-6)
    assert_trees_close(pg, po, rtol=1e-5, atol=1e-6)
    assert_trees_close((sg[0].mu, sg[0].nu, sg[0].count), (so[0].mu, so[0].nu, so[0].count), rtol=1e-5, atol=1e-6)
    assert type(sg[0]).__name__ == "SophiaState"
    assert sg[0]._fields == so[0]._fields == ("count", "mu", "nu", "hessian_fn_state")


def test_default_estimator_matches_optax():
    ug, _, _ = _run(gradax.contrib.sophia(1e-2), steps=3)
    uo, _, _ = _run(optax.contrib.sophia(1e-2), steps=3)
    assert_trees_close(ug, uo, rtol=1e-5, atol=1e-6)


def test_schedule_matches_optax():
    sched = lambda c: 1e-2 / (1.0 + c)
    key = jax.random.key(1)
    ug, _, _ = _run(
        gradax.contrib.sophia(sched, hessian_diagonal_fn=gradax.contrib.hutchinson_estimator_diag_hessian(key))
    )
    uo, _, _ = _run(
        optax.contrib.sophia(sched, hessian_diagonal_fn=optax.contrib.hutchinson_estimator_diag_hessian(key))
    )
    assert_trees_close(ug, uo, rtol=1e-5, atol=1e-6)


def test_missing_obj_fn_and_params_are_named():
    tx = gradax.contrib.sophia(1e-2)
    p = _params()
    with pytest.raises(ValueError, match=r"sophia: update\(...\) needs `obj_fn`"):
        tx.update(p, tx.init(p), p)
    with pytest.raises(ValueError, match=r"sophia: update\(...\) needs `params`"):
        tx.update(p, tx.init(p), obj_fn=f)


def test_converges_on_a_quadratic():
    a = jnp.array([0.5, 2.0, 10.0])
    q = lambda x: 0.5 * jnp.sum(a * (x - 1.0) ** 2)
    tx = gradax.contrib.sophia(0.05, weight_decay=0.0, update_interval=2)
    x = jnp.array([3.0, -2.0, 4.0])

    def body(carry, _):
        x, s = carry
        u, s = tx.update(jax.grad(q)(x), s, x, obj_fn=q)
        return (gradax.apply_updates(x, u), s), None

    (x, _), _ = jax.lax.scan(body, (x, tx.init(x)), None, length=600)
    np.testing.assert_allclose(x, jnp.ones(3), atol=2e-2)


def test_abstract_init_and_mu_dtype():
    p = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, jnp.bfloat16), _params())
    s = gradax.contrib.sophia(1e-2, mu_dtype=jnp.float32).init(p)
    assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(s[0].mu))
