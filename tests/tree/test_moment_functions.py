"""update_moment, update_moment_per_elem_norm, update_infinity_moment and bias_correction: one implementation
(gradax.tree) behind the top-level and the tree_utils names, as in Optax, and bit for bit Optax 0.2.8's results."""

import jax
import jax.numpy as jnp
import numpy as np
import optax  # the test oracle
import pytest

import gradax

NAMES = ("update_moment", "update_moment_per_elem_norm", "update_infinity_moment", "bias_correction")
KEY = jax.random.PRNGKey(0)
UPDATES = {
    "f32": jax.random.normal(KEY, (6,)),
    "bf16": jax.random.normal(jax.random.fold_in(KEY, 1), (3,)).astype(jnp.bfloat16),
    "none": None,
}
MOMENTS = {
    "f32": jax.random.uniform(jax.random.fold_in(KEY, 2), (6,)),
    "bf16": jax.random.uniform(jax.random.fold_in(KEY, 3), (3,)).astype(jnp.bfloat16),
    "none": None,
}


def _same_bits(ours, theirs):
    assert jax.tree.structure(ours) == jax.tree.structure(theirs)
    for x, y in zip(jax.tree.leaves(ours), jax.tree.leaves(theirs)):
        assert x.dtype == y.dtype
        np.testing.assert_array_equal(np.asarray(x).view(np.uint8), np.asarray(y).view(np.uint8))


@pytest.mark.parametrize("name", NAMES)
def test_one_function_behind_every_name(name):
    assert getattr(gradax, name) is getattr(gradax.tree, name) is getattr(gradax.tree_utils, "tree_" + name)


@pytest.mark.parametrize("name", ["update_moment", "update_moment_per_elem_norm"])
@pytest.mark.parametrize("order", [1, 2, 3])
def test_moments_are_optax_bit_for_bit(name, order):
    _same_bits(getattr(gradax, name)(UPDATES, MOMENTS, 0.9, order), getattr(optax, name)(UPDATES, MOMENTS, 0.9, order))


def test_infinity_moment_and_complex_magnitude_are_optax_bit_for_bit():
    ours = gradax.update_infinity_moment(UPDATES, MOMENTS, 0.9, 1e-3)
    _same_bits(ours, optax.update_infinity_moment(UPDATES, MOMENTS, 0.9, 1e-3))
    z = {"z": jnp.array([3.0 + 4.0j, -1.0j])}
    m = {"z": jnp.array([1.0, 2.0])}
    for order in (2, 3):
        ours = gradax.update_moment_per_elem_norm(z, m, 0.5, order)
        _same_bits(ours, optax.update_moment_per_elem_norm(z, m, 0.5, order))
    np.testing.assert_allclose(gradax.update_moment_per_elem_norm(z, m, 0.5, 2)["z"], [13.0, 1.5])


def test_a_none_update_stays_none_whatever_the_moment_holds():
    out = gradax.update_moment({"a": None, "b": jnp.ones(2)}, {"a": jnp.ones(3), "b": jnp.zeros(2)}, 0.5, 1)
    assert out["a"] is None
    np.testing.assert_array_equal(out["b"], 0.5)


@pytest.mark.parametrize("count", [1, 3, 1000])
def test_bias_correction_is_optax_bit_for_bit(count):
    # 1 - 0.999**3 cancels: a differently rounded power shows up at 2e-5 relative, so this pins the computation
    _same_bits(gradax.bias_correction(MOMENTS, 0.999, count), optax.bias_correction(MOMENTS, 0.999, count))
    np.testing.assert_allclose(
        gradax.bias_correction(MOMENTS, 0.999, count)["f32"], MOMENTS["f32"] / (1 - 0.999**count), rtol=3e-4
    )


def test_bias_correction_keeps_a_bfloat16_moment_bfloat16():
    # the factor 1 - 0.999 is computed in float32, then cast for the division: bfloat16 in, bfloat16 out
    out = gradax.bias_correction(jnp.ones(2, jnp.bfloat16), 0.999, 1)
    assert out.dtype == jnp.bfloat16
    np.testing.assert_allclose(np.asarray(out, np.float32), 1000.0, rtol=1e-2)
    _same_bits(out, optax.bias_correction(jnp.ones(2, jnp.bfloat16), 0.999, 1))
