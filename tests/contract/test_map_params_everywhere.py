"""Battery kind: ``tree.map_params`` over every registry entry, bare and inside every wrapper whose ``init`` needs
the params' structure (a mask or label tree, LookaheadParams) or nests the state (MultiSteps, chain, inject).

Optax's own suite found that ``map_params`` failed over ``masked`` with a mask tree and over ``lookahead``: the
marker that ``map_params`` hands to ``init`` in place of the params must pass through every wrapper. Each case is
``init`` only (eager, tiny tree), then ``map_params`` with the identity (the state must come back unchanged) and
with a function that tags every leaf of the params-structured parts (the state's structure must be kept).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradax

from ._helpers import simple_tree
from .registry import entries

ENTRIES = entries()
MASK = {"w": True, "b": False, "s": True}
LABELS = {"w": "inner", "b": "plain", "s": "inner"}

WRAPPERS = {
    "bare": lambda tx: tx,
    "masked": lambda tx: gradax.masked(tx, MASK),
    "partition": lambda tx: gradax.partition({"inner": tx, "plain": gradax.identity()}, LABELS),
    "lookahead": lambda tx: gradax.lookahead(tx, sync_period=2, slow_step_size=0.5),
    "multisteps": lambda tx: gradax.MultiSteps(tx, 2).gradient_transformation(),
    "chain": lambda tx: gradax.chain(gradax.identity(), tx),
}


def _ids(items):
    seen: dict[str, int] = {}
    out = []
    for e in items:
        seen[e.id] = seen.get(e.id, 0) + 1
        out.append(e.id if seen[e.id] == 1 else f"{e.id}-{seen[e.id]}")
    return out


def _leaves_equal(a, b):
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    assert len(la) == len(lb)
    for x, y in zip(la, lb):
        if jnp.issubdtype(jnp.result_type(x), jax.dtypes.prng_key):
            x, y = jax.random.key_data(x), jax.random.key_data(y)
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def _is_tag(x):
    return isinstance(x, tuple) and x[:1] == ("params",)


@pytest.mark.parametrize("entry", ENTRIES, ids=_ids(ENTRIES))
def test_map_params_through_every_wrapper(entry):
    if "contract" in entry.skip:
        pytest.skip(f"contract: {entry.skip['contract']}")
    params = simple_tree(jnp.float32)
    tx = entry.build(gradax)
    for name, wrap in WRAPPERS.items():
        wrapped = wrap(tx)
        p = gradax.LookaheadParams.init_synced(params) if name == "lookahead" else params
        state = wrapped.init(p)
        try:
            same = gradax.tree.map_params(wrapped, lambda v: v, state)
            tagged = gradax.tree.map_params(wrapped.init, lambda v: ("params", jnp.shape(v)), state)
        except Exception as err:
            raise AssertionError(f"tree.map_params over {name}({entry.id}) failed: {err}") from err
        assert jax.tree.structure(same) == jax.tree.structure(state), name
        _leaves_equal(same, state)
        # every leaf is visited once, tagged where it lies in a params-structured part of the state
        assert jax.tree.structure(tagged, is_leaf=_is_tag) == jax.tree.structure(state), name
