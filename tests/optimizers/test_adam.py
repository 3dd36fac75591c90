"""Tests of scale_by_adam, adam, adamw, nadam, nadamw (differential vs Optax 0.2.8, float64 references)."""

import jax
import jax.numpy as jnp
import numpy as np
import optax  # the test oracle
import pytest

import gradax

from ._adam_common import assert_matches_optax, params_tree, quadratic_converges, traced_equals_concrete


@pytest.mark.parametrize(
    "make",
    [
        lambda ox: ox.scale_by_adam(b1=0.8, b2=0.99, eps_root=1e-8),
        lambda ox: ox.scale_by_adam(nesterov=True),
        lambda ox: ox.adam(1e-2),
        lambda ox: ox.adam(lambda c: 1e-2 / (1.0 + c), nesterov=True),
        lambda ox: ox.adamw(1e-2, weight_decay=0.1),
        lambda ox: ox.adamw(1e-2, weight_decay=lambda c: 0.1 * 0.9**c),
        lambda ox: ox.adamw(1e-2, weight_decay=0.1, mask={"w": True, "b": (False, None), "s": False}),
        lambda ox: ox.nadam(1e-2),
        lambda ox: ox.nadamw(1e-2, weight_decay=0.1),
    ],
    ids=["sba", "sba_nesterov", "adam", "adam_sched", "adamw", "adamw_wd_sched", "adamw_mask", "nadam", "nadamw"],
)
def test_matches_optax(make):
    assert_matches_optax(make)


def test_bf16_mu_dtype_close_to_optax():
    # Optax multiplies b1 * mu in bfloat16 (a Python float times a bf16 array); gradax does it in float32, the rule
    # that hyperparameter arithmetic never happens in bf16. The two agree to bf16 precision.
    assert_matches_optax(lambda ox: ox.adam(1e-2, mu_dtype=jnp.bfloat16), rtol=2e-2, atol=1e-4)


# --- float64 references written from the papers ------------------------------------------------------------------


def _adam_reference(grads, params, lr, b1, b2, eps, wd=0.0):
    m = np.zeros_like(params)
    v = np.zeros_like(params)
    p = params.copy()
    for t, g in enumerate(grads, start=1):
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        m_hat = m / (1 - b1**t)
        v_hat = v / (1 - b2**t)
        p = p - lr * (m_hat / (np.sqrt(v_hat) + eps) + wd * p)
    return p


@pytest.mark.parametrize("wd", [0.0, 0.05])
def test_float64_reference(wd):
    rng = np.random.default_rng(0)
    params = rng.normal(size=(5, 3))
    grads = [rng.normal(size=(5, 3)) for _ in range(12)]
    expected = _adam_reference(grads, params, 0.05, 0.9, 0.999, 1e-8, wd)
    with jax.enable_x64(True):
        opt = gradax.adamw(0.05, weight_decay=wd) if wd else gradax.adam(0.05)
        p = jnp.asarray(params)
        state = opt.init(p)
        for g in grads:
            u, state = opt.update(jnp.asarray(g), state, p)
            p = gradax.apply_updates(p, u)
        assert p.dtype == jnp.float64
        np.testing.assert_allclose(np.asarray(p), expected, rtol=1e-12, atol=1e-12)


def test_nesterov_formula():
    b1, b2 = 0.9, 0.999
    g1, g2 = 0.5, -1.5
    tx = gradax.scale_by_adam(b1, b2, eps=0.0, nesterov=True)
    state = tx.init(jnp.zeros(1))
    _, state = tx.update(jnp.array([g1]), state)
    u, _ = tx.update(jnp.array([g2]), state)
    m = (1 - b1) * (b1 * g1) + (1 - b1) * g2 * 1.0
    m = b1 * (1 - b1) * g1 + (1 - b1) * g2
    v = b2 * (1 - b2) * g1**2 + (1 - b2) * g2**2
    m_hat = b1 * m / (1 - b1**3) + (1 - b1) * g2 / (1 - b1**2)
    np.testing.assert_allclose(u, [m_hat / np.sqrt(v / (1 - b2**2))], rtol=1e-5)


def test_first_step_is_the_sign_exactly():
    # gradax computes 1 - b from the float32 b used in b**t, so the first Adam step is exactly -lr * sign(g);
    # Optax rounds 1 - b2 from float64 and is ~6e-6 off (docs/differences.md, "float32 rounding of 1 - b").
    g = jnp.array([0.3, -7.0, 2e-3])
    ours = gradax.adam(0.1, eps=0.0).update(g, gradax.adam(0.1).init(g))[0]
    np.testing.assert_allclose(ours, -0.1 * jnp.sign(g), rtol=5e-7)
    theirs = optax.adam(0.1, eps=0.0).update(g, optax.adam(0.1).init(g))[0]
    assert float(jnp.max(jnp.abs(theirs / (-0.1 * jnp.sign(g)) - 1))) > 3e-6
    np.testing.assert_allclose(theirs, ours, rtol=1e-5)


