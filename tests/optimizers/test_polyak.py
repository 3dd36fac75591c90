"""Tests of scale_by_polyak, polyak_sgd and scale_by_distance_over_gradients (gradax.optimizers._polyak)."""

import jax
import jax.numpy as jnp
import numpy as np
import optax  # the test oracle
import pytest

import gradax
from tests.optimizers._other_helpers import assert_matches_optax, converges, random_tree

SHAPES = {"w": (4, 3), "b": (3,), "t": (2, 3, 2)}


def loss_value(params, grads, lib):
    del grads, lib
    return {"value": sum(jnp.sum(x**2) for x in jax.tree.leaves(params)) - 1.0}


@pytest.mark.parametrize(
    "kwargs", [{}, {"f_min": -1.0, "max_learning_rate": 0.05, "eps": 1e-3}, {"variant": "sps+", "f_min": 100.0}]
)
def test_scale_by_polyak_matches_optax(kwargs):
    assert_matches_optax(lambda lib: lib.scale_by_polyak(**kwargs), extra_args=loss_value)


@pytest.mark.parametrize("kwargs", [{}, {"max_learning_rate": 0.1, "variant": "sps+", "eps": 1e-4}])
def test_polyak_sgd_matches_optax_with_unit_scaling(kwargs):
    assert_matches_optax(lambda lib: lib.polyak_sgd(**kwargs), extra_args=loss_value)


@pytest.mark.parametrize("scaling", [0.5, jnp.asarray(2.0), lambda c: 0.5 / (1.0 + c)])
def test_polyak_sgd_scaling_follows_documented_formula(scaling):
    """s * min(gap / ||g||^2, gmax) * g; Optax 0.2.8 divides by s instead of multiplying (docs/differences.md)."""
    params = jnp.array([1.0, 2.0, 3.0])
    f = lambda x: jnp.sum(x**2)
    value, grad = jax.value_and_grad(f)(params)
    opt = gradax.polyak_sgd(max_learning_rate=10.0, scaling=scaling)
    u, _ = opt.update(grad, opt.init(params), params, value=value)
    s = scaling(0) if callable(scaling) else float(scaling)
    expected = -s * min(float(value) / float(jnp.sum(grad**2)), 10.0) * np.asarray(grad)
    np.testing.assert_allclose(u, expected, rtol=1e-6)
    theirs = optax.polyak_sgd(max_learning_rate=10.0, scaling=scaling)
    v, _ = theirs.update(grad, theirs.init(params), params, value=value)
    np.testing.assert_allclose(v, expected / s**2, rtol=1e-6)


def test_polyak_needs_value():
    opt = gradax.polyak_sgd()
    with pytest.raises(ValueError, match=r"scale_by_polyak: update\(\.\.\.\) needs `value`"):
        opt.update(jnp.ones(2), opt.init(jnp.ones(2)), jnp.ones(2))


def test_polyak_zero_gradient_gives_zero_step():
    tx = gradax.scale_by_polyak()
    u, _ = tx.update(jnp.zeros(2), tx.init(None), value=jnp.asarray(3.0))
    np.testing.assert_array_equal(u, 0.0)


def test_polyak_converges():
    assert converges(gradax.polyak_sgd(), steps=50, extra=True)[0]


def test_dog_matches_optax():
    params = random_tree(shapes=SHAPES)
    assert_matches_optax(lambda lib: lib.scale_by_distance_over_gradients(), params=params)
    assert_matches_optax(
        lambda lib: lib.scale_by_distance_over_gradients(reps_rel=1e-2, eps=1e-4, global_scale=0.5), params=params
    )


def test_dog_scalar_leaf_keeps_shape():
    """Optax 0.2.8 turns a 0-d update into shape (1,); gradax keeps the update's shape."""
    tx = gradax.scale_by_distance_over_gradients()
    p = {"s": jnp.asarray(2.0)}
    u, _ = tx.update(p, tx.init(p), p)
    assert u["s"].shape == ()
    v, _ = optax.scale_by_distance_over_gradients().update(p, optax.scale_by_distance_over_gradients().init(p), p)
    assert v["s"].shape == (1,)


def test_dog_closed_form_and_state():
    tx = gradax.scale_by_distance_over_gradients(reps_rel=0.5, eps=0.0)
    params = jnp.array([3.0, 4.0])
    state = tx.init(params)
    assert isinstance(state, gradax.optimizers._polyak.ScaleByDistanceOverGradientsState)
    np.testing.assert_allclose(state.max_dist, 0.5 * 6.0)
    u, state = tx.update(jnp.array([0.0, 2.0]), state, params)
    np.testing.assert_allclose(u, [0.0, 3.0])
    np.testing.assert_allclose(state.grad_sum_of_squares, [4.0])


def test_dog_converges():
    opt = gradax.chain(gradax.scale_by_distance_over_gradients(reps_rel=1e-2), gradax.scale(-1.0))
    assert converges(opt, steps=300, tol=0.05)[0]


@pytest.mark.parametrize("lr", [0.1, jnp.asarray(0.1), lambda c: 0.1 / (1.0 + c)])
def test_noisy_sgd_matches_optax(lr):
    assert_matches_optax(lambda lib: lib.noisy_sgd(lr, eta=0.0, key=0))


def test_noisy_sgd_noise_statistics():
    opt = gradax.noisy_sgd(1.0, eta=4.0, gamma=0.0, key=jax.random.key(1))
    u, _ = opt.update(jnp.zeros(20000), opt.init(jnp.zeros(20000)))
    assert abs(float(jnp.std(u)) - 2.0) < 0.05


def test_noisy_sgd_converges():
    assert converges(gradax.noisy_sgd(0.1, eta=1e-4, key=0), steps=300)[0]


@pytest.mark.parametrize(
    "call, match",
    [
        (
            lambda: gradax.scale_by_polyak(variant="sps2"),
            r"scale_by_polyak\(variant=\.\.\.\) must be one of 'sps', 'sps\+'",
        ),
        (lambda: gradax.polyak_sgd(max_learning_rate=0.0), r"scale_by_polyak\(max_learning_rate=\.\.\.\) must be > 0"),
        (lambda: gradax.polyak_sgd(eps=-1.0), r"scale_by_polyak\(eps=\.\.\.\) must be >= 0"),
        (
            lambda: gradax.scale_by_distance_over_gradients(reps_rel=0.0),
            r"scale_by_distance_over_gradients\(reps_rel=\.\.\.\) must be > 0",
        ),
        (lambda: gradax.noisy_sgd(0.1, eta=-1.0, key=0), r"add_noise\(eta=\.\.\.\) must be >= 0"),
    ],
)
def test_errors(call, match):
    with pytest.raises(ValueError, match=match):
        call()
