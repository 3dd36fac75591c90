"""snapshot, monitor, measure_with_ema: against Optax 0.2.8; fixed state structure and dtypes."""

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


P = jnp.array([1.0, 2.0, 3.0])


def _norm(x):
    return jnp.linalg.norm(x)


CASES = [
    lambda ox: ox.snapshot("n", _norm),
    lambda ox: ox.monitor({"n": _norm, "e": ox.measure_with_ema(lambda x: _norm(x) > 5.0, 0.9)}),
    lambda ox: ox.measure_with_ema(jnp.sum, 0.9),
    lambda ox: ox.measure_with_ema(jnp.sum, 0.9, debias=False),
]


@pytest.mark.parametrize("make", CASES)
def test_matches_optax_and_keeps_structure(make):
    tx, ref = make(gradax), make(optax)
    s, rs = tx.init(P), ref.init(P)
    structure = jax.tree.structure(s)
    dtypes = [x.dtype for x in jax.tree.leaves(s)]
    traces = []  # counted by tracing, not by jit's C++ dispatch cache (whose size is not stable in a long run)
    step = jax.jit(lambda g, s: (traces.append(None), tx.update(g, s))[1])
    for i in range(4):
        u, s = step(P * (i + 1), s)
        ru, rs = ref.update(P * (i + 1), rs)
        np.testing.assert_allclose(u, ru, rtol=1e-6)
        assert jax.tree.structure(s) == structure and [x.dtype for x in jax.tree.leaves(s)] == dtypes
    _same(s, rs)
    assert len(traces) == 1


def test_read_back_and_chain():
    tx = gradax.chain(gradax.sgd(0.1), gradax.monitor({"norm": _norm}), gradax.snapshot("after", _norm))
    _, s = tx.update(P, tx.init(P))
    np.testing.assert_allclose(s[1].measurements["norm"], 0.1 * _norm(P), rtol=1e-6)
    np.testing.assert_allclose(s[2].measurement["after"], 0.1 * _norm(P), rtol=1e-6)
    abstract = jax.ShapeDtypeStruct((3,), jnp.float32)
    assert gradax.monitor({"norm": _norm}).init(abstract).measurements["norm"].shape == ()


def test_monitoring_errors():
    with pytest.raises(TypeError, match=r"monitor\(measures=\.\.\.\) must be a dict"):
        gradax.monitor([_norm])
    with pytest.raises(TypeError, match=r"measures\['x'\] is int"):
        gradax.monitor({"x": 3})
    with pytest.raises(TypeError, match=r"snapshot\(measure_name=\.\.\.\) must be a str"):
        gradax.snapshot(1, _norm)
    with pytest.raises(ValueError, match=r"measure_with_ema\(decay=\.\.\.\) must be in \[0, 1\]"):
        gradax.measure_with_ema(_norm, 2.0)