@pytest.mark.parametrize("opt", [gradax.adam(0.1), gradax.nadam(0.1), gradax.adamw(0.1, weight_decay=1e-4)])
def test_converges_on_quadratic(opt):
    assert quadratic_converges(opt)


# --- dtypes ----------------------------------------------------------------------------------------------------------


def test_bf16_params_get_float32_moments():
    params = params_tree(jnp.bfloat16)
    tx = gradax.adam(1e-2)
    state = tx.init(params)
    assert {x.dtype for x in jax.tree.leaves(state[0].mu)} == {jnp.dtype(jnp.float32)}
    assert {x.dtype for x in jax.tree.leaves(state[0].nu)} == {jnp.dtype(jnp.float32)}
    grads = jax.tree.map(jnp.ones_like, params)
    updates, new_state = jax.jit(tx.update)(grads, state)
    assert {x.dtype for x in jax.tree.leaves(updates)} == {jnp.dtype(jnp.bfloat16)}
    assert jax.tree.map(lambda x: x.dtype, new_state) == jax.tree.map(lambda x: x.dtype, state)


def test_mu_dtype_and_nu_dtype():
    params = params_tree()
    state = gradax.scale_by_adam(mu_dtype=jnp.bfloat16, nu_dtype=jnp.float16).init(params)
    assert {x.dtype for x in jax.tree.leaves(state.mu)} == {jnp.dtype(jnp.bfloat16)}
    assert {x.dtype for x in jax.tree.leaves(state.nu)} == {jnp.dtype(jnp.float16)}
    tx = gradax.adamw(1e-2, mu_dtype=jnp.bfloat16, nu_dtype=jnp.bfloat16)
    s = tx.init(params)
    _, s2 = jax.jit(tx.update)(params, s, params)
    assert jax.tree.map(lambda x: x.dtype, s2) == jax.tree.map(lambda x: x.dtype, s)


def test_abstract_init():
    shapes = jax.tree.map(lambda p: jax.ShapeDtypeStruct(p.shape, p.dtype), params_tree())
    state = gradax.adam(1e-2).init(shapes)
    assert state[0].mu["w"].shape == (4, 3)


def test_state_fields():
    state = gradax.scale_by_adam().init(jnp.zeros(2))
    assert isinstance(state, gradax.ScaleByAdamState)
    assert state._fields == ("count", "mu", "nu") and state.count.dtype == jnp.int32


# --- hyperparameters as traced values (inject_hyperparams) ----------------------------------------------------------


@pytest.mark.parametrize(
    "factory,kwargs",
    [
        (gradax.adam, {"learning_rate": 1e-2, "b1": 0.9, "b2": 0.999, "eps": 1e-8}),
        (gradax.adamw, {"learning_rate": 1e-2, "b1": 0.8, "b2": 0.99, "weight_decay": 0.1, "nesterov": True}),
    ],
)
def test_traced_hyperparameters_bit_identical(factory, kwargs):
    traced_equals_concrete(factory, kwargs)


def test_inject_hyperparams_bit_identical():
    inject = getattr(gradax, "inject_hyperparams", None)
    if inject is None:
        pytest.skip("inject_hyperparams not available yet")
    params = params_tree()
    a, b = gradax.adam(1e-2, b1=0.8), inject(gradax.adam)(learning_rate=1e-2, b1=0.8)
    sa, sb = a.init(params), b.init(params)
    for i in range(3):
        g = jax.tree.map(lambda p: jnp.sin(p + i), params)
        ua, sa = jax.jit(a.update)(g, sa, params)
        ub, sb = jax.jit(b.update)(g, sb, params)
        for x, y in zip(jax.tree.leaves(ua), jax.tree.leaves(ub)):
            np.testing.assert_array_equal(x, y)


# --- argument errors -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda: gradax.adam(1e-2, b1=1.5), r"adam\(b1=\.\.\.\) must be in \[0, 1\); got 1\.5\. "),
        (lambda: gradax.adamw(1e-2, b2=1.0), r"adamw\(b2=\.\.\.\) must be in \[0, 1\); got 1\.0\."),
        (lambda: gradax.nadam(1e-2, eps=-1.0), r"nadam\(eps=\.\.\.\) must be >= 0; got -1\.0\."),
        (lambda: gradax.nadamw(1e-2, eps_root=-1e-3), r"nadamw\(eps_root=\.\.\.\) must be >= 0"),
        (lambda: gradax.scale_by_adam(b1=-0.1), r"scale_by_adam\(b1=\.\.\.\) must be in \[0, 1\)"),
    ],
)
def test_argument_errors(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_schedules_pass_validation():
    gradax.adam(lambda c: 1e-2)
    gradax.adamw(1e-2, weight_decay=lambda c: 0.1)
