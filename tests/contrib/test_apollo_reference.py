"""gradax.contrib.apollo / apollo_mini against pytorch_optimizer.APOLLO (float64, 20 steps, the same random
projection) and against the paper's update written in NumPy."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradax

from ._torch_reference import assert_runs_close, problem, run_gradax, run_torch

torch = pytest.importorskip("torch")
pytorch_optimizer = pytest.importorskip("pytorch_optimizer")
galore = pytest.importorskip("pytorch_optimizer.optimizer.utils.galore")

SHAPES = {"w": (6, 4), "v": (3, 7), "b": (4,)}
LR, EPS, RANK = 1e-2, 1e-6, 2


def _projections(tx, params):
    with jax.enable_x64(True):
        state = tx.init({k: jnp.asarray(v, jnp.float64) for k, v in params.items()})[0]
        return {k: np.asarray(p) for k, p in state.projection.items()}


def _paper(params, grads, proj, scale_type, scale=1.0, b1=0.9, b2=0.999):
    """The paper's APOLLO step for the projected leaves, in NumPy (float64)."""
    out, state = [], {k: (0.0, 0.0, None) for k in proj}
    p = {k: params[k].copy() for k in proj}
    for t, g in enumerate(grads, 1):
        for k, P in proj.items():
            G = g[k]
            rows = G.shape[0] >= G.shape[1]
            R = G @ P.T if rows else P.T @ G
            m, v, last = state[k]
            m = b1 * m + (1 - b1) * R
            v = b2 * v + (1 - b2) * R * R
            N = m / (np.sqrt(v) + EPS)
            if scale_type == "tensor":
                s = np.linalg.norm(N) / (np.linalg.norm(R) + 1e-8)
            else:
                axis = 1 if rows else 0
                s = np.linalg.norm(N, axis=axis, keepdims=True) / (np.linalg.norm(R, axis=axis, keepdims=True) + 1e-8)
            S = G * s
            n = np.linalg.norm(S)
            lim = 1.0 if last is None else max(n / (last + 1e-8), 1.01) / 1.01
            S = S / lim
            state[k] = (m, v, n / lim)
            p[k] = p[k] - LR * np.sqrt(scale) * np.sqrt(1 - b2**t) / (1 - b1**t) * S
        out.append({k: x.copy() for k, x in p.items()})
    return out


def _reference(proj, scale_type, scale):
    def make(ps):
        w, v, b = ps
        group = {"params": [w, v], "rank": RANK, "update_proj_gap": 1000, "scale": scale, "projection_type": "random"}
        return pytorch_optimizer.APOLLO([group, {"params": [b]}], lr=LR, eps=EPS, scale_type=scale_type, foreach=False)

    return make


@pytest.mark.parametrize("scale_type", ["channel", "tensor"])
def test_apollo_against_pytorch_optimizer_and_the_paper(scale_type, monkeypatch):
    params, grads = problem(SHAPES, steps=20, spikes={9: 20.0})  # the spike exercises the norm-growth limiter
    tx = gradax.contrib.apollo(LR, eps=EPS, rank=RANK, update_proj_gap=1000, scale_type=scale_type, key=3)
    proj = {k: v for k, v in _projections(tx, params).items() if k != "b"}
    by_shape = {tuple(p.shape): p for p in proj.values()}

    def same_projection(self, weights, projection_type, from_random_matrix=False):
        return torch.tensor(by_shape[_projection_shape(tuple(weights.shape))])

    monkeypatch.setattr(galore.GaLoreProjector, "get_orthogonal_matrix", same_projection)
    ours, state = run_gradax(tx, params, grads)
    theirs, opt = run_torch(_reference(proj, scale_type, 1.0), params, grads)
    state = state[0]
    # the unprojected leaf runs Adam, the same in both
    assert_runs_close([{"b": o["b"]} for o in ours], [{"b": t["b"]} for t in theirs], rtol=1e-12, atol=1e-13)
    # the moments live in the projected space: the same in both (they only see the gradients and the projection)
    tensors = dict(zip(SHAPES, [p for g in opt.param_groups for p in g["params"]]))
    for k in ("w", "v"):
        np.testing.assert_allclose(state.mu[k], opt.state[tensors[k]]["exp_avg"].numpy(), rtol=1e-11)
        np.testing.assert_allclose(state.nu[k], opt.state[tensors[k]]["exp_avg_sq"].numpy(), rtol=1e-11)
    # the step: gradax scales the raw gradient (the paper); pytorch-optimizer scales the projected gradient and
    # projects it back (docs/differences.md)
    paper = _paper(params, grads, proj, scale_type)
    assert_runs_close([{k: o[k] for k in proj} for o in ours], paper, rtol=1e-11, atol=1e-12)
    assert np.max(np.abs(theirs[0]["w"] - ours[0]["w"])) > 1e-4


