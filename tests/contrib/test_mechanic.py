"""Mechanic (gradax.contrib.mechanize) against Optax 0.2.8."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradax
from tests._stepping import run
from tests.contrib._common import assert_trees_close, check_oracle, converges, params_and_grads


@pytest.mark.parametrize("kw", [{}, {"weight_decay": 0.0, "num_betas": 3}])
def test_matches_optax(kw):
    gx, ox = gradax.contrib.mechanize(gradax.adam(1e-2), **kw), optax.contrib.mechanize(optax.adam(1e-2), **kw)
    check_oracle(gx, ox, state=False)
    params, grads = params_and_grads()
    _, sg, _ = run(gx, params, grads)
    _, so, _ = run(ox, params, grads)
    assert_trees_close((sg.r, sg.m, sg.v, sg.s, sg.x0, sg.count), (so.r, so.m, so.v, so.s, so.x0, so.count))
    # the base Adam's nu: 1 - b2 rounds differently in Optax (docs/differences.md, "Adam family"), 1.3e-5 relative
    assert_trees_close(sg.base_optimizer_state, so.base_optimizer_state, rtol=2e-5)


@pytest.mark.parametrize(("base", "rtol"), [("sgd", 1e-6), ("adam", 1e-5)])
def test_quadratic_trajectory_matches_optax(base, rtol):
    """60 steps where the scale s grows from 1e-6 to O(1); with SGD as the base the results are identical."""
    a = jnp.array([1.0, 10.0, 0.1])
    loss = lambda x: 0.5 * jnp.sum(a * (x - 1.0) ** 2)

    def traj(lib):
        tx = lib.contrib.mechanize(getattr(lib, base)(1e-2), weight_decay=0.1)
        x, out = jnp.zeros(3), []
        state = tx.init(x)
        step = jax.jit(lambda x, s: tx.update(jax.grad(loss)(x), s, x))
        for _ in range(60):
            u, state = step(x, state)
            x = lib.apply_updates(x, u)
            out.append(x)
        return np.array(out), state

    (xg, sg), (xo, so) = traj(gradax), traj(optax)
    assert float(jnp.sum(so.s)) > 0.1
    np.testing.assert_allclose(xg, xo, rtol=rtol, atol=1e-6)
    np.testing.assert_allclose(sg.s, so.s, rtol=rtol)


def test_converges_on_quadratic():
    a = jnp.array([1.0, 10.0, 0.1])
    loss = lambda x: 0.5 * jnp.sum(a * x**2)
    assert converges(gradax.contrib.mechanize(gradax.sgd(0.05)), loss, jnp.array([1.0, -1.0, 2.0]), 300) < 0.05 * 5.7


@pytest.mark.parametrize(
    ("kw", "msg"),
    [
        ({"eps": 0.0}, r"mechanize\(eps=\.\.\.\) must be > 0"),
        ({"num_betas": 0}, r"mechanize\(num_betas=\.\.\.\) must be >= 1"),
    ],
)
def test_errors(kw, msg):
    with pytest.raises(ValueError, match=msg):
        gradax.contrib.mechanize(gradax.sgd(0.1), **kw)


def test_weight_decay_schedule():
    """A schedule is evaluated at the count before the increment (the decay first changes h, hence v, at step 1)."""
    p = {"w": jnp.array([1.0, -2.0, 0.5]), "b": jnp.array([0.3])}
    grads = [{"w": jnp.array([0.3, -0.1, 0.2]) * (i + 1), "b": jnp.array([0.1 * i])} for i in range(3)]

    def run(wd):
        tx = gradax.contrib.mechanize(gradax.sgd(0.1), weight_decay=wd, s_init=0.1)
        params, out = p, []
        state = tx.init(params)
        for g in grads:
            u, state = tx.update(g, state, params)
            params = gradax.apply_updates(params, u)
            out.append(np.concatenate([params["w"], state.v]))  # v: sums of h^2, where the decay enters
        return np.array(out)

    number, none = run(0.5), run(0.0)
    np.testing.assert_allclose(run(lambda c: 0.5), number, rtol=1e-6)
    only_step1 = run(lambda c: jnp.where(c == 1, 0.5, 0.0))
    np.testing.assert_allclose(only_step1[:2], number[:2], rtol=1e-6)
    assert not np.allclose(number[1], none[1], rtol=1e-2)  # the decay does change step 1 (v by ~7%)
