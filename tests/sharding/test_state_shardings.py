"""gradax.sharding's placement rules, from abstract shapes on an abstract (data=2, model=4) mesh (no devices needed)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import AbstractMesh, NamedSharding
from jax.sharding import PartitionSpec as P

import gradax
from gradax.sharding import Fallback, bytes_per_device, collective_bytes, fallbacks, state_shardings

MESH = AbstractMesh((2, 4), ("data", "model"))


def ns(*spec):
    return NamedSharding(MESH, P(*spec))


def specs(tree):
    return {jax.tree_util.keystr(p): s.spec for p, s in jax.tree_util.tree_leaves_with_path(tree)}


PARAMS = {"w": jax.ShapeDtypeStruct((8, 12), jnp.float32), "b": jax.ShapeDtypeStruct((12,), jnp.float32)}
SHARD = {"w": ns(None, "model"), "b": ns("model")}


def test_fsdp_moments_follow_their_param_and_counters_are_replicated():
    got = specs(state_shardings(gradax.adam(0.1), PARAMS, SHARD))
    assert got == {
        "[0].count": P(),
        "[0].mu['b']": P("model"),
        "[0].mu['w']": P(None, "model"),
        "[0].nu['b']": P("model"),
        "[0].nu['w']": P(None, "model"),
    }


def test_zero1_splits_the_first_free_dimension_that_divides():
    got = specs(state_shardings(gradax.adam(0.1), PARAMS, SHARD, zero_axis="data"))
    assert got["[0].mu['w']"] == P("data", "model")
    # b's only dimension already holds "model" (4): 12 = 4 * 3 does not split further by 2 -> fallback
    assert got["[0].mu['b']"] == P("model")
    assert got["[0].count"] == P()
    report = fallbacks(gradax.adam(0.1), PARAMS, SHARD, zero_axis="data")
    assert report == [
        Fallback("[0].mu['b']", (12,), "no dimension is divisible by the 2 devices of axis 'data'"),
        Fallback("[0].nu['b']", (12,), "no dimension is divisible by the 2 devices of axis 'data'"),
    ]


def test_zero1_of_replicated_params_is_one_eighth_per_device():
    params = {"w": jax.ShapeDtypeStruct((16, 4), jnp.float32)}
    opt = gradax.adamw(0.1)
    shard = state_shardings(opt, params, ns(), zero_axis="data")
    assert specs(shard)["[0].mu['w']"] == P("data")
    abstract = jax.eval_shape(opt.init, params)
    replicated = bytes_per_device(abstract, jax.tree.map(lambda _: ns(), abstract))
    assert replicated == 2 * 16 * 4 * 4 + 4
    assert bytes_per_device(abstract, shard) == 2 * 8 * 4 * 4 + 4
    fsdp_zero = state_shardings(opt, params, ns("model"), zero_axis="data")
    assert specs(fsdp_zero)["[0].mu['w']"] == P("model", "data")
    assert bytes_per_device(abstract, fsdp_zero) == 2 * 2 * 4 * 4 + 4


def test_axis_already_used_by_the_param_is_not_added_twice():
    params = {"w": jax.ShapeDtypeStruct((8, 4), jnp.float32)}
    got = specs(state_shardings(gradax.sgd(0.1, momentum=0.9), params, ns("data", "model"), zero_axis="data"))
    assert got["[0].trace['w']"] == P("data", "model")


def test_adafactor_factored_statistics_follow_the_matching_dimension():
    params = {"m": jax.ShapeDtypeStruct((256, 128), jnp.float32)}
    got = specs(state_shardings(gradax.adafactor(0.1), params, ns("data", "model")))
    state = jax.eval_shape(gradax.adafactor(0.1).init, params)
    axis = {256: "data", 128: "model"}
    # each statistic keeps one dimension of the matrix and its mesh axis; the placeholder v is replicated
    assert got["[0].v_row['m']"] == P(axis[state[0].v_row["m"].shape[0]])
    assert got["[0].v_col['m']"] == P(axis[state[0].v_col["m"].shape[0]])
    assert got["[0].v_row['m']"] != got["[0].v_col['m']"]
    assert got["[0].v['m']"] == P()


def test_8bit_block_codes_take_the_param_axes_and_scales_are_split_by_zero():
    params = {"m": jax.ShapeDtypeStruct((64, 64), jnp.float32)}
    opt = gradax.adamw(0.1, moments="8bit")
    state = jax.eval_shape(opt.init, params)
    codes = state[0].mu["m"].codes
    got = specs(state_shardings(opt, params, ns("model"), zero_axis="data"))
    assert codes.ndim == 2
    assert got["[0].mu['m'].codes"] == P("model", "data")
    assert got["[0].mu['m'].scale"] == P("data")


def test_flatten_flat_vectors_split_by_zero_and_reported_under_fsdp():
    opt = gradax.flatten(gradax.adam(0.1))
    got = specs(state_shardings(opt, PARAMS, SHARD, zero_axis="data"))
    assert got["[0].mu"] == P("data")  # 96 + 12 = 108 elements, divisible by 2
    assert specs(state_shardings(opt, PARAMS, SHARD))["[0].mu"] == P()
    reasons = {f.reason for f in fallbacks(opt, PARAMS, SHARD)}
    assert reasons == {"holds several parameters (a flat vector): no one sharding to follow"}


def test_wrappers_masked_partition_multisteps_inject():
    masked = gradax.masked(gradax.adam(0.1), {"w": True, "b": False})
    assert specs(state_shardings(masked, PARAMS, SHARD))[".inner_state[0].mu['w']"] == P(None, "model")
    part = gradax.partition({"a": gradax.adam(0.1), "s": gradax.sgd(0.1, momentum=0.9)}, {"w": "a", "b": "s"})
    got = specs(state_shardings(part, PARAMS, SHARD, zero_axis="data"))
    assert got[".inner_states['a'].inner_state[0].nu['w']"] == P("data", "model")
    assert got[".inner_states['s'].inner_state[0].trace['b']"] == P("model")
    multi = gradax.MultiSteps(gradax.adam(0.1), 2)
    got = specs(state_shardings(multi, PARAMS, SHARD, zero_axis="data"))
    assert got[".acc_grads['w']"] == P("data", "model")
    assert got[".mini_step"] == P()
    inject = gradax.inject_hyperparams(gradax.adamw)(learning_rate=0.1)
    got = specs(state_shardings(inject, PARAMS, SHARD, zero_axis="data"))
    assert got[".hyperparams['learning_rate']"] == P()
    assert got[".inner_state[0].mu['w']"] == P("data", "model")


def test_muon_state_follows_its_matrices():
    got = specs(state_shardings(gradax.contrib.muon(0.1), PARAMS, SHARD, zero_axis="data"))
    mu = [k for k in got if k.endswith("mu['w']") and "muon" in k]
    assert mu and all(got[k] == P("data", "model") for k in mu)
    assert all(v == P() for k, v in got.items() if "ns_coeffs" in k)


def _preconditioned():
    """A Shampoo-style state: per matrix, one (n, n) statistic per dimension."""

    def init(params):
        return [jax.tree.map(lambda p: (jnp.zeros((p.shape[0],) * 2), jnp.zeros((p.shape[1],) * 2)), params)]

    return gradax.GradientTransformation(init, lambda u, s, p=None: (u, s))


def test_preconditioners_take_the_axes_of_their_dimension():
    params = {"w": jax.ShapeDtypeStruct((8, 12), jnp.float32)}
    got = specs(state_shardings(_preconditioned(), params, ns("data", "model")))
    assert got["[0]['w'][0]"] == P("data")
    assert got["[0]['w'][1]"] == P("model")


def test_single_array_params_and_tuple_params_under_a_chain():
    got = specs(state_shardings(gradax.adam(0.1), jax.ShapeDtypeStruct((8, 4), jnp.float32), ns("model")))
    assert got == {"[0].count": P(), "[0].mu": P("model"), "[0].nu": P("model")}
    # a chain's tuple of two states has the shape of a tuple of two params: the inner mu/nu decide
    params = (jax.ShapeDtypeStruct((8, 4), jnp.float32), jax.ShapeDtypeStruct((4, 8), jnp.float32))
    opt = gradax.chain(gradax.scale_by_adam(), gradax.scale(-0.1))
    got = specs(state_shardings(opt, params, (ns("model"), ns(None, "model"))))
    assert got["[0].mu[0]"] == P("model") and got["[0].mu[1]"] == P(None, "model")
    assert got["[0].count"] == P()


def test_param_shardings_read_from_arrays():
    mesh = jax.make_mesh((1,), ("data",))
    params = jax.device_put({"w": jnp.zeros((4, 2))}, NamedSharding(mesh, P("data")))
    got = state_shardings(gradax.adam(0.1), params, zero_axis="data")
    assert got[0].mu["w"].spec == P("data") and got[0].mu["w"].mesh == mesh
    assert bytes_per_device(params) == 32


def test_errors():
    with pytest.raises(ValueError, match=r"state_shardings\(zero_axis=...\) must be an axis name of the mesh"):
        state_shardings(gradax.adam(0.1), PARAMS, SHARD, zero_axis="dp")
    with pytest.raises(ValueError, match=r"state_shardings\(param_shardings=...\) must have the params tree or a"):
        state_shardings(gradax.adam(0.1), PARAMS, {"w": ns()})
    with pytest.raises(ValueError, match=r"param_shardings=...\) must be a NamedSharding or a tree of them"):
        state_shardings(gradax.adam(0.1), PARAMS, P())
    with pytest.raises(ValueError, match=r"param_shardings=...\) must be given when the params do not all carry"):
        state_shardings(gradax.adam(0.1), PARAMS)
    with pytest.raises(ValueError, match=r"state_shardings\(params=...\) must be a tree with at least one array"):
        state_shardings(gradax.adam(0.1), {}, {})
    other = NamedSharding(AbstractMesh((8,), ("data",)), P())
    with pytest.raises(ValueError, match=r"param_shardings=...\) must be on one mesh"):
        state_shardings(gradax.adam(0.1), PARAMS, {"w": ns(), "b": other})
    with pytest.raises(ValueError, match=r"bytes_per_device\(shardings=...\) must have the same structure"):
        bytes_per_device(PARAMS, [ns()])


def test_collective_bytes_reads_the_compiled_program():
    assert collective_bytes(jax.jit(lambda x: x + 1), jnp.zeros(3)) == {"total": 0}
    from gradax.sharding._shardings import _COLLECTIVE, _hlo_itemsize

    line = "  %ag = f32[8,4]{1,0} all-gather(f32[2,4]{1,0} %p), dimensions={0}"
    match = _COLLECTIVE.search(line)
    assert match.group("op") == "all-gather" and match.group("shape").startswith("f32[8,4]")
    assert [_hlo_itemsize(t) for t in ("f32", "bf16", "pred", "s8", "c64")] == [4, 2, 1, 1, 8]


def test_bytes_per_device_counts_a_typed_prng_key_by_its_key_data():
    """APOLLO's state holds a typed key: its bytes are the key data's (2 uint32 for threefry), concrete or abstract."""
    import gradax

    key = jax.random.key(0)
    assert gradax.sharding.bytes_per_device({"k": key, "a": jnp.zeros(3)}) == 8 + 12
    keys = jax.eval_shape(lambda: jax.random.split(jax.random.key(0), 4))
    assert gradax.sharding.bytes_per_device(keys) == 4 * 8
