"""gradax.contrib.spam against pytorch_optimizer.SPAM (float64, 30 steps with resets, warmups and clipped spikes)."""

import jax.numpy as jnp
import numpy as np
import pytest

import gradax

from ._torch_reference import assert_runs_close, problem, run_gradax, run_torch

torch = pytest.importorskip("torch")
pytorch_optimizer = pytest.importorskip("pytorch_optimizer")

SHAPES = {"w": (4, 3), "b": (3,)}
# resets at steps 8, 16, 24; a 3-step warmup after each; clipping from step 2 (and 2 steps after a reset on)
KW = {"reset_interval": 8, "warmup_steps": 3, "clip_delay": 2, "threshold": 50.0}
SPIKES = {4: 100.0, 12: 100.0, 21: 1e3}


def _reference(weight_decay=0.0):
    return lambda ps: pytorch_optimizer.SPAM(
        ps,
        lr=1e-2,
        weight_decay=weight_decay,
        update_proj_gap=KW["reset_interval"],
        warmup_epoch=KW["warmup_steps"],
        grad_accu_steps=KW["clip_delay"],
        threshold=KW["threshold"],
        foreach=False,
    )


def test_spam_matches_pytorch_optimizer():
    params, grads = problem(SHAPES, steps=30, spikes=SPIKES)
    ours, state = run_gradax(gradax.contrib.spam(1e-2, **KW), params, grads)
    theirs, opt = run_torch(_reference(), params, grads)
    assert_runs_close(ours, theirs, rtol=1e-11, atol=1e-12)
    state = state[0]
    for k, p in zip(SHAPES, opt.param_groups[0]["params"]):
        np.testing.assert_allclose(state.mu[k], opt.state[p]["exp_avg"].numpy().reshape(state.mu[k].shape), rtol=1e-11)
        np.testing.assert_allclose(
            state.nu[k], opt.state[p]["exp_avg_sq"].numpy().reshape(state.nu[k].shape), rtol=1e-11
        )


def test_spam_clips_spikes_and_resets():
    params, grads = problem(SHAPES, steps=22, spikes=SPIKES)
    _, clipped = run_gradax(gradax.contrib.spam(1e-2, **KW), params, grads)
    _, unclipped = run_gradax(gradax.contrib.spam(1e-2, **{**KW, "threshold": 0.0}), params, grads)
    # the 1000x spike at step 22 reaches the second moment only when clipping is off
    assert np.max(unclipped[0].nu["w"]) > 100 * np.max(clipped[0].nu["w"])
    tx = gradax.contrib.scale_by_spam(**KW)
    s = tx.init(jnp.ones(2))
    for i in range(8):
        _, s = tx.update(jnp.full(2, 1.0 + i), s)
    # step 8 reset the moments: only that step's gradient is in them
    np.testing.assert_allclose(s.mu, 0.1 * 8.0, rtol=1e-6)
    np.testing.assert_allclose(s.nu, 0.001 * 64.0, rtol=1e-4)  # float32 1 - b2


def test_spam_weight_decay_is_decoupled_from_the_old_params():
    # docs/differences.md: pytorch-optimizer multiplies the params by (1 - lr wd) after the step
    params, grads = problem(SHAPES, steps=20)
    ours, _ = run_gradax(gradax.contrib.spam(1e-2, weight_decay=0.1, **KW), params, grads)
    theirs, _ = run_torch(_reference(weight_decay=0.1), params, grads)
    assert_runs_close(ours, theirs, rtol=0, atol=1e-4)
    assert np.max(np.abs(ours[-1]["w"] - theirs[-1]["w"])) > 1e-8


def test_spam_errors():
    with pytest.raises(ValueError, match=r"scale_by_spam\(reset_interval=\.\.\.\) must be >= 1"):
        gradax.contrib.spam(reset_interval=0)
    with pytest.raises(ValueError, match=r"scale_by_spam\(threshold=\.\.\.\) must be >= 0"):
        gradax.contrib.scale_by_spam(threshold=-1.0)
    with pytest.raises(ValueError, match=r"scale_by_spam\(warmup_steps=\.\.\.\) must be >= 0"):
        gradax.contrib.scale_by_spam(warmup_steps=-1)