def _projection_shape(shape):
    m, n = shape
    return (RANK, n) if m >= n else (m, RANK)


def test_apollo_mini_is_rank_one_tensor_scaling_times_sqrt_128():
    params, grads = problem(SHAPES, steps=20)
    tx = gradax.contrib.apollo_mini(LR, eps=EPS, key=1)
    with jax.enable_x64(True):
        state = tx.init({k: jnp.asarray(v, jnp.float64) for k, v in params.items()})[0]
        proj = {k: np.asarray(state.projection[k]) for k in ("w", "v")}
    assert proj["w"].shape == (1, 4) and proj["v"].shape == (3, 1)
    ours, _ = run_gradax(tx, params, grads)
    paper = _paper(params, grads, proj, "tensor", scale=128.0)
    assert_runs_close([{k: o[k] for k in proj} for o in ours], paper, rtol=1e-11, atol=1e-12)


def test_apollo_refreshes_the_projection_and_keeps_the_moments():
    tx = gradax.contrib.scale_by_apollo(rank=1, update_proj_gap=3, key=0)
    params = {"w": jnp.ones((4, 3))}
    state = tx.init(params)
    projections = [state.projection["w"]]
    for i in range(6):
        _, state = tx.update({"w": jnp.full((4, 3), 1.0 + i)}, state)
        projections.append(state.projection["w"])
    same = [bool(jnp.array_equal(a, b)) for a, b in zip(projections, projections[1:])]
    assert same == [True, True, False, True, True, False]  # redrawn at steps 3 and 6
    assert state.mu["w"].shape == (4, 1) and bool(jnp.all(state.mu["w"] != 0))
    # the key is created in init from the int seed: two inits give the same projection
    np.testing.assert_array_equal(tx.init(params).projection["w"], projections[0])


def test_apollo_state_memory():
    params = {"w": jax.ShapeDtypeStruct((512, 128), jnp.float32)}
    mini = jax.eval_shape(gradax.contrib.apollo_mini(1e-3).init, params)[0]
    sizes = sum(x.size for x in jax.tree.leaves((mini.mu, mini.nu, mini.projection)))
    assert sizes == 2 * 512 + 128


def test_apollo_errors():
    with pytest.raises(ValueError, match=r"scale_by_apollo\(rank=\.\.\.\) must be >= 1"):
        gradax.contrib.apollo(rank=0)
    with pytest.raises(ValueError, match=r"scale_by_apollo\(scale_type=\.\.\.\) must be one of 'channel', 'tensor'"):
        gradax.contrib.scale_by_apollo(scale_type="row")
    with pytest.raises(ValueError, match=r"scale_by_apollo\(key=\.\.\.\) must be an int seed or a typed PRNG key"):
        gradax.contrib.scale_by_apollo(key="seed")
    with pytest.raises(ValueError, match=r"scale_by_apollo\(update_proj_gap=\.\.\.\) must be >= 1"):
        gradax.contrib.scale_by_apollo(update_proj_gap=0)
    with pytest.raises(ValueError, match=r"scale_by_apollo\(scale=\.\.\.\) must be > 0"):
        gradax.contrib.apollo_mini(scale=0.0)
