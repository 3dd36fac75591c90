"""The 8-bit moment interface of ``gradax._quantization`` (:class:`QuantizedMoment`, :func:`quantized_step`) that
adam and lion share: each optimizer's 8-bit step is, bit for bit, its dense float32 math on the decoded moments, with
the new block scales bounded from the old ones and the gradient, and stochastic rounding from one hash of the step.
The references below write that step out by hand with the codec's primitives."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradax
from gradax import _quantization as Q

BLOCKS = gradax.Blockwise8bit(block_size=32, min_size=40)  # "w" (3 blocks, padded) is quantized, "b" stays dense
SHAPES = {"w": (9, 10), "b": (7,)}


def _tree(seed, dtype=jnp.float32):
    keys = jax.random.split(jax.random.PRNGKey(seed), len(SHAPES))
    return {k: jax.random.normal(key, s).astype(dtype) for key, (k, s) in zip(keys, SHAPES.items())}


def _bitwise_equal(a, b):
    leaves_a, leaves_b = jax.tree.leaves(a), jax.tree.leaves(b)
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for x, y in zip(leaves_a, leaves_b):
        assert x.dtype == y.dtype and x.shape == y.shape
        np.testing.assert_array_equal(np.asarray(x).view(np.uint8), np.asarray(y).view(np.uint8))


@jax.jit
def _adam_by_hand(g, m, v, count_inc, b1, b2, eps):
    """Adam's 8-bit step for one quantized leaf, written out (b1, b2, eps: float32 scalars)."""
    gb = Q.blocks(g.astype(jnp.float32), m.codes.shape[1])
    g_max = Q.block_absmax(gb)
    m_new = (1 - b1) * gb + b1 * Q.decode_signed_blocks(m)
    root = Q.decode_root_blocks(v)
    v_new = (1 - b2) * (gb * gb) + b2 * (root * root)
    u = (m_new / (1 - b1**count_inc)) / (jnp.sqrt(v_new / (1 - b2**count_inc) + 0.0) + eps)
    m_scale = (b1 * m.scale + (1 - b1) * g_max).astype(jnp.float32)
    v_scale = jnp.sqrt(b2 * v.scale * v.scale + (1 - b2) * g_max * g_max).astype(jnp.float32)
    noise_m, noise_v = Q.dither_pair(gb.shape, 2 * count_inc)
    return (
        Q.unblock(u, g.shape).astype(g.dtype),
        Q.BlockQuantized(Q.encode_signed_blocks(m_new, m_scale, noise_m), m_scale),
        Q.BlockQuantized(Q.encode_root_blocks(jnp.sqrt(v_new), v_scale, noise_v), v_scale),
    )


@jax.jit
def _lion_by_hand(g, m, count, b1, b2):
    """Lion's 8-bit step for one quantized leaf, written out (hard sign)."""
    gb = Q.blocks(g, m.codes.shape[1])
    g_max = Q.block_absmax(gb)
    gc = gb.astype(jnp.float32)
    m_old = Q.decode_signed_blocks(m)
    u = jnp.sign((1 - b1) * gc + b1 * m_old)
    scale = (b2 * m.scale + (1 - b2) * g_max).astype(jnp.float32)
    m_new = Q.encode_signed_blocks((1 - b2) * gc + b2 * m_old, scale, Q.dither(gb.shape, count))
    return Q.unblock(u, g.shape).astype(g.dtype), Q.BlockQuantized(m_new, scale)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=["f32", "bf16"])
