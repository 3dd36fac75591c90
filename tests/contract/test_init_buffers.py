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


def _assert_distinct(what, state, params):
    arrays = [x for x in jax.tree.leaves((state, params)) if isinstance(x, jax.Array)]
    owners = collections.Counter(x.unsafe_buffer_pointer() for x in arrays)
    shared = [ptr for ptr, n in owners.items() if n > 1]
    assert not shared, f"{what}: {len(shared)} buffer(s) appear more than once in (state, params)"


@pytest.mark.parametrize("entry", ENTRIES, ids=[e.id for e in ENTRIES])
def test_init_state_holds_distinct_buffers(entry):
    params = simple_tree()
    _assert_distinct(entry.id, entry.build(gradax).init(params), params)


INJECTABLE = [e for e in ENTRIES if e.inject and e.make is None and "inject" not in e.skip]


@pytest.mark.parametrize("entry", INJECTABLE, ids=[e.id for e in INJECTABLE])
def test_injected_init_state_holds_distinct_buffers(entry):
    # inject_hyperparams keeps the hyperparameters in its state and hands them to the inner factory: an inner state
    # that stores one (Prodigy's estim_lr0) must not share its buffer (gradax train donates the state)
    params = simple_tree()
    tx = gradax.inject_hyperparams(entry.factory(gradax))(**entry.kwargs)
    _assert_distinct(f"inject_hyperparams({entry.id})", tx.init(params), params)


def test_a_donated_step_runs_on_an_eager_init():
    """The failure this prevents, end to end (Optax 0.2.8's cocob raises here)."""
    params = {"w": jnp.ones((3, 2)), "b": jnp.zeros((2,))}
    opt = gradax.contrib.cocob()
    state = opt.init(params)
    step = jax.jit(lambda p, s, g: opt.update(g, s, p), donate_argnums=(0, 1))
    grads = jax.tree.map(jnp.ones_like, params)
    updates, state = step(jax.tree.map(jnp.copy, params), state, grads)
    assert jax.tree.structure(updates) == jax.tree.structure(params)
