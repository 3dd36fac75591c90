"""Texts and error types that Optax users (and Optax 0.2.8's own tests) match on, and safe_increment on every
counting dtype: cases found by running Optax's test suite against gradax."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradax


def test_optimistic_adam_deprecation_names_the_replacement_as_optax_does():
    with pytest.warns(DeprecationWarning, match=r"optimistic_adam is deprecated; use `optimistic_adam_v2` instead"):
        gradax.optimistic_adam(1e-2)


def test_microbatch_size_error_says_divisible():
    fn = gradax.microbatching.microbatch(lambda x: jnp.sum(x), argnums=0, microbatch_size=3)
    with pytest.raises(ValueError, match=r"must be a divisor of the batch size 10; got 3\. .*divisible"):
        fn(jnp.ones((10, 2)))


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32", "int8", "int32", "uint8"])
def test_safe_increment_counts_and_saturates_in_every_dtype(dtype):
    dtype = jnp.dtype(dtype)
    inc = jax.jit(gradax.safe_increment)
    np.testing.assert_array_equal(inc(jnp.asarray(3, dtype)), jnp.asarray(4, dtype))
    top = jnp.finfo(dtype).max if jnp.issubdtype(dtype, jnp.floating) else jnp.iinfo(dtype).max
    out = inc(jnp.asarray(top, dtype))
    assert out.dtype == dtype
    np.testing.assert_array_equal(out, jnp.asarray(top, dtype))


@pytest.mark.parametrize("dtype", ["bool", "complex64"])
@pytest.mark.parametrize("error", [TypeError, ValueError])  # ValueError is what Optax raises
def test_safe_increment_refuses_bool_and_complex(dtype, error):
    with pytest.raises(
        error, match=rf"safe_increment\(count=...\) must be an integer or floating array; got dtype {dtype}"
    ):
        gradax.safe_increment(jnp.asarray(1, dtype))


def test_projection_l2_ball_gradient_at_zero_is_the_identity():
    assert float(jax.grad(gradax.projections.projection_l2_ball)(0.0)) == 1.0
    x = jnp.array([3.0, 4.0])
    g = jax.grad(lambda v: jnp.sum(gradax.projections.projection_l2_ball(v, 2.5)))(x)
    np.testing.assert_allclose(g, [0.08, -0.06], rtol=1e-5)  # outside the ball: d/dx of s x / |x|


def test_tree_vdot_complex_leaf_agrees_with_jnp_vdot():
    rng = np.random.RandomState(0)
    a, b = rng.randn(20) + 1j * rng.randn(20), rng.randn(20)
    np.testing.assert_allclose(gradax.tree.vdot(a, b), jnp.vdot(a, b), rtol=1e-7)
    assert float(gradax.tree.vdot({"x": jnp.ones((2, 3))}, {"x": jnp.full((2, 3), 2.0)})) == 12.0


def test_perturbed_fun_never_differentiates_fun():
    @jax.custom_jvp
    def f(x):
        return x

    @f.defjvp
    def _never(primals, tangents):
        raise AssertionError("make_perturbed_fun differentiated fun")

    fp = gradax.perturbations.make_perturbed_fun(f, 10)
    assert bool(jnp.isfinite(jax.grad(fp, argnums=1)(jax.random.key(0), jnp.array(0.0))))
    assert bool(jnp.isfinite(jax.hessian(fp, argnums=1)(jax.random.key(0), jnp.array(0.0))))


@pytest.mark.parametrize("error", [TypeError, ValueError])  # TypeError is what Optax raises for a missing `value`
def test_missing_update_argument_is_both_type_and_value_error(error):
    params = jnp.array([1.0, -1.0])
    polyak = gradax.scale_by_polyak()
    with pytest.raises(error, match=r"scale_by_polyak: update\(...\) needs `value`"):
        polyak.update(params, polyak.init(params), params)


def test_differentially_private_aggregate_refuses_aggregated_gradients():
    params = {"a": (jnp.zeros((2, 3)), jnp.zeros([])), "b": jnp.zeros((4,))}
    tx = gradax.contrib.differentially_private_aggregate(l2_norm_clip=0.1, noise_multiplier=1.1, key=0)
    state = tx.init(params)
    with pytest.raises(ValueError, match=r"must be per-example gradients, every leaf with the same leading batch"):
        tx.update(params, state, params)  # the mean gradient: a scalar leaf, no common batch axis
    per_example = jax.tree.map(lambda p: jnp.ones((5, *p.shape)), params)
    updates, _ = tx.update(per_example, state, params)
    assert jax.tree.structure(updates) == jax.tree.structure(params)


def test_param_block_rms_of_complex_params_is_real_like_optax():
    """adafactor on complex params (Optax's alias_test test_optimization15) scales by sqrt(mean |p|^2), not by the
    complex square root of mean p^2."""
    import optax  # the oracle (tests only)

    p = jnp.array([2e-3 + 2e-3j, 1e-5j], jnp.complex64)
    g = jnp.array([0.3 - 0.1j, -2.0 + 0.5j], jnp.complex64)
    rms = gradax.safe_root_mean_squares(p, 1e-3)
    assert not jnp.iscomplexobj(rms)
    np.testing.assert_allclose(rms, np.sqrt(np.mean(np.abs(np.asarray(p)) ** 2)), rtol=1e-6)
    for make in (lambda lib: lib.scale_by_param_block_rms(), lambda lib: lib.adafactor(5e-3)):
        outs = []
        for lib in (gradax, optax):
            tx = make(lib)
            state = tx.init(p)
            for _ in range(3):
                u, state = tx.update(g, state, p)
            outs.append(u)
        np.testing.assert_allclose(outs[0], outs[1], rtol=1e-6)


@pytest.mark.parametrize(
    "operation",
    [gradax.apply_updates, lambda new, old: gradax.incremental_update(new, old, 1)],
    ids=["apply_updates", "incremental_update"],
)
def test_none_first_tree_gives_none(operation):
    x = jnp.array([1.0, 2.0, 3.0])
    assert operation(None, x) is None
    out = operation({"a": x, "b": None}, {"a": x, "b": x})
    assert out["b"] is None and out["a"].shape == (3,)


def test_add_decayed_weights_keeps_none_updates():
    weights = (jnp.ones(2), {"a": jnp.ones(2), "b": jnp.ones(2)})
    tx = gradax.add_decayed_weights(0.1)
    assert tx.update(None, 0, weights)[0] is None
    updates, _ = tx.update((None, {"a": jnp.ones(2), "b": None}), tx.init(weights), weights)
    assert updates[0] is None and updates[1]["b"] is None
    np.testing.assert_allclose(updates[1]["a"], 1.1)


def test_extra_args_update_without_params_parameter_gets_only_what_was_passed():
    logged = {}

    def update_fn(updates, state, *, metrics_logger=None, **extra_args):
        del extra_args
        if metrics_logger:
            metrics_logger("learning_rate", 0.3)
        return updates, state

    tx = gradax.GradientTransformationExtraArgs(lambda params: {}, update_fn)

    @jax.jit
    def f(params):
        return tx.update(params, tx.init(params), metrics_logger=lambda name, value: logged.update({name: value}))

    f(jnp.ones(2))
    assert logged == {"learning_rate": 0.3}


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_zoom_linesearch_under_cond_with_float64_value_fn_and_hyperparameters(dtype):
    kw = ["tol", "increase_factor", "slope_rtol", "curv_rtol", "approx_dec_rtol", "stepsize_precision"]
    with jax.enable_x64(True):
        opt = gradax.scale_by_zoom_linesearch(
            max_linesearch_steps=5, **{k: jnp.array(1e-5, dtype=jnp.float64) for k in kw}
        )
        x = jnp.array([1.0, 2.0], dtype=dtype)
        state = opt.init(x)

        def value_fn(x):
            return jnp.sum(x**2).astype(jnp.float64)

        def step(x):
            return opt.update(x, state, x, value=1.0, grad=x, value_fn=value_fn)[1]

        new_state = jax.lax.cond(jnp.asarray(True), step, lambda x: state, x)
        assert jax.tree.structure(new_state) == jax.tree.structure(state)
