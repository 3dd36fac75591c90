"""MultiSteps, apply_every, skip_not_finite, skip_large_updates, ema: against Optax 0.2.8 and closed forms."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradax

PARAMS = {"a": jnp.array([1.0, -2.0]), "b": {"c": jnp.array([0.5, 1.5, -1.0])}}


def _grads(i, params=PARAMS):
    return jax.tree.map(lambda x: (0.3 * x + 0.1) * (1 + i % 3), params)


def test_k_micro_steps_equal_one_step_on_the_mean():
    for inner in [gradax.sgd(0.1, momentum=0.9), gradax.adamw(0.1, weight_decay=0.1, mask={"a": True, "b": False})]:
        ms = gradax.MultiSteps(inner, every_k_schedule=3)
        state, ref_state = ms.init(PARAMS), inner.init(PARAMS)
        update = jax.jit(ms.update)
        for step in range(2):
            gs = [_grads(3 * step + j) for j in range(3)]
            for j, g in enumerate(gs):
                u, state = update(g, state, PARAMS)
                assert bool(ms.has_updated(state)) == (j == 2)
            mean = jax.tree.map(lambda *x: sum(x) / 3, *gs)
            ref_u, ref_state = inner.update(mean, ref_state, PARAMS)
            jax.tree.map(lambda x, y: np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-7), u, ref_u)


CASES = [
    lambda ox: ox.MultiSteps(ox.sgd(0.1, 0.9), 3),
    lambda ox: ox.MultiSteps(ox.sgd(0.1), lambda step: step + 1, should_skip_update_fn=ox.skip_not_finite),
    lambda ox: ox.MultiSteps(
        ox.sgd(0.1),
        2,
        use_grad_mean=False,
        should_skip_update_fn=functools.partial(ox.skip_large_updates, max_squared_norm=5.0),
    ),
]


@pytest.mark.parametrize("make", CASES)
def test_matches_optax(make):
    ms, ref = make(gradax), make(optax)
    s, rs = ms.init(PARAMS), ref.init(PARAMS)
    for i in range(8):
        g = _grads(i)
        if i in (1, 4) and s.skip_state != ():  # without a skip function NaNs would poison every later step
            g = jax.tree.map(lambda x: x * jnp.nan, g)
        u, s = jax.jit(ms.update)(g, s, PARAMS)
        ru, rs = ref.update(g, rs, PARAMS)
        jax.tree.map(lambda x, y: np.testing.assert_allclose(x, y, rtol=1e-6), u, ru)
        assert int(s.mini_step) == int(rs.mini_step) and int(s.gradient_step) == int(rs.gradient_step)
        jax.tree.map(lambda x, y: np.testing.assert_allclose(x, y, rtol=1e-6), s.skip_state, rs.skip_state)
    assert gradax.MultiStepsState._fields == optax.MultiStepsState._fields


def test_bf16_params_under_jit_keep_state_dtypes():
    params = {"w": jnp.ones((3, 4), jnp.bfloat16), "b": jnp.ones(4, jnp.bfloat16)}
    inner = gradax.adafactor(0.01) if hasattr(gradax, "adafactor") else gradax.adam(0.01)
    ms = gradax.MultiSteps(inner, 2)
    state = ms.init(params)
    assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(state.acc_grads))
    dtypes = jax.tree.map(lambda x: x.dtype, state)
    traces = []  # counted by tracing, not by jit's C++ dispatch cache (whose size is not stable in a long run)
    step = jax.jit(lambda g, s, p: (traces.append(None), ms.update(g, s, p))[1])
    for i in range(4):
        u, state = step(jax.tree.map(lambda x: x * (i + 1), params), state, params)
        assert jax.tree.map(lambda x: x.dtype, state) == dtypes
        assert all(x.dtype == jnp.bfloat16 for x in jax.tree.leaves(u))
    assert len(traces) == 1
    # an inner transformation that returns float32 updates for bf16 params does not break the lax.cond
    promote = gradax.stateless(lambda g, p: jax.tree.map(lambda x: x.astype(jnp.float32), g))
    ms2 = gradax.MultiSteps(promote, 2)
    u, _ = jax.jit(ms2.update)(params, ms2.init(params))
    assert all(x.dtype == jnp.bfloat16 for x in jax.tree.leaves(u))


def test_accumulator_dtype_and_gradient_transformation():
    ms = gradax.MultiSteps(gradax.sgd(0.1), 2, accumulator_dtype=jnp.bfloat16)
    assert all(x.dtype == jnp.bfloat16 for x in jax.tree.leaves(ms.init(PARAMS).acc_grads))
    tx = gradax.chain(gradax.MultiSteps(gradax.sgd(1.0), 2).gradient_transformation())
    s = tx.init(jnp.zeros(1))
    u, s = tx.update(jnp.array([1.0]), s)
    u, s = tx.update(jnp.array([3.0]), s)
    np.testing.assert_allclose(u, [-2.0])
    abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), PARAMS)
    assert jax.tree.structure(ms.init(abstract)) == jax.tree.structure(ms.init(PARAMS))
    assert isinstance(ms.inner_opt, gradax.GradientTransformationExtraArgs)


def test_multisteps_errors():
    with pytest.raises(ValueError, match=r"MultiSteps\(every_k_schedule=\.\.\.\) must be >= 1; got 0"):
        gradax.MultiSteps(gradax.sgd(0.1), 0)
    with pytest.raises(TypeError, match=r"MultiSteps\(every_k_schedule=\.\.\.\) must be an int; got 2.5"):
        gradax.MultiSteps(gradax.sgd(0.1), 2.5)
    with pytest.raises(TypeError, match=r"MultiSteps\(opt=\.\.\.\) must be a GradientTransformation"):
        gradax.MultiSteps(0.1, 2)
    with pytest.raises(TypeError, match=r"MultiSteps\(should_skip_update_fn=\.\.\.\) must be callable or None"):
        gradax.MultiSteps(gradax.sgd(0.1), 2, should_skip_update_fn=1)


def test_skip_functions_closed_form():
    g = {"a": jnp.array([3.0, jnp.inf]), "b": jnp.array([jnp.nan])}
    skip, state = gradax.skip_not_finite(g, 0, None)
    assert bool(skip) and int(state["num_not_finite"]) == 2
    skip, state = gradax.skip_large_updates({"a": jnp.array([3.0, 4.0])}, 0, None, 25.0)
    assert not bool(skip) and float(state["norm_squared"]) == 25.0


def test_apply_every_matches_optax():
    tx, ref = gradax.apply_every(3), optax.apply_every(3)
    s, rs = tx.init(PARAMS), ref.init(PARAMS)
    for i in range(7):
        u, s = jax.jit(tx.update)(_grads(i), s)
        ru, rs = ref.update(_grads(i), rs)
        jax.tree.map(lambda x, y: np.testing.assert_allclose(x, y, rtol=1e-6), u, ru)
    with pytest.raises(ValueError, match=r"apply_every\(k=\.\.\.\) must be > 0"):
        gradax.apply_every(0)


@pytest.mark.parametrize("debias", [True, False])
def test_ema_matches_optax(debias):
    tx, ref = gradax.ema(0.9, debias), optax.ema(0.9, debias)
    s, rs = tx.init(PARAMS), ref.init(PARAMS)
    for i in range(10):
        u, s = tx.update(_grads(i), s)
        ru, rs = ref.update(_grads(i), rs)
    jax.tree.map(lambda x, y: np.testing.assert_allclose(x, y, rtol=1e-6), u, ru)
    jax.tree.map(lambda x, y: np.testing.assert_allclose(x, y, rtol=1e-6), s.ema, rs.ema)
    assert gradax.EmaState._fields == ("count", "ema")
    with pytest.raises(ValueError, match=r"ema\(decay=\.\.\.\) must be in \[0, 1\]"):
        gradax.ema(1.5)


def test_micro_step_hlo_is_one_pass_over_the_accumulator():
    """Outside the inner optimizer's lax.cond, the compiled step (params and state donated) computes exactly two
    arrays per leaf: the accumulator, in one fused pass (read gradient and accumulator, write the accumulator), and
    the new params. No copy of the inner state or the accumulator, no zeroing pass, no zero-update tree (in the
    cond either)."""
    params = {"a": jnp.ones((64, 32)), "b": jnp.ones((48,)), "c": jnp.ones((5, 7, 3))}
    ms = gradax.MultiSteps(gradax.adamw(1e-3, weight_decay=1e-4), every_k_schedule=4)
    state = ms.init(params)

    def step(p, s, g):
        u, s = ms.update(g, s, p)
        return gradax.apply_updates(p, u), s

    hlo = jax.jit(step, donate_argnums=(0, 1)).lower(params, state, params).compile().as_text()
    entry = hlo[hlo.index("\nENTRY") :].splitlines()[1:]
    skip = ("parameter(", "get-tuple-element(", " tuple(", "conditional(")
    arrays = [ln.strip() for ln in entry if "= f32[" in ln and not any(t in ln for t in skip)]
    assert len(arrays) == 2 * len(params), "\n".join(arrays)
    assert not [ln for ln in arrays if " copy(" in ln], "\n".join(arrays)
    assert " copy(" not in hlo.replace("s32[] copy(", ""), "a copy of an array in the compiled step"


def test_accumulator_buffer_after_a_step_holds_the_update_and_is_overwritten():
    ms = gradax.MultiSteps(gradax.sgd(1.0), every_k_schedule=2)
    s = ms.init(jnp.zeros(2))
    _, s = ms.update(jnp.array([1.0, 2.0]), s)
    np.testing.assert_allclose(s.acc_grads, [1.0, 2.0])
    u, s = ms.update(jnp.array([3.0, 4.0]), s)
    np.testing.assert_allclose(u, [-2.0, -3.0])
    np.testing.assert_allclose(s.acc_grads, [-2.0, -3.0])  # the emitted update (Optax: zeros); same updates either way
    _, s = ms.update(jnp.array([10.0, 20.0]), s)
    np.testing.assert_allclose(s.acc_grads, [10.0, 20.0])
    u, s = ms.update(jnp.array([0.0, 0.0]), s)
    np.testing.assert_allclose(u, [-5.0, -10.0])
