"""Mechanic (gradax.contrib.mechanize) against Optax 0.2.8."""

import jax.numpy as jnp
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
