"""Tests of the CPU kernel that runs the Muon family's Newton-Schulz iteration with bfloat16 products
(``ns_dtype=jnp.bfloat16``) on Intel AMX tiles or with AVX-512 BF16 (``gradax/_kernels/fused_newton_schulz.c``).

The truth is the float64 NumPy iteration of ``test_muon_ns_dtype`` (each product's operands rounded to bfloat16, all
else in float64). The kernel rounds the same operands and keeps X, A and B in float32, so for one or two steps it
agrees with the truth to float32 accumulation; over five steps an entry that lands on the other side of a bfloat16
rounding boundary changes the rest of the iteration, and the test then allows what the definition itself moves when
its input moves by one float32 rounding (as ``test_float32_within_the_definitions_own_rounding_sensitivity``).

The kernel's products run on AMX, with AVX-512 BF16, or in plain C with the same packing and order of work
("portable"), so the packings, padding, transposition, batching and update are tested on every CPU the kernels build
on; the AMX and AVX-512 BF16 products where the CPU has them.
"""

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import gradax
from gradax import _kernels, contrib
from gradax.contrib import _muon
from tests.contrib.test_muon_ns_dtype import POLAR, STANDARD, _reference

BF16 = ml_dtypes.bfloat16

pytestmark = pytest.mark.skipif(not _kernels.load().available, reason="gradax's CPU kernels are not built here")

MODES = [
    pytest.param("portable", id="portable"),
    pytest.param("amx", id="amx", marks=pytest.mark.skipif(not _kernels.amx_available(), reason="no AMX here")),
    pytest.param(
        "avx512_bf16",
        id="avx512_bf16",
        marks=pytest.mark.skipif(not _kernels.avx512_bf16_available(), reason="no AVX-512 BF16 here"),
    ),
]
FAST = _kernels.bf16_products()  # what the recipes use here (None: the XLA iteration)


def _normalized(x):
    return x / np.linalg.norm(x.astype(np.float64)).astype(np.float32)


def _kernel(x, coeffs, steps, products):
    rows = np.broadcast_to(coeffs, (steps, 3)) if coeffs.ndim == 1 else coeffs[:steps]
    return np.asarray(
        _kernels.newton_schulz(jnp.asarray(x), jnp.asarray(rows, jnp.float32), x.shape[0] > x.shape[1], products)
    )


@pytest.mark.parametrize("products", MODES)
@pytest.mark.parametrize("shape", [(64, 96), (96, 64), (40, 70), (70, 40), (33, 33), (1, 50), (5, 3)])
@pytest.mark.parametrize("steps", [1, 2])
def test_first_steps_match_the_definition_to_float32(products, shape, steps):
    """Padding to multiples of 32 (every shape but the first two), the tall form (on the transpose), one row."""
    x = _normalized(np.random.default_rng(0).normal(size=shape).astype(np.float32))
    want = _reference(x, STANDARD, steps, "none", 0.0, BF16)
    got = _kernel(x, STANDARD, steps, products)
    assert got.dtype == np.float32 and got.shape == shape
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6 * np.abs(want).max())


@pytest.mark.parametrize("products", MODES)
@pytest.mark.parametrize("shape", [(48, 160), (160, 48)])
@pytest.mark.parametrize("coeffs", ["standard", "polar_express"])
def test_five_steps_within_the_definitions_own_rounding_sensitivity(products, shape, coeffs):
    c = STANDARD if coeffs == "standard" else POLAR
    rng = np.random.default_rng(1)
    x = _normalized(rng.normal(size=shape).astype(np.float32))
    nudged = x * (1 + np.float32(2**-23) * np.sign(rng.normal(size=shape))).astype(np.float32)
    want = _reference(x, c, 5, "none", 0.0, BF16)
    sensitivity = np.mean(np.abs(_reference(nudged, c, 5, "none", 0.0, BF16) - want))
    got = _kernel(x, c, 5, products)
    assert np.mean(np.abs(got - want)) < 2 * sensitivity
    full = _reference(x, c, 5, "none", 0.0, np.float64)
    assert np.mean(np.abs(got - want)) < np.mean(np.abs(got - full))  # the products are bfloat16's


@pytest.mark.parametrize("products", MODES)
def test_a_batch_is_its_matrices(products):
    """vmap hands the kernel a batch (one call, matrices over the threads): each result is bit for bit the one of
    its matrix alone, and a batch of coefficient sets goes with its matrices."""
    rng = np.random.default_rng(2)
    xs = np.stack([_normalized(rng.normal(size=(40, 24)).astype(np.float32)) for _ in range(3)])
    rows = np.broadcast_to(STANDARD, (5, 3)).astype(np.float32)
    call = lambda x, c: _kernels.newton_schulz(x, c, True, products)
    batched = np.asarray(jax.vmap(call, in_axes=(0, None))(jnp.asarray(xs), jnp.asarray(rows)))
    per_set = np.asarray(jax.vmap(call)(jnp.asarray(xs), jnp.asarray(np.stack([rows, rows[::-1], rows]))))
    for i, x in enumerate(xs):
        np.testing.assert_array_equal(batched[i], np.asarray(call(jnp.asarray(x), jnp.asarray(rows))))
    np.testing.assert_array_equal(per_set[0], batched[0])
    np.testing.assert_array_equal(per_set[1], np.asarray(call(jnp.asarray(xs[1]), jnp.asarray(rows[::-1]))))


