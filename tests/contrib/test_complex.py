"""split_real_and_imaginary (gradax.contrib) against Optax 0.2.8 and the real-pair definition."""

import jax
import jax.numpy as jnp
import numpy as np
import optax

import gradax
from tests._stepping import run
from tests.contrib._common import assert_trees_close, check_oracle


def _complex_problem(steps=6):
    rng = np.random.default_rng(0)
    c = lambda *s: jnp.asarray(rng.normal(size=s) + 1j * rng.normal(size=s), jnp.complex64)
    params = {"z": c(3), "r": jnp.asarray(rng.normal(size=2), jnp.float32)}
    grads = [{"z": c(3), "r": jnp.asarray(rng.normal(size=2), jnp.float32)} for _ in range(steps)]
    return params, grads


def _parts(t):
    return jax.tree.map(lambda x: (jnp.real(x), jnp.imag(x)), t)


def test_matches_optax():
    params, grads = _complex_problem()
    ug, _, _ = run(gradax.contrib.split_real_and_imaginary(gradax.adam(0.1)), params, grads)
    uo, _, _ = run(optax.contrib.split_real_and_imaginary(optax.adam(0.1)), params, grads)
    assert_trees_close(_parts(ug), _parts(uo))
    check_oracle(
        gradax.contrib.split_real_and_imaginary(gradax.adam(0.1)),
        optax.contrib.split_real_and_imaginary(optax.adam(0.1)),
        params,
        grads,
    )
    check_oracle(
        gradax.contrib.split_real_and_imaginary(gradax.adamw(0.1, weight_decay=0.1)),
        optax.contrib.split_real_and_imaginary(optax.adamw(0.1, weight_decay=0.1)),
        params,
        grads,
    )


def test_same_as_inner_on_real_pairs():
    params, grads = _complex_problem()
    tx = gradax.contrib.split_real_and_imaginary(gradax.adam(0.1))
    ups, state, _ = run(tx, params, grads)
    assert isinstance(state, gradax.contrib.SplitRealAndImaginaryState)
    pairs = lambda t: {"re": jnp.real(t["z"]), "im": jnp.imag(t["z"]), "r": t["r"]}
    ref, _, _ = run(gradax.adam(0.1), pairs(params), [pairs(g) for g in grads])
    for u, r in zip(ups, ref):
        assert u["z"].dtype == jnp.complex64
        assert_trees_close(pairs(u), r)


def test_abstract_init():
    params, _ = _complex_problem()
    tx = gradax.contrib.split_real_and_imaginary(gradax.adam(0.1))
    abstract = jax.tree.map(lambda p: jax.ShapeDtypeStruct(p.shape, p.dtype), params)
    s_abs, s_con = tx.init(abstract), tx.init(params)
    assert jax.tree.structure(s_abs) == jax.tree.structure(s_con)
    for a, c in zip(jax.tree.leaves(s_abs), jax.tree.leaves(s_con)):
        assert a.shape == c.shape and a.dtype == c.dtype == (jnp.int32 if c.ndim == 0 else jnp.float32)


def test_converges_on_complex_quadratic():
    # JAX's grad of a real loss of z is the conjugate of the steepest-ascent direction: optimize with conj(grad)
    target = jnp.array([1.0 + 2.0j, -0.5j], jnp.complex64)
    loss = lambda z: jnp.sum(jnp.abs(z - target) ** 2)
    tx = gradax.contrib.split_real_and_imaginary(gradax.adam(0.05))
    z = jnp.zeros(2, jnp.complex64)
    state = tx.init(z)
    step = jax.jit(lambda z, s: tx.update(jnp.conj(jax.grad(loss)(z)), s, z))
    for _ in range(300):
        u, state = step(z, state)
        z = gradax.apply_updates(z, u)
    assert float(loss(z)) < 1e-3