def test_adam_8bit_step_is_the_written_out_step(dtype):
    b1, b2, eps = jnp.float32(0.9), jnp.float32(0.999), jnp.float32(1e-8)
    opt = gradax.scale_by_adam(b1, b2, eps, moments=BLOCKS)
    state = opt.init(_tree(0, dtype))
    step = jax.jit(opt.update)
    _, state = step(_tree(1, dtype), state)  # non-zero moments and scales
    g = _tree(2, dtype)
    u, new = step(g, state)
    m, v = state.mu["w"], state.nu["w"]
    assert isinstance(m, gradax.BlockQuantized) and not isinstance(state.mu["b"], gradax.BlockQuantized)
    # The codes and scales are exactly the written-out ones; the update agrees to float32 rounding (XLA may fuse
    # the hand-written graph differently).
    want_u, want_m, want_v = _adam_by_hand(g["w"], m, v, jnp.int32(2), b1, b2, eps)
    _bitwise_equal((new.mu["w"], new.nu["w"]), (want_m, want_v))
    np.testing.assert_allclose(np.asarray(u["w"], np.float32), np.asarray(want_u, np.float32), rtol=1e-6)
    # Bit for bit, the update is dense Adam's from the decoded moments, and the dense leaf is dense Adam's.
    dense = gradax.scale_by_adam(b1, b2, eps, mu_dtype=jnp.float32, nu_dtype=jnp.float32)
    decoded = gradax.ScaleByAdamState(
        state.count,
        {"w": Q.unblock(Q.FIRST_MOMENT.read(m), SHAPES["w"]), "b": state.mu["b"]},
        {"w": Q.unblock(Q.SECOND_MOMENT.read(v), SHAPES["w"]), "b": state.nu["b"]},
    )
    dense_u, dense_new = jax.jit(dense.update)(g, decoded)
    _bitwise_equal(u, dense_u)
    _bitwise_equal((new.mu["b"], new.nu["b"]), (dense_new.mu["b"], dense_new.nu["b"]))


def test_lion_8bit_step_is_the_written_out_step():
    b1, b2 = jnp.float32(0.9), jnp.float32(0.99)
    opt = gradax.scale_by_lion(b1, b2, moments=BLOCKS)
    state = opt.init(_tree(0))
    step = jax.jit(opt.update)
    _, state = step(_tree(3), state)
    g = _tree(4)
    u, new = step(g, state)
    want_u, want_m = _lion_by_hand(g["w"], state.mu["w"], state.count, b1, b2)
    _bitwise_equal(new.mu["w"], want_m)
    np.testing.assert_array_equal(u["w"], want_u)  # signs: equal unless an interpolation rounds across zero


def test_quantized_step_sends_a_dense_leaf_to_the_dense_math():
    def leaf(g, m):
        return g + m, 2 * m

    step = Q.quantized_step(leaf, ((Q.FIRST_MOMENT, 0.5, 0.5),), jnp.int32(0))
    u, m = step(jnp.ones(3), jnp.full(3, 2.0))
    np.testing.assert_array_equal(u, 3.0)
    np.testing.assert_array_equal(m, 4.0)


@pytest.mark.parametrize(
    "kind, bound", [(Q.FIRST_MOMENT, 2.0**-4), (Q.SECOND_MOMENT, 2 * 2.0**-5 + 2.0**-10)], ids=["first", "second"]
)
def test_quantized_moment_writes_within_the_block_scale_and_reads_back(kind, bound):
    x = jax.random.normal(jax.random.PRNGKey(5), (4, 32)) * jnp.asarray([[1e-3], [1.0], [10.0], [0.0]])
    if not kind.signed:
        x = x * x  # a second moment is non-negative
    old = Q.BlockQuantized(jnp.zeros((4, 32), jnp.uint8), jnp.zeros(4, jnp.float32))
    g_max = Q.block_absmax(jnp.sqrt(x) if not kind.signed else x)
    scale = kind.next_scale(old, g_max, 0.0, 1.0)  # decay 0: the new moment is the gradient's, scale its absmax
    np.testing.assert_array_equal(scale, g_max)
    q = kind.write(x, scale, None)  # round to nearest
    assert q.codes.dtype == jnp.uint8 and q.codes.shape == (4, 32)
    back, exact = np.asarray(kind.read(q), np.float64), np.asarray(x, np.float64)
    big = np.abs(exact) > 1e-3 * np.max(np.abs(exact), axis=1, keepdims=True)
    assert np.all(np.abs(back - exact)[big] <= bound * np.abs(exact)[big])
    np.testing.assert_array_equal(back[3], 0.0)  # an all-zero block stays exactly zero
