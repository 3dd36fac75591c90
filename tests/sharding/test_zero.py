"""gradax.sharding.apply_updates_zero1 in one process (one device): the numbers of apply_updates, its errors.

The 8-device runs (bit-identical training, the state kept, one all-gather per bucket) are in test_mesh.py."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import gradax
from gradax.sharding import apply_updates_zero1
from gradax.sharding._zero import _buckets


def _mesh(explicit):
    if explicit:
        return jax.make_mesh((1,), ("data",))
    return jax.sharding.Mesh(np.array(jax.devices()[:1]), ("data",))


def _tree():
    return {
        "w": jnp.linspace(-1.0, 1.0, 12, dtype=jnp.float32).reshape(4, 3),
        "b": jnp.arange(3, dtype=jnp.bfloat16),
        "s": jnp.float32(2.0),
        "none": None,
    }


@pytest.mark.parametrize("explicit", [False, True])
@pytest.mark.parametrize("bucket_bytes", [0, 1 << 20])
def test_same_numbers_as_apply_updates(explicit, bucket_bytes):
    params = _tree()
    updates = {"w": params["w"] * 0.1, "b": jnp.full(3, 0.3, jnp.float32), "s": jnp.float32(-0.5), "none": None}
    sharding = NamedSharding(_mesh(explicit), P())
    got = jax.jit(lambda p, u: apply_updates_zero1(p, u, sharding, zero_axis="data", bucket_bytes=bucket_bytes))(
        params, updates
    )
    want = gradax.apply_updates(params, updates)
    assert jax.tree.structure(got) == jax.tree.structure(want)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(np.asarray(a, np.float32), np.asarray(b, np.float32))


def test_buckets_group_small_leaves_per_dtype_in_order():
    leaves = [
        jax.ShapeDtypeStruct((8,), jnp.float32),  # 32 bytes
        jax.ShapeDtypeStruct((8,), jnp.bfloat16),  # 16 bytes
        jax.ShapeDtypeStruct((64,), jnp.float32),  # 256 bytes: alone
        jax.ShapeDtypeStruct((16,), jnp.float32),  # 64 bytes
        jax.ShapeDtypeStruct((8,), jnp.bfloat16),
        jax.ShapeDtypeStruct((32,), jnp.float32),  # 128 bytes: alone
        jax.ShapeDtypeStruct((8,), jnp.float32),  # 32 + 64 + 32 = 128 fits
        jax.ShapeDtypeStruct((4,), jnp.float32),  # would make 144: opens a bucket, alone in it (no bucket)
    ]
    assert _buckets(leaves, [True] * 8, 128) == [[0, 3, 6], [1, 4]]
    assert _buckets(leaves, [True, True, True, False, True, True, True, True], 128) == [[0, 6, 7], [1, 4]]
    assert _buckets(leaves, [True] * 8, 0) == []


@pytest.mark.parametrize("bad", [-1, 1.5, True, "1MiB"])
def test_bucket_bytes_must_be_a_non_negative_int(bad):
    sharding = NamedSharding(_mesh(False), P())
    with pytest.raises(ValueError, match=r"apply_updates_zero1\(bucket_bytes=\.\.\.\) must be an int >= 0; got"):
        apply_updates_zero1({"w": jnp.ones(2)}, {"w": jnp.ones(2)}, sharding, zero_axis="data", bucket_bytes=bad)


def test_zero_axis_must_be_a_mesh_axis():
    sharding = NamedSharding(_mesh(False), P())
    with pytest.raises(ValueError, match=r"apply_updates_zero1\(zero_axis=\.\.\.\) must be an axis name of the mesh"):
        apply_updates_zero1({"w": jnp.ones(2)}, {"w": jnp.ones(2)}, sharding, zero_axis="model")
    with pytest.raises(ValueError, match=r"must be an axis name of the mesh; got None\. Without ZeRO-1 use"):
        apply_updates_zero1({"w": jnp.ones(2)}, {"w": jnp.ones(2)}, sharding, zero_axis=None)


def test_updates_must_be_shaped_like_the_params():
    sharding = NamedSharding(_mesh(False), P())
    with pytest.raises(ValueError, match=r"apply_updates_zero1\(updates=\.\.\.\)"):
        apply_updates_zero1({"w": jnp.ones(2)}, {"v": jnp.ones(2)}, sharding, zero_axis="data")


def test_param_shardings_must_be_named_shardings():
    with pytest.raises(ValueError, match=r"apply_updates_zero1\(param_shardings=\.\.\.\) must be a NamedSharding"):
        apply_updates_zero1({"w": jnp.ones(2)}, {"w": jnp.ones(2)}, {"w": "replicated"}, zero_axis="data")
