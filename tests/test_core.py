"""The core names of gradax (tests/contract/registry/core.py COVERED): update helpers, safe numerics, chains and the
base types. Optax 0.2.8 is the oracle where it has the same function."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradax

# --- apply_updates, incremental_update, periodic_update ---------------------------------------------------------------


def test_apply_updates_keeps_param_dtype_and_none_leaves():
    params = {"a": jnp.ones(3, jnp.bfloat16), "b": None, "c": (jnp.zeros(2), [])}
    updates = {"a": jnp.full(3, 0.5, jnp.float32), "b": None, "c": (jnp.ones(2), [])}
    out = gradax.apply_updates(params, updates)
    assert out["a"].dtype == jnp.bfloat16
    np.testing.assert_array_equal(np.asarray(out["a"], np.float32), 1.5)
    assert out["b"] is None
    np.testing.assert_array_equal(out["c"][0], 1.0)
    assert out["c"][1] == []
    ref = optax.apply_updates(params, updates)
    assert jax.tree.structure(ref) == jax.tree.structure(out)


def test_incremental_update_closed_form():
    new, old = {"x": jnp.array([1.0, 2.0])}, {"x": jnp.array([3.0, -1.0])}
    out = gradax.incremental_update(new, old, 0.25)
    np.testing.assert_allclose(out["x"], 0.25 * np.array([1.0, 2.0]) + 0.75 * np.array([3.0, -1.0]), rtol=1e-6)
    np.testing.assert_allclose(out["x"], optax.incremental_update(new, old, 0.25)["x"], rtol=1e-6)


@pytest.mark.parametrize("steps,expected", [(0, 1.0), (3, 1.0), (4, 0.0), (7, 0.0)])
def test_periodic_update_closed_form(steps, expected):
    new, old = {"x": jnp.ones(2)}, {"x": jnp.zeros(2)}
    out = jax.jit(gradax.periodic_update, static_argnums=3)(new, old, jnp.asarray(steps), 3)
    np.testing.assert_array_equal(out["x"], expected)


# --- safe numerics --------------------------------------------------------------------------------------------------


def test_safe_norm_and_rms_read_their_input_once():
    """The Euclidean safe_norm and safe_root_mean_squares guard the sqrt, not the input: one reduction each."""
    x = jnp.ones((8, 4))
    for f in (
        lambda v: gradax.safe_norm(v, 1e-3),
        lambda v: gradax.safe_norm(v, 1e-3, axis=1),
        lambda v: gradax.safe_root_mean_squares(v, 1e-3),
    ):
        assert str(jax.make_jaxpr(f)(x)).count("reduce_sum") == 1
    np.testing.assert_array_equal(jax.grad(lambda v: gradax.safe_root_mean_squares(v, 1e-3))(jnp.zeros(3)), 0.0)
    np.testing.assert_allclose(gradax.safe_root_mean_squares(jnp.array([3.0, 4.0]), 1e-3), np.sqrt(12.5), rtol=1e-6)


def test_safe_norm_values_and_finite_gradient_at_zero():
    x = jnp.array([3.0, 4.0])
    np.testing.assert_allclose(gradax.safe_norm(x, 1e-6), 5.0, rtol=1e-6)
    np.testing.assert_allclose(gradax.safe_norm(x, 10.0), 10.0)
    m = jnp.array([[3.0, 4.0], [0.0, 0.0]])
    np.testing.assert_allclose(gradax.safe_norm(m, 1e-3, axis=1), [5.0, 1e-3], rtol=1e-6)
    np.testing.assert_allclose(
        gradax.safe_norm(m, 1e-3, axis=1, keepdims=True), optax.safe_norm(m, 1e-3, axis=1, keepdims=True), rtol=1e-6
    )
    g = jax.grad(lambda v: gradax.safe_norm(v, 1e-6))(jnp.zeros(3))
    assert np.all(np.isfinite(g)) and np.all(g == 0)
    np.testing.assert_allclose(jax.grad(lambda v: gradax.safe_norm(v, 1e-6))(x), x / 5.0, rtol=1e-6)


def test_safe_root_mean_squares_values_and_finite_gradient_at_zero():
    x = jnp.array([3.0, 4.0])
    np.testing.assert_allclose(gradax.safe_root_mean_squares(x, 1e-6), np.sqrt(12.5), rtol=1e-6)
    np.testing.assert_allclose(gradax.safe_root_mean_squares(x, 1e-6), optax.safe_root_mean_squares(x, 1e-6))
    np.testing.assert_allclose(gradax.safe_root_mean_squares(jnp.zeros(4), 0.5), 0.5)
    g = jax.grad(lambda v: gradax.safe_root_mean_squares(v, 1e-6))(jnp.zeros(3))
    assert np.all(np.isfinite(g)) and np.all(g == 0)


def test_safe_int32_increment_saturates():
    top = jnp.asarray(np.iinfo(np.int32).max, jnp.int32)
    assert int(gradax.safe_int32_increment(jnp.asarray(5, jnp.int32))) == 6
    out = gradax.safe_int32_increment(top)
    assert out.dtype == jnp.int32 and int(out) == np.iinfo(np.int32).max
    assert int(jax.jit(gradax.safe_int32_increment)(top)) == np.iinfo(np.int32).max


def test_safe_int32_increment_rejects_other_dtypes():
    with pytest.raises(TypeError, match=r"safe_int32_increment\(count=\.\.\.\) must be an int32 array; got dtype"):
        gradax.safe_int32_increment(jnp.asarray(1.0, jnp.float32))


def test_safe_increment_saturates_ints_and_floats():
    assert int(gradax.safe_increment(jnp.asarray(np.iinfo(np.int32).max, jnp.int32))) == np.iinfo(np.int32).max
    assert float(gradax.safe_increment(jnp.asarray(2.0))) == 3.0
    fmax = np.finfo(np.float32).max
    assert float(gradax.safe_increment(jnp.asarray(fmax, jnp.float32))) == fmax
    with pytest.raises(TypeError, match=r"safe_increment\(count=\.\.\.\) must be an integer or floating array"):
        gradax.safe_increment(jnp.asarray(True))


@pytest.mark.filterwarnings("ignore:optax.global_norm is deprecated")
def test_global_norm():
    tree = {"a": jnp.array([3.0]), "b": [jnp.array([[4.0]]), None], "c": ()}
    np.testing.assert_allclose(gradax.global_norm(tree), 5.0, rtol=1e-6)
    np.testing.assert_allclose(gradax.global_norm(tree), optax.global_norm(tree), rtol=1e-6)
    assert float(gradax.global_norm({})) == 0.0
    np.testing.assert_allclose(gradax.global_norm(jnp.array([1j, 1.0], jnp.complex64)), np.sqrt(2), rtol=1e-6)


# --- chain and named_chain --------------------------------------------------------------------------------------------


def test_chain_composes_and_matches_optax():
    params = {"w": jnp.array([1.0, -2.0])}
    g = {"w": jnp.array([0.5, 0.25])}
    tx = gradax.chain(gradax.trace(0.5), gradax.scale(-0.1))
    ref = optax.chain(optax.trace(0.5), optax.scale(-0.1))
    s, r = tx.init(params), ref.init(params)
    for _ in range(3):
        u, s = tx.update(g, s, params)
        v, r = ref.update(g, r, params)
        np.testing.assert_allclose(u["w"], v["w"], rtol=1e-6)
    assert isinstance(tx, gradax.GradientTransformationExtraArgs)
    tx.update(g, s, params, some_unknown_kwarg=1)


def test_chain_errors():
    with pytest.raises(TypeError, match=r"chain\(\.\.\.\) takes GradientTransformations; argument 1 is"):
        gradax.chain(gradax.scale(1.0), 3.0)
    tx = gradax.chain(gradax.scale(1.0), gradax.scale(2.0))
    with pytest.raises(ValueError, match=r"chain: update\(state=\.\.\.\) must hold one state per transformation \(2\)"):
        tx.update({"w": jnp.ones(1)}, (gradax.EmptyState(),))


def test_named_chain_state_and_errors():
    tx = gradax.named_chain(("t", gradax.trace(0.5)), ("s", gradax.scale(-0.1)))
    state = tx.init({"w": jnp.ones(2)})
    assert list(state.keys()) == ["t", "s"]
    assert isinstance(state["t"], gradax.TraceState)
    with pytest.raises(TypeError, match=r"named_chain\(\.\.\.\) takes \(name, transformation\) pairs; argument 0"):
        gradax.named_chain(gradax.scale(1.0))
    with pytest.raises(ValueError, match=r"named_chain\(\.\.\.\) names must be distinct; got \['a', 'a'\]"):
        gradax.named_chain(("a", gradax.scale(1.0)), ("a", gradax.scale(2.0)))


def test_with_extra_args_support_error():
    with pytest.raises(TypeError, match=r"with_extra_args_support\(tx=\.\.\.\) must be a GradientTransformation"):
        gradax.with_extra_args_support(3)


# --- base types -------------------------------------------------------------------------------------------------------


def test_base_types_and_aliases_exist():
    tx = gradax.GradientTransformation(gradax.init_empty_state, lambda u, s, p=None: (u, s))
    assert tx.init(None) == gradax.EmptyState()
    assert isinstance(gradax.EmptyState(), tuple) and gradax.EmptyState._fields == ()
    ea = gradax.GradientTransformationExtraArgs(tx.init, lambda u, s, p=None, **kw: (u, s))
    assert isinstance(ea, gradax.GradientTransformation)
    for name in [
        "MaskOrFn",
        "OptState",
        "Params",
        "ScalarOrSchedule",
        "Schedule",
        "TransformInitFn",
        "TransformUpdateExtraArgsFn",
        "TransformUpdateFn",
        "Updates",
    ]:
        assert getattr(gradax, name) is not None, name
    assert gradax.TraceState._fields == optax.TraceState._fields
    assert gradax.ScaleByScheduleState._fields == optax.ScaleByScheduleState._fields
    assert gradax.ScaleState._fields == optax.ScaleState._fields