@pytest.mark.parametrize("products", MODES)
def test_a_matrix_split_over_the_threads_is_the_same_matrix(products, monkeypatch):
    """From SPLIT_FROM elements one matrix's steps run over XLA's threads (packings, X X^T by block rows, the update
    by column strips); every block is still computed by one thread in one order, so the result is the one of a
    batch (matrices whole, one per thread) bit for bit."""
    if products == "portable":
        pytest.skip("the portable products take minutes at this size")
    x = _normalized(np.random.default_rng(3).normal(size=(256, 4096)).astype(np.float32))
    rows = jnp.asarray(np.broadcast_to(STANDARD, (2, 3)), jnp.float32)
    alone = np.asarray(_kernels.newton_schulz(jnp.asarray(x), rows, False, products))
    pair = np.asarray(_kernels.newton_schulz(jnp.asarray(np.stack([x, x])), rows, False, products))
    np.testing.assert_array_equal(alone, pair[0])
    np.testing.assert_array_equal(alone, pair[1])


def test_the_muon_family_takes_the_kernel_where_it_applies():
    """bfloat16 products of float32 matrices normalized by a norm: the kernel (on a CPU with AMX or AVX-512 BF16);
    float16 products, the aol and schatten first steps, float64: the XLA iteration."""
    x = jnp.ones((64, 16), jnp.float32)
    std = jnp.asarray(STANDARD, jnp.float32)

    def uses_kernel(pre="frobenius", dtype=jnp.bfloat16, x=x):
        f = lambda x: _muon._newton_schulz(x, std, 5, pre, 1e-7, dtype)
        return "gradax_newton_schulz" in jax.jit(f).lower(x).as_text()

    fast = FAST is not None
    assert uses_kernel() == fast and uses_kernel("spectral") == fast
    assert not uses_kernel("aol") and not uses_kernel("schatten") and not uses_kernel(dtype=jnp.float16)
    with jax.enable_x64(True):
        assert not uses_kernel(x=jnp.ones((64, 16), jnp.float64))


@pytest.mark.skipif(FAST is None, reason="neither AMX nor AVX-512 BF16 here")
def test_derivative_and_vmap_are_the_xla_iterations():
    """The kernel has no derivative of its own: jvp is the XLA iteration's (to float32 rounding: the normalization's
    derivative is taken outside the iteration's); under vmap the kernel takes the batch in one call."""
    rng = np.random.default_rng(4)
    x, t = (jnp.asarray(rng.normal(size=(24, 40)), jnp.float32) for _ in range(2))
    std = jnp.asarray(STANDARD, jnp.float32)
    f = lambda kernel: lambda x: _muon._low_precision_newton_schulz(x, std, 5, "frobenius", 1e-7, jnp.bfloat16, kernel)
    (y_k, dy_k), (y_x, dy_x) = jax.jvp(f(None), (x,), (t,)), jax.jvp(f(False), (x,), (t,))
    np.testing.assert_allclose(dy_k, dy_x, atol=1e-4 * float(jnp.abs(dy_x).max()))
    np.testing.assert_allclose(y_k, y_x, atol=3e-2)
    text = jax.jit(jax.vmap(f(None))).lower(jnp.stack([x, 2 * x])).as_text()
    calls = [line for line in text.splitlines() if "gradax_newton_schulz" in line]
    assert len(calls) == 1 and "tensor<2x24x40xf32>" in calls[0]


