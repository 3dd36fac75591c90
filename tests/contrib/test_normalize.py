"""normalize (gradax.contrib.normalize) against Optax 0.2.8 and the definition g / ||g||."""

import jax
import jax.numpy as jnp
import numpy as np
import optax

import gradax
from tests.contrib._common import check_abstract_and_bf16, check_oracle, converges, params_and_grads


def test_matches_optax():
    check_oracle(gradax.contrib.normalize(), optax.contrib.normalize())


def test_unit_global_norm_and_state():
    _, grads = params_and_grads(steps=1)
    tx = gradax.contrib.normalize()
    assert tx.init(None) == gradax.contrib.NormalizeState() == gradax.EmptyState()
    u, _ = tx.update(grads[0], tx.init(None))
    np.testing.assert_allclose(float(gradax.global_norm(u)), 1.0, rtol=1e-6)
    ref = np.concatenate([np.ravel(x) for x in jax.tree.leaves(grads[0])])
    got = np.concatenate([np.ravel(x) for x in jax.tree.leaves(u)])
    np.testing.assert_allclose(got, ref / np.linalg.norm(ref), rtol=1e-6)


def test_zero_gradient_gives_zeros_where_optax_gives_nan():
    g = {"a": jnp.zeros(2)}
    u, _ = gradax.contrib.normalize().update(g, gradax.EmptyState())
    np.testing.assert_array_equal(u["a"], 0.0)
    uo, _ = optax.contrib.normalize().update(g, optax.EmptyState())
    assert np.isnan(np.asarray(uo["a"])).all()  # Optax 0.2.8 (docs/differences.md)


def test_abstract_init_and_bf16():
    check_abstract_and_bf16(gradax.contrib.normalize())


def test_converges_with_decaying_step():
    loss = lambda x: 0.5 * jnp.sum(x**2)
    tx = gradax.chain(gradax.contrib.normalize(), gradax.sgd(lambda c: 1.0 / (1.0 + c)))
    assert converges(tx, loss, jnp.array([1.0, -2.0]), 200) < 1e-2
