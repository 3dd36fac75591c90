"""Sharded AdamW and Muon state on 8 host CPU devices, one subprocess (``_mesh_script.py``): state kept step after
step, the numbers of the unsharded run, 1/N of the state per device, and what a step communicates."""

from __future__ import annotations

import pytest

from ._subprocess import run_json


@pytest.fixture(scope="module")
def report():
    return run_json("tests.sharding._mesh_script")


@pytest.mark.parametrize("case", ["adamw_zero1", "adamw_fsdp", "adamw_fsdp_zero1"])
def test_adamw_sharded_is_bit_identical_and_kept(report, case):
    r = report[case]
    assert r["kept"], "the state lost the shardings it was given"
    assert r["identical"], f"element-wise AdamW differs when sharded: {r['max_abs_diff']}"


def test_adamw_state_memory_per_device(report):
    for case, ways in (("adamw_zero1", 8), ("adamw_fsdp", 4), ("adamw_fsdp_zero1", 8)):
        r = report[case]
        # measured from the addressable shards: 1/N of the moments plus the replicated count
        assert (
            r["state_bytes_per_device"] == (r["state_bytes_replicated"] - r["scalar_bytes"]) // ways + r["scalar_bytes"]
        ), case


def test_adamw_step_never_gathers_the_state(report):
    # ZeRO-1: only the updates are gathered back to the replicated params (the params' bytes); the state never moves
    assert report["adamw_zero1"]["collectives"] == {"all-gather": report["adamw_zero1"]["param_bytes"], "total": 8320}
    assert report["adamw_fsdp"]["collectives"] == {"total": 0}
    zero_fsdp = report["adamw_fsdp_zero1"]
    assert zero_fsdp["collectives"]["total"] == zero_fsdp["param_bytes"] // 4


@pytest.mark.parametrize("case", ["muon_fsdp", "muon_fsdp_zero1"])
def test_muon_with_fsdp_matrices(report, case):
    r = report[case]
    assert r["kept"]
    # Newton-Schulz matmuls on sharded matrices add in another order: within 1e-6 of the largest entry
    assert r["max_abs_diff"] <= 1e-6 * r["max_abs"] + 1e-7, r["max_abs_diff"]
    # GSPMD gathers the matrices for the orthogonalization (each device of the axis computes it): what it costs
    assert 0 < r["collectives"]["total"] <= 3 * r["param_bytes"], r["collectives"]


def test_flax_nnx_recipe_keeps_zero1_state(report):
    # kernel 16 x 8 and bias 8, two float32 moments, split 8 ways; the int32 count replicated
    assert report["nnx"] == {"bytes_per_device": (16 * 8 + 8) * 2 * 4 // 8 + 4, "bytes_replicated": 1092}
