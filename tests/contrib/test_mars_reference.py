"""gradax.contrib.mars against pytorch_optimizer.MARS (float64, 20 steps, AdamW and Lion variants)."""

import jax.numpy as jnp
import numpy as np
import pytest

import gradax

from ._torch_reference import assert_runs_close, problem, run_gradax, run_torch

torch = pytest.importorskip("torch")
pytorch_optimizer = pytest.importorskip("pytorch_optimizer")

SHAPES = {"w": (4, 3), "v": (3, 5)}


def _reference(variant, weight_decay, cautious=False, eps=0.0):
    return lambda ps: pytorch_optimizer.MARS(
        ps,
        lr=3e-3,
        betas=(0.95, 0.99),
        gamma=0.025,
        mars_type=variant,
        optimize_1d=True,
        weight_decay=weight_decay,
        cautious=cautious,
        eps=eps,
        foreach=False,
    )


@pytest.mark.parametrize("variant", ["adamw", "lion"])
def test_mars_matches_pytorch_optimizer(variant):
    # a spike at step 5 makes the unit-norm clipping of the corrected gradient bite
    params, grads = problem(SHAPES, steps=20, spikes={5: 10.0})
    ours, state = run_gradax(gradax.contrib.mars(3e-3, eps=0.0, weight_decay=0.1, variant=variant), params, grads)
    theirs, opt = run_torch(_reference(variant, 0.1), params, grads)
    assert_runs_close(ours, theirs, rtol=1e-9, atol=1e-10)
    state = state[0]  # the chain's first state: ScaleByMarsState
    assert type(state).__name__ == "ScaleByMarsState"
    for k, p in zip(SHAPES, opt.param_groups[0]["params"]):
        np.testing.assert_allclose(state.mu[k], opt.state[p]["exp_avg"].numpy(), rtol=1e-12)
        np.testing.assert_allclose(state.last_grad[k], grads[-1][k], rtol=0)
        if variant == "adamw":
            np.testing.assert_allclose(state.nu[k], opt.state[p]["exp_avg_sq"].numpy(), rtol=1e-12)


def test_cautious_mars_matches_pytorch_optimizer():
    params, grads = problem(SHAPES, steps=20)
    tx = gradax.chain(
        gradax.cautious(gradax.contrib.scale_by_mars(), aligned_with_gradient=True),
        gradax.scale_by_learning_rate(3e-3),
    )
    ours, _ = run_gradax(tx, params, grads)
    theirs, _ = run_torch(_reference("adamw", 0.0, cautious=True, eps=1e-8), params, grads)
    assert_runs_close(ours, theirs, rtol=1e-9, atol=1e-6)


def test_mars_eps_follows_the_paper():
    # docs/differences.md: pytorch-optimizer divides (sqrt(v) + eps) by sqrt(1 - b2^t), so its eps is
    # eps / sqrt(1 - b2^t) in the paper's sqrt(v_hat) + eps; gradax follows the paper.
    params, grads = problem(SHAPES, steps=20)
    ours, _ = run_gradax(gradax.contrib.mars(3e-3, eps=1e-3), params, grads)
    theirs, _ = run_torch(_reference("adamw", 0.0, eps=1e-3), params, grads)
    steps = [(ours[i]["w"] - params["w"], theirs[i]["w"] - params["w"]) for i in (0, 19)]
    assert np.max(np.abs(steps[0][0] - steps[0][1])) > 1e-5  # eps / sqrt(0.01) = 10 eps at step 1
    paper = gradax.chain(gradax.contrib.scale_by_mars(eps=0.0), gradax.scale_by_learning_rate(3e-3))
    ours0, _ = run_gradax(paper, params, grads)
    assert np.max(np.abs(ours0[0]["w"] - ours[0]["w"])) > 0


def test_mars_with_gamma_zero_is_clipped_adam():
    params, grads = problem({"w": (3,)}, steps=5)
    grads = [{"w": g["w"] * 0.1} for g in grads]  # norms below 1: no clipping
    ours, _ = run_gradax(gradax.contrib.mars(1e-2, gamma=0.0), params, grads)
    adam, _ = run_gradax(gradax.adam(1e-2, b1=0.95, b2=0.99, eps=1e-8), params, grads)
    assert_runs_close(ours, adam, rtol=1e-12, atol=1e-14)


def test_mars_lion_state_has_no_second_moment():
    tx = gradax.contrib.scale_by_mars(variant="lion")
    assert tx.init({"a": jnp.zeros(3)}).nu == ()


def test_mars_errors():
    with pytest.raises(ValueError, match=r"scale_by_mars\(variant=\.\.\.\) must be one of 'adamw', 'lion'"):
        gradax.contrib.mars(variant="shampoo")
    with pytest.raises(ValueError, match=r"scale_by_mars\(gamma=\.\.\.\) must be >= 0"):
        gradax.contrib.mars(gamma=-1.0)
    with pytest.raises(ValueError, match=r"scale_by_mars\(max_norm=\.\.\.\) must be > 0"):
        gradax.contrib.scale_by_mars(max_norm=0.0)
    with pytest.raises(ValueError, match=r"scale_by_mars\(b1=\.\.\.\) must be"):
        gradax.contrib.scale_by_mars(b1=1.0)
