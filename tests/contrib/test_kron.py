"""Tests of gradax.contrib.kron / scale_by_kron / KronState against kron_torch 0.3.3 (the PSGD-Kron of the NanoGPT
speedrun leaderboards).

How the stochastic parts are matched: the preconditioner update probability is 1.0 (every step updates, the draw is
always true), and the random probes are injected: both sides take the same standard-normal ``V`` per leaf and step
from one list (gradax's ``_probes`` and the reference's ``torch.randn_like`` are patched; gradax's ``_probes`` is called
while its jitted step is traced, and hands out that step's probes, which are arguments of the step). Both run in
float64 (the reference with ``precond_dtype=torch.float64`` and ``torch.compile`` off) for 22 steps; parameters agree within rtol 1e-6 (the reference solves its triangular systems in
float32 whatever its dtype, a relative 1e-7 per step; the elementwise leaves agree to 1e-12).

One departure of the reference, followed by the paper here: kron_torch adds the damping noise to the momentum in place,
so the noisy momentum is also what it preconditions; gradax (like PSGD) uses the noise only to fit the preconditioner.
The 22-step comparison removes that leak from the reference (``_calc_A_and_conjB`` gets a copy), and
``test_reference_leaks_damping_noise`` shows the one-step difference.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradax
from gradax import contrib
from gradax.contrib import _kron
from tests._jaxpr import equations

torch = pytest.importorskip("torch")
kron_torch = pytest.importorskip("kron_torch.kron")

STEPS = 22
_QUEUE = {"gradax": [], "torch": []}  # the probes of the step being traced (gradax) or run (torch)
SHAPES = {"a": (4, 3), "b": (2, 5), "c": (3,)}  # kron_torch fails on 0-d parameters (V.permute)


@pytest.fixture
def probes(monkeypatch):
    """A shared queue of probe vectors, consumed in order by both implementations."""
    for name in ("_update_precond", "_precond_grad", "_clip_update_rms", "_balance_Q"):  # torch.compile off
        fn = getattr(kron_torch, name)
        monkeypatch.setattr(kron_torch, name, getattr(fn, "_torchdynamo_orig_callable", fn))

    def fill(vs):
        _QUEUE["torch"][:] = list(vs)

    def ours(key, specs):
        return [_QUEUE["gradax"].pop(0).astype(dtype).reshape(shape) for shape, dtype in specs]

    def theirs(t, *args, **kwargs):
        return torch.tensor(_QUEUE["torch"].pop(0), dtype=t.dtype).reshape(t.shape)

    monkeypatch.setattr(_kron, "_probes", ours)
    monkeypatch.setattr(torch, "randn_like", theirs)
    return fill


def _data(seed=0):
    rng = np.random.default_rng(seed)
    params = {k: rng.normal(size=s) for k, s in SHAPES.items()}
    grads = [{k: rng.normal(size=s) for k, s in SHAPES.items()} for _ in range(STEPS)]
    vs = [rng.normal(size=SHAPES[k]) for _ in range(STEPS) for k in sorted(SHAPES)]
    return params, grads, vs


def _run_gradax(params, grads, vs, with_state=False, **kw):
    opt = contrib.kron(3e-2, weight_decay=0.1, mask=lambda p: jax.tree.map(lambda x: x.ndim >= 2, p), **kw)
    with jax.enable_x64(True):
        p = {k: jnp.asarray(v) for k, v in params.items()}
        s = opt.init(p)

        @jax.jit
        def step(g, s, p, v):
            _QUEUE["gradax"][:] = list(v)  # traced once: the probes are arguments of the compiled step
            return opt.update(g, s, p)

        n = len(SHAPES)
        for i, g in enumerate(grads):
            u, s = step(
                {k: jnp.asarray(v) for k, v in g.items()}, s, p, [jnp.asarray(v) for v in vs[i * n : i * n + n]]
            )
            p = gradax.apply_updates(p, u)
        out = {k: np.asarray(v) for k, v in p.items()}
        return (out, s) if with_state else out


def _run_torch(params, grads, **kw):
    tp = {k: torch.tensor(params[k], requires_grad=True) for k in sorted(SHAPES)}
    opt = kron_torch.Kron(list(tp.values()), lr=3e-2, weight_decay=0.1, precond_dtype=torch.float64, **kw)
    # its rebalancing at random 1% of the updates (exact in exact arithmetic) stays off, as gradax's (every 100)
    opt.rng.random = lambda: 0.5
    for g in grads:
        for k, v in g.items():
            tp[k].grad = torch.tensor(v)
        opt.step()
    return {k: v.detach().numpy() for k, v in tp.items()}


@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"memory_save_mode": "one_diag", "momentum_into_precond_update": False, "b1": 0.5},
        {"max_size_triangular": 3, "precond_lr": 0.3, "precond_init_scale": 2.0},
        {"blocks": ((4, 4), (2, 2))},
    ],
    ids=["triangular", "one_diag_grad", "max_size", "blocked_products"],
)
def test_matches_kron_torch(probes, monkeypatch, kw):
    # "blocks": the factors' triangular products by blocks (_TRIANGULAR_BLOCKS) at these small sizes, uneven included
    kw = dict(kw)
    if "blocks" in kw:
        monkeypatch.setattr(_kron, "_TRIANGULAR_BLOCKS", kw.pop("blocks"))
    original = kron_torch._calc_A_and_conjB
    monkeypatch.setattr(kron_torch, "_calc_A_and_conjB", lambda e, G, Q: original(e, G.clone(), Q))
    params, grads, vs = _data()
    probes(vs)
    ours = _run_gradax(params, grads, vs, preconditioner_update_probability=1.0, **kw)
    probes(vs)
    theirs = _run_torch(params, grads, preconditioner_update_probability=1.0, **kw)
    for k in SHAPES:
        np.testing.assert_allclose(ours[k], theirs[k], rtol=1e-6, atol=1e-9, err_msg=k)


def test_reference_leaks_damping_noise(probes):
    # one step: both fit the same preconditioner P to the noisy momentum g + delta V; kron_torch then preconditions
    # that noisy momentum, gradax (like PSGD) the momentum g itself
    params, grads, vs = _data(1)
    probes(vs)
    ours, state = _run_gradax(params, grads[:1], vs, preconditioner_update_probability=1.0, with_state=True)
    probes(vs)
    theirs = _run_torch(params, grads[:1], preconditioner_update_probability=1.0)
    g, v, p = grads[0]["a"], vs[0], params["a"]
    ql, qr = state[0].qs["a"]
    with jax.enable_x64(True):
        noisy = jnp.asarray(g + _kron._DAMPING * np.mean(np.abs(g)) * v)
        leaked = np.asarray(_kron._precondition(noisy, ql[0], qr[0]))
        clean = np.asarray(_kron._precondition(jnp.asarray(g), ql[0], qr[0]))
    np.testing.assert_allclose(theirs["a"], p - 3e-2 * (leaked + 0.1 * p), rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(ours["a"], p - 3e-2 * (clean + 0.1 * p), rtol=1e-12, atol=1e-12)
    assert np.max(np.abs(ours["a"] - theirs["a"])) > 1e-6


def test_update_probability_and_key():
    params = {"w": jax.random.normal(jax.random.key(0), (4, 3)), "b": jnp.ones(3)}
    g = jax.tree.map(lambda x: 0.1 * x, params)

    def run(tx, steps=6):
        s = tx.init(params)
        step = jax.jit(tx.update)
        for _ in range(steps):
            u, s = step(g, s)
        return u, s

    # probability 1: every step updates; same key, same result; a different key, different probes
    u1, s1 = run(contrib.scale_by_kron(preconditioner_update_probability=1.0, key=3))
    u2, _ = run(contrib.scale_by_kron(preconditioner_update_probability=1.0, key=jax.random.key(3)))
    u3, _ = run(contrib.scale_by_kron(preconditioner_update_probability=1.0, key=4))
    jax.tree.map(np.testing.assert_array_equal, u1, u2)
    assert not np.allclose(u1["w"], u3["w"])
    assert not np.allclose(s1.qs["w"][0], np.eye(4))
    # probability 0: the preconditioner stays the identity, the update is the clipped momentum
    u0, s0 = run(contrib.scale_by_kron(preconditioner_update_probability=0.0), steps=1)
    np.testing.assert_array_equal(s0.qs["w"][0][0], np.eye(4))
    np.testing.assert_allclose(u0["w"], g["w"] * min(1.0, 1.1 / float(jnp.sqrt(jnp.mean(g["w"] ** 2)))), rtol=1e-6)
    # the default schedule: 1 for 500 steps, then down to 0.03
    sched = contrib.precond_update_prob_schedule()
    np.testing.assert_allclose([sched(0), sched(500), sched(1500), sched(10_000)], [1, 1, np.exp(-1), 0.03], rtol=1e-6)
    s = contrib.scale_by_kron().init(params)
    assert s.key.dtype == jnp.uint32 and contrib.KronState._fields == ("count", "key", "mu", "qs")


def test_shapes_policy_and_dtypes():
    # an embedding of 50,000 rows gets a diagonal factor on that side (abstract init: nothing is allocated)
    emb = jax.ShapeDtypeStruct((50_000, 8), jnp.float32)
    s = jax.eval_shape(contrib.scale_by_kron().init, {"embed": emb})
    assert [q.shape for q in s.qs["embed"]] == [(1, 50_000), (1, 8, 8)]
    modes = {None: [(1, 6, 6), (1, 4, 4)], "one_diag": [(1, 6), (1, 4, 4)], "all_diag": [(1, 6), (1, 4)]}
    for mode, shapes in modes.items():
        s = contrib.scale_by_kron(memory_save_mode=mode).init(jnp.ones((6, 4)))
        assert [q.shape for q in s.qs] == shapes
    # stacked layers and conv kernels through MuonDimensionNumbers; vectors and scalars elementwise
    params = {
        "conv": jnp.ones((3, 3, 2, 4), jnp.bfloat16),
        "stack": jnp.ones((2, 4, 3), jnp.bfloat16),
        "b": jnp.ones(3, jnp.bfloat16),
        "s": jnp.ones((), jnp.bfloat16),
    }
    dims = {
        "conv": contrib.MuonDimensionNumbers((0, 1, 2), 3),
        "stack": contrib.MuonDimensionNumbers(1, 2),
        "b": None,
        "s": None,
    }
    opt = contrib.kron(1e-3, weight_dimension_numbers=dims, preconditioner_update_probability=1.0)
    s = opt.init(params)
    assert [q.shape for q in s[0].qs["conv"]] == [(1, 18, 18), (1, 4, 4)]
    assert [q.shape for q in s[0].qs["stack"]] == [(2, 4, 4), (2, 3, 3)]
    assert [q.shape for q in s[0].qs["s"]] == [(1,)]
    abstract = opt.init(jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), params))
    sig = lambda t: jax.tree.map(lambda x: (x.shape, x.dtype), t)
    assert sig(s) == sig(abstract)
    u, s2 = jax.jit(opt.update)(params, s, params)
    assert all(x.dtype == jnp.bfloat16 for x in jax.tree.leaves(u)) and sig(s2) == sig(s)
    assert all(q.dtype == jnp.float32 for q in jax.tree.leaves(s2[0].qs))
    # each stacked layer is preconditioned on its own: same as the 2-D optimizer on each layer
    g = jax.random.normal(jax.random.key(2), (2, 4, 3))
    tx3 = contrib.scale_by_kron(
        preconditioner_update_probability=0.0, weight_dimension_numbers=contrib.MuonDimensionNumbers(1, 2)
    )
    tx2 = contrib.scale_by_kron(preconditioner_update_probability=0.0)
    u3 = tx3.update(g, tx3.init(g))[0]
    for k in range(2):
        np.testing.assert_allclose(u3[k], tx2.update(g[k], tx2.init(g[k]))[0], rtol=1e-6)


def test_errors():
    with pytest.raises(ValueError, match=r"scale_by_kron\(b1=\.\.\.\) must be in \[0, 1\); got 1\.0"):
        contrib.scale_by_kron(b1=1.0)
    with pytest.raises(ValueError, match=r"scale_by_kron\(preconditioner_update_probability=\.\.\.\) must be in"):
        contrib.scale_by_kron(preconditioner_update_probability=1.5)
    with pytest.raises(ValueError, match=r"scale_by_kron\(memory_save_mode=\.\.\.\) must be one of"):
        contrib.scale_by_kron(memory_save_mode="some_diag")
    with pytest.raises(TypeError, match=r"scale_by_kron\(max_size_triangular=\.\.\.\) must be an int"):
        contrib.scale_by_kron(max_size_triangular=2.5)
    with pytest.raises(ValueError, match=r"scale_by_kron\(precond_lr=\.\.\.\) must be >= 0"):
        contrib.scale_by_kron(precond_lr=-0.1)
    with pytest.raises(ValueError, match=r"scale_by_kron\(precond_init_scale=\.\.\.\) must be > 0"):
        contrib.scale_by_kron(precond_init_scale=0.0)
    with pytest.raises(ValueError, match=r"scale_by_kron\(key=\.\.\.\) must be an int seed or a PRNG key"):
        contrib.scale_by_kron(key="seed")
    with pytest.raises(ValueError, match=r"precond_update_prob_schedule\(min_prob=\.\.\.\) must be in \[0, 0\.5\]"):
        contrib.precond_update_prob_schedule(max_prob=0.5, min_prob=0.7)
    with pytest.raises(ValueError, match=r"precond_update_prob_schedule\(max_prob=\.\.\.\) must be in \[0, 1\]"):
        contrib.precond_update_prob_schedule(max_prob=2.0)
    with pytest.raises(ValueError, match=r"precond_update_prob_schedule\(decay=\.\.\.\) must be >= 0"):
        contrib.precond_update_prob_schedule(decay=-1.0)
    with pytest.raises(ValueError, match=r"kron\(weight_decay=\.\.\.\) must be >= 0"):
        contrib.kron(1e-3, weight_decay=-1.0)


def test_balance_keeps_the_preconditioner():
    rng = np.random.default_rng(5)
    ql = jnp.triu(jnp.asarray(rng.normal(size=(3, 3)))) * 40.0
    qr = jnp.triu(jnp.asarray(rng.normal(size=(2, 2)))) / 40.0
    bl, br = _kron._balance(ql, qr)
    np.testing.assert_allclose(jnp.max(jnp.abs(bl)), jnp.max(jnp.abs(br)), rtol=1e-6)
    np.testing.assert_allclose(jnp.kron(bl.T @ bl, br.T @ br), jnp.kron(ql.T @ ql, qr.T @ qr), rtol=1e-5, atol=1e-6)


def test_the_program_grows_with_the_shapes_not_the_leaves():
    # one random draw per dtype and one loop per matrix shape, however many layers share it: drawn per leaf and
    # looped per leaf, a GPT-2-shaped tree compiled in 37 s (now 15 s)
    opt = contrib.kron(1e-2, key=0)

    def counts(layers):
        params = {f"w{i}": jnp.ones((8, 4)) for i in range(layers)} | {f"b{i}": jnp.ones(4) for i in range(layers)}
        state = opt.init(params)
        names = [e.primitive.name for e in equations(jax.make_jaxpr(opt.update)(params, state, params).jaxpr)]
        return {k: names.count(k) for k in ("random_bits", "threefry2x32", "scan", "while")}

    assert counts(6) == counts(1)


@pytest.mark.parametrize(
    "n, blocks", [(37, ((1, 4),)), (37, ((1, 8),)), (515, _kron._TRIANGULAR_BLOCKS), (5, ((1, 8),))]
)
def test_triangular_product_by_blocks(monkeypatch, n, blocks):
    """The factors' product by blocks is the product of the two upper-triangular matrices (float64 NumPy)."""
    monkeypatch.setattr(_kron, "_TRIANGULAR_BLOCKS", blocks)
    rng = np.random.default_rng(n)
    d, q = np.triu(rng.normal(size=(n, n))), np.triu(rng.normal(size=(n, n)))
    with jax.enable_x64(True):
        out = np.asarray(jax.jit(_kron._triangular_product)(jnp.asarray(d), jnp.asarray(q)))
    np.testing.assert_allclose(out, d @ q, rtol=1e-12, atol=1e-12 * n)
    assert np.all(np.tril(out, -1) == 0)
