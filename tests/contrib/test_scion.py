"""Tests of gradax.contrib.scion / scale_by_scion / ScionState against pytorch_optimizer 4.1.0's SCION.

Both sides run in float64 (the reference's Newton-Schulz patched from bfloat16 to float64) from the same parameters
and 22 gradients, one parameter group per layer type. Layouts: a gradax dense weight is ``(in, out)``, a PyTorch one
``(out, in)`` (the reference gets the transpose); an embedding is ``(vocab, dim)`` on both sides (the reference's
``Col(transpose=True)``). Tolerance: rtol 2e-6, the Newton-Schulz norm floor as in tests/contrib/test_muon_family.py.
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
from pytorch_optimizer.optimizer import scion as po_scion  # noqa: E402
from pytorch_optimizer.optimizer.utils import matrix as po_matrix  # noqa: E402

STEPS = 22
SHAPES = {"embed": (7, 3), "hidden": (3, 5), "head": (5, 4), "bias": (4,)}
NORMS = {"embed": "colnorm", "hidden": "spectral", "head": "sign", "bias": "bias"}
TORCH_NORM = {
    "embed": (po_scion.LMONorm.COL, {"transpose": True}),
    "hidden": (po_scion.LMONorm.SPECTRAL, {}),
    "head": (po_scion.LMONorm.SIGN, {}),
    "bias": (po_scion.LMONorm.BIAS, {}),
}
SCALES = {"colnorm": 2.0, "spectral": 3.0, "sign": 50.0, "bias": 0.5}


@pytest.fixture
def f64_reference(monkeypatch):
    ns = functools.partial(po_matrix.zero_power_via_newton_schulz_5, dtype=torch.float64)
    monkeypatch.setattr(po_scion, "zero_power_via_newton_schulz_5", ns)


def _torch_layout(k, x):
    return x.T.copy() if k in ("hidden", "head") else x.copy()


def _compare(constrained, weight_decay, lr):
    rng = np.random.default_rng(0)
    params = {k: rng.normal(size=s) for k, s in SHAPES.items()}
    grads = [{k: rng.normal(size=s) for k, s in SHAPES.items()} for _ in range(STEPS)]
    opt = contrib.scion(
        lr, momentum=0.3, layer_norms=NORMS, scales=SCALES, weight_decay=weight_decay, constrained=constrained
    )
    with jax.enable_x64(True):
        p = {k: jnp.asarray(v) for k, v in params.items()}
        s = opt.init(p)
        step = jax.jit(opt.update)
        for g in grads:
            u, s = step({k: jnp.asarray(v) for k, v in g.items()}, s, p)
            p = gradax.apply_updates(p, u)
        ours = {k: np.asarray(v) for k, v in p.items()}
    tp = {k: torch.tensor(_torch_layout(k, v), requires_grad=True) for k, v in params.items()}
    groups = [
        {
            "params": [tp[k]],
            "norm_type": TORCH_NORM[k][0],
            "norm_kwargs": TORCH_NORM[k][1],
            "scale": SCALES[NORMS[k]],
        }
        for k in SHAPES
    ]
    ref = po.SCION(groups, lr=lr, momentum=0.3, constraint=constrained, weight_decay=weight_decay, foreach=False)
    for g in grads:
        for k, v in g.items():
            tp[k].grad = torch.tensor(_torch_layout(k, v))
        ref.step()
    for k in SHAPES:
        theirs = _torch_layout(k, tp[k].detach().numpy())
        np.testing.assert_allclose(ours[k], theirs, rtol=2e-6, atol=1e-8, err_msg=k)


def test_uscg_matches_pytorch_optimizer(f64_reference):
    _compare(constrained=False, weight_decay=0.1, lr=0.01)


def test_scg_matches_pytorch_optimizer(f64_reference):
    _compare(constrained=True, weight_decay=0.0, lr=0.05)


def test_lmos_closed_form():
    d = jnp.array([[3.0, -4.0], [0.0, 2.0], [1.0, 1.0]])  # fan_in 3, fan_out 2
    lmo = lambda norm: contrib.scale_by_scion(momentum=1.0, layer_norms=norm, eps=0.0).update(
        d, contrib.scale_by_scion().init(d)
    )[0]
    np.testing.assert_allclose(lmo("sign"), jnp.sign(d) / 3)
    rows = np.linalg.norm(np.asarray(d), axis=1, keepdims=True)
    np.testing.assert_allclose(lmo("colnorm"), d / rows * np.sqrt(2), rtol=1e-6)
    cols = np.linalg.norm(np.asarray(d), axis=0, keepdims=True)
    np.testing.assert_allclose(lmo("rownorm"), d / (cols * np.sqrt(3)), rtol=1e-6)
    np.testing.assert_allclose(lmo("bias"), d / np.sqrt(np.mean(np.asarray(d) ** 2)), rtol=1e-6)
    np.testing.assert_allclose(lmo("none"), d)
    s = np.linalg.svd(np.asarray(lmo("spectral")) / np.sqrt(2 / 3), compute_uv=False)
    assert s.min() > 0.6 and s.max() < 1.25


def test_shapes_policy_and_dtypes():
    # default labels: spectral for matrices (and named stacks), bias for vectors and scalars
    params = {
        "w": jnp.ones((4, 3), jnp.bfloat16),
        "stack": jax.random.normal(jax.random.key(0), (2, 4, 3)).astype(jnp.bfloat16),
        "b": jnp.ones(3, jnp.bfloat16),
        "s": jnp.ones((), jnp.bfloat16),
    }
    dims = {"w": contrib.MuonDimensionNumbers(), "stack": contrib.MuonDimensionNumbers(1, 2), "b": None, "s": None}
    opt = contrib.scion(0.1, weight_dimension_numbers=dims)
    s = opt.init(params)
    abstract = opt.init(jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), params))
    shapes = lambda t: jax.tree.map(lambda x: (x.shape, x.dtype), t)
    assert shapes(s) == shapes(abstract)
    u, s2 = jax.jit(opt.update)(params, s, params)
    assert all(x.dtype == jnp.bfloat16 for x in jax.tree.leaves(u)) and shapes(s2) == shapes(s)
    np.testing.assert_allclose(np.asarray(u["s"], np.float32), -0.1, rtol=1e-2)  # a scalar: the RMS-normalized step
    g = jax.random.normal(jax.random.key(1), (2, 4, 3))
    tx3 = contrib.scale_by_scion(momentum=1.0, weight_dimension_numbers=contrib.MuonDimensionNumbers(1, 2))
    tx2 = contrib.scale_by_scion(momentum=1.0)
    u3 = tx3.update(g, tx3.init(g))[0]
    for k in range(2):
        np.testing.assert_allclose(u3[k], tx2.update(g[k], tx2.init(g[k]))[0], rtol=1e-5, atol=1e-6)
    # labels by path
    labels = gradax.transforms.path_labels({"embed": "colnorm", "head": "sign"}, default="spectral")
    p = {"embed": jnp.ones((6, 2)), "head": jnp.ones((2, 6))}
    tx = contrib.scale_by_scion(momentum=1.0, layer_norms=labels)
    u = tx.update(p, tx.init(p))[0]
    np.testing.assert_allclose(u["head"], jnp.ones((2, 6)) / 2)
    assert contrib.ScionState._fields == ("count", "mu")


def test_errors():
    with pytest.raises(ValueError, match=r"scale_by_scion\(momentum=\.\.\.\) must be in \(0, 1\]; got 0"):
        contrib.scale_by_scion(momentum=0.0)
    with pytest.raises(ValueError, match=r"scale_by_scion\(layer_norms=\.\.\.\) must be one of 'spectral'"):
        contrib.scale_by_scion(layer_norms="nuclear")
    with pytest.raises(ValueError, match=r"scale_by_scion\(scales=\.\.\.\) must be one of 'spectral'"):
        contrib.scale_by_scion(scales={"x": 1.0})
    with pytest.raises(ValueError, match=r"scale_by_scion\(scales=\.\.\.\) must be > 0"):
        contrib.scale_by_scion(scales=-1.0)
    with pytest.raises(ValueError, match=r"scion\(weight_decay=\.\.\.\) must be 0 with constrained=True"):
        contrib.scion(0.1, weight_decay=0.1, constrained=True)
    tx = contrib.scale_by_scion(layer_norms={"v": "spectral"})
    with pytest.raises(ValueError, match=r"scale_by_scion: a parameter of rank 1 is not a matrix\. Give it the 'bias'"):
        tx.update({"v": jnp.ones(3)}, tx.init({"v": jnp.ones(3)}))
    tx = contrib.scale_by_scion(layer_norms={"v": "nuclear"})
    with pytest.raises(ValueError, match=r"scale_by_scion\(layer_norms=\.\.\.\) must be one of"):
        tx.update({"v": jnp.ones((2, 2))}, tx.init({"v": jnp.ones((2, 2))}))


def test_embedding_rows_never_make_a_dense_square():
    emb = jax.ShapeDtypeStruct((50_000, 8), jnp.float32)
    for norm in ("spectral", "colnorm"):
        tx = contrib.scale_by_scion(layer_norms=norm)
        compiled = jax.jit(tx.update).lower(emb, jax.eval_shape(tx.init, emb)).compile()
        assert compiled.memory_analysis().temp_size_in_bytes < 50_000 * 8 * 4 * 16
