"""CAME's CPU kernel (``gradax/_kernels/fused_factored.c``): the momentum and the factored statistics of float32
matrices in two passes, where ``gradax.contrib.came`` runs on the CPU.

The truth is the authors' ``came_pytorch.CAME`` in float64 (the kernel runs in float32, so within float32 rounding),
and the jnp step of ``scale_by_came`` (the same float32 arithmetic element by element; the sums in another order).
The shapes cover the kernel's three ways through a leaf: whole on one thread, split by rows over the threads (a
matrix of 2^20 elements or more), split by matrix (a stack of matrices at least as many as the threads), with
leading axes of length 1, a single row and a single column.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradax
from gradax import _kernels
from gradax.contrib import _came
from tests._fused_common import trajectory

from ._torch_reference import problem, run_torch

pytestmark = pytest.mark.skipif(not _kernels.load().available, reason="gradax's CPU kernels are not built here")

SMALL = {"w": (37, 53), "t": (3, 5, 7), "u": (1, 4, 9), "x": (2, 1, 3, 4), "col": (5, 1), "row": (1, 6), "b": (6,)}
# split by rows (one matrix of 1.1M elements), split by matrix (three of 360k)
LARGE = {"rows": (1100, 1000), "stack": (3, 600, 600), "w": (16, 24)}


def _without_kernel(monkeypatch):
    monkeypatch.setattr(_came, "_kernel_applies", lambda: False)


def _calls(tx, params) -> int:
    text = jax.jit(tx.update).lower(params, tx.init(params), params).as_text()
    return text.count("gradax_came_matrices")


def test_the_kernel_takes_the_float32_matrices_and_nothing_else():
    f32 = {k: jnp.ones(s, jnp.float32) for k, s in SMALL.items()}
    assert _calls(gradax.contrib.came(1e-2), f32) == 1  # every matrix in one call; the vector "b" in jnp
    bf16 = {k: jnp.ones(s, jnp.bfloat16) for k, s in SMALL.items()}
    assert _calls(gradax.contrib.came(1e-2), bf16) == 0  # bfloat16 gradients: jnp
    assert _calls(gradax.contrib.came(1e-2, mu_dtype=jnp.bfloat16), f32) == 0  # a bfloat16 momentum: jnp
    with jax.enable_x64(True):
        assert _calls(gradax.contrib.came(1e-2), {"w": jnp.ones((4, 3))}) == 0


@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
def test_the_kernel_matches_came_pytorch_to_float32(weight_decay):
    """20 steps (a spike at step 8), against the float64 reference given the same float32 numbers (params,
    gradients and hyperparameters: 1 - 0.9999 in float32 is 1.00017e-4, which moves the update by about 8e-5
    relative): float32 rounding only."""
    came_pytorch = pytest.importorskip("came_pytorch")
    f32 = lambda x: float(np.float32(x))
    params, grads = problem(SMALL, steps=20, spikes={7: 5.0})
    params = {k: v.astype(np.float32).astype(np.float64) for k, v in params.items()}
    grads = [{k: v.astype(np.float32).astype(np.float64) for k, v in g.items()} for g in grads]
    ours, state = trajectory(gradax.contrib.came(1e-2, weight_decay=weight_decay), params, grads)
    hyper = dict(betas=(f32(0.9), f32(0.999), f32(0.9999)), eps=(f32(1e-30), f32(1e-16)))
    make = lambda ps: came_pytorch.CAME(ps, lr=f32(1e-2), weight_decay=f32(weight_decay), **hyper)
    theirs, opt = run_torch(make, params, grads)
    for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        for k in a:
            np.testing.assert_allclose(a[k], b[k], rtol=2e-6, atol=2e-6, err_msg=f"step {i + 1}, leaf {k!r}")
    state = state[0]
    for k, p in zip(SMALL, opt.param_groups[0]["params"], strict=True):
        ref = opt.state[p]
        np.testing.assert_allclose(state.mu[k], ref["exp_avg"].numpy(), rtol=1e-4, atol=1e-5)
        if k != "b":
            np.testing.assert_allclose(state.nu_row[k], ref["exp_avg_sq_row"].numpy(), rtol=1e-5)
            np.testing.assert_allclose(state.nu_col[k], ref["exp_avg_sq_col"].numpy(), rtol=1e-5)
            np.testing.assert_allclose(state.res_row[k], ref["exp_avg_res_row"].numpy(), rtol=1e-4)
            np.testing.assert_allclose(state.res_col[k], ref["exp_avg_res_col"].numpy(), rtol=1e-4)


@pytest.mark.parametrize("shapes", [SMALL, LARGE], ids=["whole", "split"])
def test_the_kernel_agrees_with_the_jnp_step(shapes, monkeypatch):
    """The kernel against scale_by_came's jnp step, both float32, 12 steps: the same element-wise arithmetic, the
    sums in another order (float32 rounding of the statistics)."""
    params, grads = problem(shapes, steps=12, seed=3, spikes={5: 20.0})
    tx = gradax.contrib.came(1e-2, weight_decay=0.05)
    if shapes is LARGE:
        assert _calls(tx, {k: jnp.ones(s, jnp.float32) for k, s in shapes.items()}) == 1
    with_kernel, s_kernel = trajectory(tx, params, grads)
    _without_kernel(monkeypatch)
    in_jnp, s_jnp = trajectory(tx, params, grads)
    for i, (a, b) in enumerate(zip(with_kernel, in_jnp, strict=True)):
        for k in a:
            np.testing.assert_allclose(a[k], b[k], rtol=1e-6, atol=1e-6, err_msg=f"step {i + 1}, leaf {k!r}")
    for field in ("mu", "nu_row", "nu_col", "res_row", "res_col"):
        for k in shapes:
            x, y = np.asarray(getattr(s_kernel[0], field)[k]), np.asarray(getattr(s_jnp[0], field)[k])
            np.testing.assert_allclose(x, y, rtol=2e-5, atol=1e-6 * np.abs(y).max(), err_msg=f"{field}[{k!r}]")


def test_the_clipping_is_over_the_whole_leaf(monkeypatch):
    """A stack of matrices of very different scales: scale_by_came's clipping divisor is one per leaf (the RMS of the
    whole update), as came_pytorch's, not one per matrix."""
    g = np.stack([np.full((4, 5), 1e-3), np.random.default_rng(0).normal(size=(4, 5)) * 100]).astype(np.float32)
    tx = gradax.contrib.scale_by_came()
    params = {"s": jnp.zeros(g.shape)}
    state = tx.init(params)
    got = np.asarray(jax.jit(tx.update)({"s": jnp.asarray(g)}, state)[0]["s"])
    _without_kernel(monkeypatch)
    want = np.asarray(jax.jit(tx.update)({"s": jnp.asarray(g)}, state)[0]["s"])
    np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize("eps1", [1e-30, 0.0])
