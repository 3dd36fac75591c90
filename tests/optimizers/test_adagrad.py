"""Tests of scale_by_rss and adagrad (gradax.optimizers._adagrad)."""

import jax.numpy as jnp
import numpy as np
import pytest

import gradax
from tests.optimizers._other_helpers import assert_matches_optax, converges


@pytest.mark.parametrize("kwargs", [{}, {"initial_accumulator_value": 0.0, "eps": 0.0}, {"eps": 1e-3}])
def test_scale_by_rss_matches_optax(kwargs):
    assert_matches_optax(lambda lib: lib.scale_by_rss(**kwargs))


@pytest.mark.parametrize("lr", [0.1, jnp.asarray(0.1), lambda c: 0.1 / (1.0 + c)])
def test_adagrad_matches_optax(lr):
    assert_matches_optax(lambda lib: lib.adagrad(lr))


def test_closed_form_and_zero():
    tx = gradax.scale_by_rss(initial_accumulator_value=0.0, eps=0.0)
    s = tx.init(jnp.zeros(2))
    u1, s = tx.update(jnp.array([3.0, 0.0]), s)
    u2, s = tx.update(jnp.array([4.0, 0.0]), s)
    np.testing.assert_allclose(u2, [4.0 / 5.0, 0.0])
    assert isinstance(s, gradax.ScaleByRssState)
    np.testing.assert_allclose(s.sum_of_squares, [25.0, 0.0])


def test_converges():
    assert converges(gradax.adagrad(0.5), steps=300)[0]


@pytest.mark.parametrize(
    "call, match",
    [
        (
            lambda: gradax.scale_by_rss(initial_accumulator_value=-1.0),
            r"scale_by_rss\(initial_accumulator_value=\.\.\.\) must be >= 0",
        ),
        (lambda: gradax.adagrad(0.1, eps=-1.0), r"scale_by_rss\(eps=\.\.\.\) must be >= 0"),
    ],
)
def test_errors(call, match):
    with pytest.raises(ValueError, match=match):
        call()
