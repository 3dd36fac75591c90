"""GaLore (gradax.contrib.galore, scale_by_galore) against Optax 0.2.8 and the paper's projection rule."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradax
from tests._stepping import run
from tests.contrib._common import assert_trees_close


def _tree(seed, dtype=jnp.float32):
    rng = np.random.default_rng(seed)
    shapes = {"w": (5, 3), "t": (3, 6), "sq": (4, 4), "b": (3,), "x": (2, 3, 4)}
    return {k: jnp.asarray(rng.normal(size=s), dtype) for k, s in shapes.items()}


def _run(tx, lib, steps=8, dtype=jnp.float32):
    updates, state, _ = run(tx, _tree(0, dtype), lambda k, _: _tree(k + 1, dtype), steps, apply=lib.apply_updates)
    return updates, state


def _both(make, rtol=1e-5, atol=1e-6):
    # the same LAPACK SVD and the same products as Optax: within a third of these tolerances over 8 steps
    ug, sg = _run(make(gradax), gradax)
    uo, so = _run(make(optax), optax)
    assert_trees_close(ug, uo, rtol, atol)
    assert_trees_close(sg, so, rtol, atol)


@pytest.mark.parametrize(
    "kw",
    [
        {"rank": 2, "update_proj_gap": 3},
        {"rank": 10, "update_proj_gap": 2, "scale": 0.5},
        {"rank": 1, "update_proj_gap": 1, "weight_decay": 0.1},
    ],
)
def test_galore_matches_optax(kw):
    _both(lambda lib: lib.contrib.galore(1e-2, **kw))


def test_scale_by_galore_base_and_dimension_numbers_match_optax():
    _both(lambda lib: lib.contrib.scale_by_galore(rank=2, update_proj_gap=2, base_optimizer=lib.scale_by_rms()))
    dn = lambda lib: {
        "w": None,
        "t": lib.contrib.GaLoreDimensionNumbers(1, 0),
        "sq": None,
        "b": None,
        "x": lib.contrib.GaLoreDimensionNumbers(0, (1, 2)),
    }
    _both(lambda lib: lib.contrib.scale_by_galore(rank=2, update_proj_gap=3, weight_dimension_numbers=dn(lib)))


def test_schedule_matches_optax():
    sched = lambda c: 1e-2 / (1.0 + c)
    _both(lambda lib: lib.contrib.galore(sched, rank=2, update_proj_gap=3))


def test_projection_rule_and_state_fields():
    g = _tree(3)
    tx = gradax.contrib.scale_by_galore(rank=2, base_optimizer=gradax.identity())
    u, s = tx.update(g, tx.init(g))
    for k in ("w", "t", "sq"):
        a = np.asarray(g[k], np.float64)
        uu, ss, vt = np.linalg.svd(a, full_matrices=False)
        best = (uu[:, :2] * ss[:2]) @ vt[:2]  # the projection keeps the best rank-2 approximation
        np.testing.assert_allclose(u[k], best, rtol=1e-4, atol=1e-5)  # float32 SVD against a float64 one
    np.testing.assert_array_equal(u["b"], g["b"])
    assert s._fields == ("count", "base_optimizer_state", "projector")
    assert s.projector["w"].shape == (5, 2) and s.projector["t"].shape == (6, 2) and s.projector["b"].shape == (0, 0)
    assert gradax.contrib.GaLoreDimensionNumbers()._fields == ("reduction_axis", "output_axis")


def test_abstract_init_and_bf16():
    tx = gradax.contrib.galore(1e-2, rank=2)
    p = _tree(0, jnp.bfloat16)
    abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), p)
    same = jax.tree.map(lambda a, b: a.shape == b.shape and a.dtype == b.dtype, tx.init(abstract), tx.init(p))
    assert all(jax.tree.leaves(same))
    outs, _ = _run(tx, gradax, steps=2, dtype=jnp.bfloat16)
    assert all(x.dtype == jnp.bfloat16 and np.isfinite(np.asarray(x, np.float32)).all() for x in jax.tree.leaves(outs))


def test_converges_on_low_rank_least_squares():
    target = jnp.outer(jnp.arange(1.0, 7.0), jnp.array([1.0, -1.0, 0.5, 2.0]))
    loss = lambda w: 0.5 * jnp.sum((w - target) ** 2)
    tx = gradax.contrib.galore(0.3, rank=1, update_proj_gap=5)
    w = jnp.zeros((6, 4))
    s = tx.init(w)
    step = jax.jit(lambda w, s: tx.update(jax.grad(loss)(w), s, w))
    for _ in range(150):
        u, s = step(w, s)
        w = gradax.apply_updates(w, u)
    assert float(loss(w)) < 5e-2 * float(loss(jnp.zeros((6, 4))))


def test_errors():
    with pytest.raises(ValueError, match=r"scale_by_galore\(rank=...\) must be >= 1; got 0"):
        gradax.contrib.scale_by_galore(rank=0)
    with pytest.raises(TypeError, match=r"scale_by_galore\(rank=...\) must be an int; got 2.5"):
        gradax.contrib.scale_by_galore(rank=2.5)
    with pytest.raises(ValueError, match=r"scale_by_galore\(update_proj_gap=...\) must be >= 1; got 0"):
        gradax.contrib.scale_by_galore(update_proj_gap=0)
    with pytest.raises(ValueError, match=r"galore\(weight_decay=...\) must be >= 0; got -1.0"):
        gradax.contrib.galore(0.1, weight_decay=-1.0)
    bad = gradax.contrib.scale_by_galore(weight_dimension_numbers=gradax.contrib.GaLoreDimensionNumbers(0, 0))
    with pytest.raises(ValueError, match=r"must name every axis of a weight of shape \(2, 3\)"):
        bad.init(jnp.zeros((2, 3)))
