"""Tests of scale_by_rms, scale_by_stddev and rmsprop (gradax.optimizers._rms)."""

import jax
import jax.numpy as jnp
import numpy as np
import optax  # the test oracle
import pytest

import gradax
from tests.optimizers._other_helpers import assert_matches_optax, converges


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"decay": 0.5, "eps": 1e-4, "initial_scale": 0.1},
        {"eps_in_sqrt": False, "eps": 1e-3},
        {"bias_correction": True, "eps": 0.1},  # centered + bias correction: variance 0 at step 1
        {"bias_correction": True, "eps_in_sqrt": False, "decay": 0.7},
    ],
)
@pytest.mark.parametrize("name", ["scale_by_rms", "scale_by_stddev"])
def test_scaling_matches_optax(name, kwargs):
    assert_matches_optax(lambda lib: getattr(lib, name)(**kwargs))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"learning_rate": 0.01},
        {"learning_rate": 0.01, "centered": True, "momentum": 0.9},
        {"learning_rate": 0.01, "momentum": 0.5, "nesterov": True, "bias_correction": True},
    ],
)
def test_rmsprop_matches_optax(kwargs):
    assert_matches_optax(lambda lib: lib.rmsprop(**kwargs))


def test_rmsprop_schedule_matches_optax():
    assert_matches_optax(lambda lib: lib.rmsprop(lambda c: 0.01 / (1.0 + c), centered=True))


def test_state_classes():
    params = {"a": jnp.ones(2)}
    assert isinstance(gradax.scale_by_rms().init(params), gradax.ScaleByRmsState)
    assert type(gradax.scale_by_rms(bias_correction=True).init(params)).__name__ == "ScaleByRmsWithCountState"
    assert isinstance(gradax.scale_by_stddev().init(params), gradax.ScaleByRStdDevState)
    state = gradax.scale_by_stddev(bias_correction=True).init(params)
    assert state._fields == ("count", "mu", "nu")


def test_closed_form_first_step():
    tx = gradax.scale_by_rms(decay=0.9, eps=0.0)
    g = jnp.array([3.0, -1.0])
    u, state = tx.update(g, tx.init(g))
    np.testing.assert_allclose(u, g / np.sqrt(0.1 * np.asarray(g) ** 2), rtol=1e-6)
    np.testing.assert_allclose(state.nu, 0.1 * np.asarray(g) ** 2, rtol=1e-6)


@pytest.mark.parametrize("eps_in_sqrt", [True, False])
@pytest.mark.parametrize("name", ["scale_by_rms", "scale_by_stddev"])
def test_zero_eps_zero_grads_is_finite(name, eps_in_sqrt):
    """Optax gives NaN here (0 * inf); gradax defines 0/0 updates as 0 (docs/differences.md)."""
    g = jnp.array([0.0, 2.0])
    ours = getattr(gradax, name)(eps=0.0, eps_in_sqrt=eps_in_sqrt)
    u, _ = ours.update(g, ours.init(g))
    assert np.all(np.isfinite(u))
    assert u[0] == 0.0 and u[1] > 0
    theirs = getattr(optax, name)(eps=0.0, eps_in_sqrt=eps_in_sqrt)
    v, _ = theirs.update(g, theirs.init(g))
    assert np.isnan(v[0])
    np.testing.assert_allclose(v[1], u[1], rtol=1e-6)


def test_nan_gradients_still_propagate():
    tx = gradax.scale_by_rms(eps=0.0)
    u, _ = tx.update(jnp.array([jnp.nan]), tx.init(jnp.zeros(1)))
    assert np.isnan(u[0])


def test_bf16_params_keep_float32_state_and_bf16_updates():
    params = {"a": jnp.ones(3, jnp.bfloat16)}
    tx = gradax.rmsprop(0.1, momentum=0.9, bias_correction=True)
    state = tx.init(params)
    u, new_state = jax.jit(tx.update)(params, state)
    assert u["a"].dtype == jnp.bfloat16
    assert state[0].nu["a"].dtype == jnp.float32
    assert jax.tree.map(lambda x: x.dtype, state) == jax.tree.map(lambda x: x.dtype, new_state)


def test_abstract_init():
    tx = gradax.rmsprop(0.1, centered=True, bias_correction=True)
    state = tx.init({"a": jax.ShapeDtypeStruct((2, 3), jnp.float32)})
    assert state[0].mu["a"].shape == (2, 3)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: gradax.scale_by_rms(decay=1.0), r"scale_by_rms\(decay=\.\.\.\) must be in \[0, 1\); got 1\.0"),
        (lambda: gradax.scale_by_rms(eps=-1.0), r"scale_by_rms\(eps=\.\.\.\) must be >= 0"),
        (lambda: gradax.scale_by_stddev(initial_scale=-1.0), r"scale_by_stddev\(initial_scale=\.\.\.\) must be >= 0"),
        (lambda: gradax.rmsprop(0.1, momentum=1.5), r"rmsprop\(momentum=\.\.\.\) must be in \[0, 1\)"),
    ],
)
def test_errors(call, match):
    with pytest.raises(ValueError, match=match):
        call()


@pytest.mark.parametrize("kwargs", [{}, {"centered": True}, {"momentum": 0.5, "nesterov": True}])
def test_rmsprop_converges(kwargs):
    ok, final = converges(gradax.rmsprop(lambda c: 0.05 * 0.99**c, **kwargs), steps=300)
    assert ok, final
