"""Tests of scale_by_factored_rms and adafactor (gradax.optimizers._adafactor).

Checked against Optax 0.2.8 on every branch and against a float64 NumPy implementation written from Shazeer & Stern
(2018), Algorithms 4 and 5 with update clipping, relative step size and first moment.
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax  # the test oracle
import pytest

import gradax
from tests.optimizers._other_helpers import assert_matches_optax, converges, random_tree

# "u" and "c": unit axes beside the factored ones (dropped before the reductions: without_unit_axes)
SHAPES = {"m": (3, 4), "v": (5,), "s": (), "t": (2, 3, 4), "n": (4, 2), "u": (1, 4, 3), "c": (1, 3, 1, 5)}


def reference_adafactor(params, grads, lr, eps1=1e-30, d=None, relative=False, beta1=None, min_dim=3, decay=0.8):
    """Float64 Adafactor for one array; leaves of rank 3 factor their two last axes per slice of the first."""
    x = np.asarray(params, np.float64)
    shape = x.shape
    factored = len(shape) >= 2 and sorted(shape)[-2] >= min_dim
    r = c = v = None
    m = np.zeros(shape)
    steps = []
    for t, g in enumerate(grads, start=1):
        g = np.asarray(g, np.float64)
        beta2 = 1.0 - t ** (-decay)
        sq = g**2 + eps1
        if factored:
            # rows: the second-largest axis, columns: the largest (Optax's choice of axes)
            big = int(np.argsort(shape)[-1])
            small = int(np.argsort(shape)[-2])
            row_stat = sq.sum(axis=big)  # R = (G^2 + eps) 1_m
            col_stat = sq.sum(axis=small)  # C = 1_n^T (G^2 + eps)
            r = (1 - beta2) * row_stat if r is None else beta2 * r + (1 - beta2) * row_stat
            c = (1 - beta2) * col_stat if c is None else beta2 * c + (1 - beta2) * col_stat
            r_total = r.sum(axis=small if small < big else small - 1, keepdims=True)
            v_hat = np.expand_dims(r / r_total, big) * np.expand_dims(c, small)  # R C / (1^T R)
        else:
            v = (1 - beta2) * sq if v is None else beta2 * v + (1 - beta2) * sq
            v_hat = v
        u = g / np.sqrt(v_hat)
        if d is not None:
            u = u / max(1.0, np.sqrt(np.mean(u**2)) / d)
        alpha = lr * (max(1e-3, np.sqrt(np.mean(x**2))) if relative else 1.0)
        step = alpha * u
        if beta1 is not None:
            m = beta1 * m + (1 - beta1) * step
            step = m
        x = x - step
        steps.append(-step)
    return steps


@pytest.mark.parametrize(
    "kwargs",
    [
        {"learning_rate": 0.1, "multiply_by_parameter_scale": False, "clipping_threshold": None},
        {"learning_rate": 0.1},
        {"learning_rate": 0.05, "momentum": 0.9, "clipping_threshold": 0.5, "dtype_momentum": jnp.float64},
        {"learning_rate": 0.05, "factored": False, "momentum": 0.5, "dtype_momentum": jnp.float64},
    ],
)
def test_float64_reference(kwargs):
    with jax.enable_x64(True):
        params = random_tree(3, jnp.float64, SHAPES)
        grads = [random_tree(20 + i, jnp.float64, SHAPES) for i in range(8)]
        opt = gradax.adafactor(min_dim_size_to_factor=3, eps=1e-30, **kwargs)
        state = opt.init(params)
        p = params
        outs = []
        for g in grads:
            u, state = opt.update(g, state, p)
            p = gradax.apply_updates(p, u)
            outs.append(u)
        for name in SHAPES:
            ref = reference_adafactor(
                params[name],
                [g[name] for g in grads],
                kwargs["learning_rate"],
                d=kwargs.get("clipping_threshold", 1.0),
                relative=kwargs.get("multiply_by_parameter_scale", True),
                beta1=kwargs.get("momentum"),
                min_dim=3 if kwargs.get("factored", True) else 10**9,
            )
            for got, want in zip(outs, ref):
                assert got[name].dtype == jnp.float64
                np.testing.assert_allclose(got[name], want, rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"factored": False},
        {"min_dim_size_to_factor": 3, "decay_rate": 0.5, "step_offset": 2, "epsilon": 1e-3},
        {"min_dim_size_to_factor": 2, "decay_rate_fn": lambda t, r: jnp.minimum(0.9, 1.0 - (t + 1.0) ** -r)},
    ],
)
def test_scale_by_factored_rms_matches_optax(kwargs):
    assert_matches_optax(lambda lib: lib.scale_by_factored_rms(**kwargs), params=random_tree(shapes=SHAPES))


BRANCHES = [
    {},
    {"learning_rate": 0.1, "min_dim_size_to_factor": 3},
    {"learning_rate": 0.1, "min_dim_size_to_factor": 3, "factored": False},
    {"learning_rate": 0.1, "min_dim_size_to_factor": 2, "multiply_by_parameter_scale": False},
    {"learning_rate": 0.1, "min_dim_size_to_factor": 3, "clipping_threshold": None},
    {"learning_rate": 0.1, "min_dim_size_to_factor": 3, "momentum": 0.9, "dtype_momentum": jnp.float32},
    {"learning_rate": 0.1, "min_dim_size_to_factor": 3, "weight_decay_rate": 0.01},
    {
        "learning_rate": lambda c: 0.1 / (1.0 + c),
        "min_dim_size_to_factor": 3,
        "weight_decay_rate": lambda c: 0.01 * 0.9**c,
        "weight_decay_mask": {"m": True, "v": False, "s": False, "t": True, "n": True, "u": True, "c": False},
        "decay_offset": 1,
        "decay_rate": 0.6,
        "eps": 1e-20,
    },
]


@pytest.mark.parametrize("kwargs", BRANCHES)
def test_adafactor_matches_optax(kwargs):
    assert_matches_optax(lambda lib: lib.adafactor(**kwargs), params=random_tree(shapes=SHAPES))


def test_state_layout_matches_optax():
    params = random_tree(shapes=SHAPES)
    ours = gradax.scale_by_factored_rms(min_dim_size_to_factor=3).init(params)
    theirs = optax.scale_by_factored_rms(min_dim_size_to_factor=3).init(params)
    assert ours._fields == theirs._fields == ("count", "v_row", "v_col", "v")
    for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(theirs)):
        assert a.shape == b.shape and a.dtype == b.dtype
    assert ours.v["m"].shape == (1,) and ours.v_row["m"].shape == (3,) and ours.v_col["m"].shape == (4,)
    assert ours.v_row["v"].shape == (1,) and ours.v["v"].shape == (5,)
    assert ours.v_row["t"].shape == (2, 3) and ours.v_col["t"].shape == (2, 4)


def test_bf16_and_abstract_init():
    params = {"w": jnp.ones((4, 3), jnp.bfloat16)}
    opt = gradax.adafactor(0.1, min_dim_size_to_factor=2, momentum=0.9)
    state = opt.init(params)
    assert state[0].v_row["w"].dtype == jnp.float32
    u, s2 = jax.jit(opt.update)(params, state, params)
    assert u["w"].dtype == jnp.bfloat16
    assert jax.tree.map(lambda x: x.dtype, state) == jax.tree.map(lambda x: x.dtype, s2)
    abstract = opt.init({"w": jax.ShapeDtypeStruct((4, 3), jnp.float32)})
    assert abstract[0].v_row["w"].shape == (3,)


def test_converges():
    assert converges(gradax.adafactor(0.1), steps=300, tol=0.05)[0]
    assert converges(gradax.adafactor(0.05, multiply_by_parameter_scale=False, momentum=0.5), steps=300)[0]


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: gradax.adafactor(decay_rate=0.0), r"adafactor\(decay_rate=\.\.\.\) must be > 0"),
        (lambda: gradax.adafactor(clipping_threshold=0.0), r"adafactor\(clipping_threshold=\.\.\.\) must be > 0"),
        (lambda: gradax.adafactor(momentum=1.0), r"adafactor\(momentum=\.\.\.\) must be in \[0, 1\)"),
        (lambda: gradax.adafactor(eps=-1.0), r"adafactor\(eps=\.\.\.\) must be >= 0"),
        (lambda: gradax.adafactor(weight_decay_rate=-1.0), r"adafactor\(weight_decay_rate=\.\.\.\) must be >= 0"),
        (lambda: gradax.scale_by_factored_rms(epsilon=-1.0), r"scale_by_factored_rms\(epsilon=\.\.\.\) must be >= 0"),
    ],
)
def test_errors(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_min_dim_must_be_int():
    with pytest.raises(TypeError, match=r"adafactor\(min_dim_size_to_factor=\.\.\.\) must be an int"):
        gradax.adafactor(min_dim_size_to_factor=2.5)


def test_compiled_step_keeps_no_gradient_sized_temporary():
    """With params and state donated, the compiled adafactor step computes exactly one array of each factored leaf's
    shape, the new params: the row and column means, the clipping RMS and the parameter RMS are each a reduction fused
    into one pass over g or p (on XLA:CPU, a shared |g|^2 or a broadcast factor would be a materialized temporary)."""
    params = {"w": jnp.ones((256, 512)), "k": jnp.ones((4, 128, 192)), "b": jnp.ones((512,))}
    opt = gradax.adafactor(learning_rate=1e-2)

    def step(p, s, g):
        u, s = opt.update(g, s, p)
        return gradax.apply_updates(p, u), s

    hlo = jax.jit(step, donate_argnums=(0, 1)).lower(params, opt.init(params), params).compile().as_text()
    entry = hlo[hlo.index("\nENTRY") :].splitlines()[1:]
    for shape in ("f32[256,512]", "f32[4,128,192]"):
        arrays = [ln.strip() for ln in entry if f"= {shape}" in ln and "parameter(" not in ln]
        assert len(arrays) == 1, "\n".join(arrays)


@pytest.mark.parametrize("min_dim", [1, 3])
def test_unit_axes_change_nothing(min_dim):
    """A factored leaf with axes of length 1 (dropped before the reductions, for XLA:CPU's speed) steps exactly as the
    same leaf without them; with min_dim_size_to_factor=1 a unit axis can itself be factored, and is kept."""
    with_units = {"a": (1, 6, 1, 4), "b": (1, 5)}
    plain = {"a": (6, 4), "b": (5,)} if min_dim > 1 else {"a": (6, 4), "b": (1, 5)}
    params = random_tree(shapes=with_units)
    grads = [random_tree(10 + i, shapes=with_units) for i in range(3)]

    def run(reshape):
        opt = gradax.adafactor(0.1, min_dim_size_to_factor=min_dim)
        p = jax.tree.map(reshape, params, plain)
        s = opt.init(p)
        outs = []
        for g in grads:
            u, s = jax.jit(opt.update)(jax.tree.map(reshape, g, plain), s, p)
            outs.append(jax.tree.map(lambda x: np.asarray(x).reshape(-1), u))
        return outs

    for a, b in zip(run(lambda x, shape: x), run(lambda x, shape: jnp.reshape(x, shape))):
        jax.tree.map(lambda x, y: np.testing.assert_allclose(x, y, rtol=1e-6, atol=0), a, b)


@pytest.mark.parametrize(
    "make", [lambda: gradax.adafactor(0.1), lambda: gradax.contrib.came(0.1)], ids=["adafactor", "came"]
)
def test_row_and_column_reductions_see_no_unit_axis(make, monkeypatch):
    """A factored leaf's row and column reductions run on its arrays without their unit axes: XLA:CPU reduces an
    expression of several arrays with a leading axis of length 1 up to 30x slower (without_unit_axes). The
    reductions in XLA, that is without the CPU kernels (which take any leading axes)."""
    import re

    from gradax.contrib import _came
    from gradax.optimizers import _adafactor

    monkeypatch.setattr(_came, "_kernel_applies", lambda: False)
    monkeypatch.setattr(_adafactor, "_kernel_applies", lambda: False)

    params = {"w": jnp.zeros((1, 256, 128))}
    opt = make()
    text = jax.jit(opt.update).lower(params, opt.init(params), params).compile().as_text()
    shapes = dict(re.findall(r"%(\S+) = (f32\[[0-9,]*\])", text))
    per_axis = re.findall(r"= f32\[[0-9,]+\]\S* reduce\(%([^,]+),", text)  # reductions to a vector, not a scalar
    assert per_axis and not [name for name in per_axis if shapes[name].startswith("f32[1,")], per_axis