@pytest.mark.skipif(FAST is None, reason="neither AMX nor AVX-512 BF16 here")
@pytest.mark.parametrize("name", ["muon", "normuon", "scion"])
def test_recipes_with_the_kernel_train_as_with_the_xla_iteration(name, monkeypatch):
    """20 steps of each recipe on a small tree with the kernel and with the XLA iteration: the same state structure
    and dtypes, params within bfloat16's precision of each other."""
    params = {"w": jnp.ones((48, 80)) * 0.1, "v": jnp.ones((80, 24)) * 0.1, "b": jnp.zeros(24)}
    make = {
        "muon": lambda: contrib.muon(1e-2, ns_dtype=jnp.bfloat16),
        "normuon": lambda: contrib.normuon(1e-2, ns_dtype=jnp.bfloat16),
        "scion": lambda: contrib.scion(
            1e-2, layer_norms={"w": "spectral", "v": "spectral", "b": "bias"}, ns_dtype=jnp.bfloat16
        ),
    }[name]

    def run():
        opt = make()
        p, s = params, opt.init(params)
        step = jax.jit(opt.update)
        for i in range(20):
            g = jax.tree.map(lambda x: jax.random.normal(jax.random.key(i), x.shape), p)
            u, s = step(g, s, p)
            p = gradax.apply_updates(p, u)
        return p, s, step.lower(g, s, p).as_text()

    p_k, s_k, text = run()
    assert "gradax_newton_schulz" in text
    monkeypatch.setattr(_muon, "_kernel_applies", lambda *a: False)
    p_x, s_x, text = run()
    assert "gradax_newton_schulz" not in text
    assert jax.tree.structure(s_k) == jax.tree.structure(s_x)
    assert [a.dtype for a in jax.tree.leaves(s_k)] == [a.dtype for a in jax.tree.leaves(s_x)]
    for k in params:
        np.testing.assert_allclose(p_k[k], p_x[k], atol=20 * 1e-2 * 2e-2)  # steps x lr x 2% of a unit entry


@pytest.mark.skipif(FAST is None, reason="neither AMX nor AVX-512 BF16 here")
@pytest.mark.parametrize("name", ["muon", "normuon", "adamuon", "scion"])
def test_the_matrices_of_one_shape_go_to_one_kernel_call(name):
    """Every recipe of the family stacks the matrices of one shape, from every leaf, into one kernel call (the kernel
    spreads a batch over the threads; a call per leaf left that to XLA's scheduling): three leaves and a stack of
    three layers of 48 x 80 are one call of six matrices, the 80 x 24 leaf another."""
    params = {
        "a": jnp.ones((48, 80)),
        "b": jnp.ones((48, 80)),
        "c": jnp.ones((80, 24)),
        "d": jnp.ones((48, 80)),
        "stack": jnp.ones((3, 48, 80)),
        "bias": jnp.ones(24),
    }
    stack = contrib.MuonDimensionNumbers(1, 2)
    make = {
        "muon": lambda dims: contrib.muon(1e-2, ns_dtype=jnp.bfloat16, muon_weight_dimension_numbers=dims),
        "normuon": lambda dims: contrib.normuon(1e-2, ns_dtype=jnp.bfloat16, muon_weight_dimension_numbers=dims),
        "adamuon": lambda dims: contrib.adamuon(1e-2, ns_dtype=jnp.bfloat16, muon_weight_dimension_numbers=dims),
        "scion": lambda dims: contrib.scion(1e-2, ns_dtype=jnp.bfloat16, weight_dimension_numbers=dims),
    }[name]
    dims = {k: (stack if k == "stack" else (None if k == "bias" else contrib.MuonDimensionNumbers())) for k in params}
    opt = make(dims)
    text = jax.jit(opt.update).lower(params, opt.init(params), params).as_text()
    calls = [line for line in text.splitlines() if "gradax_newton_schulz" in line]
    assert sorted("tensor<6x48x80xf32>" in c for c in calls) == [False, True], calls
    assert any("tensor<1x80x24xf32>" in c or "tensor<80x24xf32>" in c for c in calls), calls


@pytest.mark.skipif(FAST is None, reason="neither AMX nor AVX-512 BF16 here")
def test_stacked_leaves_are_orthogonalized_as_each_alone():
    """orthogonalize_leaves (one kernel call per shape) gives each leaf what orthogonalize gives it alone (a kernel
    call per matrix), to float32 rounding of the normalization."""
    rng = np.random.default_rng(5)
    xs = [jnp.asarray(rng.normal(size=s), jnp.float32) for s in [(40, 24), (40, 24), (2, 40, 24), (24, 56)]]
    dims = (
        [contrib.MuonDimensionNumbers()] * 2 + [contrib.MuonDimensionNumbers(1, 2)] + [contrib.MuonDimensionNumbers()]
    )
    std = jnp.asarray(STANDARD, jnp.float32)
    together = _muon.orthogonalize_leaves(xs, dims, std, 5, "frobenius", 1e-7, jnp.bfloat16)
    for x, d, got in zip(xs, dims, together):
        alone = _muon.orthogonalize(x, std, 5, "frobenius", 1e-7, d, jnp.bfloat16)
        np.testing.assert_allclose(got, alone, rtol=1e-5, atol=1e-6)


def test_an_unknown_kind_of_products_is_a_clear_error():
    x = jnp.ones((8, 8), jnp.float32)
    rows = jnp.asarray(np.broadcast_to(STANDARD, (1, 3)), jnp.float32)
    with pytest.raises(ValueError, match=r"products must be one of \['amx', 'avx512_bf16', 'portable'\], got 'avx2'"):
        _kernels.newton_schulz(x, rows, False, "avx2")
