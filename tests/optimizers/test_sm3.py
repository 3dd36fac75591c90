"""Tests of scale_by_sm3 and sm3 (gradax.optimizers._sm3), against Optax and a float64 NumPy reference."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import optax  # the test oracle
import pytest

import gradax
from tests.optimizers._other_helpers import assert_matches_optax, converges, random_tree

NO_SCALAR = {"w": (4, 3), "b": (3,), "t": (2, 3, 2)}


def reference_sm3(grads, b1=0.9, eps=1e-8):
    """SM3-II (Anil et al. 2019, Algorithm 2, cover = the slices along each axis) with momentum, float64, loops.

    For each entry i: nu(i) = min over axes a of mu_a[i_a] + g(i)^2; then mu_a[j] = max of nu over entries with
    i_a = j. Vectors keep a full accumulator (their cover is the singletons). Update g / sqrt(nu), momentum
    m = b1 m + (1 - b1) update.
    """
    shape = np.shape(grads[0])
    mus = [np.zeros(n) for n in shape]
    full = np.zeros(shape)
    m = np.zeros(shape)
    out = []
    for g in grads:
        g = np.asarray(g, np.float64)
        nu = np.zeros(shape)
        for i in itertools.product(*[range(n) for n in shape]):
            bound = full[i] if len(shape) < 2 else min(mus[a][i[a]] for a in range(len(shape)))
            nu[i] = bound + g[i] ** 2
        if len(shape) < 2:
            full = nu.copy()
        else:
            mus = [np.full(n, -np.inf) for n in shape]
            for i in itertools.product(*[range(n) for n in shape]):
                for a in range(len(shape)):
                    mus[a][i[a]] = max(mus[a][i[a]], nu[i])
        u = np.where(nu > 0, g / np.sqrt(nu + eps), 0.0)
        m = b1 * m + (1 - b1) * u
        out.append(m.copy())
    return out


@pytest.mark.parametrize("kwargs", [{}, {"b1": 0.5, "b2": 0.9, "eps": 1e-4}, {"b1": 0.0}])
def test_scale_by_sm3_matches_optax(kwargs):
    assert_matches_optax(lambda lib: lib.scale_by_sm3(**kwargs), params=random_tree(shapes=NO_SCALAR))


@pytest.mark.parametrize("lr", [0.1, jnp.asarray(0.1)])
def test_sm3_matches_optax(lr):
    assert_matches_optax(lambda lib: lib.sm3(lr, momentum=0.8), params=random_tree(shapes=NO_SCALAR))


def test_float64_reference():
    with jax.enable_x64(True):
        tx = gradax.scale_by_sm3(b1=0.7, eps=1e-8)
        shapes = {"m": (3, 4), "v": (5,), "t": (2, 3, 2)}
        grads = [random_tree(10 + i, dtype=jnp.float64, shapes=shapes) for i in range(6)]
        grads = [jax.tree.map(lambda x, i=i: x * (1.0 + i), g) for i, g in enumerate(grads)]  # growing scales
        state = tx.init(grads[0])
        outs = []
        for g in grads:
            u, state = tx.update(g, state)
            outs.append(u)
        for name in shapes:
            ref = reference_sm3([g[name] for g in grads], b1=0.7, eps=1e-8)
            for got, want in zip(outs, ref):
                assert got[name].dtype == jnp.float64
                np.testing.assert_allclose(got[name], want, rtol=1e-12)


def test_scalar_leaves_supported():
    """Optax 0.2.8 raises IndexError on 0-d params; gradax keeps a scalar accumulator (docs/differences.md)."""
    params = {"s": jnp.array(2.0), "v": jnp.ones(2)}
    tx = gradax.scale_by_sm3(b1=0.0, eps=0.0)
    state = tx.init(params)
    u, state = tx.update({"s": jnp.array(-3.0), "v": jnp.ones(2)}, state)
    np.testing.assert_allclose(u["s"], -1.0)
    assert len(state.mu["s"]) == 1
    theirs = optax.scale_by_sm3()
    with pytest.raises(IndexError):
        theirs.update(params, theirs.init(params))


def test_schedule_learning_rate():
    """Optax's sm3 fails for a schedule (it negates the callable); gradax accepts it (docs/differences.md)."""
    params = random_tree(shapes=NO_SCALAR)
    opt = gradax.sm3(lambda c: 0.1 / (1.0 + c))
    state = opt.init(params)
    u, state = opt.update(params, state)
    ref, _ = gradax.sm3(0.1).update(params, gradax.sm3(0.1).init(params))
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6), u, ref)
    with pytest.raises(TypeError):
        optax.sm3(lambda c: 0.1)


def test_state_layout_and_bf16():
    params = {"w": jnp.ones((3, 2), jnp.bfloat16)}
    tx = gradax.sm3(0.1)
    state = tx.init(params)
    assert [m.shape for m in state[0].mu["w"]] == [(3,), (2,)]
    assert state[0].mu["w"][0].dtype == jnp.float32
    u, s2 = jax.jit(tx.update)(params, state)
    assert u["w"].dtype == jnp.bfloat16
    assert jax.tree.map(lambda x: x.dtype, state) == jax.tree.map(lambda x: x.dtype, s2)


def test_converges():
    assert converges(gradax.sm3(0.5, momentum=0.5), steps=300)[0]


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: gradax.scale_by_sm3(b1=1.0), r"scale_by_sm3\(b1=\.\.\.\) must be in \[0, 1\)"),
        (lambda: gradax.scale_by_sm3(b2=0.0), r"scale_by_sm3\(b2=\.\.\.\) must be in \(0, 1\]"),
        (lambda: gradax.sm3(0.1, momentum=-0.1), r"scale_by_sm3\(b1=\.\.\.\) must be in \[0, 1\)"),
        (
            lambda: gradax.scale_by_sm3().init({"c": jnp.ones(2, jnp.complex64)}),
            r"scale_by_sm3\(params=\.\.\.\) must be real",
        ),
    ],
)
def test_errors(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_traced_b2_equals_concrete():
    """b2 == 1 selects the running sum also when b2 is traced (inject_hyperparams, jit arguments)."""
    params = random_tree(shapes=NO_SCALAR)

    def first_update(b2):
        tx = gradax.scale_by_sm3(b2=b2)
        return tx.update(params, tx.init(params))[0]

    traced = jax.jit(first_update)(jnp.asarray(1.0))
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6), traced, first_update(1.0))
