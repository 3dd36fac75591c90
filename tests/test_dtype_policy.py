"""gradax.state_dtype_policy: gradax's float32 state for low-precision params by default, Optax 0.2.8's dtypes under
"optax" (the opt-out that Optax's suite tests test_explicit_dtype9-11, galore's nu dtype and schedule_free's
test_explicit_dtype3 rely on). The same dtypes for every registry entry with an Optax oracle: see
tests/sharding/test_optax_checkpoints.py."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradax
from gradax._dtype_policy import current_state_dtype_policy

BF16 = jnp.array([0.0, 0.0], jnp.bfloat16)

# (optimizer, path to the state field) of the five Optax suite tests the policy accounts for
SUITE_CASES = {
    "sgd momentum trace (alias_test test_explicit_dtype9)": (
        lambda ox: ox.sgd(0.1, momentum=0.9),
        lambda s: s[0].trace,
    ),
    "adam mu (test_explicit_dtype10)": (lambda ox: ox.adam(0.1), lambda s: s[0].mu),
    "adamw mu (test_explicit_dtype11)": (lambda ox: ox.adamw(0.1), lambda s: s[0].mu),
    "galore nu (test_mu_dtype_controls_moment_dtype)": (
        lambda ox: ox.contrib.galore(
            0.01, rank=4, update_proj_gap=1, base_optimizer=ox.scale_by_adam(mu_dtype=jnp.float32)
        ),
        lambda s: s[0].base_optimizer_state.nu,
    ),
    "schedule_free z (test_explicit_dtype3)": (
        lambda ox: ox.contrib.schedule_free(ox.sgd(1.0), learning_rate=1.0),
        lambda s: s.z,
    ),
}


def _params_for(name):
    return jnp.ones((16, 32), jnp.bfloat16) if name.startswith("galore") else BF16


@pytest.mark.parametrize("name", list(SUITE_CASES))
def test_default_keeps_float32_state_and_optax_policy_restores_optax_dtype(name):
    make, field = SUITE_CASES[name]
    params = _params_for(name)
    assert field(jax.eval_shape(make(gradax).init, params)).dtype == jnp.float32
    with gradax.state_dtype_policy("optax"):
        ours = field(jax.eval_shape(make(gradax).init, params)).dtype
    theirs = field(jax.eval_shape(make(optax).init, params)).dtype
    assert ours == theirs == jnp.bfloat16
    assert current_state_dtype_policy() == "gradax"


def test_explicit_dtype_argument_wins_over_the_policy():
    with gradax.state_dtype_policy("optax"):
        state = gradax.adam(0.1, mu_dtype=jnp.float32).init(BF16)
    assert state[0].mu.dtype == jnp.float32 and state[0].nu.dtype == jnp.bfloat16
    assert gradax.sgd(0.1, momentum=0.9, accumulator_dtype=jnp.bfloat16).init(BF16)[0].trace.dtype == jnp.bfloat16


def test_call_sets_the_policy_and_the_context_restores_it():
    restore = gradax.state_dtype_policy("optax")
    try:
        assert current_state_dtype_policy() == "optax"
        assert gradax.adam(0.1).init(BF16)[0].mu.dtype == jnp.bfloat16
        with gradax.state_dtype_policy("gradax"):
            assert gradax.adam(0.1).init(BF16)[0].mu.dtype == jnp.float32
        assert current_state_dtype_policy() == "optax"
    finally:
        restore.__exit__(None, None, None)
    assert current_state_dtype_policy() == "gradax"
    assert "previous: 'gradax'" in repr(restore)


def test_float32_params_are_unaffected():
    params = jnp.zeros(3)
    with gradax.state_dtype_policy("optax"):
        inside = jax.eval_shape(gradax.adam(0.1).init, params)
    outside = jax.eval_shape(gradax.adam(0.1).init, params)
    assert jax.tree.map(lambda a: a.dtype, inside) == jax.tree.map(lambda a: a.dtype, outside)


@pytest.mark.parametrize("name", ["adam", "sgd_momentum"])
def test_optax_policy_trains_like_optax_on_bfloat16_params(name):
    # the state's dtypes are Optax's at every step; the values agree within a bfloat16 rounding (gradax computes the
    # moments in float32 and rounds them to bfloat16, Optax computes some products in bfloat16)
    def make(ox):
        return ox.adam(1e-2) if name == "adam" else ox.sgd(1e-2, momentum=0.9)

    params = {"w": jnp.linspace(-1, 1, 8, dtype=jnp.bfloat16)}

    def run(lib, opt):
        @jax.jit
        def step(p, s, k):
            g = jax.tree.map(lambda x: jnp.cos(x * (1.0 + 0.1 * k)).astype(x.dtype), p)
            u, s = opt.update(g, s, p)
            return lib.apply_updates(p, u), s

        p, s = params, opt.init(params)
        for k in range(3):
            p, s = step(p, s, jnp.float32(k))
        return p, s

    with gradax.state_dtype_policy("optax"):
        ours = run(gradax, make(gradax))
    theirs = run(optax, make(optax))
    assert jax.tree.map(lambda a: a.dtype, ours) == jax.tree.map(lambda a: a.dtype, theirs)
    for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(theirs)):
        np.testing.assert_allclose(np.asarray(a, np.float32), np.asarray(b, np.float32), atol=2e-2)


def test_policy_error():
    with pytest.raises(
        ValueError,
        match=r"state_dtype_policy\(policy=\.\.\.\) must be 'gradax' or 'optax'; got 'params'\. Use 'optax' for "
        r"Optax 0\.2\.8's state dtypes",
    ):
        gradax.state_dtype_policy("params")
    assert current_state_dtype_policy() == "gradax"


def test_inject_hyperparams_default_dtype_follows_the_policy():
    params = {"w": jnp.zeros(3, jnp.bfloat16)}

    def make(ox):
        return ox.inject_hyperparams(ox.adam)(learning_rate=ox.linear_schedule(0.1, 0.01, 4), b2=0.95)

    assert make(gradax).init(params).hyperparams["b2"].dtype == jnp.float32
    with gradax.state_dtype_policy("optax"):
        opt = make(gradax)
        state = opt.init(params)
        _, after = jax.jit(opt.update)(params, state, params)
    theirs = make(optax).init(params).hyperparams
    dtypes = {k: v.dtype for k, v in theirs.items()}
    assert {k: v.dtype for k, v in state.hyperparams.items()} == dtypes
    assert {k: v.dtype for k, v in after.hyperparams.items()} == dtypes
    # the numbers in the params' dtype; a schedule's value stays the float32 array the schedule returns, as in Optax
    assert dtypes["b2"] == jnp.bfloat16 and dtypes["learning_rate"] == jnp.float32


def test_injected_value_set_by_hand_keeps_its_dtype_under_the_optax_policy():
    """A hyperparameter set by hand in the state (a Python float) keeps the dtype init stored it in, so the state's
    dtypes, and so jit's cache and a scan carry, do not change from one step to the next."""
    params = {"w": jnp.ones(3, jnp.bfloat16)}
    with gradax.state_dtype_policy("optax"):
        opt = gradax.inject_hyperparams(gradax.adam)(learning_rate=0.1)
        state = opt.init(params)
        before = jax.tree.map(lambda x: x.dtype, state)
        state.hyperparams["learning_rate"] = 0.05
        _, state = opt.update(params, state, params)
    assert jax.tree.map(lambda x: x.dtype, state) == before
