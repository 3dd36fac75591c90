"""Tests of gradax.contrib NorMuon, AdaMuon, MuonClip and the Polar Express preset, against pytorch_optimizer 4.1.0.

How the references are compared: both sides run in float64 (the reference's Newton-Schulz is patched from its
bfloat16 default to float64), from the same initial parameters, with the same gradient sequence, for 22 steps. A
PyTorch weight is ``(out, in)``; the gradax weight is its transpose ``(in, out)`` (the output neurons are the
columns), so the reference gets ``W.T`` and its gradients transposed. Tolerance: rtol 2e-6 after 22 steps in float64;
what is left is where the Newton-Schulz input's norm floor sits (gradax divides by ``||X|| + eps``, the reference by
``max(||X||, 1e-7)``), a relative 1e-7 per step.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradax
from gradax import contrib

torch = pytest.importorskip("torch")
po = pytest.importorskip("pytorch_optimizer")
from pytorch_optimizer.optimizer.muon import adamuon as po_adamuon  # noqa: E402
from pytorch_optimizer.optimizer.muon import base as po_base  # noqa: E402
from pytorch_optimizer.optimizer.muon import normuon as po_normuon  # noqa: E402
from pytorch_optimizer.optimizer.utils import matrix as po_matrix  # noqa: E402

STEPS = 22
SHAPES = {"w1": (6, 4), "w2": (3, 5)}  # gradax (in, out) layout


@pytest.fixture
def f64_reference(monkeypatch):
    ns = functools.partial(po_matrix.zero_power_via_newton_schulz_5, dtype=torch.float64)
    for mod in (po_base, po_normuon, po_adamuon):
        monkeypatch.setattr(mod, "zero_power_via_newton_schulz_5", ns)


def _data(seed=0):
    rng = np.random.default_rng(seed)
    params = {k: rng.normal(size=s) for k, s in SHAPES.items()}
    grads = [{k: rng.normal(size=s) for k, s in SHAPES.items()} for _ in range(STEPS)]
    return params, grads


def _run_gradax(opt, params, grads, extra=None):
    with jax.enable_x64(True):
        p = {k: jnp.asarray(v, jnp.float64) for k, v in params.items()}
        s = opt.init(p)
        step = jax.jit(lambda g, s, p, e: opt.update(g, s, p, **e))
        for i, g in enumerate(grads):
            u, s = step({k: jnp.asarray(v, jnp.float64) for k, v in g.items()}, s, p, extra(i) if extra else {})
            p = gradax.apply_updates(p, u)
        return {k: np.asarray(v) for k, v in p.items()}


def _run_torch(make, params, grads, step_kwargs=None):
    tp = {k: torch.tensor(v.T.copy(), dtype=torch.float64, requires_grad=True) for k, v in params.items()}
    opt = make(tp)
    for i, g in enumerate(grads):
        for k, v in g.items():
            tp[k].grad = torch.tensor(v.T.copy(), dtype=torch.float64)
        opt.step(**(step_kwargs(i) if step_kwargs else {}))
    return {k: v.detach().numpy().T for k, v in tp.items()}


def _close(ours, theirs, rtol=1e-9, atol=1e-10):
    for k in ours:
        np.testing.assert_allclose(ours[k], theirs[k], rtol=rtol, atol=atol, err_msg=k)


@pytest.mark.parametrize("update_scale", ["rms", "preserve_norm"])
def test_normuon_matches_pytorch_optimizer(f64_reference, update_scale):
    params, grads = _data(1)
    ours = _run_gradax(
        contrib.normuon(0.02, weight_decay=0.1, update_scale=update_scale, beta=0.9, b2=0.8), params, grads
    )
    theirs = _run_torch(
        lambda tp: po.NorMuon(
            [{"params": list(tp.values()), "use_muon": True}],
            lr=0.02,
            weight_decay=0.1,
            momentum=0.9,
            beta2=0.8,
            update_scale="match_rms" if update_scale == "rms" else "preserve_norm",
            foreach=False,
        ),
        params,
        grads,
    )
    _close(ours, theirs, rtol=2e-6, atol=1e-8)


def test_adamuon_matches_pytorch_optimizer(f64_reference):
    params, grads = _data(2)
    ours = _run_gradax(
        contrib.adamuon(0.01, weight_decay=0.1, b1=0.9, b2=0.95, eps=1e-8, nesterov=False), params, grads
    )
    theirs = _run_torch(
        lambda tp: po.AdaMuon(
            [{"params": list(tp.values()), "use_muon": True}],
            lr=0.01,
            weight_decay=0.1,
            betas=(0.9, 0.95),
            eps=1e-8,
            foreach=False,
        ),
        params,
        grads,
    )
    _close(ours, theirs, rtol=2e-6, atol=1e-8)


def test_muon_clip_matches_pytorch_optimizer(f64_reference):
    # w1 is a query projection, w2 a key projection: 4 output columns each, 2 heads of 2
    params, grads = _data(3)
    params["w2"] = params["w2"][:, :4]
    params["w1"] = params["w1"][:4]
    for g in grads:
        g["w2"] = g["w2"][:, :4]
        g["w1"] = g["w1"][:4]
    logits = [np.array([1.0 + 3.0 * i, 50.0 / (i + 1)]) for i in range(STEPS)]
    labels = gradax.transforms.path_labels({"w1": "query", "w2": "key"})
    opt = contrib.muon_clip(0.05, qk_clip_labels=labels, qk_clip_threshold=20.0, weight_decay=0.1, beta=0.9)
    ours = _run_gradax(opt, params, grads, extra=lambda i: {"max_logits": {"": jnp.asarray(logits[i])}})

    def make(tp):
        return po.MuonClip(
            [
                {"params": [tp["w1"]], "use_muon": True, "attention_name": "a", "qk_clip": "query"},
                {"params": [tp["w2"]], "use_muon": True, "attention_name": "a", "qk_clip": "key"},
            ],
            lr=0.05,
            weight_decay=0.1,
            momentum=0.9,
            qk_clip_threshold=20.0,
            foreach=False,
        )

    theirs = _run_torch(make, params, grads, lambda i: {"attention_max_logits": {"a": torch.tensor(logits[i])}})
    _close(ours, theirs, rtol=2e-6, atol=1e-8)


def test_muon_clip_rescales_only_labelled_heads_above_threshold():
    params = {"q": jnp.ones((2, 4)), "k": jnp.ones((2, 4)), "v": jnp.ones((2, 4)), "b": jnp.ones(4)}
    labels = {"q": "query", "k": "key", "v": "none", "b": "none"}
    opt = contrib.muon_clip(0.0, qk_clip_labels=labels, qk_clip_threshold=10.0, qk_clip_alpha=0.25)
    s = opt.init(params)
    u, _ = opt.update(params, s, params, max_logits={"": jnp.array([160.0, 1.0])})
    new = gradax.apply_updates(params, u)
    np.testing.assert_allclose(new["q"][0], [0.5, 0.5, 1, 1], rtol=1e-6)  # (10/160)^0.25
    np.testing.assert_allclose(new["k"][0], [0.125, 0.125, 1, 1], rtol=1e-6)  # (10/160)^0.75
    np.testing.assert_allclose(new["v"], params["v"])
    # no logits, or a key that does not cover the leaf: nothing is clipped
    for extra in ({}, {"max_logits": {"encoder": jnp.array([160.0, 1.0])}}):
        u, _ = opt.update(params, s, params, **extra)
        np.testing.assert_allclose(gradax.apply_updates(params, u)["q"], params["q"])
    # stacked (layers, d, heads*k) weight with (layers, heads) logits
    stacked = {"q": jnp.ones((2, 3, 4))}
    opt = contrib.muon_clip(
        0.0,
        qk_clip_labels={"q": "query"},
        qk_clip_threshold=10.0,
        muon_weight_dimension_numbers={"q": contrib.MuonDimensionNumbers(1, 2)},
    )
    u, _ = opt.update(stacked, opt.init(stacked), stacked, max_logits={"q": jnp.array([[40.0, 1.0], [1.0, 40.0]])})
    new = gradax.apply_updates(stacked, u)["q"]
    np.testing.assert_allclose(new[0, 0], [0.5, 0.5, 1, 1], rtol=1e-6)
    np.testing.assert_allclose(new[1, 0], [1, 1, 0.5, 0.5], rtol=1e-6)


def test_polar_express_preset():
    coeffs = contrib._muon_family.preset_rows("muon", "polar_express", 8)
    # the composed polynomials send every singular value in [1e-3, 1] close to 1 (Amsel et al., 2025)
    s = np.geomspace(1e-3, 1.0, 2000)
    for a, b, c in coeffs:
        s = a * s + b * s**3 + c * s**5
    assert s.min() > 0.85 and s.max() < 1.15
    # the same iteration as the reference's 'polar_express' preset
    g = np.random.default_rng(0).normal(size=(5, 7))
    with jax.enable_x64(True):
        tx = contrib.scale_by_muon(ns_coeffs=coeffs, ns_steps=8, beta=0.0, nesterov=False, eps=1e-7)
        ours = np.asarray(tx.update(jnp.asarray(g), tx.init(jnp.asarray(g)))[0])
    theirs = po_matrix.zero_power_via_newton_schulz_5(
        torch.tensor(g), num_steps=8, weights="polar_express", dtype=torch.float64
    ).numpy()
    np.testing.assert_allclose(ours, theirs, rtol=1e-9, atol=1e-9)
    # ns_steps < 8 takes the first rows; muon accepts the preset by name
    assert contrib._muon_family.preset_rows("muon", "polar_express", 5) == coeffs[:5]
    opt = contrib.muon(0.1, ns_coeffs="polar_express")
    p = {"w": jnp.ones((3, 2))}
    assert opt.update(p, opt.init(p), p)[0]["w"].shape == (3, 2)


def test_shapes_policy_and_dtypes():
    params = {
        "w": jnp.ones((4, 3), jnp.bfloat16),
        "stack": jax.random.normal(jax.random.key(0), (2, 4, 3)).astype(jnp.bfloat16),
        "b": jnp.ones(3, jnp.bfloat16),
        "s": jnp.ones((), jnp.bfloat16),
    }
    dims = {"w": contrib.MuonDimensionNumbers(), "stack": contrib.MuonDimensionNumbers(1, 2), "b": None, "s": None}
    for make in (contrib.normuon, contrib.adamuon):
        opt = make(1e-2, muon_weight_dimension_numbers=dims)
        s = opt.init(params)
        abstract = opt.init(jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), params))
        shapes = lambda t: jax.tree.map(lambda x: (x.shape, x.dtype), t)
        assert shapes(s) == shapes(abstract)
        u, s2 = jax.jit(opt.update)(params, s, params)
        assert all(x.dtype == jnp.bfloat16 for x in jax.tree.leaves(u))
        assert shapes(s2) == shapes(s)
        assert all(x.dtype in (jnp.float32, jnp.int32) for x in jax.tree.leaves(s))
    # stacked layers: each layer is its own matrix
    g = jax.random.normal(jax.random.key(1), (2, 4, 3))
    for scale_by in (contrib.scale_by_normuon, contrib.scale_by_adamuon):
        tx3 = scale_by(weight_dimension_numbers=contrib.MuonDimensionNumbers(1, 2))
        tx2 = scale_by()
        u3 = tx3.update(g, tx3.init(g))[0]
        for k in range(2):
            np.testing.assert_allclose(u3[k], tx2.update(g[k], tx2.init(g[k]))[0], rtol=1e-5, atol=1e-6)
    assert contrib.NorMuonState._fields == ("count", "mu", "nu", "ns_coeffs")
    assert contrib.AdaMuonState._fields == ("count", "mu", "nu", "ns_coeffs")


def test_errors():
    with pytest.raises(ValueError, match=r"scale_by_normuon\(b2=\.\.\.\) must be in \[0, 1\); got 1\.5"):
        contrib.scale_by_normuon(b2=1.5)
    with pytest.raises(ValueError, match=r"scale_by_normuon\(update_scale=\.\.\.\) must be one of 'rms'"):
        contrib.scale_by_normuon(update_scale="x")
    with pytest.raises(ValueError, match=r"scale_by_adamuon\(target_rms=\.\.\.\) must be > 0"):
        contrib.scale_by_adamuon(target_rms=0.0)
    with pytest.raises(ValueError, match=r"normuon\(ns_coeffs=\.\.\.\) must be one of 'standard', 'dion'"):
        contrib.normuon(0.1, ns_coeffs="x")
    with pytest.raises(ValueError, match=r"adamuon\(learning_rate=\.\.\.\) must be >= 0"):
        contrib.adamuon(-1.0)
    with pytest.raises(ValueError, match=r"muon_clip\(qk_clip_threshold=\.\.\.\) must be > 0"):
        contrib.muon_clip(0.1, qk_clip_threshold=0.0)
    with pytest.raises(ValueError, match=r"muon_clip\(qk_clip_alpha=\.\.\.\) must be in \[0, 1\]"):
        contrib.muon_clip(0.1, qk_clip_alpha=2.0)
    tx = contrib.scale_by_normuon()
    with pytest.raises(ValueError, match=r"scale_by_normuon: a parameter of rank 1 is not a matrix"):
        tx.init(jnp.ones(3))
    params = {"q": jnp.ones((2, 4))}
    opt = contrib.muon_clip(0.1, qk_clip_labels={"q": "query"})
    s = opt.init(params)
    with pytest.raises(ValueError, match=r"needs `params`"):
        opt.update(params, s, None, max_logits={"": jnp.ones(2)})
    with pytest.raises(TypeError, match=r"muon_clip: update\(max_logits=\.\.\.\) must be a mapping"):
        opt.update(params, s, params, max_logits=jnp.ones(2))
    with pytest.raises(ValueError, match=r"max_logits for 'q' must hold one logit per head"):
        opt.update(params, s, params, max_logits={"": jnp.ones(3)})
    vec = {"q": jnp.ones((2, 4)), "bq": jnp.ones(4)}
    opt = contrib.muon_clip(0.1, qk_clip_labels="query")
    with pytest.raises(ValueError, match=r"muon_clip: a parameter of rank 1 is not a matrix\. Label 'bq' 'none'"):
        opt.update(vec, opt.init(vec), vec, max_logits={"": jnp.ones(2)})
    opt = contrib.muon_clip(0.1, qk_clip_labels={"q": "queries"})
    with pytest.raises(ValueError, match=r"muon_clip\(qk_clip_labels=\.\.\.\) must be one of 'query'"):
        opt.update(params, opt.init(params), params, max_logits={"": jnp.ones(2)})


def test_embedding_rows_never_make_a_dense_square():
    # a 50,000-row matrix is orthogonalized through its 8 x 8 Gram side: the compiled step's temporaries stay far
    # below one 50,000 x 50,000 float32 matrix (10 GB)
    emb = jax.ShapeDtypeStruct((50_000, 8), jnp.float32)
    for tx in (contrib.scale_by_normuon(), contrib.scale_by_adamuon()):
        state = jax.eval_shape(tx.init, emb)
        compiled = jax.jit(tx.update).lower(emb, state).compile()
        assert compiled.memory_analysis().temp_size_in_bytes < 50_000 * 8 * 4 * 16
