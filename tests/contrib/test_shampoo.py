"""Tests of gradax.contrib shampoo, scale_by_shampoo, ShampooState: against pytorch_optimizer's ScalableShampoo (a port
of Anil et al.'s distributed Shampoo) in float64, closed forms, the matrix-root choice and the shape policy."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradax
from gradax import contrib
from gradax.contrib._shampoo import inverse_root
from tests.contrib._helpers import assert_each_leaf_as_if_alone
from tests.contrib.test_soap import _problem, _run_gradax, _run_torch

torch = pytest.importorskip("torch")
pytorch_optimizer = pytest.importorskip("pytorch_optimizer")
from pytorch_optimizer.optimizer.utils.graft import LayerWiseGrafting  # noqa: E402

_GRAFTS = {"sgd": LayerWiseGrafting.SGD, "adagrad": LayerWiseGrafting.ADAGRAD, "rmsprop": LayerWiseGrafting.RMSPROP}


@pytest.mark.parametrize(
    "graft, merge",
    [("sgd", False), ("adagrad", False), ("rmsprop", True)],
    ids=["sgd", "adagrad", "rmsprop_merged"],
)
def test_matches_pytorch_optimizer_scalable_shampoo(graft, merge):
    # 24 steps; blocks of 3 (5 rows: one full and one padded block); preconditioning from step 6; inverse roots at
    # steps 5, 10, 15, 20. The reference's SVD roots (use_svd=True) are exact; gradax's coupled Newton iteration stops
    # at 1e-6, hence the tolerance. matrix_eps is tiny on both sides: the reference adds no ridge to its SVD roots.
    shapes = {"w": (5, 3), "v": (4, 4), "b": (3,)}
    if merge:
        shapes["k"] = (2, 3, 4)  # merged to (6, 4) by both (blocks of 6)
    params, grads = _problem(shapes, 24)
    kw = dict(b1=0.9, b2=0.95, matrix_eps=1e-12, diagonal_eps=1e-10, start_preconditioning_step=6)
    kw.update(preconditioning_compute_steps=5, block_size=6 if merge else 3)
    ours, state = _run_gradax(contrib.shampoo(0.05, graft_type=graft, merge_dims=merge, **kw), params, grads)
    theirs, tstate = _run_torch(
        lambda ps: pytorch_optimizer.ScalableShampoo(
            ps,
            lr=0.05,
            betas=(0.9, 0.95),
            matrix_eps=1e-12,
            diagonal_eps=1e-10,
            block_size=kw["block_size"],
            start_preconditioning_step=6,
            preconditioning_compute_steps=5,
            graft_type=_GRAFTS[graft],
            use_svd=True,
            shape_interpretation=merge,
            no_preconditioning_for_layers_with_dim_gt=10**6,
            nesterov=True,
        ),
        params,
        grads,
    )
    for i, (a, b) in enumerate(zip(ours, theirs)):
        for k in a:
            np.testing.assert_allclose(a[k], b[k], rtol=2e-5, atol=1e-8, err_msg=f"step {i + 1}, leaf {k}")
    for k in shapes:
        np.testing.assert_allclose(state[0].momentum[k], tstate[k]["momentum"], rtol=2e-5, atol=1e-8)


def test_newton_roots_are_more_accurate_than_eigh_in_float32():
    # the reason inverse_root uses matrix_inverse_pth_root for p in (1, 2, 4, 8): against a float64 truth, on an
    # ill-conditioned (cond 1e4) 16 x 16 statistic, float32 eigh's error is about 4x the coupled Newton iteration's
    rng = np.random.default_rng(0)
    q, _ = np.linalg.qr(rng.normal(size=(16, 16)))
    lam = np.logspace(0, -4, 16)
    truth = (q * lam**-0.25) @ q.T
    a = jnp.asarray((q * lam) @ q.T, jnp.float32)
    w, v = jnp.linalg.eigh(a)
    by_eigh = (v * w**-0.25) @ v.T
    by_newton = inverse_root(a, 4, 0.0)
    err = lambda r: np.linalg.norm(np.asarray(r, np.float64) - truth) / np.linalg.norm(truth)
    assert err(by_newton) < 0.5 * err(by_eigh)
    # p = 6 (a rank-3 tensor) has no Newton iteration here: eigh, still accurate for a well-conditioned statistic
    b = jnp.asarray((q * np.logspace(0, -1, 16)) @ q.T, jnp.float32)
    np.testing.assert_allclose(inverse_root(b, 6, 0.0), (q * np.logspace(0, -1, 16) ** (-1 / 6)) @ q.T, atol=1e-5)


def test_adam_graft_before_preconditioning_is_adam_with_nesterov_momentum():
    g = jnp.array([[1.0, -2.0], [3.0, 0.5]])
    tx = contrib.scale_by_shampoo(b1=0.5, b2=0.9, diagonal_eps=0.0, graft_type="adam", start_preconditioning_step=5)
    u, _ = tx.update(g, tx.init(g))
    # t = 1: v_hat = g^2, direction sign(g), momentum = direction, Nesterov: 0.5 * m + direction = 1.5 sign(g)
    np.testing.assert_allclose(u, 1.5 * jnp.sign(g), rtol=1e-6)


def test_vectors_get_the_graft_with_momentum():
    # a vector is not preconditioned: with the SGD graft, Shampoo is Nesterov momentum (gradax.trace)
    gs = [jax.random.normal(jax.random.key(i), (4,)) for i in range(4)]
    sh, tr = contrib.scale_by_shampoo(b1=0.8, graft_type="sgd"), gradax.trace(decay=0.8, nesterov=True)
    s1, s2 = sh.init(gs[0]), tr.init(gs[0])
    for g in gs:
        u1, s1 = sh.update(g, s1)
        u2, s2 = tr.update(g, s2)
        np.testing.assert_allclose(u1, u2, rtol=1e-6)
    assert s1.stats == ()


def test_shape_policy_and_bounded_state():
    f32 = jnp.float32
    params = {
        "embedding": jax.ShapeDtypeStruct((50_000, 64), f32),
        "stacked": jax.ShapeDtypeStruct((4, 8, 6), f32),
        "conv": jax.ShapeDtypeStruct((3, 3, 2, 4), f32),
        "bias": jax.ShapeDtypeStruct((6,), f32),
    }
    dims = {"embedding": None, "stacked": None, "conv": contrib.MuonDimensionNumbers((0, 1, 2), 3), "bias": None}
    s = jax.eval_shape(contrib.scale_by_shampoo(block_size=128, weight_dimension_numbers=dims).init, params)
    shapes = jax.tree.map(lambda x: x.shape, s.stats)
    assert shapes == {
        "embedding": ((391, 128, 128), (391, 64, 64)),  # 50,000 rows in 391 blocks of 128 (the last one padded)
        "stacked": ((4, 8, 8), (4, 6, 6)),  # one pair of factors per stacked layer
        "conv": ((1, 18, 18), (1, 4, 4)),  # (h w c_in, c_out)
        "bias": (),
    }
    # statistics of the embedding: 2.5x the parameter's size here (rows x 128 + rows x 64), never a 50,000^2 matrix
    assert sum(np.prod(x) for x in shapes["embedding"]) <= 2.51 * 50_000 * 64


def test_bf16_params_keep_float32_statistics_and_schedules_inject():
    p = {"w": jnp.ones((4, 3), jnp.bfloat16), "b": jnp.ones(3, jnp.bfloat16)}
    kw = dict(weight_decay=lambda c: 1e-3 * c, start_preconditioning_step=1, preconditioning_compute_steps=2)
    plain = contrib.shampoo(lambda c: 0.1 / (1 + c), **kw)
    injected = gradax.inject_hyperparams(contrib.shampoo)(lambda c: 0.1 / (1 + c), **kw)

    @jax.jit
    def run(p):
        s1, s2, out = plain.init(p), injected.init(p), []
        for k in range(3):
            g = jax.tree.map(lambda x: (0.1 * k + 0.3) * x, p)
            u1, s1 = plain.update(g, s1, p)
            u2, s2 = injected.update(g, s2, p)
            out.append((u1, u2))
        return out, s1

    out, s = run(p)
    for u1, u2 in out:
        assert u1["w"].dtype == jnp.bfloat16
        np.testing.assert_array_equal(u1["w"], u2["w"])
    assert s[0].stats["w"][0].dtype == s[0].momentum["w"].dtype == jnp.float32


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: contrib.scale_by_shampoo(b1=1.0), r"scale_by_shampoo\(b1=\.\.\.\) must be in \[0, 1\); got 1.0"),
        (lambda: contrib.scale_by_shampoo(b2=1.5), r"scale_by_shampoo\(b2=\.\.\.\) must be in \[0, 1\]; got 1.5"),
        (lambda: contrib.scale_by_shampoo(matrix_eps=-1.0), r"scale_by_shampoo\(matrix_eps=\.\.\.\) must be >= 0"),
        (lambda: contrib.scale_by_shampoo(diagonal_eps=-1.0), r"scale_by_shampoo\(diagonal_eps=\.\.\.\) must be >= 0"),
        (lambda: contrib.scale_by_shampoo(block_size=0), r"scale_by_shampoo\(block_size=\.\.\.\) must be >= 1"),
        (
            lambda: contrib.scale_by_shampoo(inverse_exponent=0),
            r"scale_by_shampoo\(inverse_exponent=\.\.\.\) must be >= 1",
        ),
        (
            lambda: contrib.scale_by_shampoo(start_preconditioning_step=-1),
            r"scale_by_shampoo\(start_preconditioning_step=\.\.\.\) must be >= 0",
        ),
        (
            lambda: contrib.scale_by_shampoo(preconditioning_compute_steps=0),
            r"scale_by_shampoo\(preconditioning_compute_steps=\.\.\.\) must be >= 1",
        ),
        (
            lambda: contrib.scale_by_shampoo(statistics_compute_steps=0),
            r"scale_by_shampoo\(statistics_compute_steps=\.\.\.\) must be >= 1",
        ),
        (
            lambda: contrib.scale_by_shampoo(graft_type="lion"),
            r"scale_by_shampoo\(graft_type=\.\.\.\) must be one of 'sgd', 'adagrad', 'rmsprop', 'adam'; got 'lion'",
        ),
        (lambda: contrib.shampoo(-1.0), r"shampoo\(learning_rate=\.\.\.\) must be >= 0"),
        (lambda: contrib.shampoo(0.1, weight_decay=-1.0), r"shampoo\(weight_decay=\.\.\.\) must be >= 0"),
    ],
)
def test_errors(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_leaves_sharing_a_block_size_are_rooted_as_one_batch_as_if_alone():
    # every inverse root of the tree comes from one cond, blocks of one size and exponent batched across leaves
    tx = contrib.scale_by_shampoo(
        block_size=3, start_preconditioning_step=1, preconditioning_compute_steps=2, statistics_compute_steps=2
    )
    shapes = {"a": (5, 3), "b": (3, 7), "v": (4,), "c": (2, 2, 3)}
    assert_each_leaf_as_if_alone(tx, shapes, steps=4, seed=7, rtol=1e-5, atol=1e-6)
