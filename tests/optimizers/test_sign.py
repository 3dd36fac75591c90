"""Tests of scale_by_sign, sign_sgd and signum (gradax.optimizers._sign)."""

import jax.numpy as jnp
import numpy as np
import pytest

import gradax
from tests.optimizers._other_helpers import assert_matches_optax, converges


def test_scale_by_sign_matches_optax():
    assert_matches_optax(lambda lib: lib.scale_by_sign())


@pytest.mark.parametrize("lr", [0.1, jnp.asarray(0.1), lambda c: 0.1 / (1.0 + c)])
def test_sign_sgd_and_signum_match_optax(lr):
    assert_matches_optax(lambda lib: lib.sign_sgd(lr))
    assert_matches_optax(lambda lib: lib.signum(lr, beta=0.5))


def test_signum_closed_form():
    opt = gradax.signum(0.1, beta=0.9)
    s = opt.init(jnp.zeros(2))
    _, s = opt.update(jnp.array([1.0, -1.0]), s)
    u, s = opt.update(jnp.array([-0.05, -1.0]), s)  # m = 0.09 - 0.005 > 0
    np.testing.assert_allclose(u, [-0.1, 0.1])


def test_converges():
    assert converges(gradax.sign_sgd(lambda c: 0.1 * 0.97**c), steps=300)[0]
    assert converges(gradax.signum(lambda c: 0.1 * 0.97**c), steps=300)[0]


def test_errors():
    with pytest.raises(ValueError, match=r"signum\(beta=\.\.\.\) must be in \[0, 1\); got 1\.5"):
        gradax.signum(0.1, beta=1.5)
