"""Clipping transformations: differential tests against Optax 0.2.8, closed forms, dtypes, errors."""

import jax
import jax.numpy as jnp
import numpy as np
import optax  # the test oracle
import pytest

import gradax

KEYS = jax.random.split(jax.random.key(0), 4)
PARAMS = {
    "dense": jax.random.normal(KEYS[0], (3, 4)),
    "bias": jax.random.normal(KEYS[1], (4,)),
    "conv": jax.random.normal(KEYS[2], (2, 2, 3, 4)),
}
GRADS = jax.tree.map(lambda p: 3.0 * p + 0.5, PARAMS)


def _steps(lib, make, steps=3, grads=GRADS, params=PARAMS):
    tx = make(lib)
    state = tx.init(params)
    out = []
    for i in range(steps):
        g = jax.tree.map(lambda x: x * (1.0 + i), grads)
        u, state = tx.update(g, state, params)
        out.append(u)
    return out


@pytest.mark.parametrize(
    "make",
    [
        lambda ox: ox.clip(0.5),
        lambda ox: ox.clip_by_block_rms(0.7),
        lambda ox: ox.clip_by_global_norm(2.0),
        lambda ox: ox.clip_by_global_norm(1e6),
        lambda ox: ox.adaptive_grad_clip(0.05),
        lambda ox: ox.adaptive_grad_clip(0.05, eps=0.1, axis=-1),
        lambda ox: ox.transforms.clip_by_global_norm(1.0),
    ],
)
def test_matches_optax(make):
    for a, b in zip(_steps(optax, make), _steps(gradax, make)):
        jax.tree.map(lambda x, y: np.testing.assert_allclose(x, y, rtol=1e-6, atol=1e-7), a, b)


def test_global_norm_closed_form():
    u, _ = gradax.clip_by_global_norm(1.0).update({"a": jnp.array([3.0]), "b": jnp.array([4.0])}, None)
    np.testing.assert_allclose(u["a"], [0.6], rtol=1e-6)
    np.testing.assert_allclose(u["b"], [0.8], rtol=1e-6)
    assert float(optax.tree.norm(u)) == pytest.approx(1.0, rel=1e-6)


def test_global_norm_zero_max_norm_zero_grads_differs_from_optax():
    """docs/differences.md, "Clipping": Optax 0.2.8 gives NaN (0/0); gradax keeps zero updates."""
    zeros = {"a": jnp.zeros(3), "b": jnp.zeros((2, 2))}
    theirs, _ = optax.clip_by_global_norm(0.0).update(zeros, optax.EmptyState())
    ours, _ = gradax.clip_by_global_norm(0.0).update(zeros, gradax.EmptyState())
    assert all(bool(jnp.all(jnp.isnan(x))) for x in jax.tree.leaves(theirs))
    assert all(bool(jnp.all(x == 0)) for x in jax.tree.leaves(ours))
    # non-zero gradients with max_norm=0 become zero in both
    g = {"a": jnp.ones(3), "b": jnp.ones((2, 2))}
    for lib in (optax, gradax):
        u, _ = lib.clip_by_global_norm(0.0).update(g, lib.EmptyState())
        assert all(bool(jnp.all(x == 0)) for x in jax.tree.leaves(u))


def test_global_norm_bf16_is_accumulated_in_float32():
    g = jnp.full((4096,), 1.0, jnp.bfloat16)  # the squared sum 4096 rounds badly when accumulated in bf16 steps
    u, _ = jax.jit(gradax.clip_by_global_norm(32.0).update)(g * 2.0, None)
    assert u.dtype == jnp.bfloat16
    ref = np.full(4096, 2.0) * 32.0 / np.sqrt(4096 * 4.0)
    np.testing.assert_allclose(np.asarray(u, np.float32), ref, rtol=1e-2)


def test_global_norm_is_one_fused_pass():
    """The jitted update reads each leaf for one reduction and writes it once: no extra traversal ops."""
    tx = gradax.clip_by_global_norm(1.0)
    hlo = jax.jit(lambda g: tx.update(g, None)[0]).lower(GRADS).as_text()
    assert hlo.count("stablehlo.reduce") + hlo.count("stablehlo.reduce(") >= len(GRADS)
    assert "while" not in hlo


