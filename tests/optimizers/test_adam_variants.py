"""Tests of AMSGrad, Adamax(W), RAdam, AdaBelief and Yogi (differential vs Optax 0.2.8 and closed forms)."""

import jax
import jax.numpy as jnp
import numpy as np
import optax  # the test oracle
import pytest

import gradax

from ._adam_common import assert_matches_optax, quadratic_converges, traced_equals_concrete


@pytest.mark.parametrize(
    "make",
    [
        lambda ox: ox.scale_by_amsgrad(b1=0.8),
        lambda ox: ox.scale_by_amsgrad(bias_correction_mu=False, bias_correction_nu=False),
        lambda ox: ox.amsgrad(lambda c: 1e-2 / (1.0 + c)),
        lambda ox: ox.scale_by_adamax(b2=0.99),
        lambda ox: ox.adamax(1e-2),
        lambda ox: ox.adamaxw(1e-2, weight_decay=0.1),
        lambda ox: ox.scale_by_belief(b1=0.8),
        lambda ox: ox.scale_by_belief(nesterov=True),
        lambda ox: ox.adabelief(1e-2),
        lambda ox: ox.scale_by_yogi(eps_root=1e-6, initial_accumulator_value=0.1),
        lambda ox: ox.yogi(1e-2),
    ],
)
def test_matches_optax(make):
    assert_matches_optax(make)


@pytest.mark.parametrize("nesterov", [False, True])
def test_radam_close_to_optax(nesterov):
    # Optax's rho_t is ~0.026 off in float32 (see test_radam_rho_is_consistent); the rectification differs by <1e-3.
    assert_matches_optax(lambda ox: ox.radam(1e-2, nesterov=nesterov), steps=12, rtol=5e-3)


def test_radam_rho_is_consistent():
    # Exact math: rho_1 = 1 and rho_t ~ t for small t. With rho_inf from float64 b2 and b2**t in float32, Optax's
    # rho_t is off by ~0.026 (docs/differences.md, "RAdam's rho"); gradax stays within float32 rounding.
    b2 = 0.999
    t = np.arange(1, 13)
    exact = (2 / (1 - b2) - 1) - 2 * t * b2**t / (1 - b2**t)
    b2f = jnp.float32(b2)
    cnt = jnp.asarray(t, jnp.int32)
    ours = (2 / (1 - b2f) - 1) - 2 * cnt * b2f**cnt / (1 - b2f**cnt)
    theirs = (2.0 / (1.0 - b2) - 1.0) - 2 * cnt * b2**cnt / (1 - b2**cnt)
    assert float(ours[0]) == 1.0 and float(theirs[0]) != 1.0
    assert np.mean(np.abs(np.asarray(ours) - exact)) < 1e-2
    assert np.mean(np.abs(np.asarray(theirs) - exact)) > 2e-2


def test_radam_threshold_falls_back_to_momentum():
    # rho_t < 5 for t <= 5 with b2=0.999: the update is the bias-corrected first moment.
    tx = gradax.scale_by_radam()
    state = tx.init(jnp.zeros(2))
    g = jnp.array([1.0, -2.0])
    u, state = tx.update(g, state)
    np.testing.assert_allclose(u, g, rtol=1e-6)


def test_amsgrad_nu_max_is_monotone():
    tx = gradax.scale_by_amsgrad()
    state = tx.init(jnp.zeros(3))
    assert isinstance(state, gradax.ScaleByAmsgradState)
    assert state._fields == ("count", "mu", "nu", "nu_max")
    prev = state.nu_max
    for i, scale in enumerate([5.0, 0.1, 0.1, 3.0]):
        _, state = tx.update(scale * jnp.array([1.0, -1.0, 0.5]), state)
        assert bool(jnp.all(state.nu_max >= prev)), i
        prev = state.nu_max


def test_adamax_closed_form():
    tx = gradax.scale_by_adamax(b1=0.9, b2=0.5, eps=0.0)
    state = tx.init(jnp.zeros(1))
    _, state = tx.update(jnp.array([4.0]), state)
    u, state = tx.update(jnp.array([1.0]), state)
    m = 0.9 * 0.1 * 4.0 + 0.1 * 1.0
    np.testing.assert_allclose(u, [m / (1 - 0.81) / 2.0], rtol=1e-6)
    np.testing.assert_allclose(state.nu, [2.0])


def test_belief_state_and_eps_root_kept():
    tx = gradax.scale_by_belief(eps_root=1e-3)
    state = tx.init(jnp.zeros(1))
    assert isinstance(state, gradax.ScaleByBeliefState) and state._fields == ("count", "mu", "nu")
    _, state = tx.update(jnp.zeros(1), state)
    np.testing.assert_allclose(state.nu, [1e-3])


def test_yogi_initial_value():
    state = gradax.scale_by_yogi(initial_accumulator_value=0.25).init({"a": jnp.zeros(2, jnp.bfloat16)})
    np.testing.assert_array_equal(state.mu["a"], [0.25, 0.25])
    assert state.nu["a"].dtype == jnp.float32


@pytest.mark.parametrize(
    "opt",
    [gradax.amsgrad(0.1), gradax.adamax(0.1), gradax.radam(0.1), gradax.adabelief(0.1), gradax.yogi(0.1)],
    ids=["amsgrad", "adamax", "radam", "adabelief", "yogi"],
)
def test_converges_on_quadratic(opt):
    assert quadratic_converges(opt, steps=400, tol=5e-2)


@pytest.mark.parametrize(
    "factory,kwargs",
    [
        (gradax.radam, {"learning_rate": 1e-2, "b2": 0.99}),
        (gradax.adabelief, {"learning_rate": 1e-2, "b1": 0.8}),
        (gradax.amsgrad, {"learning_rate": 1e-2, "b2": 0.99}),
    ],
)
def test_traced_hyperparameters_bit_identical(factory, kwargs):
    traced_equals_concrete(factory, kwargs, steps=7)


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda: gradax.amsgrad(1e-2, b1=1.0), r"amsgrad\(b1=\.\.\.\) must be in \[0, 1\); got 1\.0\."),
        (lambda: gradax.adamax(1e-2, b2=2.0), r"adamax\(b2=\.\.\.\) must be in \[0, 1\)"),
        (lambda: gradax.adamaxw(1e-2, eps=-1.0), r"adamaxw\(eps=\.\.\.\) must be >= 0"),
        (lambda: gradax.radam(1e-2, b2=-0.5), r"radam\(b2=\.\.\.\) must be in \[0, 1\)"),
        (lambda: gradax.adabelief(1e-2, eps_root=-1.0), r"adabelief\(eps_root=\.\.\.\) must be >= 0"),
        (lambda: gradax.yogi(1e-2, b1=1.2), r"yogi\(b1=\.\.\.\) must be in \[0, 1\)"),
        (
            lambda: gradax.scale_by_yogi(initial_accumulator_value=0.0),
            r"scale_by_yogi\(initial_accumulator_value=\.\.\.\) must be > 0; got 0\.0\.",
        ),
    ],
)
def test_argument_errors(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_optax_oracle_imported():
    assert optax.__version__.startswith("0.2.8")
    assert jax.tree.leaves(gradax.scale_by_radam().init(jnp.zeros(1)))
