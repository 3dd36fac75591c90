"""add_decayed_weights, add_noise, keep_params_nonnegative, zero_nans: against Optax 0.2.8 and closed forms."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax  # the test oracle
import pytest

import gradax

PARAMS = {"w": jnp.array([[1.0, -2.0], [0.5, 3.0]]), "b": jnp.array([0.1, -0.3]), "n": (jnp.array(2.0),)}
GRADS = jax.tree.map(lambda p: 0.5 - p, PARAMS)


def _run(lib, make, steps=4, params=PARAMS, grads=GRADS):
    tx = make(lib)
    state = tx.init(params)
    outs = []
    for i in range(steps):
        u, state = tx.update(jax.tree.map(lambda g: g * (i + 1), grads), state, params)
        outs.append(u)
    return outs, state


@pytest.mark.parametrize(
    "make",
    [
        lambda ox: ox.add_decayed_weights(0.1),
        lambda ox: ox.add_decayed_weights(0.0),
        lambda ox: ox.add_decayed_weights(lambda c: 0.1 / (1.0 + c)),
        lambda ox: ox.add_decayed_weights(0.1, mask={"w": True, "b": False, "n": (True,)}),
        lambda ox: ox.add_decayed_weights(0.1, mask=lambda p: jax.tree.map(lambda x: x.ndim > 1, p)),
        lambda ox: ox.add_noise(0.1, 0.55, key=jax.random.key(3)),
        lambda ox: ox.add_noise(0.1, 0.55, key=7),
        lambda ox: ox.keep_params_nonnegative(),
        lambda ox: ox.zero_nans(),
        lambda ox: ox.transforms.add_decayed_weights(0.2),
    ],
)
def test_matches_optax(make):
    a, sa = _run(optax, make)
    b, sb = _run(gradax, make)
    for x, y in zip(a, b):
        jax.tree.map(lambda p, q: np.testing.assert_allclose(p, q, rtol=1e-6, atol=1e-7), x, y)
    assert len(jax.tree.leaves(sa)) == len(jax.tree.leaves(sb))


def test_weight_decay_closed_form_and_schedule_count():
    tx = gradax.add_decayed_weights(lambda c: 0.5 * c)
    state = tx.init(PARAMS)
    u, state = tx.update(GRADS, state, PARAMS)  # schedule(0) = 0
    jax.tree.map(np.testing.assert_allclose, u, GRADS)
    u, state = tx.update(GRADS, state, PARAMS)  # schedule(1) = 0.5
    jax.tree.map(lambda x, g, p: np.testing.assert_allclose(x, g + 0.5 * p), u, GRADS, PARAMS)
    assert int(state.count) == 2


def test_noise_statistics_and_dtype():
    tx = gradax.add_noise(eta=1.0, gamma=0.0, key=0)
    g = jnp.zeros(20000)
    u, state = tx.update(g, tx.init(g))
    assert abs(float(jnp.std(u)) - 1.0) < 0.03 and abs(float(jnp.mean(u))) < 0.03
    u2, _ = tx.update(g, state)
    assert not np.allclose(u, u2)  # a fresh key every step
    gb = jnp.zeros(4, jnp.bfloat16)
    ub, _ = jax.jit(tx.update)(gb, tx.init(gb))
    assert ub.dtype == jnp.bfloat16


def test_nonnegative_and_zero_nans_closed_form():
    tx = gradax.keep_params_nonnegative()
    p = jnp.array([1.0, 2.0, 0.0])
    u, _ = tx.update(jnp.array([-3.0, -1.0, 1.0]), tx.init(p), p)
    np.testing.assert_array_equal(u, [-1.0, -1.0, 1.0])
    assert bool(jnp.all(p + u >= 0))
    tz = gradax.zero_nans()
    u, s = tz.update({"a": jnp.array([1.0, jnp.nan]), "b": jnp.ones(2)}, tz.init({"a": jnp.ones(2), "b": jnp.ones(2)}))
    np.testing.assert_array_equal(u["a"], [1.0, 0.0])
    assert bool(s.found_nan["a"]) and not bool(s.found_nan["b"])


def test_abstract_init():
    shapes = jax.tree.map(lambda p: jax.ShapeDtypeStruct(p.shape, p.dtype), PARAMS)
    for tx in [gradax.zero_nans(), gradax.add_noise(0.1, 0.5, key=0), gradax.add_decayed_weights(lambda c: 0.1)]:
        tx.init(shapes)


def test_errors():
    with pytest.raises(ValueError, match="add_decayed_weights: update.*needs `params`"):
        tx = gradax.add_decayed_weights(0.1)
        tx.update(GRADS, tx.init(PARAMS))
    with pytest.raises(ValueError, match="keep_params_nonnegative: update.*needs `params`"):
        tx = gradax.keep_params_nonnegative()
        tx.update(GRADS, tx.init(PARAMS))
    with pytest.raises(ValueError, match=r"add_decayed_weights\(weight_decay=...\) must be finite; got nan"):
        gradax.add_decayed_weights(float("nan"))
    with pytest.raises(ValueError, match=r"add_noise\(eta=...\) must be >= 0; got -1.0"):
        gradax.add_noise(-1.0, 0.5, key=0)
    with pytest.raises(ValueError, match=r"add_noise\(key=...\) must be an int seed or a PRNG key"):
        gradax.add_noise(1.0, 0.5, key="abc")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match=r"add_noise\(seed=...\) must be None when key is given"):
            gradax.add_noise(1.0, 0.5, key=1, seed=2)
    with pytest.warns(UserWarning, match="no key given"):
        gradax.add_noise(1.0, 0.5)
    with pytest.warns(DeprecationWarning, match="seed"):
        gradax.add_noise(1.0, 0.5, seed=1)
