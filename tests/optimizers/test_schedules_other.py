"""Schedules everywhere: every learning_rate / weight_decay of the non-Adam optimizers takes a schedule.

A constant schedule must give the same updates as the float (docs/differences.md, "Schedules everywhere").
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax  # the test oracle
import pytest

import gradax
from tests.optimizers._other_helpers import random_tree

SHAPES = {"w": (4, 3), "b": (3,), "t": (2, 3, 2)}


def const(x):
    return lambda count: x * jnp.ones([], jnp.float32)


FACTORIES = {
    "rmsprop": lambda lr: gradax.rmsprop(lr, momentum=0.5),
    "adagrad": lambda lr: gradax.adagrad(lr),
    "adadelta": lambda lr: gradax.adadelta(lr, weight_decay=const(0.1) if callable(lr) else 0.1),
    "adafactor": lambda lr: gradax.adafactor(
        lr, min_dim_size_to_factor=3, weight_decay_rate=const(0.01) if callable(lr) else 0.01
    ),
    "sm3": lambda lr: gradax.sm3(lr),
    "rprop": lambda lr: gradax.rprop(lr),
    "sign_sgd": lambda lr: gradax.sign_sgd(lr),
    "signum": lambda lr: gradax.signum(lr),
    "fromage": lambda lr: gradax.fromage(lr),
    "lars": lambda lr: gradax.lars(lr, weight_decay=const(0.01) if callable(lr) else 0.01),
    "noisy_sgd": lambda lr: gradax.noisy_sgd(lr, key=0),
    "polyak_sgd": lambda lr: gradax.polyak_sgd(scaling=lr),
}


def _steps(opt, n=3):
    params = random_tree(shapes=SHAPES)
    state = opt.init(params)
    outs = []
    for i in range(n):
        grads = random_tree(5 + i, shapes=SHAPES)
        u, state = opt.update(grads, state, params, value=jnp.asarray(2.0))
        params = gradax.apply_updates(params, u)
        outs.append(u)
    return outs


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_constant_schedule_equals_float(name):
    make = FACTORIES[name]
    for a, b in zip(_steps(make(0.05)), _steps(make(const(0.05)))):
        jax.tree.map(lambda x, y: np.testing.assert_allclose(x, y, rtol=1e-6, atol=1e-7), a, b)
    for a, b in zip(_steps(make(0.05)), _steps(make(jnp.asarray(0.05)))):
        jax.tree.map(lambda x, y: np.testing.assert_allclose(x, y, rtol=1e-6, atol=1e-7), a, b)


def test_optax_fails_where_gradax_does_not():
    params = {"w": jnp.ones((2, 2))}
    for name in ["sm3", "rprop"]:
        with pytest.raises(TypeError):
            opt = getattr(optax, name)(const(0.1))
            opt.update(params, opt.init(params), params)
        opt = getattr(gradax, name)(const(0.1))
        u, _ = opt.update(params, opt.init(params), params)
        assert np.all(np.isfinite(u["w"]))


def test_decaying_schedule_is_used():
    opt = gradax.sm3(lambda c: 0.1 * 0.5**c, momentum=0.0)
    params = {"w": jnp.ones((2, 2))}
    state = opt.init(params)
    u0, state = opt.update(params, state)
    u1, state = opt.update(params, state)
    ratio = np.asarray(u1["w"]) / np.asarray(u0["w"])
    # second step: the schedule halves, the SM3 accumulator doubles (so 1/sqrt(2))
    np.testing.assert_allclose(ratio, 0.5 / np.sqrt(2.0), rtol=1e-6)
