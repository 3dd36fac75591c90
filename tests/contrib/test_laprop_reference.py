"""gradax.contrib.laprop against pytorch_optimizer.LaProp (float64, 20 steps)."""

import numpy as np
import pytest

import gradax

from ._torch_reference import assert_runs_close, problem, run_gradax, run_torch

torch = pytest.importorskip("torch")
pytorch_optimizer = pytest.importorskip("pytorch_optimizer")

SHAPES = {"w": (4, 3), "b": (3,)}


def _reference(weight_decay=0.0, cautious=False):
    return lambda ps: pytorch_optimizer.LaProp(
        ps, lr=4e-3, betas=(0.9, 0.99), eps=1e-15, weight_decay=weight_decay, cautious=cautious, foreach=False
    )


def test_laprop_matches_pytorch_optimizer():
    params, grads = problem(SHAPES, steps=20)
    ours, state = run_gradax(gradax.contrib.laprop(4e-3, b1=0.9, b2=0.99), params, grads)
    theirs, opt = run_torch(_reference(), params, grads)
    assert_runs_close(ours, theirs, rtol=1e-11, atol=1e-12)
    state = state[0]
    for k, p in zip(SHAPES, opt.param_groups[0]["params"]):
        # pytorch-optimizer keeps the learning rate inside its momentum
        np.testing.assert_allclose(4e-3 * state.mu[k], opt.state[p]["exp_avg"].numpy(), rtol=1e-10)
        np.testing.assert_allclose(state.nu[k], opt.state[p]["exp_avg_sq"].numpy(), rtol=1e-12)


def test_cautious_laprop_matches_pytorch_optimizer():
    params, grads = problem(SHAPES, steps=20)
    ours, _ = run_gradax(gradax.cautious(gradax.contrib.laprop(4e-3, b1=0.9, b2=0.99)), params, grads)
    theirs, _ = run_torch(_reference(cautious=True), params, grads)
    assert_runs_close(ours, theirs, rtol=1e-11, atol=1e-12)


def test_laprop_weight_decay_is_decoupled_from_the_old_params():
    # docs/differences.md: pytorch-optimizer decays the params after the step, theta <- (theta - eta u)(1 - eta lam);
    # gradax decays the params before it (theta <- theta - eta (u + lam theta)), as AdamW does.
    params, grads = problem(SHAPES, steps=20)
    wd, lr = 0.5, 4e-3
    ours, _ = run_gradax(gradax.contrib.laprop(lr, b1=0.9, b2=0.99, weight_decay=wd), params, grads)
    theirs, _ = run_torch(_reference(weight_decay=wd), params, grads)
    # gradax's first step: theta_0 - lr * (u_1 + wd * theta_0); the reference: (theta_0 - lr * u_1) * (1 - lr * wd)
    nodecay, _ = run_gradax(gradax.contrib.laprop(lr, b1=0.9, b2=0.99), params, grads[:1])
    step = {k: nodecay[0][k] - params[k] for k in params}
    for k in params:
        np.testing.assert_allclose(ours[0][k], params[k] + step[k] - lr * wd * params[k], rtol=1e-12)
        np.testing.assert_allclose(theirs[0][k], (params[k] + step[k]) * (1 - lr * wd), rtol=1e-12)
    # the two orders differ by lr^2 wd |u| <= 1e-5 per step
    assert_runs_close(ours, theirs, rtol=0, atol=5e-4)
    assert np.max(np.abs(ours[-1]["w"] - theirs[-1]["w"])) > 1e-7


def test_laprop_errors():
    with pytest.raises(ValueError, match=r"scale_by_laprop\(b2=\.\.\.\) must be"):
        gradax.contrib.laprop(b2=1.5)
    with pytest.raises(ValueError, match=r"scale_by_laprop\(eps=\.\.\.\) must be >= 0"):
        gradax.contrib.scale_by_laprop(eps=-1.0)
