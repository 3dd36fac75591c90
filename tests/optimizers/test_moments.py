"""Tests of update_moment, update_moment_per_elem_norm, update_infinity_moment and bias_correction."""

import jax.numpy as jnp
import numpy as np
import optax  # the test oracle
import pytest

import gradax

TREE = {"a": jnp.array([1.0, -2.0, 3.0]), "b": (jnp.array(0.5), None)}
MOM = {"a": jnp.array([0.1, 0.2, -0.3]), "b": (jnp.array(2.0), None)}


@pytest.mark.parametrize("name", ["update_moment", "update_moment_per_elem_norm"])
@pytest.mark.parametrize("order", [1, 2, 3])
def test_moments_match_optax(name, order):
    ours = getattr(gradax, name)(TREE, MOM, 0.9, order)
    theirs = getattr(optax, name)(TREE, MOM, 0.9, order)
    for x, y in zip(ours.values(), theirs.values()):
        np.testing.assert_allclose(
            np.asarray(x[0] if isinstance(x, tuple) else x), np.asarray(y[0] if isinstance(y, tuple) else y), rtol=1e-6
        )
    assert ours["b"][1] is None


def test_update_moment_closed_form():
    out = gradax.update_moment(jnp.array([2.0]), jnp.array([1.0]), 0.25, 2)
    np.testing.assert_allclose(out, [0.75 * 4.0 + 0.25 * 1.0])


def test_per_elem_norm_complex():
    g = jnp.array([3.0 + 4.0j])
    out = gradax.update_moment_per_elem_norm(g, jnp.zeros(1, jnp.complex64), 0.5, 2)
    np.testing.assert_allclose(out, [12.5])
    np.testing.assert_allclose(out, optax.update_moment_per_elem_norm(g, jnp.zeros(1, jnp.complex64), 0.5, 2))


def test_infinity_moment():
    out = gradax.update_infinity_moment(TREE, MOM, 0.9, 1e-3)
    theirs = optax.update_infinity_moment(TREE, MOM, 0.9, 1e-3)
    np.testing.assert_allclose(out["a"], theirs["a"])
    np.testing.assert_allclose(out["a"], [1.001, 2.001, 3.001], rtol=1e-6)


def test_bias_correction():
    out = gradax.bias_correction(MOM, 0.9, jnp.asarray(3, jnp.int32))
    np.testing.assert_allclose(out["a"], np.asarray(MOM["a"]) / (1 - 0.9**3), rtol=1e-6)
    np.testing.assert_allclose(out["a"], optax.bias_correction(MOM, 0.9, jnp.asarray(3, jnp.int32))["a"], rtol=1e-6)
    bf = gradax.bias_correction(jnp.ones(2, jnp.bfloat16), 0.999, 1)
    assert bf.dtype == jnp.bfloat16 and bool(jnp.all(jnp.isfinite(bf)))
