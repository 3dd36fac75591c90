"""Tests of gradax.contrib schedule_free, schedule_free_sgd, schedule_free_adamw, schedule_free_eval_params."""

import jax
import jax.numpy as jnp
import numpy as np
import optax  # the test oracle
import pytest

import gradax
from gradax import contrib
from tests.contrib._helpers import assert_matches_optax, tree


def test_sgd_matches_optax():
    assert_matches_optax(lambda lib: lib.contrib.schedule_free_sgd(0.1, b1=0.8, weight_decay=1e-2))


def test_adamw_matches_optax():
    assert_matches_optax(lambda lib: lib.contrib.schedule_free_adamw(1e-2, weight_decay=1e-3, b2=0.99))


def test_wrapper_matches_optax_with_array_lr():
    assert_matches_optax(lambda lib: lib.contrib.schedule_free(lib.sgd(0.05), jnp.asarray(0.05), b1=0.5))


def test_eval_params_matches_optax():
    params = tree()
    g = tree(7)
    outs = []
    for lib in (gradax, optax):
        opt = lib.contrib.schedule_free_adamw(0.1)
        s = opt.init(params)
        u, s = opt.update(g, s, params)
        p = lib.apply_updates(params, u)
        outs.append(lib.contrib.schedule_free_eval_params(s, p))
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6), *outs)


def test_schedule_evaluated_from_step_zero():
    """Paper: the first step uses gamma_0. Optax 0.2.8 evaluates the schedule at step_count = 1 first."""
    lr = lambda c: 0.1 * (c + 1.0)
    p = jnp.array([0.0])
    g = jnp.array([1.0])
    ours = contrib.schedule_free(gradax.sgd(lr), lr, weight_lr_power=2.0)
    theirs = optax.contrib.schedule_free(optax.sgd(lr), lr, weight_lr_power=2.0)
    s1, s2 = ours.init(p), theirs.init(p)
    _, s1 = ours.update(g, s1, p)
    _, s2 = theirs.update(g, s2, p)
    np.testing.assert_allclose(s1.max_lr, 0.1)  # gamma_0
    np.testing.assert_allclose(s2.max_lr, 0.2)  # Optax 0.2.8: gamma_1 (docs/differences.md)
    np.testing.assert_allclose(s1.weight_sum, 0.01, rtol=1e-6)


def test_closed_form_sgd_first_steps():
    # y0 = z0 = x0 = 1; g = 1, lr = 0.5, b1 = 0.9: z1 = 0.5, c1 = 1, x1 = z1, y1 = 0.5
    opt = contrib.schedule_free_sgd(0.5, b1=0.9)
    p = jnp.array([1.0])
    s = opt.init(p)
    u, s = opt.update(jnp.array([1.0]), s, p)
    np.testing.assert_allclose(u, [-0.5])
    p = p + u
    # z2 = 0, c2 = 1/2, x2 = 0.25, y2 = 0.9 * 0.25 = 0.225
    u, s = opt.update(jnp.array([1.0]), s, p)
    np.testing.assert_allclose(p + u, [0.225], rtol=1e-6)
    np.testing.assert_allclose(contrib.schedule_free_eval_params(s, p + u), [0.25], rtol=1e-6)


def test_converges_on_quadratic():
    # the convex quadratic of the paper's setting (Defazio et al., 2024, Sec. 2): x_T -> argmin
    loss = lambda p: 0.5 * jnp.sum(jnp.array([1.0, 3.0]) * (p - 1.0) ** 2)
    opt = contrib.schedule_free_adamw(0.1, warmup_steps=5)
    p = jnp.zeros(2)
    s = opt.init(p)
    step = jax.jit(lambda p, s: opt.update(jax.grad(loss)(p), s, p))
    for _ in range(300):
        u, s = step(p, s)
        p = gradax.apply_updates(p, u)
    assert loss(contrib.schedule_free_eval_params(s, p)) < 1e-3