@pytest.mark.parametrize("scale", [1e-19, 1e-30, 1e20])
def test_tiny_and_huge_gradients_step_as_the_jnp_step(scale, eps1, monkeypatch):
    """Gradients whose squares are near float32's smallest normal or under it, with and without eps1, or near its
    largest, and a row of zeros: the kernel's update is the jnp step's (NaN where the jnp step's is: XLA:CPU flushes
    subnormals to zero, and the kernel, on XLA's threads, does too)."""
    rng = np.random.default_rng(2)
    g = {"w": jnp.asarray(rng.normal(size=(9, 20)) * scale, jnp.float32)}
    g["w"] = g["w"].at[3].set(0.0)  # a zero row
    tx = gradax.contrib.scale_by_came(eps1=eps1)
    state = tx.init(g)
    got = np.asarray(jax.jit(tx.update)(g, state)[0]["w"])
    _without_kernel(monkeypatch)
    want = np.asarray(jax.jit(tx.update)(g, state)[0]["w"])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=0)


def test_vmap_and_grad_go_through_the_jnp_step():
    """Under vmap the step is jnp's (the kernel takes one step at a time): each example as its own update."""
    tx = gradax.contrib.scale_by_came()
    params = {"w": jnp.zeros((6, 4))}
    gs = jnp.asarray(np.random.default_rng(1).normal(size=(3, 6, 4)), jnp.float32)
    batched = jax.vmap(lambda g: tx.update({"w": g}, tx.init(params))[0]["w"])(gs)
    for i in range(3):
        one = jax.jit(tx.update)({"w": gs[i]}, tx.init(params))[0]["w"]
        np.testing.assert_allclose(batched[i], one, rtol=1e-6)
    loss = lambda g: jnp.sum(tx.update({"w": g}, tx.init(params))[0]["w"] ** 2)
    assert np.all(np.isfinite(jax.grad(loss)(gs[0])))
