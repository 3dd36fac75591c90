"""make_perturbed_fun against Optax 0.2.8 (same draws: values and gradients), closed forms, and errors."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.scipy.stats import norm

import gradax

GP, OP = gradax.perturbations, optax.perturbations
X = {"a": jnp.array([1.0, -2.0, 0.5]), "b": (jnp.array([[0.3, -0.1]]),)}


def f(t):
    return jnp.sum(jnp.maximum(t["a"], 0.0)) + jnp.sum(jnp.sign(t["b"][0]))


def argmax_onehot(x):
    return jax.nn.one_hot(jnp.argmax(x), x.shape[0])


@pytest.mark.parametrize("noise", ["Gumbel", "Normal"])
@pytest.mark.parametrize("use_baseline", [True, False])
def test_matches_optax(noise, use_baseline):
    key = jax.random.key(3)
    ours = GP.make_perturbed_fun(f, 50, 0.3, getattr(GP, noise)(), use_baseline)
    theirs = OP.make_perturbed_fun(f, 50, 0.3, getattr(OP, noise)(), use_baseline)
    np.testing.assert_allclose(ours(key, X), theirs(key, X), rtol=1e-5)
    np.testing.assert_allclose(jax.jit(ours)(key, X), theirs(key, X), rtol=1e-5)
    g_ours, g_theirs = jax.grad(ours, argnums=1)(key, X), jax.grad(theirs, argnums=1)(key, X)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6), g_ours, g_theirs)
    # vector-valued function and its Jacobian
    x = jnp.array([0.1, 0.5, -0.3])
    ours_v = GP.make_perturbed_fun(argmax_onehot, 40, 0.5, getattr(GP, noise)(), use_baseline)
    theirs_v = OP.make_perturbed_fun(argmax_onehot, 40, 0.5, getattr(OP, noise)(), use_baseline)
    np.testing.assert_allclose(ours_v(key, x), theirs_v(key, x), rtol=1e-5)
    np.testing.assert_allclose(jax.jacobian(ours_v, 1)(key, x), jax.jacobian(theirs_v, 1)(key, x), rtol=1e-4, atol=1e-6)


def test_vmap_over_keys():
    keys = jax.random.split(jax.random.key(0), 3)
    fn = GP.make_perturbed_fun(f, 20, 0.2)
    batched = jax.vmap(fn, in_axes=(0, None))(keys, X)
    for i in range(3):
        np.testing.assert_allclose(batched[i], fn(keys[i], X), rtol=1e-6)


def test_noise_distributions():
    key = jax.random.key(0)
    z = jnp.array([-1.0, 0.0, 2.0])
    for ours, theirs in [(GP.Gumbel(), OP.Gumbel()), (GP.Normal(), OP.Normal())]:
        np.testing.assert_allclose(ours.log_prob(z), theirs.log_prob(z))
        np.testing.assert_array_equal(ours.sample(key, (4,)), theirs.sample(key, (4,)))
    np.testing.assert_allclose(GP.Normal().log_prob(z), norm.logpdf(z) - norm.logpdf(0.0), rtol=1e-6)


def test_closed_form_smoothing_of_relu():
    # E[max(x + s z, 0)] for z ~ N(0, 1) is x Phi(x/s) + s phi(x/s); its derivative is Phi(x/s).
    x, s = jnp.array([0.3]), 0.5
    fn = GP.make_perturbed_fun(lambda v: jnp.maximum(v, 0.0)[0], 20000, s, GP.Normal())
    value = fn(jax.random.key(0), x)
    grad = jax.grad(fn, argnums=1)(jax.random.key(1), x)
    np.testing.assert_allclose(value, x[0] * norm.cdf(x[0] / s) + s * norm.pdf(x[0] / s), rtol=2e-2)
    np.testing.assert_allclose(grad[0], norm.cdf(x[0] / s), rtol=5e-2)


def test_errors():
    with pytest.raises(ValueError, match=r"make_perturbed_fun\(num_samples=\.\.\.\) must be >= 1"):
        GP.make_perturbed_fun(f, 0)
    with pytest.raises(ValueError, match=r"make_perturbed_fun\(sigma=\.\.\.\) must be > 0"):
        GP.make_perturbed_fun(f, 10, sigma=0.0)
