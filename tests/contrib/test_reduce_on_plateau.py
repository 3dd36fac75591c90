"""reduce_on_plateau (gradax.contrib) against Optax 0.2.8 and its definition."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradax
from tests.contrib._common import assert_trees_close

KW = [{}, {"factor": 0.5, "patience": 1, "cooldown": 1, "accumulation_size": 2, "min_scale": 0.1}]
VALUES = [3.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 1.0] + [1.0] * 14


def _scales(tx, values, params=None):
    params = {"a": jnp.zeros(2)} if params is None else params
    state = tx.init(params)
    step = jax.jit(lambda s, v: tx.update(jax.tree.map(jnp.ones_like, params), s, value=v))
    out = []
    for v in values:
        u, state = step(state, jnp.asarray(v))
        out.append(float(jax.tree.leaves(u)[0].reshape(-1)[0]))
    return out, state


@pytest.mark.parametrize("kw", KW)
def test_matches_optax(kw):
    sg, stg = _scales(gradax.contrib.reduce_on_plateau(**{"patience": 2, **kw}), VALUES)
    so, sto = _scales(optax.contrib.reduce_on_plateau(**{"patience": 2, **kw}), VALUES)
    assert sg == so and min(sg) < 1.0
    assert stg._fields == sto._fields
    assert_trees_close(tuple(stg), tuple(sto))


def test_negative_values_reduce_unlike_optax():
    """Optax 0.2.8 compares with (1 - rtol) * best, which is above best for negative values (docs/differences.md)."""
    values = [-1.0] * 8
    sg, _ = _scales(gradax.contrib.reduce_on_plateau(factor=0.5, patience=2), values)
    so, _ = _scales(optax.contrib.reduce_on_plateau(factor=0.5, patience=2), values)
    assert sg[-1] < 1.0
    assert so[-1] == 1.0  # Optax 0.2.8 never reduces


def test_min_scale_and_abstract_init():
    s, _ = _scales(gradax.contrib.reduce_on_plateau(factor=0.1, patience=1, min_scale=0.05), [1.0] * 6)
    np.testing.assert_allclose(s[-1], 0.05)
    tx = gradax.contrib.reduce_on_plateau()
    abstract = tx.init({"a": jax.ShapeDtypeStruct((2,), jnp.bfloat16)})
    assert abstract.scale.dtype == jnp.float32 and abstract.best_value.shape == ()


def test_in_training_loop_converges():
    a = jnp.array([1.0, 10.0])
    loss = lambda x: 0.5 * jnp.sum(a * x**2)
    tx = gradax.chain(gradax.sgd(0.19), gradax.contrib.reduce_on_plateau(patience=3, factor=0.5))
    x, state = jnp.array([1.0, 1.0]), tx.init(jnp.zeros(2))

    @jax.jit
    def step(x, s):
        v, g = jax.value_and_grad(loss)(x)
        u, s = tx.update(g, s, x, value=v)
        return gradax.apply_updates(x, u), s

    for _ in range(200):
        x, state = step(x, state)
    assert float(loss(x)) < 1e-3


def test_missing_value():
    tx = gradax.contrib.reduce_on_plateau()
    with pytest.raises(ValueError, match=r"reduce_on_plateau: update\(...\) needs `value`"):
        tx.update(jnp.ones(2), tx.init(jnp.zeros(2)))


@pytest.mark.parametrize(
    ("kw", "msg"),
    [
        ({"factor": 0.0}, r"reduce_on_plateau\(factor=\.\.\.\) must be in \(0, 1\]"),
        ({"patience": -1}, r"reduce_on_plateau\(patience=\.\.\.\) must be >= 0"),
        ({"rtol": -1.0}, r"reduce_on_plateau\(rtol=\.\.\.\) must be >= 0"),
        ({"cooldown": -1}, r"reduce_on_plateau\(cooldown=\.\.\.\) must be >= 0"),
        ({"accumulation_size": 0}, r"reduce_on_plateau\(accumulation_size=\.\.\.\) must be >= 1"),
        ({"min_scale": -0.1}, r"reduce_on_plateau\(min_scale=\.\.\.\) must be >= 0"),
    ],
)
def test_errors(kw, msg):
    with pytest.raises(ValueError, match=msg):
        gradax.contrib.reduce_on_plateau(**kw)
