"""Tests of ``ns_dtype``, the low-precision Newton-Schulz products of the Muon family (muon, normuon, adamuon,
muon_clip, scion and their ``scale_by_*``).

The truth is a float64 NumPy iteration written from the definition: each matrix product's operands rounded to the
low precision (``ml_dtypes``), the product and everything between products in float64. Run in float64, gradax
rounds the same float64 operands and accumulates in float64, so the two agree to float64 rounding; in float32 they
agree to float32 accumulation, except where an iterate's float32 rounding lands it on the other side of a bfloat16
rounding boundary (a bfloat16 ulp, 2**-8 relative, for one operand entry).
"""

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import gradax
from gradax import contrib
from gradax.contrib import _muon
from gradax.contrib._muon import _NS_PRESETS, _newton_schulz
from tests._jaxpr import equations

STANDARD = np.array(_NS_PRESETS["standard"])
POLAR = np.array(_NS_PRESETS["polar_express"][:5])


def _reference(x, coeffs, steps, pre, eps, dtype):
    """``X <- a X + (b A + c A^2) X``, ``A = X X^T``, on the short side; products of operands rounded to ``dtype``."""

    def mm(a, b):
        return a.astype(dtype).astype(np.float64) @ b.astype(dtype).astype(np.float64)

    x = np.asarray(x, np.float64)
    tall = x.shape[0] > x.shape[1]
    if tall:
        x = x.T
    if pre == "frobenius":
        x = x / (np.linalg.norm(x) + eps)
    elif pre == "spectral":
        x = x / (np.linalg.norm(x, 2) + eps)
    rows = coeffs if coeffs.ndim == 2 else np.broadcast_to(coeffs, (steps, 3))
    for i, (a, b, c) in enumerate(rows[:steps]):
        g = mm(x, x.T)
        if i == 0 and pre == "aol":
            s = 1 / np.sqrt(np.maximum(np.abs(g).sum(-1), eps))
            x, g = x * s[:, None], g * s[:, None] * s[None, :]
        elif i == 0 and pre == "schatten":
            s = 1 / np.sqrt(max(np.linalg.norm(g), eps))
            x, g = x * s, g * s**2
        x = a * x + mm(b * g + c * mm(g, g), x)
    return x.T if tall else x


@pytest.mark.parametrize("shape", [(12, 20), (20, 12), (9, 9)])
@pytest.mark.parametrize("pre", ["frobenius", "spectral", "aol", "schatten"])
@pytest.mark.parametrize("coeffs", ["standard", "polar_express"])
def test_matches_the_definition_in_float64(shape, pre, coeffs):
    c = STANDARD if coeffs == "standard" else POLAR
    x = np.random.default_rng(0).normal(size=shape)
    want = _reference(x, c, 5, pre, 1e-7, ml_dtypes.bfloat16)
    with jax.enable_x64(True):
        got = _newton_schulz(jnp.asarray(x), jnp.asarray(c), 5, pre, 1e-7, jnp.bfloat16)
        assert got.dtype == jnp.float64
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("shape", [(48, 160), (160, 48)])
@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
def test_float32_within_the_definitions_own_rounding_sensitivity(shape, dtype):
    """In float32 the iterate is rounded to float32 between products, and an entry that lands on the other side of
    a low-precision rounding boundary changes the rest of the iteration: the definition itself moves that much when
    its input moves by one float32 rounding. gradax stays within that, and the low precision does change the
    result (it is not quietly float32)."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=shape).astype(np.float32)
    nudged = x * (1 + np.float32(2**-23) * np.sign(rng.normal(size=shape))).astype(np.float32)
    got = np.asarray(_newton_schulz(jnp.asarray(x), jnp.asarray(STANDARD), 5, "frobenius", 1e-7, dtype))
    assert got.dtype == np.float32
    want = _reference(x, STANDARD, 5, "frobenius", 1e-7, np.dtype(dtype))
    sensitivity = np.mean(np.abs(_reference(nudged, STANDARD, 5, "frobenius", 1e-7, np.dtype(dtype)) - want))
    assert np.mean(np.abs(got - want)) < 2 * sensitivity
    full = _reference(x, STANDARD, 5, "frobenius", 1e-7, np.float64)
    assert np.mean(np.abs(got - want)) < np.mean(np.abs(got - full))


def test_a_tall_matrix_is_the_transpose_of_its_wide_one():
    """The tall form (``A = X^T X``, no transpose) is the wide form's iteration written on the other side."""
    x = np.random.default_rng(2).normal(size=(40, 24))
    with jax.enable_x64(True):
        tall = _newton_schulz(jnp.asarray(x), jnp.asarray(STANDARD), 5, "aol", 1e-7, jnp.bfloat16)
        wide = _newton_schulz(jnp.asarray(x.T), jnp.asarray(STANDARD), 5, "aol", 1e-7, jnp.bfloat16)
    np.testing.assert_allclose(tall, wide.T, rtol=1e-10, atol=1e-12)


