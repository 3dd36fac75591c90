"""gradax.cautious: the exact count, the two evaluation paths (element-wise inner: count from a second evaluation;
otherwise from the update itself), and the compiled step's memory (no full-size temporary, state updated in place).

The numbers against the torch references are in tests/contrib/test_cautious_reference.py."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradax
from gradax.transforms._cautious import COUNT_ROW, after, count_true, elementwise

_P = {"w": jnp.linspace(-1.0, 1.0, 3 * 40).reshape(3, 40), "b": jnp.array([0.3, -0.7, 0.1]), "s": jnp.array(0.5)}
_G = [jax.tree.map(lambda p, i=i: jnp.cos(3.0 * p * (i + 1)) + 0.1 * i, _P) for i in range(4)]


@pytest.mark.parametrize("size", [0, 1, COUNT_ROW - 1, COUNT_ROW, COUNT_ROW + 1, 5 * COUNT_ROW + 7])
def test_count_true_is_exact(size):
    mask = np.arange(size) % 3 == 1
    assert int(count_true(jnp.asarray(mask))) == int(mask.sum())
    assert int(jax.jit(count_true)(jnp.asarray(mask))) == int(mask.sum())
    assert count_true(jnp.asarray(mask)).dtype == jnp.int32


def test_after_is_the_identity_bit_for_bit():
    x = jnp.array([-0.0, 0.0, 1.5, -2.0, jnp.inf, -jnp.inf, jnp.nan], jnp.float32)
    y = jax.jit(after)(x, jnp.int32(12345))
    np.testing.assert_array_equal(np.asarray(y).view(np.uint32), np.asarray(x).view(np.uint32))
    z = after(x.astype(jnp.bfloat16), jnp.int32(7))
    assert z.dtype == jnp.bfloat16
    np.testing.assert_array_equal(np.asarray(z.astype(jnp.float32)), np.asarray(x))


def _jaxpr(tx):
    return jax.make_jaxpr(lambda g, s, p: tx.update(g, s, p))(_G[0], tx.init(_P), _P)


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda: gradax.adamw(0.1), True),
        (lambda: gradax.lion(0.1), True),
        (lambda: gradax.sgd(0.1, momentum=0.9, nesterov=True), True),
        (lambda: gradax.chain(gradax.clip_by_global_norm(1.0), gradax.adamw(0.1)), False),
        (lambda: gradax.adafactor(0.1), False),
        (lambda: gradax.lamb(0.1), False),
    ],
    ids=["adamw", "lion", "sgd", "clipped_adamw", "adafactor", "lamb"],
)
def test_elementwise_tells_which_inner_updates_are_cheap_to_evaluate_twice(make, expected):
    assert elementwise(_jaxpr(make())) is expected


def _reference(inner, sign=-1.0):
    """The rule written plainly: the inner update, a float sum of the mask, the rescaled update."""

    def update(g, state, params):
        u, state = inner.update(g, state, params)

        def leaf(u, g):
            keep = sign * u * g > 0
            return u * jnp.where(keep, keep.size / (jnp.sum(keep.astype(u.dtype)) + 1), 0)

        return jax.tree.map(leaf, u, g), state

    return update


@pytest.mark.parametrize(
    "make",
    [
        lambda: gradax.adamw(0.1, weight_decay=0.1),
        lambda: gradax.lion(0.1),
        lambda: gradax.chain(gradax.clip_by_global_norm(0.5), gradax.adamw(0.1)),
    ],
    ids=["adamw", "lion", "clipped_adamw"],
)
def test_both_paths_follow_the_rule(make):
    """Compiled, both paths (cautious(adamw) and cautious(lion) evaluate their inner update twice, the clipped one
    once) keep the same coordinates as the plain rule, with its numbers, and leave the same state."""
    tx, ref = gradax.cautious(make()), _reference(make())
    step, ref_step = jax.jit(tx.update), jax.jit(ref)
    s1 = s2 = tx.init(_P)
    for g in _G:
        u1, s1 = step(g, s1, _P)
        u2, s2 = ref_step(g, s2, _P)
        for k in _P:
            np.testing.assert_array_equal(np.asarray(u1[k]) == 0, np.asarray(u2[k]) == 0)
            np.testing.assert_allclose(u1[k], u2[k], rtol=1e-5, atol=1e-9)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6), s1, s2)


def test_vmap_and_grad_go_through_both_evaluations():
    tx = gradax.cautious(gradax.adamw(0.1))
    params = {"w": jnp.arange(1.0, 7.0)}
    grads = {"w": jnp.stack([jnp.cos(jnp.arange(6.0) + k) for k in range(3)])}
    state = tx.init(params)
    batched, _ = jax.vmap(lambda g: tx.update({"w": g}, state, params))(grads["w"])
    for k in range(3):
        one, _ = tx.update({"w": grads["w"][k]}, state, params)
        np.testing.assert_allclose(batched["w"][k], one["w"], rtol=1e-6)
    d = jax.grad(lambda p: jnp.sum(tx.update({"w": grads["w"][0]}, state, {"w": p})[0]["w"]))(params["w"])
    assert d.shape == (6,) and bool(jnp.all(jnp.isfinite(d)))


def test_compiled_step_has_no_full_size_temporary():
    """The speed fix: XLA keeps no array the size of the params between passes (it was the inner update, allocated
    afresh at each step) and updates the state in place (no copy of a donated buffer)."""
    params = {"w": jnp.zeros((64, 256)), "b": jnp.zeros((256,))}
    tx = gradax.cautious(gradax.adamw(1e-3, weight_decay=1e-4))

    def step(p, s, g):
        u, s = tx.update(g, s, p)
        return gradax.apply_updates(p, u), s

    compiled = jax.jit(step, donate_argnums=(0, 1)).lower(params, tx.init(params), params).compile()
    param_bytes = sum(x.nbytes for x in jax.tree.leaves(params))
    assert compiled.memory_analysis().temp_size_in_bytes < param_bytes / 8
    entry = compiled.as_text().split("ENTRY", 1)[1]
    assert " copy(" not in entry
