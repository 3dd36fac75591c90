"""Mechanic (gradax.contrib.mechanize) against Optax 0.2.8."""

import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradax
from tests.contrib._common import check_oracle, converges


@pytest.mark.parametrize("kw", [{}, {"weight_decay": 0.0, "num_betas": 3}])
def test_matches_optax(kw):
    # rtol 1e-4: s is a ratio of accumulated sums of h^2 that amplifies float32 rounding of the inner products
    check_oracle(
        gradax.contrib.mechanize(gradax.adam(1e-2), **kw), optax.contrib.mechanize(optax.adam(1e-2), **kw), rtol=1e-4
    )


def test_converges_on_quadratic():
    a = jnp.array([1.0, 10.0, 0.1])
    loss = lambda x: 0.5 * jnp.sum(a * x**2)  # noqa: E731
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
