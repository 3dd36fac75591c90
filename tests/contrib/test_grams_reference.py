"""gradax.contrib.grams against pytorch_optimizer.Grams (float64, 20 steps)."""

import jax.numpy as jnp
import numpy as np
import pytest

import gradax

from ._torch_reference import assert_runs_close, problem, run_gradax, run_torch

torch = pytest.importorskip("torch")
pytorch_optimizer = pytest.importorskip("pytorch_optimizer")

SHAPES = {"w": (4, 3), "b": (3,)}


@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
def test_grams_matches_pytorch_optimizer(weight_decay):
    params, grads = problem(SHAPES, steps=20)
    ours, state = run_gradax(gradax.contrib.grams(1e-2, weight_decay=weight_decay), params, grads)
    theirs, opt = run_torch(
        lambda ps: pytorch_optimizer.Grams(ps, lr=1e-2, weight_decay=weight_decay, foreach=False), params, grads
    )
    assert_runs_close(ours, theirs, rtol=1e-12, atol=1e-13)
    state = state[0]
    for k, p in zip(SHAPES, opt.param_groups[0]["params"]):
        np.testing.assert_allclose(state.mu[k], opt.state[p]["exp_avg"].numpy(), rtol=1e-12)
        np.testing.assert_allclose(state.nu[k], opt.state[p]["exp_avg_sq"].numpy(), rtol=1e-12)


def test_grams_moves_along_minus_the_gradient_sign():
    tx = gradax.contrib.grams(1.0)
    p = jnp.zeros(3)
    s = tx.init(p)
    _, s = tx.update(jnp.array([1.0, 1.0, 1.0]), s, p)
    u, _ = tx.update(jnp.array([-0.1, 0.0, 2.0]), s, p)
    assert u[0] > 0 and u[1] == 0 and u[2] < 0


def test_grams_errors():
    with pytest.raises(ValueError, match=r"scale_by_grams\(b1=\.\.\.\) must be"):
        gradax.contrib.grams(b1=-0.1)
    with pytest.raises(ValueError, match=r"scale_by_grams\(eps=\.\.\.\) must be >= 0"):
        gradax.contrib.scale_by_grams(eps=-1.0)
