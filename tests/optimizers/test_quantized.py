"""Block-wise 8-bit moments (``moments="8bit"``) of adam/adamw/lion and their scale_by_*: codec, memory, contract,
convergence. Optax has no such mode: the references are float64 NumPy and gradax's own float32 optimizers."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradax
from gradax import _quantization as Q

ALL = gradax.Blockwise8bit(block_size=64, min_size=0)  # quantize every floating leaf, small blocks for tiny tests


def _rng(seed=0):
    return np.random.default_rng(seed)


def _moment_like(n, seed=0):
    """Signed values spread over many orders of magnitude, like optimizer moments."""
    r = _rng(seed)
    return (r.standard_normal(n) * np.exp(1.5 * r.standard_normal(n))).astype(np.float32)


# --- codec ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", [Q._SIGNED, Q._UNSIGNED], ids=["signed_e4m3", "unsigned_e4m4"])
def test_format_table_round_trips_exactly_and_is_increasing(fmt):
    table = fmt.table()
    assert table[0] == 0.0 and table[-1] == 1.0
    assert np.all(np.diff(table) > 0)
    codes = fmt.encode(jnp.asarray(table, jnp.float32))
    np.testing.assert_array_equal(np.asarray(codes), np.arange(fmt.top + 1))
    np.testing.assert_array_equal(np.asarray(fmt.decode(codes), np.float64), table)


@pytest.mark.parametrize("fmt", [Q._SIGNED, Q._UNSIGNED], ids=["signed_e4m3", "unsigned_e4m4"])
def test_format_rounds_to_nearest_like_a_float64_reference(fmt):
    table = fmt.table()
    y = np.exp(_rng(1).uniform(np.log(table[1]), 0.0, 20000)).astype(np.float32)
    got = np.asarray(fmt.decode(fmt.encode(jnp.asarray(y))), np.float64)
    nearest = table[np.abs(table[None, :] - y.astype(np.float64)[:, None]).argmin(axis=1)]
    np.testing.assert_array_equal(got, nearest)
    rel = np.abs(got - y) / y
    assert rel.max() <= 2.0 ** -(fmt.man_bits + 1) + 1e-7
    # Below the smallest code: flushed to zero (or rounded up to it).
    tiny = np.float32(table[1] / 4)
    assert float(fmt.decode(fmt.encode(jnp.asarray(tiny)))) == 0.0


def test_stochastic_rounding_is_unbiased_and_keeps_small_increments():
    x = jnp.asarray(_moment_like(256, 8)).reshape(1, 256)
    scale = Q.block_absmax(x)
    draws = jnp.stack(
        [
            Q.decode_signed_blocks(
                Q.BlockQuantized(Q.encode_signed_blocks(x, scale, Q.dither(x.shape, jnp.int32(k))), scale)
            )
            for k in range(400)
        ]
    )
    big = jnp.abs(x) > 1e-3 * scale[:, None]
    mean_rel = jnp.abs(jnp.mean(draws, 0) - x) / jnp.abs(x)
    assert float(jnp.max(jnp.where(big, mean_rel, 0.0))) < 0.02  # round-to-nearest errors reach 6%
    # A second moment decaying by b2 = 0.999 per step (no gradient): round-to-nearest would freeze it.
    opt = gradax.scale_by_adam(moments=gradax.Blockwise8bit(block_size=256, min_size=0))
    params = {"w": jnp.zeros(4096)}
    g = {"w": jnp.asarray(_moment_like(4096, 9))}
    state = opt.init(params)
    _, state = opt.update(g, state)
    v1 = Q.decode_second_moment(state.nu["w"], (4096,))
    zero = jax.tree.map(jnp.zeros_like, g)
    step = jax.jit(opt.update)
    for _ in range(300):
        _, state = step(zero, state)
    ratio = jnp.sum(Q.decode_second_moment(state.nu["w"], (4096,))) / jnp.sum(v1)
    np.testing.assert_allclose(float(ratio), 0.999**300, rtol=0.02)


@pytest.mark.parametrize("size", [0, 1, 63, 64, 1000])
def test_signed_blocks_round_trip_against_numpy(size):
    x = _moment_like(size, seed=size)
    q = Q.encode_signed(jnp.asarray(x), 64)
    nb = -(-size // 64)
    assert q.codes.shape == (nb, 64) and q.codes.dtype == jnp.uint8
    assert q.scale.shape == (nb,) and q.scale.dtype == jnp.float32
    padded = np.zeros(nb * 64, np.float64)
    padded[:size] = x
    np.testing.assert_array_equal(np.asarray(q.scale, np.float64), np.abs(padded.reshape(nb, 64)).max(axis=1))
    got = np.asarray(Q.decode_signed(q, (size,)), np.float64)
    scale = np.repeat(np.asarray(q.scale, np.float64), 64)[:size]
    big = np.abs(x) >= Q._SIGNED.table()[1] * scale
    assert np.all(np.sign(got[big]) == np.sign(x[big]))
    assert np.all(np.abs(got - x)[big] <= 2.0**-4 * np.abs(x)[big] * (1 + 1e-6))
    assert np.all(np.abs(got - x)[~big] <= Q._SIGNED.table()[1] * scale[~big])
    if size:
        assert np.median(np.abs(got - x)[big] / np.abs(x)[big]) < 0.03


def test_second_moment_round_trip_against_numpy():
    v = np.exp(3.0 * _rng(2).standard_normal(4096)).astype(np.float32)
    q = Q.encode_second_moment(jnp.asarray(v), 256)
    got = np.asarray(Q.decode_second_moment(q, (4096,)), np.float64)
    assert np.all(got >= 0)
    root_err = np.abs(np.sqrt(got) - np.sqrt(v)) / np.sqrt(v)
    kept = got > 0
    assert kept.mean() > 0.999  # 16 binades of sqrt(nu): almost nothing flushed
    assert root_err[kept].max() <= 2.0**-5 * (1 + 1e-5)


def test_scalar_and_multi_dim_shapes_round_trip():
    for shape in [(), (3, 5), (2, 3, 70)]:
        x = jnp.asarray(_moment_like(int(np.prod(shape, dtype=int)), 3).reshape(shape))
        y = Q.decode_signed(Q.encode_signed(x, 64), shape)
        assert y.shape == shape
        np.testing.assert_allclose(y, x, rtol=2.0**-4, atol=float(jnp.max(jnp.abs(x))) * 2.0**-15)


# --- construction errors ----------------------------------------------------------------------------------------------


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match=r"adamw\(moments=...\) must be None, '8bit' or a gradax.Blockwise8bit"):
        gradax.adamw(1e-3, moments="int8")
    with pytest.raises(ValueError, match=r"adam\(mu_dtype=...\) must be None when moments= is given"):
        gradax.adam(1e-3, mu_dtype=jnp.bfloat16, moments="8bit")
    with pytest.raises(ValueError, match=r"scale_by_adam\(nu_dtype=...\) must be None when moments= is given"):
        gradax.scale_by_adam(nu_dtype=jnp.bfloat16, moments="8bit")
    with pytest.raises(ValueError, match=r"lion\(mu_dtype=...\) must be None when moments= is given"):
        gradax.lion(1e-4, mu_dtype=jnp.float32, moments="8bit")
    with pytest.raises(ValueError, match=r"scale_by_lion\(moments=...\) must be None, '8bit'"):
        gradax.scale_by_lion(moments=8)
    with pytest.raises(ValueError, match=r"Blockwise8bit\(block_size=...\) must be >= 1"):
        gradax.Blockwise8bit(block_size=0)
    with pytest.raises(TypeError, match=r"Blockwise8bit\(min_size=...\) must be an int"):
        gradax.Blockwise8bit(min_size=1.5)


# --- memory ---------------------------------------------------------------------------------------------------------


def _nbytes(tree):
    return sum(int(np.prod(x.shape, dtype=int)) * jnp.dtype(x.dtype).itemsize for x in jax.tree.leaves(tree))


def test_state_bytes_ratio_below_0_3():
    params = {"w1": jax.ShapeDtypeStruct((512, 384), jnp.float32), "w2": jax.ShapeDtypeStruct((384, 10), jnp.float32)}
    params["b"] = jax.ShapeDtypeStruct((384,), jnp.float32)  # small: stays dense
    for dense, quant in [
        (gradax.adamw(1e-3), gradax.adamw(1e-3, moments="8bit")),
        (gradax.lion(1e-4), gradax.lion(1e-4, moments="8bit")),
    ]:
        ratio = _nbytes(jax.eval_shape(quant.init, params)) / _nbytes(jax.eval_shape(dense.init, params))
        assert ratio <= 0.3, ratio
    state = jax.eval_shape(gradax.adamw(1e-3, moments="8bit").init, params)[0]
    assert isinstance(state.mu["w1"], gradax.BlockQuantized) and state.mu["w1"].codes.shape == (768, 256)
    assert state.nu["b"].shape == (384,) and state.nu["b"].dtype == jnp.float32


# --- contract -------------------------------------------------------------------------------------------------------


def _params():
    r = _rng(4)
    return {
        "w": jnp.asarray(r.standard_normal((7, 13)), jnp.float32),  # 91 elements: padded to 128
        "s": jnp.asarray(0.5, jnp.float32),
        "none": None,
        "t": (jnp.asarray(r.standard_normal(64), jnp.bfloat16),),
        "i": jnp.arange(3),  # integer leaf: dense
    }


def _grads(params, k):
    r = _rng(10 + k)
    return jax.tree.map(
        lambda p: (
            jnp.asarray(r.standard_normal(jnp.shape(p)), p.dtype)
            if jnp.issubdtype(p.dtype, jnp.floating)
            else jnp.zeros_like(p)
        ),
        params,
    )


_FACTORIES = {
    "scale_by_adam": lambda: gradax.scale_by_adam(moments=ALL),
    "scale_by_adam_nesterov": lambda: gradax.scale_by_adam(eps_root=1e-8, nesterov=True, moments=ALL),
    "adam": lambda: gradax.adam(1e-2, moments=ALL),
    "adamw": lambda: gradax.adamw(1e-2, weight_decay=0.1, moments=ALL),
    "nadamw": lambda: gradax.nadamw(1e-2, weight_decay=0.1, moments=ALL),
    "scale_by_lion": lambda: gradax.scale_by_lion(moments=ALL),
    "lion": lambda: gradax.lion(1e-3, moments=ALL),
}


def _float_only(tree):
    return jax.tree.map(lambda x: x if jnp.issubdtype(x.dtype, jnp.floating) else None, tree)


@pytest.mark.parametrize("name", list(_FACTORIES))
def test_contract(name):
    opt = _FACTORIES[name]()
    params = _float_only(_params())
    state = opt.init(params)
    abstract = opt.init(jax.tree.map(lambda p: jax.ShapeDtypeStruct(p.shape, p.dtype), params))
    spec = jax.tree.map(lambda x: (x.shape, x.dtype), state)
    assert jax.tree.map(lambda x: (x.shape, x.dtype), abstract) == spec
    step = jax.jit(lambda g, s, p: opt.update(g, s, p))
    p = params
    for k in range(3):
        g = _grads(params, k)
        u, state = step(g, state, p)
        assert jax.tree.map(lambda x: (x.shape, x.dtype), state) == spec
        assert jax.tree.map(lambda x: (x.shape, x.dtype), u) == jax.tree.map(lambda x: (x.shape, x.dtype), g)
        assert all(bool(jnp.all(jnp.isfinite(x))) for x in jax.tree.leaves(u))
        p = gradax.apply_updates(p, u)
    assert jax.tree.leaves(u) and "none" in u and u["none"] is None


def test_integer_leaves_stay_dense_and_structure_is_kept():
    opt = gradax.scale_by_adam(moments=ALL)
    params = _params()
    state = opt.init(params)
    assert state.mu["none"] is None
    assert isinstance(state.mu["w"], gradax.BlockQuantized) and state.mu["w"].codes.shape == (2, 64)
    assert isinstance(state.nu["s"], gradax.BlockQuantized) and state.nu["s"].codes.shape == (1, 64)
    assert isinstance(state.mu["t"][0], gradax.BlockQuantized)
    # integer leaves stay dense; their moments are float32 (docs/differences.md: integer parameters)
    assert state.mu["i"].dtype == jnp.float32 and state.mu["i"].shape == (3,)


def test_vmap_scan_cond():
    opt = gradax.adamw(1e-2, moments=ALL)
    params = {"w": jnp.ones((3, 70)), "b": jnp.zeros(2)}
    grads = [_grads(params, k) for k in range(4)]
    state = opt.init(params)

    def body(carry, g):
        p, s = carry
        u, s = opt.update(g, s, p)
        return (gradax.apply_updates(p, u), s), None

    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *grads)
    (p_scan, s_scan), _ = jax.lax.scan(body, (params, state), stacked)
    p_loop, s_loop = params, state
    for g in grads:
        (p_loop, s_loop), _ = body((p_loop, s_loop), g)
    np.testing.assert_allclose(p_scan["w"], p_loop["w"], rtol=1e-6, atol=1e-7)
    assert jax.tree.structure(s_scan) == jax.tree.structure(s_loop)

    # vmap over a batch of independent problems
    batch = jax.tree.map(lambda x: jnp.stack([x, 2 * x]), params)
    bstate = jax.vmap(opt.init)(batch)
    bu, bstate2 = jax.vmap(opt.update)(jax.tree.map(lambda x: jnp.stack([x, x]), grads[0]), bstate, batch)
    single, _ = opt.update(grads[0], state, params)
    np.testing.assert_allclose(bu["w"][0], single["w"], rtol=1e-6)
    assert jax.tree.map(jnp.shape, bstate2) == jax.tree.map(jnp.shape, bstate)

    # lax.cond between two steps keeps the state's structure
    def maybe(flag, s):
        return jax.lax.cond(flag, lambda s: opt.update(grads[1], s, params)[1], lambda s: s, s)

    out = jax.jit(maybe)(True, state)
    assert jax.tree.map(lambda x: (x.shape, x.dtype), out) == jax.tree.map(lambda x: (x.shape, x.dtype), state)


def test_inject_hyperparams_equals_plain():
    params = {"w": jnp.ones((5, 30))}
    plain = gradax.adamw(1e-2, weight_decay=0.1, moments=ALL)
    injected = gradax.inject_hyperparams(gradax.adamw)(learning_rate=1e-2, weight_decay=0.1, moments=ALL)
    sp, si = plain.init(params), injected.init(params)
    for k in range(3):
        g = _grads(params, k)
        up, sp = plain.update(g, sp, params)
        ui, si = injected.update(g, si, params)
        np.testing.assert_allclose(up["w"], ui["w"], rtol=1e-6, atol=1e-9)
    shorthand = gradax.inject_hyperparams(gradax.lion)(learning_rate=1e-3, moments="8bit")
    shorthand.update(params, shorthand.init(params), params)


def test_default_path_is_unchanged():
    params, g = {"w": jnp.linspace(-1, 1, 300)}, {"w": jnp.cos(jnp.arange(300.0))}
    a, b = gradax.adamw(1e-2), gradax.adamw(1e-2, moments=None)
    ua, _ = a.update(g, a.init(params), params)
    ub, _ = b.update(g, b.init(params), params)
    np.testing.assert_array_equal(ua["w"], ub["w"])


def test_first_step_matches_dense_closely():
    # The update of a step is computed in float32 from the decoded moments: the first one (zero moments) is exact.
    params = {"w": jnp.asarray(_moment_like(5000, 5))}
    g = {"w": jnp.asarray(_moment_like(5000, 6))}
    dense, quant = gradax.adam(1e-2), gradax.adam(1e-2, moments="8bit")
    ud, _ = dense.update(g, dense.init(params))
    uq, sq = quant.update(g, quant.init(params))
    np.testing.assert_allclose(uq["w"], ud["w"], rtol=1e-6)
    assert isinstance(sq[0].mu["w"], gradax.BlockQuantized)


# --- convergence ------------------------------------------------------------------------------------------------------


def _regression_loss():
    r = _rng(7)
    x = jnp.asarray(r.standard_normal((256, 64)), jnp.float32)
    w_true = jnp.asarray(r.standard_normal((64, 8)), jnp.float32)
    y = jnp.tanh(x @ w_true) + 0.05 * jnp.asarray(r.standard_normal((256, 8)), jnp.float32)

    def loss(p):
        h = jnp.tanh(x @ p["w1"] + p["b1"])
        return jnp.mean((h @ p["w2"] - y) ** 2)

    params = {
        "w1": jnp.asarray(0.1 * r.standard_normal((64, 96)), jnp.float32),
        "b1": jnp.zeros(96),
        "w2": jnp.asarray(0.1 * r.standard_normal((96, 8)), jnp.float32),
    }
    return loss, params


def _train(opt, loss, params, steps):
    @jax.jit
    def run(p):
        def body(carry, _):
            p, s = carry
            value, g = jax.value_and_grad(loss)(p)
            u, s = opt.update(g, s, p)
            return (gradax.apply_updates(p, u), s), value

        (p, _), losses = jax.lax.scan(body, (p, opt.init(p)), None, length=steps)
        return loss(p), losses

    return run(params)


@pytest.mark.parametrize(
    "dense, quant",
    [
        (gradax.adamw(3e-3, weight_decay=1e-2), gradax.adamw(3e-3, weight_decay=1e-2, moments=ALL)),
        (gradax.lion(3e-4, weight_decay=1e-2), gradax.lion(3e-4, weight_decay=1e-2, moments=ALL)),
    ],
    ids=["adamw", "lion"],
)
def test_converges_like_float32(dense, quant):
    loss, params = _regression_loss()
    final_dense, curve_dense = _train(dense, loss, params, 400)
    final_quant, curve_quant = _train(quant, loss, params, 400)
    assert float(final_dense) < 0.2 * float(loss(params))
    assert abs(float(final_quant) - float(final_dense)) <= 0.05 * float(final_dense) + 1e-4
    np.testing.assert_allclose(curve_quant[::50], curve_dense[::50], rtol=0.1)
