"""DP-SGD (gradax.contrib.dpsgd, differentially_private_aggregate) against Optax 0.2.8 and the paper's rule."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradax
from tests._stepping import run
from tests.contrib._common import assert_trees_close

B = 3


def _per_example(seed=0, dtype=jnp.float32):
    rng = np.random.default_rng(seed)
    return {"w": jnp.asarray(rng.normal(size=(B, 3, 2)), dtype), "b": jnp.asarray(rng.normal(size=(B, 2)), dtype)}


def _params(dtype=jnp.float32):
    return {"w": jnp.zeros((3, 2), dtype), "b": jnp.zeros((2,), dtype)}


def _run(tx, steps=10, dtype=jnp.float32):
    updates, state, _ = run(tx, _params(dtype), lambda k, _: _per_example(k, dtype), steps, apply=None)
    return updates, state


@pytest.mark.parametrize("key", [0, 7, "typed"])
def test_aggregate_matches_optax_same_key_same_noise(key):
    k = jax.random.key(5) if key == "typed" else key
    ug, sg = _run(gradax.contrib.differentially_private_aggregate(1.0, 0.7, key=k))
    uo, so = _run(optax.contrib.differentially_private_aggregate(1.0, 0.7, key=k))
    assert_trees_close(ug, uo)
    np.testing.assert_array_equal(jax.random.key_data(sg.rng_key), jax.random.key_data(so.rng_key))
    assert type(sg).__name__ == "DifferentiallyPrivateAggregateState" and sg._fields == ("rng_key",)


def test_seed_and_missing_key_match_optax():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for kw in [{"seed": 3}, {}]:
            ug, _ = _run(gradax.contrib.differentially_private_aggregate(0.5, 1.0, **kw), steps=2)
            uo, _ = _run(optax.contrib.differentially_private_aggregate(0.5, 1.0, **kw), steps=2)
            assert_trees_close(ug, uo)
    with pytest.warns(DeprecationWarning, match="seed"):
        gradax.contrib.differentially_private_aggregate(1.0, 1.0, seed=1)
    with pytest.warns(UserWarning, match="no key given"):
        gradax.contrib.differentially_private_aggregate(1.0, 1.0)


@pytest.mark.parametrize("kw", [{}, {"momentum": 0.9}, {"momentum": 0.5, "nesterov": True}])
def test_dpsgd_matches_optax(kw):
    ug, sg = _run(gradax.contrib.dpsgd(0.1, 1.0, 0.5, 4, **kw))
    uo, so = _run(optax.contrib.dpsgd(0.1, 1.0, 0.5, 4, **kw))
    assert_trees_close(ug, uo)
    assert [type(s).__name__ for s in sg] == [type(s).__name__ for s in so]


def test_dpsgd_schedule_matches_optax():
    sched = lambda c: 0.1 / (1.0 + c)
    ug, _ = _run(gradax.contrib.dpsgd(sched, 2.0, 0.3, 1, momentum=0.9))
    uo, _ = _run(optax.contrib.dpsgd(sched, 2.0, 0.3, 1, momentum=0.9))
    assert_trees_close(ug, uo)


def test_paper_rule_without_noise():
    g = _per_example(1)
    tx = gradax.contrib.differentially_private_aggregate(0.8, 0.0, key=0)
    out, _ = tx.update(g, tx.init(None))
    w, b = np.asarray(g["w"], np.float64), np.asarray(g["b"], np.float64)
    norms = np.sqrt((w**2).sum(axis=(1, 2)) + (b**2).sum(axis=1))
    d = np.maximum(norms / 0.8, 1.0)
    np.testing.assert_allclose(out["w"], (w / d[:, None, None]).mean(0), rtol=1e-5)
    np.testing.assert_allclose(out["b"], (b / d[:, None]).mean(0), rtol=1e-5)


def test_noise_std_property():
    # one example with zero gradient: the update is pure noise of std C * sigma / B (B = 1)
    tx = gradax.contrib.differentially_private_aggregate(2.0, 1.5, key=0)
    u, _ = tx.update({"x": jnp.zeros((1, 20000))}, tx.init(None))
    assert abs(float(jnp.std(u["x"])) - 3.0) < 0.1 and abs(float(jnp.mean(u["x"]))) < 0.1


def test_each_step_new_noise_and_jit_vmap_safe():
    tx = gradax.contrib.differentially_private_aggregate(1.0, 1.0, key=0)
    g = {"x": jnp.zeros((2, 4))}
    u1, s = jax.jit(tx.update)(g, tx.init(None))
    u2, _ = jax.jit(tx.update)(g, s)
    assert not np.allclose(u1["x"], u2["x"])
    assert jax.vmap(lambda gg: tx.update(gg, tx.init(None))[0])({"x": jnp.zeros((3, 2, 4))})["x"].shape == (3, 4)


def test_abstract_init_and_bf16():
    tx = gradax.contrib.dpsgd(0.1, 1.0, 0.5, 0, momentum=0.9)
    abstract = jax.tree.map(lambda p: jax.ShapeDtypeStruct(p.shape, p.dtype), _params(jnp.bfloat16))
    s = tx.init(abstract)
    assert jax.tree.map(jnp.shape, s[1].trace) == jax.tree.map(jnp.shape, _params())
    u, s2 = jax.jit(tx.update)(_per_example(0, jnp.bfloat16), tx.init(_params(jnp.bfloat16)))
    assert all(x.dtype == jnp.bfloat16 for x in jax.tree.leaves(u))
    assert all(np.isfinite(np.asarray(x, np.float32)).all() for x in jax.tree.leaves(u))


def test_converges_on_quadratic():
    target = jnp.array([1.0, -2.0])
    data = target + 0.1 * jax.random.normal(jax.random.key(1), (8, 2))
    tx = gradax.contrib.dpsgd(0.5, 1.0, 0.1, 0)
    params = jnp.zeros(2)
    state = tx.init(params)

    @jax.jit
    def step(p, s):
        per_ex = jax.vmap(jax.grad(lambda p, x: 0.5 * jnp.sum((p - x) ** 2)), in_axes=(None, 0))(p, data)
        u, s = tx.update(per_ex, s)
        return gradax.apply_updates(p, u), s

    for _ in range(100):
        params, state = step(params, state)
    assert float(jnp.linalg.norm(params - target)) < 0.2


def test_errors():
    api = "differentially_private_aggregate"
    with pytest.raises(ValueError, match=rf"{api}\(l2_norm_clip=...\) must be > 0; got 0.0"):
        gradax.contrib.differentially_private_aggregate(0.0, 1.0, key=0)
    with pytest.raises(ValueError, match=rf"{api}\(noise_multiplier=...\) must be >= 0; got -1.0"):
        gradax.contrib.differentially_private_aggregate(1.0, -1.0, key=0)
    with pytest.raises(ValueError, match=rf"{api}\(seed=...\) must be None when key is given"):
        gradax.contrib.differentially_private_aggregate(1.0, 1.0, key=0, seed=1)
    with pytest.raises(ValueError, match=rf"{api}\(key=...\) must be an int seed or a PRNG key"):
        gradax.contrib.differentially_private_aggregate(1.0, 1.0, key="k")
    with pytest.raises(ValueError, match=r"dpsgd\(momentum=...\) must be in \[0, 1\); got 1.5"):
        gradax.contrib.dpsgd(0.1, 1.0, 1.0, 0, momentum=1.5)