def test_dtypes_and_jit():
    g = jax.tree.map(lambda x: x.astype(jnp.bfloat16), GRADS)
    p = jax.tree.map(lambda x: x.astype(jnp.bfloat16), PARAMS)
    for tx in [
        gradax.clip(0.1),
        gradax.clip_by_block_rms(0.1),
        gradax.clip_by_global_norm(0.1),
        gradax.adaptive_grad_clip(0.1),
    ]:
        u, _ = jax.jit(tx.update)(g, tx.init(p), p)
        assert jax.tree.map(lambda x: x.dtype, u) == jax.tree.map(lambda x: x.dtype, g)


def test_unitwise_norm_and_clip_match_optax():
    for shape in [(5,), (3, 4), (2, 3, 4), (2, 2, 3, 4), (2, 2, 2, 3, 4), (1, 5)]:
        x = jax.random.normal(KEYS[3], shape)
        np.testing.assert_allclose(gradax.transforms.unitwise_norm(x), optax.transforms.unitwise_norm(x), rtol=1e-6)
    x = jax.random.normal(KEYS[3], (3, 4))
    n = gradax.transforms.unitwise_norm(x, axis=1)
    np.testing.assert_allclose(n, optax.transforms.unitwise_norm(x, axis=1), rtol=1e-6)
    m = jnp.full(x.shape, 1.0)
    np.testing.assert_allclose(gradax.transforms.unitwise_clip(n, m, x), optax.transforms.unitwise_clip(n, m, x))
    with pytest.raises(ValueError, match=r"unitwise_norm\(x=...\) must have rank 1 to 5"):
        gradax.transforms.unitwise_norm(jnp.ones((2,) * 6))
    with pytest.raises(ValueError, match="must have equal shapes"):
        gradax.transforms.unitwise_clip(n, jnp.ones(2), x)


def test_per_example_clips_match_optax():
    grads = [jnp.array([[0, 0, 0], [0, 3, 4], [4, 0, 3], [3, 4, 0.0]]), jnp.arange(8.0).reshape(4, 2)]
    for c in [jnp.inf, 0.0, 1.25]:
        for a, b in [
            (optax.per_example_global_norm_clip(grads, c), gradax.per_example_global_norm_clip(grads, c)),
            (optax.per_example_layer_norm_clip(grads, c), gradax.per_example_layer_norm_clip(grads, c)),
            (optax.per_example_layer_norm_clip(grads, c, False), gradax.per_example_layer_norm_clip(grads, c, False)),
        ]:
            jax.tree.map(lambda x, y: np.testing.assert_allclose(x, y, rtol=1e-6), a, b)
    with pytest.raises(ValueError, match=r"per_example_global_norm_clip\(grads=...\) must have a batch dimension"):
        gradax.per_example_global_norm_clip([jnp.ones((2, 3)), jnp.ones((3, 3))], 1.0)
    with pytest.raises(ValueError, match=r"per_example_layer_norm_clip\(grads=...\) must have a batch dimension"):
        gradax.per_example_layer_norm_clip([jnp.ones(())], 1.0)


def test_errors():
    with pytest.raises(ValueError, match=r"clip\(max_delta=...\) must be >= 0; got -1.0"):
        gradax.clip(-1.0)
    with pytest.raises(ValueError, match=r"clip_by_block_rms\(threshold=...\) must be >= 0"):
        gradax.clip_by_block_rms(-0.1)
    with pytest.raises(ValueError, match=r"clip_by_global_norm\(max_norm=...\) must be >= 0"):
        gradax.clip_by_global_norm(-1.0)
    with pytest.raises(ValueError, match=r"adaptive_grad_clip\(clipping=...\) must be >= 0"):
        gradax.adaptive_grad_clip(-1.0)
    with pytest.raises(ValueError, match=r"adaptive_grad_clip\(eps=...\) must be >= 0"):
        gradax.adaptive_grad_clip(0.1, eps=-1.0)
    with pytest.raises(ValueError, match="adaptive_grad_clip: update.*needs `params`"):
        tx = gradax.adaptive_grad_clip(0.1)
        tx.update(GRADS, tx.init(PARAMS))
    with pytest.raises(ValueError, match=r"clip_by_global_norm\(max_norm=...\) must be a scalar"):
        gradax.clip_by_global_norm(jnp.ones(2)).update(GRADS, None)
