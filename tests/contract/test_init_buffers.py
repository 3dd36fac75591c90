"""Every registered transformation's ``init`` returns a state whose arrays are distinct buffers, none of them a
params buffer: a training step that donates params and state (``jax.jit(step, donate_argnums=(0, 1))``) must not be
handed one buffer twice ("Attempt to donate the same buffer twice"), even when ``init`` ran outside ``jit``.

Optax 0.2.8 shares buffers in cocob, lbfgs, dog, dowg, prodigy, madgrad, mechanize, sam and
scale_by_distance_over_gradients (docs/differences.md).
"""

from __future__ import annotations

import collections

import jax
import jax.numpy as jnp
import pytest

import gradax

from ._helpers import simple_tree
from .registry import entries

ENTRIES = entries()


@pytest.mark.parametrize("entry", ENTRIES, ids=[e.id for e in ENTRIES])
def test_init_state_holds_distinct_buffers(entry):
    params = simple_tree()
    state = entry.build(gradax).init(params)
    arrays = [x for x in jax.tree.leaves((state, params)) if isinstance(x, jax.Array)]
    owners = collections.Counter(x.unsafe_buffer_pointer() for x in arrays)
    shared = [ptr for ptr, n in owners.items() if n > 1]
    assert not shared, f"{entry.id}: {len(shared)} buffer(s) appear more than once in (state, params)"


def test_a_donated_step_runs_on_an_eager_init():
    """The failure this prevents, end to end (Optax 0.2.8's cocob raises here)."""
    params = {"w": jnp.ones((3, 2)), "b": jnp.zeros((2,))}
    opt = gradax.contrib.cocob()
    state = opt.init(params)
    step = jax.jit(lambda p, s, g: opt.update(g, s, p), donate_argnums=(0, 1))
    grads = jax.tree.map(jnp.ones_like, params)
    updates, state = step(jax.tree.map(jnp.copy, params), state, grads)
    assert jax.tree.structure(updates) == jax.tree.structure(params)
