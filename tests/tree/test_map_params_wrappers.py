"""tree.map_params over wrappers whose init needs the params' structure (masks, labels, LookaheadParams), and the
order of tree.get_all_with_path: cases found by Optax 0.2.8's own test suite, checked against Optax."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax  # the oracle (tests only)
import pytest

import gradax

PARAMS = {"a": jnp.ones(2), "b": {"c": jnp.full((3,), 2.0), "d": jnp.ones(1)}}
MASK = {"a": True, "b": {"c": False, "d": True}}
LABELS = {"a": "x", "b": {"c": "y", "d": "x"}}

CASES = {
    "masked": lambda ox: ox.masked(ox.adam(0.1), MASK),
    "masked_prefix": lambda ox: ox.masked(ox.sgd(0.1, 0.9), {"a": False, "b": True}),
    "partition": lambda ox: ox.partition({"x": ox.adam(0.1), "y": ox.sgd(0.1, 0.9)}, LABELS),
    "multi_transform": lambda ox: ox.multi_transform({"x": ox.adam(0.1), "y": ox.sgd(0.1, 0.9)}, LABELS),
    "freeze": lambda ox: ox.transforms.freeze(MASK),
    "selective_transform": lambda ox: ox.transforms.selective_transform(ox.adam(0.1), freeze_mask=MASK),
    "adamw_mask": lambda ox: ox.adamw(0.1, mask=MASK),
    "chain_masked": lambda ox: ox.chain(ox.masked(ox.adam(0.1), MASK), ox.scale(1.0)),
    "inject_adamw_mask": lambda ox: ox.inject_hyperparams(ox.adamw)(learning_rate=0.1, mask=MASK),
    "lookahead": lambda ox: ox.lookahead(ox.adam(0.1), sync_period=2, slow_step_size=0.5),
    "lookahead_masked": lambda ox: ox.lookahead(ox.masked(ox.sgd(0.1, 0.9), MASK), 2, 0.5),
}


def _state(ox, name):
    tx = CASES[name](ox)
    params = ox.LookaheadParams.init_synced(PARAMS) if name.startswith("lookahead") else PARAMS
    grads = jax.tree.map(jnp.ones_like, PARAMS)
    updates, state = tx.update(grads, tx.init(params), params)
    return tx, state


def _plus_one(x):
    return x + 1


@pytest.mark.filterwarnings("ignore")  # Optax's lookahead logs that the marker has no `fast` attribute
@pytest.mark.parametrize("name", sorted(CASES))
def test_map_params_over_wrapper_matches_optax(name):
    tx, state = _state(gradax, name)
    same = gradax.tree.map_params(tx, lambda v: v, state)
    assert jax.tree.structure(same) == jax.tree.structure(state)
    for a, b in zip(jax.tree.leaves(same), jax.tree.leaves(state)):
        np.testing.assert_array_equal(a, b)

    o_tx, o_state = _state(optax, name)
    ours = gradax.tree.map_params(tx.init, _plus_one, state, transform_non_params=lambda v: v * 0)
    theirs = optax.tree.map_params(o_tx.init, _plus_one, o_state, transform_non_params=lambda v: v * 0)
    assert [type(x).__name__ for x in jax.tree.leaves(ours, is_leaf=lambda x: isinstance(x, tuple))] == [
        type(x).__name__ for x in jax.tree.leaves(theirs, is_leaf=lambda x: isinstance(x, tuple))
    ]
    ours_l, theirs_l = jax.tree.leaves(ours), jax.tree.leaves(theirs)
    assert len(ours_l) == len(theirs_l)
    for a, b in zip(ours_l, theirs_l):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def test_map_params_over_masked_sees_masked_nodes_with_is_leaf():
    """With ``is_leaf`` catching MaskedNode, ``f`` sees the masked-out entries and can pair the others with a
    params-shaped tree (e.g. sharding axes)."""
    tx = gradax.masked(gradax.sgd(0.1, momentum=0.9), MASK)
    state = tx.init(PARAMS)
    axes = {"a": 0, "b": {"c": 1, "d": 2}}
    out = gradax.tree.map_params(
        tx,
        lambda p, axis: None if isinstance(p, gradax.MaskedNode) else axis,
        state,
        axes,
        is_leaf=lambda v: isinstance(v, gradax.MaskedNode),
        transform_non_params=lambda v: None,
    )
    assert out.inner_state[0].trace == {"a": 0, "b": {"c": None, "d": 2}}


def test_get_all_with_path_nearest_first_like_optax():
    state = {"hparams": {"learning_rate": 1.0}, "learning_rate": "foo"}
    ours = gradax.tree.get_all_with_path(state, "learning_rate")
    assert ours == optax.tree.get_all_with_path(state, "learning_rate")
    assert [v for _, v in ours] == ["foo", 1.0]
    state = gradax.chain(gradax.sgd(0.1, 0.9), gradax.inject_hyperparams(gradax.adam)(0.1)).init(PARAMS)
    ours = [(jax.tree_util.keystr(p), type(v).__name__) for p, v in gradax.tree.get_all_with_path(state, "count")]
    o_state = optax.chain(optax.sgd(0.1, 0.9), optax.inject_hyperparams(optax.adam)(0.1)).init(PARAMS)
    theirs = [(jax.tree_util.keystr(p), type(v).__name__) for p, v in optax.tree.get_all_with_path(o_state, "count")]
    assert ours == theirs