def test_bf16_under_multisteps_keeps_state_dtypes():
    params = {"w": jnp.ones((3, 2), jnp.bfloat16), "b": jnp.zeros((2,), jnp.bfloat16)}
    opt = gradax.MultiSteps(contrib.schedule_free_adamw(1e-2), every_k_schedule=2)
    state = opt.init(params)
    dtypes = jax.tree.map(lambda x: x.dtype, state)
    step = jax.jit(opt.update)
    for i in range(4):
        g = jax.tree.map(lambda x: jnp.full_like(x, 0.5 + i), params)
        u, state = step(g, state, params)
        assert jax.tree.map(lambda x: x.dtype, u) == jax.tree.map(lambda x: x.dtype, params)
        params = gradax.apply_updates(params, u)
        assert jax.tree.map(lambda x: x.dtype, state) == dtypes
    inner = state.inner_opt_state
    assert inner.z["w"].dtype == jnp.float32 and inner.max_lr.dtype == jnp.float32


def test_abstract_init():
    params = {"w": jax.ShapeDtypeStruct((3, 2), jnp.bfloat16)}
    s = contrib.schedule_free_adamw(1e-2).init(params)
    assert s.z["w"].shape == (3, 2) and s.z["w"].dtype == jnp.float32
    s = jax.eval_shape(contrib.schedule_free_sgd(1e-2, state_dtype=jnp.bfloat16).init, params)
    assert s.z["w"].dtype == jnp.bfloat16


def test_schedule_learning_rate_and_state_fields():
    opt = contrib.schedule_free_sgd(gradax.linear_schedule(0.1, 0.0, 10))
    s = opt.init(jnp.ones(2))
    assert contrib.ScheduleFreeState._fields == (
        "b1",
        "weight_sum",
        "step_count",
        "max_lr",
        "base_optimizer_state",
        "z",
    )
    assert int(s.step_count) == 1


def test_errors():
    with pytest.raises(ValueError, match=r"schedule_free_adamw\(b1=\.\.\.\) must be in \(0, 1\); got 1\.0"):
        contrib.schedule_free_adamw(b1=1.0)
    with pytest.raises(ValueError, match=r"schedule_free_sgd\(learning_rate=\.\.\.\) must be >= 0; got -1"):
        contrib.schedule_free_sgd(-1)
    with pytest.raises(ValueError, match=r"schedule_free_adamw\(b2=\.\.\.\) must be in \[0, 1\); got 1\.5"):
        contrib.schedule_free_adamw(b2=1.5)
    with pytest.raises(
        TypeError, match=r"schedule_free\(base_optimizer=\.\.\.\) must be a GradientTransformation; got float"
    ):
        contrib.schedule_free(1.0, 0.1)
    with pytest.raises(ValueError, match=r"schedule_free: update\(\.\.\.\) needs `params`"):
        opt = contrib.schedule_free_sgd()
        opt.update(jnp.ones(1), opt.init(jnp.ones(1)))
    with pytest.raises(ValueError, match=r"schedule_free_eval_params\(state=\.\.\.\) must be a ScheduleFreeState"):
        contrib.schedule_free_eval_params(gradax.EmptyState(), jnp.ones(1))


@pytest.mark.parametrize("name", ["schedule_free_sgd", "schedule_free_adamw"])
def test_warmup_of_a_schedule_learning_rate(name):
    # Optax's suite (test_optimizers_accept_learning_rate_schedule_if_type_annotated_as_such) passes a schedule with
    # warmup_steps: the warmup ramps the schedule, and a constant schedule gives the constant learning rate's numbers
    factory = getattr(contrib, name)
    scheduled = factory(learning_rate=gradax.constant_schedule(1e-2), warmup_steps=3)
    constant = factory(learning_rate=1e-2, warmup_steps=3)
    params = jnp.array([1.0, -0.5])
    s_state, c_state = scheduled.init(params), constant.init(params)
    for i in range(5):
        g = jnp.array([1.0, -2.0]) * (i + 1)
        s_updates, s_state = scheduled.update(g, s_state, params)
        c_updates, c_state = constant.update(g, c_state, params)
        np.testing.assert_allclose(s_updates, c_updates, rtol=1e-6)
