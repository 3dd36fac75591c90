"""Hutchinson's Hessian-diagonal estimator (gradax.contrib.hutchinson_estimator_diag_hessian) vs Optax 0.2.8."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradax
from tests.contrib._common import assert_trees_close


def f(p):
    return jnp.sum(p["a"] ** 3) * jnp.sum(p["b"]) + jnp.prod(p["a"]) * p["b"][0] + jnp.sum(jnp.sin(p["w"]) @ p["b"])


def _params(dtype=jnp.float32):
    rng = np.random.default_rng(0)
    return {k: jnp.asarray(rng.normal(size=s), dtype) for k, s in {"a": (3,), "b": (2,), "w": (4, 2)}.items()}


def _run(tx, steps=10, dtype=jnp.float32):
    p = _params(dtype)
    state = tx.init(p)
    step = jax.jit(lambda s, p: tx.update(p, s, p, obj_fn=f))
    outs = []
    for k in range(steps):
        u, state = step(state, p)
        outs.append(u)
        p = jax.tree.map(lambda x: x * 0.9 + 0.01 * k, p)
    return outs, state


@pytest.mark.parametrize("seed", [jax.random.key(2), 5])
def test_matches_optax_same_key_same_probes(seed):
    # Optax 0.2.8 keeps an int seed as the state as is (and cannot split it); gradax makes it jax.random.PRNGKey(seed).
    oseed = jax.random.PRNGKey(seed) if isinstance(seed, int) else seed
    ug, sg = _run(gradax.contrib.hutchinson_estimator_diag_hessian(seed))
    uo, so = _run(optax.contrib.hutchinson_estimator_diag_hessian(oseed))
    assert_trees_close(ug, uo, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(jax.random.key_data(sg.key), jax.random.key_data(so.key))
    assert type(sg).__name__ == "HutchinsonState" and sg._fields == ("key",)


def test_default_key_matches_optax_prngkey0():
    ug, _ = _run(gradax.contrib.hutchinson_estimator_diag_hessian(), steps=2)
    uo, _ = _run(optax.contrib.hutchinson_estimator_diag_hessian(), steps=2)
    assert_trees_close(ug, uo, rtol=1e-5, atol=1e-5)


def test_unbiased_for_a_dense_hessian():
    a = jnp.array([[2.0, 1.0, -0.5], [1.0, 3.0, 0.7], [-0.5, 0.7, 1.5]])
    g = lambda x: 0.5 * x @ a @ x
    tx = gradax.contrib.hutchinson_estimator_diag_hessian(0)
    x = jnp.ones(3)

    def body(s, _):
        u, s = tx.update(x, s, x, obj_fn=g)
        return s, u

    _, us = jax.lax.scan(body, tx.init(x), None, length=4000)
    np.testing.assert_allclose(us.mean(0), jnp.diag(a), atol=0.06)
    # each estimate is diag(H) + off-diagonal terms with signs: exact on a diagonal Hessian
    assert float(jnp.abs(us - jnp.diag(a)).max()) > 0.1


def test_abstract_init_bf16_and_new_probes_each_step():
    tx = gradax.contrib.hutchinson_estimator_diag_hessian(jax.random.key(1))
    abstract = jax.tree.map(lambda p: jax.ShapeDtypeStruct(p.shape, p.dtype), _params())
    assert jax.random.key_data(tx.init(abstract).key).shape == (2,)
    (u1, u2), _ = _run(tx, steps=2, dtype=jnp.bfloat16)
    assert all(x.dtype == jnp.bfloat16 for x in jax.tree.leaves(u1))
    ug, _ = _run(tx, steps=2)
    assert not np.allclose(ug[0]["a"], ug[1]["a"]) or not np.allclose(ug[0]["w"], ug[1]["w"])


def test_errors_name_each_missing_argument():
    tx = gradax.contrib.hutchinson_estimator_diag_hessian(0)
    p = _params()
    with pytest.raises(ValueError, match=r"hutchinson_estimator_diag_hessian: update\(...\) needs `params`"):
        tx.update(p, tx.init(p), obj_fn=f)
    with pytest.raises(ValueError, match=r"hutchinson_estimator_diag_hessian: update\(...\) needs `obj_fn`"):
        tx.update(p, tx.init(p), p)
    with pytest.raises(ValueError, match=r"hutchinson_estimator_diag_hessian\(random_seed=...\) must be an int seed"):
        gradax.contrib.hutchinson_estimator_diag_hessian("seed")


@pytest.mark.parametrize(
    "seed", [None, 3, np.asarray(jax.random.PRNGKey(3)), jax.random.key(3)], ids=["none", "int", "raw", "typed"]
)
def test_state_key_is_stored_as_optax_stores_it(seed):
    """An int seed or a raw key stays a raw uint32[2] key in the state (as Optax keeps it: its checkpoints load); a
    typed key stays typed. Same dtype, shape and numbers as Optax's state, before and after a step."""
    p = _params()
    ours = gradax.contrib.hutchinson_estimator_diag_hessian(seed)
    theirs = optax.contrib.hutchinson_estimator_diag_hessian(
        jax.random.PRNGKey(seed) if isinstance(seed, int) else seed
    )
    s_ours, s_theirs = ours.init(p), theirs.init(p)
    for _ in range(2):
        assert s_ours.key.dtype == s_theirs.key.dtype and s_ours.key.shape == s_theirs.key.shape
        data = jax.random.key_data if jnp.issubdtype(s_ours.key.dtype, jax.dtypes.prng_key) else np.asarray
        np.testing.assert_array_equal(data(s_ours.key), data(s_theirs.key))
        u_ours, s_ours = ours.update(p, s_ours, p, obj_fn=f)
        u_theirs, s_theirs = theirs.update(p, s_theirs, p, obj_fn=f)
        assert_trees_close(u_ours, u_theirs, rtol=0, atol=0)