def test_still_orthogonalizes():
    x = jnp.asarray(np.random.default_rng(3).normal(size=(32, 64)), jnp.float32)
    o = _newton_schulz(x, jnp.asarray(STANDARD), 5, "frobenius", 1e-7, jnp.bfloat16)
    sv = np.linalg.svd(np.asarray(o), compute_uv=False)
    assert 0.6 < sv.min() and sv.max() < 1.25  # the standard quintic's band, not exactly 1


PARAMS = {"w": jnp.ones((6, 4)), "v": jnp.ones((3, 5)), "b": jnp.ones(3)}
RECIPES = {
    "muon": lambda d: contrib.muon(1e-2, ns_dtype=d),
    "normuon": lambda d: contrib.normuon(1e-2, ns_dtype=d),
    "adamuon": lambda d: contrib.adamuon(1e-2, ns_dtype=d),
    "muon_clip": lambda d: contrib.muon_clip(1e-2, ns_dtype=d),
    "scion": lambda d: contrib.scion(1e-2, layer_norms={"w": "spectral", "v": "spectral", "b": "bias"}, ns_dtype=d),
}


def _run(opt, steps=6):
    key = jax.random.key(4)
    p, s = PARAMS, opt.init(PARAMS)
    step = jax.jit(opt.update)
    for _ in range(steps):
        key, sub = jax.random.split(key)
        g = jax.tree.map(lambda x: jax.random.normal(sub, x.shape), p)
        u, s = step(g, s, p)
        p = gradax.apply_updates(p, u)
    return p, s


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_every_recipe_takes_it(name):
    """Same state structure and dtypes as without it; the matrices move by about bfloat16's precision, the rest
    (AdamW's vectors) not at all."""
    (p32, s32), (p16, s16) = _run(RECIPES[name](None)), _run(RECIPES[name](jnp.bfloat16))
    assert jax.tree.structure(s32) == jax.tree.structure(s16)
    assert [x.dtype for x in jax.tree.leaves(s32)] == [x.dtype for x in jax.tree.leaves(s16)]
    for k in ("w", "v"):
        diff = float(jnp.max(jnp.abs(p32[k] - p16[k])))
        assert 0 < diff < 6 * 1e-2 * 5e-2  # steps x lr x 5% of a unit-size update entry
    if name != "scion":  # scion's "bias" norm is its own first-order step, also without the products
        np.testing.assert_array_equal(p32["b"], p16["b"])


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_bad_ns_dtype_names_the_argument(name):
    with pytest.raises(ValueError, match=r"ns_dtype=\.\.\.\) must be None or a real floating dtype"):
        RECIPES[name](jnp.int8)


def test_complex_params_need_the_default():
    tx = contrib.scale_by_muon(ns_dtype=jnp.bfloat16)
    p = jnp.ones((3, 2), jnp.complex64)
    with pytest.raises(ValueError, match="leave ns_dtype=None for complex parameters"):
        tx.update(p, tx.init(p))


@pytest.mark.parametrize("pre,outside,in_loop", [("frobenius", 0, 5), ("spectral", 0, 5), ("aol", 3, 4)])
def test_every_step_runs_in_the_loop_unless_the_first_preconditions(pre, outside, in_loop, monkeypatch):
    # outside the loop XLA:CPU folds the transpose and the rounding of the first step's operand into a float32
    # product (3-4x a step's time on a tall matrix); aol rescales inside its first step, which stays outside. (The
    # XLA iteration: on a CPU with AMX, frobenius and spectral run in the kernel, tests/contrib/test_muon_ns_kernel.py)
    monkeypatch.setattr(_muon, "_kernel_applies", lambda *a: False)
    x = jnp.ones((64, 16), jnp.float32)
    f = lambda x: _newton_schulz(x, jnp.asarray(STANDARD, jnp.float32), 5, pre, 1e-7, jnp.bfloat16)
    outer = list(equations(jax.make_jaxpr(f)(x).jaxpr, into_loops=False))
    assert sum(e.primitive.name == "dot_general" for e in outer) == outside
    assert [e.params["length"] for e in outer if e.primitive.name == "scan"] == [in_loop]
