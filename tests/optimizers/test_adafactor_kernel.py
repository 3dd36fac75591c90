"""Adafactor's factored second moment in gradax's CPU kernel (``gradax/_kernels/fused_factored.c``,
``gradax_factored_moments``): the row and column statistics and the clipping sum of float32 leaves factored on their
last two axes in one pass over the gradient, where ``gradax.adafactor`` runs on the CPU.

The truth is Optax 0.2.8's ``adafactor`` (float32, the same arithmetic; the sums in another order) and the jnp step of
``scale_by_factored_rms`` (the same code without the kernel). The shapes cover both orientations (the row statistic
normalized where the matrix is wider than tall, the column statistic where it is taller), stacks of matrices, a
leading axis of length 1, a matrix split over the threads by rows and a stack split by matrix.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradax
from gradax import _kernels
from gradax.optimizers import _adafactor
from tests._fused_common import trajectory

optax = pytest.importorskip("optax")

pytestmark = pytest.mark.skipif(not _kernels.load().available, reason="gradax's CPU kernels are not built here")

SHAPES = {
    "wide": (140, 260),
    "tall": (260, 140),
    "stack": (3, 130, 150),
    "unit": (1, 256, 128),
    "vector": (300,),
    "small": (10, 20),  # under min_dim_size_to_factor: not factored
}
LARGE = {"rows": (1100, 1000), "stack": (3, 600, 600)}  # split by rows; split by matrix


def _grads(shapes, steps, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(steps):
        g = {k: rng.normal(size=s).astype(np.float32) for k, s in shapes.items()}
        if i == 3:
            g = {k: v * 30 for k, v in g.items()}  # a spike: the clipping acts
        out.append(g)
    return out


def _run(lib, shapes, steps, **kwargs):
    params = {k: np.random.default_rng(9).normal(size=s) for k, s in shapes.items()}
    return trajectory(lib.adafactor(**kwargs), params, _grads(shapes, steps), lib)


def _calls(tx, params) -> int:
    return jax.jit(tx.update).lower(params, tx.init(params), params).as_text().count("gradax_factored_moments")


def test_the_kernel_takes_float32_leaves_factored_on_their_last_two_axes():
    f32 = {k: jnp.ones(s, jnp.float32) for k, s in SHAPES.items()}
    assert _calls(gradax.adafactor(1e-2), f32) == 1  # the four factored leaves in one call
    assert _calls(gradax.adafactor(1e-2), jax.tree.map(lambda x: x.astype(jnp.bfloat16), f32)) == 0
    # factored on axes 0 and 2 (the two largest): jnp
    assert _calls(gradax.adafactor(1e-2), {"k": jnp.ones((200, 4, 300))}) == 0
    assert _calls(gradax.adafactor(1e-2, factored=False), f32) == 0
    with jax.enable_x64(True):
        assert _calls(gradax.adafactor(1e-2), {"w": jnp.ones((200, 300))}) == 0


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(learning_rate=1e-2),
        dict(learning_rate=1e-2, clipping_threshold=None, multiply_by_parameter_scale=False),
        dict(learning_rate=1e-2, momentum=0.9, weight_decay_rate=1e-3, min_dim_size_to_factor=16),
    ],
    ids=["default", "no_clipping", "momentum"],
)
def test_the_kernel_matches_optax(kwargs):
    """12 steps against Optax 0.2.8's adafactor, both float32: float32 rounding of the statistics only."""
    ours, _ = _run(gradax, SHAPES, 12, **kwargs)
    theirs, _ = _run(optax, SHAPES, 12, **kwargs)
    for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        for k in a:
            np.testing.assert_allclose(a[k], b[k], rtol=2e-6, atol=2e-6, err_msg=f"step {i + 1}, leaf {k!r}")


@pytest.mark.parametrize("shapes", [SHAPES, LARGE], ids=["whole", "split"])
def test_the_kernel_agrees_with_the_jnp_step(shapes, monkeypatch):
    if shapes is LARGE:
        assert _calls(gradax.adafactor(1e-2), {k: jnp.ones(s, jnp.float32) for k, s in shapes.items()}) == 1
    with_kernel, s_kernel = _run(gradax, shapes, 8, learning_rate=1e-2)
    monkeypatch.setattr(_adafactor, "_kernel_applies", lambda: False)
    in_jnp, s_jnp = _run(gradax, shapes, 8, learning_rate=1e-2)
    for i, (a, b) in enumerate(zip(with_kernel, in_jnp, strict=True)):
        for k in a:
            np.testing.assert_allclose(a[k], b[k], rtol=1e-6, atol=1e-6, err_msg=f"step {i + 1}, leaf {k!r}")
    for x, y in zip(jax.tree.leaves(s_kernel), jax.tree.leaves(s_jnp), strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=2e-6)


def test_vmap_and_grad_go_through_the_jnp_step():
    tx = gradax.adafactor(1e-2, min_dim_size_to_factor=4)
    params = {"w": jnp.zeros((6, 8))}
    gs = jnp.asarray(np.random.default_rng(1).normal(size=(3, 6, 8)), jnp.float32)
    assert _calls(tx, params) == 1
    batched = jax.vmap(lambda g: tx.update({"w": g}, tx.init(params), params)[0]["w"])(gs)
    for i in range(3):
        one = jax.jit(tx.update)({"w": gs[i]}, tx.init(params), params)[0]["w"]
        np.testing.assert_allclose(batched[i], one, rtol=1e-6)
    loss = lambda g: jnp.sum(tx.update({"w": g}, tx.init(params), params)[0]["w"] ** 2)
    assert np.all(np.isfinite(jax.grad(loss)(gs[0])))
