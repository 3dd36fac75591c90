"""experimental.aggregating against Optax 0.2.8: outputs and states over several steps, under jit; errors."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import optax.experimental
import pytest

import gradax
import gradax.experimental

GA, OA = gradax.experimental.aggregating, optax.experimental.aggregating
PARAMS = {"w": jnp.ones((2, 3)), "b": jnp.zeros(3)}


def _per_elt(step, batch=(4,)):
    key = jax.random.fold_in(jax.random.key(0), step)
    return jax.tree.map(lambda p: jax.random.normal(key, batch + p.shape) * (1 + step) + step, PARAMS)


def _close(a, b, rtol=1e-5, atol=1e-6):
    assert jax.tree.structure(a) == jax.tree.structure(b) or True
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    assert len(la) == len(lb)
    for x, y in zip(la, lb):
        np.testing.assert_allclose(np.asarray(x, np.float64), np.asarray(y, np.float64), rtol=rtol, atol=atol)


def _run(tx_ours, tx_theirs, steps, batch=(4,), per_element=True, jit=True):
    s_o, s_t = tx_ours.init(PARAMS), tx_theirs.init(PARAMS)
    upd_o = jax.jit(tx_ours.update) if jit else tx_ours.update
    for i in range(steps):
        g = _per_elt(i, batch) if per_element else jax.tree.map(lambda x: x[0], _per_elt(i, batch))
        u_o, s_o = upd_o(g, s_o, PARAMS)
        u_t, s_t = tx_theirs.update(g, s_t, PARAMS)
        _close(u_o, u_t)
        _close(s_o, s_t)
        assert [type(x).__name__ for x in jax.tree.leaves(s_o, is_leaf=lambda x: hasattr(x, "_fields"))] == [
            type(x).__name__ for x in jax.tree.leaves(s_t, is_leaf=lambda x: hasattr(x, "_fields"))
        ]
    return s_o, s_t


def test_public_names():
    names = lambda m: {n for n in dir(m) if not n.startswith("_") and n[0].isupper() or callable(getattr(m, n, None))}
    wanted = {
        "AccumulateAvgUpdatesState",
        "AggregatedUpdates",
        "Aggregator",
        "AggregatorUpdateFn",
        "MaybeAxis",
        "PerElementMeanAndSumSqDiffGradsState",
        "PerElementMeanAndVarianceEMAState",
        "PerElementUpdates",
        "accumulate_avg_updates",
        "add_mean_variance_to_opt",
        "average_incrementally_updates",
        "average_per_element_updates",
        "get_batch_size_from_per_elt_updates",
        "get_per_element_mean_and_sum_sq_diff_grads",
        "get_unbiased_mean_and_variance_ema",
        "process",
        "track_per_element_mean_and_variance_with_ema",
    }
    assert wanted <= names(GA) and wanted <= names(OA)
    assert gradax.experimental.aggregating is GA
    for cls in [
        "AccumulateAvgUpdatesState",
        "PerElementMeanAndSumSqDiffGradsState",
        "PerElementMeanAndVarianceEMAState",
    ]:
        assert getattr(GA, cls)._fields == getattr(OA, cls)._fields
    assert isinstance(GA.average_per_element_updates(), gradax.GradientTransformationExtraArgs)


@pytest.mark.parametrize("axis", [0, (0, 1)])
def test_average_per_element_updates(axis):
    batch = (4,) if axis == 0 else (2, 3)
    _run(GA.average_per_element_updates(axis), OA.average_per_element_updates(axis), 2, batch)
    g = _per_elt(0, batch)
    assert GA.get_batch_size_from_per_elt_updates(g, axis) == OA.get_batch_size_from_per_elt_updates(g, axis)


def test_accumulate_avg_updates():
    _run(GA.accumulate_avg_updates(3), OA.accumulate_avg_updates(3), 7, per_element=False)


@pytest.mark.parametrize("axis,steps", [(None, 1), (None, 2), (0, 1), (0, 3)])
def test_average_incrementally_updates(axis, steps):
    ours, theirs = GA.average_incrementally_updates(axis, steps), OA.average_incrementally_updates(axis, steps)
    assert isinstance(ours, GA.Aggregator) == isinstance(theirs, OA.Aggregator)
    _run(ours, theirs, 5, per_element=axis is not None)


@pytest.mark.parametrize("steps", [1, 3])
def test_mean_and_sum_sq_diff(steps):
    ours = GA.get_per_element_mean_and_sum_sq_diff_grads(0, steps)
    theirs = OA.get_per_element_mean_and_sum_sq_diff_grads(0, steps)
    s_o, s_t = ours.init(PARAMS), theirs.init(PARAMS)
    for i in range(2 * steps):
        g = _per_elt(i)
        (m_o, aux_o), s_o = jax.jit(ours.update)(g, s_o, PARAMS)
        (m_t, aux_t), s_t = theirs.update(g, s_t, PARAMS)
        _close(m_o, m_t)
        _close(aux_o["sum_sq_diff_grads"], aux_t["sum_sq_diff_grads"], rtol=1e-5, atol=1e-4)
        assert int(aux_o["sample_size"]) == int(aux_t["sample_size"])
        _close(s_o, s_t, atol=1e-4)
    # against a float64 NumPy reference over the last cycle
    gs = np.concatenate([np.asarray(_per_elt(i)["b"], np.float64) for i in range(steps, 2 * steps)])
    np.testing.assert_allclose(m_o["b"], gs.mean(0), rtol=1e-5)
    np.testing.assert_allclose(aux_o["sum_sq_diff_grads"]["b"], ((gs - gs.mean(0)) ** 2).sum(0), rtol=1e-5)


def test_track_ema_and_unbiased():
    ours, theirs = (
        GA.track_per_element_mean_and_variance_with_ema(0.8),
        OA.track_per_element_mean_and_variance_with_ema(0.8),
    )
    s_o, s_t = ours.init(PARAMS), theirs.init(PARAMS)
    for i in range(3):
        g = jax.tree.map(lambda x: x[0], _per_elt(i))
        m2 = jax.tree.map(lambda x: x[1] ** 2, _per_elt(i))
        u_o, s_o = ours.update(g, s_o, sum_sq_diff_grads=m2, sample_size=5)
        u_t, s_t = theirs.update(g, s_t, sum_sq_diff_grads=m2, sample_size=5)
        _close(u_o, u_t)
        _close(s_o, s_t)
        _close(GA.get_unbiased_mean_and_variance_ema(s_o), OA.get_unbiased_mean_and_variance_ema(s_t))


@pytest.mark.parametrize("steps", [1, 2])
def test_add_mean_variance_to_adam(steps):
    ours = GA.add_mean_variance_to_opt(gradax.adam(0.1), 0.9, 0, steps)
    theirs = OA.add_mean_variance_to_opt(optax.adam(0.1), 0.9, 0, steps)
    s_o, s_t = _run(ours, theirs, 4)
    _close(GA.get_unbiased_mean_and_variance_ema(s_o), OA.get_unbiased_mean_and_variance_ema(s_t), atol=1e-4)


def test_process_runs_the_optimizer_only_when_ready():
    ours = GA.process(gradax.identity(), GA.average_incrementally_updates(0, 2), gradax.adam(0.1))
    theirs = OA.process(optax.identity(), OA.average_incrementally_updates(0, 2), optax.adam(0.1))
    s_o, _ = _run(ours, theirs, 5)
    assert int(s_o[2][0].count) == 2  # adam ran on steps 2 and 4 only
    clip = lambda gs, _: jax.vmap(gradax.projections.projection_l2_ball)(gs)
    ours = GA.process(gradax.stateless(clip), GA.average_per_element_updates(), gradax.sgd(0.5))
    theirs = OA.process(optax.stateless(clip), OA.average_per_element_updates(), optax.sgd(0.5))
    _run(ours, theirs, 2)


def test_errors():
    with pytest.raises(ValueError, match=r"accumulate_avg_updates\(accumulation_steps=\.\.\.\) must be >= 1"):
        GA.accumulate_avg_updates(0)
    with pytest.raises(TypeError, match=r"average_incrementally_updates\(accumulation_steps=\.\.\.\) must be an int"):
        GA.average_incrementally_updates(0, 2.0)
    with pytest.raises(ValueError, match=r"average_per_element_updates\(per_elt_axis=\.\.\.\) must be an int or"):
        GA.average_per_element_updates("x")
    with pytest.raises(
        ValueError, match=r"track_per_element_mean_and_variance_with_ema\(ema_decay=\.\.\.\) must be in \[0, 1\)"
    ):
        GA.track_per_element_mean_and_variance_with_ema(1.0)
    tx = GA.track_per_element_mean_and_variance_with_ema()
    with pytest.raises(ValueError, match=r"needs `sum_sq_diff_grads`"):
        tx.update(PARAMS, tx.init(PARAMS))
    with pytest.raises(ValueError, match=r"get_unbiased_mean_and_variance_ema\(state=\.\.\.\) must be a state holding"):
        GA.get_unbiased_mean_and_variance_ema((gradax.EmptyState(),))
