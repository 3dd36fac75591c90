"""Tests of gradax.contrib soap, scale_by_soap, SOAPState: against pytorch_optimizer's SOAP (the authors' algorithm)
in float64, closed forms, and the shape policy."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradax
from gradax import contrib
from gradax.contrib._kronecker import mode_product

torch = pytest.importorskip("torch")
pytorch_optimizer = pytest.importorskip("pytorch_optimizer")


def _problem(shapes, steps, seed=0):
    rng = np.random.default_rng(seed)
    params = {k: rng.normal(size=s) for k, s in shapes.items()}
    grads = [{k: rng.normal(size=s) for k, s in shapes.items()} for _ in range(steps)]
    return params, grads


def _run_gradax(tx, params, grads):
    with jax.enable_x64(True):
        p = {k: jnp.asarray(v, jnp.float64) for k, v in params.items()}
        state = tx.init(p)
        step = jax.jit(tx.update)
        out = []
        for g in grads:
            u, state = step({k: jnp.asarray(v, jnp.float64) for k, v in g.items()}, state, p)
            p = gradax.apply_updates(p, u)
            out.append({k: np.asarray(v) for k, v in p.items()})
        return out, jax.tree.map(np.asarray, state)


def _run_torch(make, params, grads):
    tensors = {k: torch.nn.Parameter(torch.tensor(v, dtype=torch.float64)) for k, v in params.items()}
    opt = make(list(tensors.values()))
    out = []
    for g in grads:
        for k, t in tensors.items():
            t.grad = torch.tensor(g[k], dtype=torch.float64)
        opt.step()
        out.append({k: t.detach().numpy().copy() for k, t in tensors.items()})
    return out, {k: opt.state[t] for k, t in tensors.items()}


def _close(a, b, rtol, atol, what):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=rtol, atol=atol, err_msg=what)


# The reference computes its QR in float32 even for float64 parameters (soap.py: "power_iter.to(torch.float32)"),
# so from the first refresh on the two runs agree to float32 precision, not float64's.
RTOL, ATOL = 1e-5, 1e-7


@pytest.mark.parametrize("merge", [False, True], ids=["matrices", "merged_tensor"])
def test_matches_pytorch_optimizer_soap(merge):
    # 24 steps, eigenbasis refreshed at steps 5, 10, 15, 20. (4, 3): the first step's left factor has a 1-D null
    # space, so its eigenbasis is unique up to signs (which SOAP's update does not see).
    # (the reference cannot merge a vector: merge_small_dims gives it shape [1])
    shapes = {"w": (4, 3), "v": (3, 3), "b": (3,), "s": ()} if not merge else {"k": (2, 3, 4, 5)}
    params, grads = _problem(shapes, 24)
    kw = dict(b1=0.9, b2=0.95, shampoo_beta=0.9, eps=1e-8, precondition_frequency=5, max_precond_dim=8)
    ours, state = _run_gradax(contrib.soap(3e-2, weight_decay=0.0, merge_dims=merge, **kw), params, grads)
    theirs, tstate = _run_torch(
        lambda ps: pytorch_optimizer.SOAP(
            ps,
            lr=3e-2,
            betas=(0.9, 0.95),
            shampoo_beta=0.9,
            weight_decay=0.0,
            precondition_frequency=5,
            max_precondition_dim=8,
            merge_dims=merge,
            eps=1e-8,
        ),
        params,
        grads,
    )
    for i, (a, b) in enumerate(zip(ours, theirs)):
        for k in a:
            _close(a[k], b[k], RTOL, ATOL, f"params, step {i + 1}, leaf {k}")
    soap_state = state[0]
    for k in shapes:
        view = (6, 4, 5) if merge else shapes[k]  # merge_small_dims((2, 3, 4, 5), 8)
        # gradax keeps the first moment in the eigenbasis, the reference in the parameters' basis
        mu = mode_product(soap_state.mu[k].reshape(view), soap_state.bases[k], transpose=True)
        _close(mu.reshape(shapes[k]), tstate[k]["exp_avg"], RTOL, ATOL, f"mu {k}")
        # the reference permutes its second moment with the sorted basis columns; gradax keeps the second moment in
        # place and the columns in their order (same pairs, so the same update): match the columns to compare
        nu = soap_state.nu[k].reshape(view)
        for axis, (ours_s, ours_q, gg, q) in enumerate(
            zip(soap_state.stats[k], soap_state.bases[k], tstate[k]["GG"], tstate[k]["Q"])
        ):
            if ours_s is None:
                assert len(gg) == 0
                continue
            _close(ours_s, gg.numpy(), RTOL, ATOL, f"stats {k}")
            overlap = ours_q.T @ q.numpy()
            match = np.argmax(np.abs(overlap), axis=0)  # the column of ours that is column j of theirs
            assert sorted(match) == list(range(len(match)))
            signs = np.sign(overlap[match, np.arange(len(match))])
            _close(ours_q[:, match] * signs, q.numpy(), 1e-4, 1e-6, f"bases {k}")
            nu = np.take(nu, match, axis=axis)
        _close(nu.reshape(shapes[k]), tstate[k]["exp_avg_sq"], RTOL, ATOL, f"nu {k}")


def test_first_step_builds_exact_eigenbasis_and_then_is_adam_in_it():
    g0, g1 = (jax.random.normal(jax.random.key(i), (3, 3)) for i in range(2))
    tx = contrib.scale_by_soap(b1=0.5, b2=0.5, eps=0.0)
    u0, s = tx.update(g0, tx.init(g0))
    np.testing.assert_array_equal(u0, 0.0)
    ql, qr = s.bases
    el = np.linalg.eigvalsh(np.asarray(0.5 * g0 @ g0.T))[::-1]
    np.testing.assert_allclose(np.diag(ql.T @ s.stats[0] @ ql), el, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(ql.T @ ql, np.eye(3), atol=1e-5)
    # second call, t = 1: Adam's first step in the basis, u = Q_L sign(Q_L^T g1 Q_R) Q_R^T
    u1, _ = tx.update(g1, s)
    expected = ql @ jnp.sign(ql.T @ g1 @ qr) @ qr.T
    np.testing.assert_allclose(u1, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mu_dtype, tol", [(None, 1e-5), (jnp.bfloat16, 2e-2)])
def test_first_moment_is_the_gradients_average_in_the_current_basis(mu_dtype, tol):
    """gradax keeps the first moment in the eigenbasis and carries it over at each refresh: after steps across two
    refreshes it is the parameters'-basis average of the gradients (the reference's ``exp_avg``), rotated by the
    current bases (float32 rounding apart; a bfloat16 moment is rounded once a step, after the carry)."""
    b1 = 0.8
    tx = contrib.scale_by_soap(b1=b1, b2=0.9, precondition_frequency=3, mu_dtype=mu_dtype)
    grads = [jax.random.normal(jax.random.key(i), (5, 4)) for i in range(8)]
    state = tx.init(grads[0])
    average = np.zeros((5, 4))
    for i, g in enumerate(grads):
        _, state = tx.update(g, state)
        if i:  # the first call only builds the bases
            average = b1 * average + (1 - b1) * np.asarray(g, np.float64)
    ql, qr = (np.asarray(q, np.float64) for q in state.bases)
    np.testing.assert_allclose(np.asarray(state.mu, np.float64), ql.T @ average @ qr, rtol=tol, atol=tol / 10)


def test_scalars_and_vectors_get_adam():
    # no factor: SOAP's step t + 1 is Adam's step t (the first call only builds the bases); with eps = 0 the two
    # bias-correction placements coincide
    gs = [jax.random.normal(jax.random.key(i), (5,)) for i in range(6)]
    soap, adam = contrib.scale_by_soap(b1=0.9, b2=0.99, eps=0.0), gradax.scale_by_adam(b1=0.9, b2=0.99, eps=0.0)
    s1, s2 = soap.init(gs[0]), adam.init(gs[0])
    u, s1 = soap.update(gs[0], s1)
    np.testing.assert_array_equal(u, 0.0)
    for g in gs[1:]:
        u1, s1 = soap.update(g, s1)
        u2, s2 = adam.update(g, s2)
        np.testing.assert_allclose(u1, u2, rtol=1e-5, atol=1e-7)
    assert s1.stats == (None,)


def test_shape_policy_and_bounded_state():
    f32 = jnp.float32
    params = {
        "embedding": jax.ShapeDtypeStruct((50_000, 64), f32),
        "stacked": jax.ShapeDtypeStruct((4, 8, 6), f32),
        "conv": jax.ShapeDtypeStruct((3, 3, 2, 4), f32),
        "bias": jax.ShapeDtypeStruct((6,), f32),
    }
    dims = {
        "embedding": None,
        "stacked": None,
        "conv": contrib.MuonDimensionNumbers((0, 1, 2), 3),
        "bias": None,
    }
    shapes = lambda t: jax.tree.map(lambda x: x.shape, t)
    s = jax.eval_shape(contrib.scale_by_soap(weight_dimension_numbers=dims).init, params)
    assert shapes(s.stats) == {
        # the 50,000-row side is longer than max_precond_dim: no factor there, never a 50,000^2 matrix
        "embedding": (None, (64, 64)),
        "stacked": ((4, 8, 8), (4, 6, 6)),  # one factor pair per stacked layer
        "conv": ((18, 18), (4, 4)),  # (h w c_in, c_out)
        "bias": (None,),
    }
    s1 = jax.eval_shape(contrib.scale_by_soap(one_sided=True, max_precond_dim=100_000).init, params)
    assert shapes(s1.stats)["embedding"] == (None, (64, 64))
    assert shapes(s1.stats)["stacked"] == (None, (4, 6, 6))


def test_stacked_layers_match_per_layer():
    g = jax.random.normal(jax.random.key(0), (2, 3, 4))
    tx3, tx2 = contrib.scale_by_soap(), contrib.scale_by_soap()
    s3 = tx3.init(g)
    s2 = [tx2.init(g[i]) for i in range(2)]
    up3, up2 = jax.jit(tx3.update), jax.jit(tx2.update)
    for t in range(3):
        gt = g * (1.0 + t) + t
        u3, s3 = up3(gt, s3)
        for i in range(2):
            u2, s2[i] = up2(gt[i], s2[i])
            np.testing.assert_allclose(u3[i], u2, rtol=1e-4, atol=1e-6)


def test_bf16_params_keep_float32_statistics():
    p = {"w": jnp.ones((4, 3), jnp.bfloat16), "b": jnp.ones(3, jnp.bfloat16)}
    opt = contrib.soap(1e-2)
    s = opt.init(p)
    step = jax.jit(opt.update)
    for _ in range(3):
        u, s = step(jax.tree.map(lambda x: 0.1 * x + 0.3, p), s, p)
    assert u["w"].dtype == jnp.bfloat16
    assert s[0].mu["w"].dtype == s[0].nu["w"].dtype == s[0].stats["w"][0].dtype == jnp.float32


def test_weight_decay_is_decoupled_and_before_the_step():
    # gradax: theta - lr (u + wd theta) on every step (AdamW's order); the reference multiplies the already
    # updated parameters by (1 - lr wd) and skips its first step entirely (docs/differences.md)
    p = jnp.full((2, 2), 2.0)
    opt = contrib.soap(0.1, weight_decay=0.5)
    u, _ = opt.update(jnp.ones((2, 2)), opt.init(p), p)
    np.testing.assert_allclose(u, -0.1 * 0.5 * 2.0)
    tp = torch.nn.Parameter(torch.full((2, 2), 2.0))
    ref = pytorch_optimizer.SOAP([tp], lr=0.1, weight_decay=0.5)
    tp.grad = torch.ones((2, 2))
    ref.step()
    np.testing.assert_allclose(tp.detach().numpy(), 2.0)


def test_schedules_and_inject_hyperparams():
    p = {"w": jnp.ones((3, 2))}
    g = {"w": jnp.arange(6.0).reshape(3, 2)}
    plain = contrib.soap(lambda c: 0.1 / (1 + c), weight_decay=lambda c: 0.01 * c, precondition_frequency=2)
    injected = gradax.inject_hyperparams(contrib.soap)(
        lambda c: 0.1 / (1 + c), weight_decay=lambda c: 0.01 * c, precondition_frequency=2
    )

    @jax.jit
    def run(p, g):
        s1, s2, out = plain.init(p), injected.init(p), []
        for _ in range(4):
            u1, s1 = plain.update(g, s1, p)
            u2, s2 = injected.update(g, s2, p)
            out.append((u1["w"], u2["w"]))
        return out

    for a, b in run(p, g):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: contrib.scale_by_soap(b1=1.0), r"scale_by_soap\(b1=\.\.\.\) must be in \[0, 1\); got 1.0"),
        (lambda: contrib.scale_by_soap(shampoo_beta=-0.1), r"scale_by_soap\(shampoo_beta=\.\.\.\) must be in"),
        (lambda: contrib.scale_by_soap(eps=-1.0), r"scale_by_soap\(eps=\.\.\.\) must be >= 0"),
        (
            lambda: contrib.scale_by_soap(precondition_frequency=0),
            r"scale_by_soap\(precondition_frequency=\.\.\.\) must be >= 1",
        ),
        (lambda: contrib.scale_by_soap(max_precond_dim=0), r"scale_by_soap\(max_precond_dim=\.\.\.\) must be >= 1"),
        (lambda: contrib.soap(-1.0), r"soap\(learning_rate=\.\.\.\) must be >= 0"),
        (lambda: contrib.soap(0.1, weight_decay=-1.0), r"soap\(weight_decay=\.\.\.\) must be >= 0"),
    ],
)
def test_errors(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_non_int_frequency_is_a_type_error():
    with pytest.raises(TypeError, match=r"scale_by_soap\(precondition_frequency=\.\.\.\) must be an int"):
        contrib.scale_by_soap(precondition_frequency=2.5)
