"""apply_if_finite, conditionally_mask, conditionally_transform: against Optax 0.2.8 and documented counters."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradax


def _same(a, b, rtol=1e-6):
    """Leaf-by-leaf comparison of a gradax tree with an Optax one (their NamedTuple classes differ)."""
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    assert len(la) == len(lb)
    for x, y in zip(la, lb):
        np.testing.assert_allclose(x, y, rtol=rtol, atol=1e-7)


P = {"w": jnp.array([1.0, -2.0]), "b": jnp.array([0.5])}


def _g(i, bad):
    g = jax.tree.map(lambda x: x * (i + 1), P)
    return jax.tree.map(lambda x: x * jnp.nan, g) if i in bad else g


def test_apply_if_finite_matches_optax_and_counts():
    tx, ref = gradax.apply_if_finite(gradax.sgd(0.1, 0.9), 2), optax.apply_if_finite(optax.sgd(0.1, 0.9), 2)
    s, rs = tx.init(P), ref.init(P)
    bad = (1, 2, 4, 5, 6)
    counts = []
    for i in range(8):
        before = s.inner_state
        u, s = jax.jit(tx.update)(_g(i, bad), s, P)
        ru, rs = ref.update(_g(i, bad), rs, P)
        _same(u, ru)
        _same(s.inner_state, rs.inner_state)
        for f in ("notfinite_count", "last_finite", "total_notfinite"):
            assert int(getattr(s, f)) == int(getattr(rs, f))
        if i in (1, 2, 4, 5):  # skipped: zero update, inner state untouched
            jax.tree.map(lambda x: np.testing.assert_array_equal(x, 0.0), u)
            jax.tree.map(np.testing.assert_array_equal, s.inner_state, before)
        counts.append(int(s.notfinite_count))
    assert counts == [0, 1, 2, 0, 1, 2, 3, 0]  # reset by a finite step; the 3rd consecutive one is applied
    assert int(s.total_notfinite) == 5


def test_apply_if_finite_counters_saturate():
    tx = gradax.apply_if_finite(gradax.sgd(0.1), 2)
    s = tx.init(P)._replace(total_notfinite=jnp.asarray(2**31 - 1, jnp.int32))
    _, s = tx.update(_g(0, (0,)), s, P)
    assert int(s.total_notfinite) == 2**31 - 1


def test_apply_if_finite_errors():
    with pytest.raises(ValueError, match=r"apply_if_finite\(max_consecutive_errors=\.\.\.\) must be >= 0"):
        gradax.apply_if_finite(gradax.sgd(0.1), -1)
    with pytest.raises(TypeError, match=r"apply_if_finite\(inner=\.\.\.\) must be a GradientTransformation"):
        gradax.apply_if_finite(None, 1)


@pytest.mark.parametrize("name", ["conditionally_mask", "conditionally_transform"])
def test_conditionally_matches_optax(name):
    cond = lambda step: step % 3 != 1
    tx, ref = getattr(gradax, name)(gradax.sgd(0.1, 0.9), cond), getattr(optax, name)(optax.sgd(0.1, 0.9), cond)
    s, rs = tx.init(P), ref.init(P)
    for i in range(6):
        u, s = jax.jit(tx.update)(_g(i, ()), s, P)
        ru, rs = ref.update(_g(i, ()), rs, P)
        _same(u, ru)
    assert int(s.step) == 6
    assert type(s).__name__ == type(rs).__name__ and type(s)._fields == type(rs)._fields


def test_conditionally_forward_extra_args_and_errors():
    tx = gradax.conditionally_mask(gradax.scale(2.0), lambda step, loss: loss < 1.0, forward_extra_args=True)
    s = tx.init(P)
    u, s = tx.update(P, s, loss=jnp.asarray(2.0))
    np.testing.assert_array_equal(u["w"], 0.0)
    u, s = tx.update(P, s, loss=jnp.asarray(0.5))
    np.testing.assert_array_equal(u["w"], 2 * P["w"])
    bad = gradax.conditionally_transform(gradax.scale(2.0), lambda step: jnp.ones(2, bool))
    with pytest.raises(
        TypeError,
        match=r"conditionally_transform\(should_transform_fn=\.\.\.\) must return a "
        r"boolean scalar; got shape \(2,\)",
    ):
        bad.update(P, bad.init(P))
    with pytest.raises(TypeError, match=r"conditionally_mask\(should_transform_fn=\.\.\.\) must be a function"):
        gradax.conditionally_mask(gradax.scale(2.0), 3)
