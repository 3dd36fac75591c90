"""gradax.microbatching against Optax 0.2.8 (values and gradients), properties, jit, errors."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradax

GM, OM = gradax.microbatching, optax.microbatching
GT, OT = GM.AccumulationType, OM.AccumulationType

X = jax.random.normal(jax.random.key(0), (12, 3))
Y = jax.random.normal(jax.random.key(1), (12,))
W = jnp.array([0.5, -1.0, 2.0])


def _loss(w, x, y):
    return 0.5 * jnp.mean((x @ w - y) ** 2)


def _close(a, b, rtol=1e-5, atol=1e-6):
    jax.tree.map(lambda u, v: np.testing.assert_allclose(u, v, rtol=rtol, atol=atol), a, b)


def _same_kind(kind):
    return getattr(OT, kind.name)


# --- public surface ----------------------------------------------------------------------------------------------------


def test_top_level_is_submodule_function_and_enum_members():
    assert gradax.microbatch is GM.microbatch
    assert optax.microbatch is OM.microbatch
    assert [m.name for m in GT] == [m.name for m in OT]
    assert [m.value for m in GT] == [m.value for m in OT]


@pytest.mark.parametrize("name", ["micro_grad", "micro_vmap", "microbatch", "reshape_batch_axis"])
def test_signatures_match_optax(name):
    import inspect

    gs, os_ = inspect.signature(getattr(GM, name)), inspect.signature(getattr(OM, name))
    assert list(gs.parameters) == list(os_.parameters)
    for p in gs.parameters:
        g, o = gs.parameters[p], os_.parameters[p]
        assert g.kind == o.kind
        if isinstance(o.default, OT):
            assert g.default.name == o.default.name
        elif not callable(o.default):
            assert g.default == o.default


def test_accumulator_fields():
    import dataclasses

    assert [f.name for f in dataclasses.fields(GM.Accumulator)] == [f.name for f in dataclasses.fields(OM.Accumulator)]


# --- reshape_batch_axis ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("axis", [0, 1])
def test_reshape_batch_axis_column_major(axis):
    x = jnp.arange(2 * 12 * 3).reshape(2, 12, 3)
    x = jnp.moveaxis(x, 1, axis)
    got = GM.reshape_batch_axis({"a": x}, 4, axis)["a"]
    np.testing.assert_array_equal(got, OM.reshape_batch_axis({"a": x}, 4, axis)["a"])
    n = 12 // 4
    xb = np.moveaxis(np.asarray(x), axis, 0)
    gb = np.moveaxis(np.asarray(got), (axis, axis + 1), (0, 1))
    for j in range(n):  # microbatch j holds rows j, j + n, j + 2n, ...
        np.testing.assert_array_equal(gb[j], xb[j::n])


# --- microbatch ---------------------------------------------------------------------------------------------------------


def _f(x, y, scale=1.0):
    return {"rows": scale * x * y[:, None], "total": jnp.sum(x) * scale, "mean": jnp.mean(x * y[:, None])}


@pytest.mark.parametrize("mb", [1, 3, 4, 12])
def test_microbatch_matches_optax_and_full_batch(mb):
    acc = {"rows": GT.CONCAT, "total": GT.SUM, "mean": GT.MEAN}
    oacc = {"rows": OT.CONCAT, "total": OT.SUM, "mean": OT.MEAN}
    got = GM.microbatch(_f, argnums=(0, 1), microbatch_size=mb, accumulator=acc)(X, Y, 2.0)
    want = OM.microbatch(_f, argnums=(0, 1), microbatch_size=mb, accumulator=oacc)(X, Y, 2.0)
    _close(got, want)
    full = _f(X, Y, 2.0)
    np.testing.assert_allclose(got["rows"], full["rows"], rtol=1e-6)  # CONCAT restores the row order
    np.testing.assert_allclose(got["total"], full["total"], rtol=1e-5)
    np.testing.assert_allclose(got["mean"], full["mean"], rtol=1e-5, atol=1e-6)


def test_microbatch_none_returns_fun_and_default_sum():
    assert GM.microbatch(_f, 0, None) is _f
    s = GM.microbatch(lambda x: jnp.sum(x, axis=0), 0, 4)(X)
    np.testing.assert_allclose(s, jnp.sum(X, axis=0), rtol=1e-5)


def test_microbatch_kwargs_in_axes_running_mean_and_early_stop():
    def f(a, *, b):
        return jnp.mean(a, axis=1) + jnp.mean(b)

    a = X.T  # batch on axis 1
    for kind in (GT.RUNNING_MEAN, GT.MEAN, GT.SUM):
        for real in (None, 2, jnp.array(2)):
            kw = dict(argnames="b", in_axes=(1, 0), num_real_microbatches=real)
            got = GM.microbatch(f, 0, 4, kind, **kw)(a, b=Y)
            want = OM.microbatch(f, 0, 4, _same_kind(kind), **kw)(a, b=Y)
            _close(got, want)
    # RUNNING_MEAN averages over the microbatches actually run.
    got = GM.microbatch(f, 0, 4, GT.RUNNING_MEAN, argnames="b", in_axes=(1, 0), num_real_microbatches=2)(a, b=Y)
    parts = [f(a[:, j::3], b=Y[j::3]) for j in range(2)]
    np.testing.assert_allclose(got, (parts[0] + parts[1]) / 2, rtol=1e-5)


def test_custom_accumulator_max():
    acc = GM.Accumulator(
        init=lambda v: jnp.full(v.shape, -jnp.inf, v.dtype),
        update=lambda c, v, i: jnp.maximum(c, v),
        finalize=lambda c: c,
        aggregate=lambda v: jnp.max(v, axis=0),
    )
    got = GM.microbatch(lambda x: jnp.max(x, axis=0), 0, 3, acc)(X)
    np.testing.assert_allclose(got, jnp.max(X, axis=0))
    got = GM.micro_vmap(lambda x: jnp.max(x), microbatch_size=4, accumulator=acc)(X)
    np.testing.assert_allclose(got, jnp.max(X))


def test_microbatch_jit_and_grad_through():
    f = GM.microbatch(lambda w, x, y: _loss(w, x, y), argnums=(1, 2), microbatch_size=4, accumulator=GT.MEAN)
    jf = jax.jit(jax.value_and_grad(f))
    v, g = jf(W, X, Y)
    v0, g0 = jax.value_and_grad(_loss)(W, X, Y)
    np.testing.assert_allclose(v, v0, rtol=1e-5)
    np.testing.assert_allclose(g, g0, rtol=1e-5, atol=1e-6)
    of = OM.microbatch(lambda w, x, y: _loss(w, x, y), argnums=(1, 2), microbatch_size=4, accumulator=OT.MEAN)
    _close(jf(W, X, Y), jax.jit(jax.value_and_grad(of))(W, X, Y))


# --- micro_vmap ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["CONCAT", "SUM", "MEAN", "RUNNING_MEAN"])
def test_micro_vmap_matches_optax_and_vmap(kind):
    def f(w, x, *, y):
        return jnp.dot(w, x) * y

    gfun = GM.micro_vmap(f, in_axes=(None, 0), microbatch_size=3, accumulator=GT[kind])
    ofun = OM.micro_vmap(f, in_axes=(None, 0), microbatch_size=3, accumulator=OT[kind])
    got = jax.jit(gfun)(W, X, y=Y)
    _close(got, ofun(W, X, y=Y))
    per_example = jax.vmap(f, in_axes=(None, 0))(W, X, y=Y)
    ref = {"CONCAT": per_example, "SUM": per_example.sum(0)}.get(kind, per_example.mean(0))
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


def test_micro_vmap_without_microbatching_is_vmap():
    got = GM.micro_vmap(lambda x: x**2)(jnp.arange(8))
    np.testing.assert_array_equal(got, jnp.arange(8) ** 2)


# --- micro_grad ---------------------------------------------------------------------------------------------------------


def _per_example_loss(w, x, y):
    return 0.5 * jnp.mean((x @ w - y) ** 2)


@pytest.mark.parametrize("mb", [None, 2, 6])
def test_micro_grad_mean_equals_full_batch_gradient(mb):
    fn = GM.micro_grad(_per_example_loss, batch_argnums=(1, 2), microbatch_size=mb, accumulator=GT.MEAN)
    g, aux = jax.jit(fn)(W, X, Y)
    np.testing.assert_allclose(g, jax.grad(_loss)(W, X, Y), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(aux.values, 0.5 * (X @ W - Y) ** 2, rtol=1e-5, atol=1e-6)
    assert aux.metrics is None and aux.aux is None
    gs, _ = GM.micro_grad(_per_example_loss, batch_argnums=(1, 2), microbatch_size=mb)(W, X, Y)  # default SUM
    np.testing.assert_allclose(gs, 12 * jax.grad(_loss)(W, X, Y), rtol=1e-5, atol=1e-5)


def test_micro_grad_matches_optax_with_transform_metrics_aux():
    def fun(params, x, y):
        r = x @ params["w"] + params["b"] - y
        return jnp.mean(r**2), {"r": r}

    params = {"w": W, "b": jnp.array(0.3)}

    def clip(g):
        norm = jnp.sqrt(sum(jnp.sum(v**2) for v in jax.tree.leaves(g)))
        return jax.tree.map(lambda v: v * jnp.minimum(1.0, 1.0 / norm), g), jax.tree.map(jnp.square, g)

    def metrics(g):
        return jnp.sqrt(sum(jnp.sum(v**2) for v in jax.tree.leaves(g)))

    for keep in (True, False):
        kw = dict(has_aux=True, batch_argnums=(1, 2), keep_batch_dim=keep, microbatch_size=4)
        kw.update(transform_fn=clip, metrics_fn=metrics)
        got = GM.micro_grad(fun, accumulator=GT.MEAN, **kw)(params, X, Y)
        want = OM.micro_grad(fun, accumulator=OT.MEAN, **kw)(params, X, Y)
        _close((got[0], tuple(got[1])), (want[0], tuple(want[1])))
        assert type(got[1]).__name__ == "Aux" and got[1]._fields == ("values", "metrics", "aux")


def test_micro_grad_argnums_tuple_and_early_stop():
    fun = lambda w, s, x: s * jnp.sum(x @ w)
    kw = dict(argnums=(0, 1), batch_argnums=2, keep_batch_dim=False, microbatch_size=3, num_real_microbatches=2)
    got = GM.micro_grad(fun, **kw)(W, 2.0, X)
    want = OM.micro_grad(fun, **kw)(W, 2.0, X)
    _close((got[0], tuple(got[1])), (want[0], tuple(want[1])))


# --- errors -------------------------------------------------------------------------------------------------------------


def test_error_batch_not_divisible():
    with pytest.raises(
        ValueError, match=r"microbatch\(microbatch_size=\.\.\.\) must be a divisor of the batch size 12; got 5\."
    ):
        GM.microbatch(jnp.sum, 0, 5)(X)
    with pytest.raises(ValueError, match=r"microbatch\(microbatch_size=\.\.\.\) must be a divisor"):
        GM.micro_vmap(jnp.sum, microbatch_size=5)(X)


def test_error_unknown_accumulation_type():
    with pytest.raises(
        ValueError, match=r"microbatch\(accumulator=\.\.\.\) must be an Accumulator, an AccumulationType"
    ):
        GM.microbatch(jnp.sum, 0, 2, accumulator="sum")
    with pytest.raises(ValueError, match=r"micro_vmap\(accumulator=\.\.\.\) must be an Accumulator.*got 'mean'\. Use"):
        GM.micro_vmap(jnp.sum, accumulator=("mean",))
    with pytest.raises(ValueError, match=r"micro_grad\(accumulator=\.\.\.\) must be"):
        GM.micro_grad(_per_example_loss, accumulator=OT.SUM, microbatch_size=2)  # Optax's enum is not gradax's


def test_error_bad_microbatch_size_unequal_batches_out_axes_and_int_mean():
    with pytest.raises(
        ValueError, match=r"microbatch\(microbatch_size=\.\.\.\) must be a positive int or None; got 0\."
    ):
        GM.microbatch(jnp.sum, 0, 0)
    with pytest.raises(ValueError, match=r"microbatch\(argnums=\.\.\.\) must be arguments whose batch axes all have"):
        GM.microbatch(lambda a, b: a, (0, 1), 2)(X, Y[:6])
    with pytest.raises(ValueError, match=r"micro_vmap\(out_axes=\.\.\.\) must be 0; got 1\."):
        GM.micro_vmap(jnp.sum, out_axes=1)
    with pytest.raises(ValueError, match="MEAN and RUNNING_MEAN Accumulators require floating-point values"):
        GM.microbatch(jnp.sum, 0, 2, GT.MEAN)(jnp.arange(4))
    with pytest.raises(ValueError, match=r"microbatch\(in_axes=\.\.\.\) must be an int or one axis per batch argument"):
        GM.microbatch(jnp.sum, 0, 2, in_axes=(0, 1))
