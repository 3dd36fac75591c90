"""Every registry entry on inputs nobody planned for (issue 23), with Hypothesis across the contract-battery registry.

* ``test_random_trees``: random pytrees (nested dicts, lists, tuples, NamedTuples, ``None`` leaves, empty subtrees,
  scalars, zero-size arrays, ranks up to 4), a random float dtype among the entry's, a random learning rate (and
  weight decay) where the entry takes one: ``init`` on ``ShapeDtypeStruct`` matches ``init`` on arrays, ``update``
  under ``jit`` keeps the state's structure and dtypes and the updates' structure and dtypes, and the outputs are
  finite for finite inputs (random values and exact zeros), except where :data:`NOT_FINITE` says why not.

Extreme gradients (1e30, 1e-30, subnormals, zeros, one inf, one NaN) are in ``test_extreme_gradients.py`` (a file of
its own: the two run on different CI workers).

CI runs few examples per entry, derandomized; ``GRADAX_PROPERTY_EXAMPLES=200`` runs a long search.
"""

from __future__ import annotations

import collections
import os
import zlib
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import gradax

from ._helpers import assert_same_signature, is_float_array, sds
from .registry import entries

ENTRIES = entries()
EXAMPLES = int(os.environ.get("GRADAX_PROPERTY_EXAMPLES", "1"))
SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
    # shrinking a failure compiles one step per attempt: only in long runs
    phases=[Phase.explicit, Phase.reuse, Phase.generate, *([Phase.shrink] if EXAMPLES > 1 else [])],
)


def _ids(items):
    seen = collections.Counter()
    out = []
    for e in items:
        seen[e.id] += 1
        out.append(e.id if seen[e.id] == 1 else f"{e.id}-{seen[e.id]}")
    return out


IDS = _ids(ENTRIES)
BY_ID = dict(zip(IDS, ENTRIES, strict=True))


def _update_fn(entry, tx):
    def update(g, s, p):
        extra = dict(entry.extra_args(p, g, gradax)) if entry.extra_args is not None else {}
        return tx.update(g, s, p if entry.needs_params else None, **extra)

    return update


# ---------------------------------------------------------------------------------------------------------------------
# random trees


class Node(NamedTuple):
    left: object
    right: object


class _Leaf(NamedTuple):
    shape: tuple


def _leaf_strategy(max_rank=4):
    return st.builds(_Leaf, st.lists(st.integers(0, 3), max_size=max_rank).map(tuple))


def _extend(children):
    return st.one_of(
        st.dictionaries(st.sampled_from("abcd"), children, max_size=3),
        st.lists(children, max_size=3),
        st.lists(children, max_size=3).map(tuple),
        st.builds(Node, children, children),
    )


TREES = st.recursive(st.one_of(_leaf_strategy(), st.none()), _extend, max_leaves=4)
# shapes for entries that only take matrices
MATRICES = st.dictionaries(
    st.sampled_from("abcd"), st.builds(_Leaf, st.tuples(st.integers(1, 4), st.integers(1, 4))), min_size=1, max_size=3
)


def _random_skeleton(rng, depth=0):
    """A random tree skeleton from ``rng`` (so that even Hypothesis's first, simplest example of an entry holds a
    tree of its own: the seed mixes in the entry's id)."""
    kind = rng.integers(0, 6 if depth < 2 else 2)
    if kind == 0:
        return None if rng.random() < 0.2 else _Leaf(tuple(int(d) for d in rng.integers(0, 4, rng.integers(0, 5))))
    if kind == 1:
        return _Leaf(tuple(int(d) for d in rng.integers(1, 4, rng.integers(0, 5))))
    children = [_random_skeleton(rng, depth + 1) for _ in range(rng.integers(0, 4))]
    if kind == 2:
        return {f"k{i}": c for i, c in enumerate(children)}
    if kind == 3:
        return children
    if kind == 4:
        return tuple(children)
    return Node(*(children + [None, None])[:2])


# every awkward feature at once, with shapes drawn per example
def _awkward(leaf):
    return {
        "nested": {"x": {"y": leaf()}},
        "list": [leaf(), None, (_Leaf((0, 3)),)],
        "empty": ((), {}, []),
        "nt": Node(_Leaf((2, 1, 3, 2)), None),
        "scalar": _Leaf(()),
    }


def _materialize(skeleton, dtype, rng, scale=1.0):
    def leaf(x):
        if isinstance(x, _Leaf):
            return jnp.asarray(scale * (rng.normal(size=x.shape) + 0.5), dtype)
        return x

    return jax.tree.map(leaf, skeleton, is_leaf=lambda x: isinstance(x, _Leaf))


# Entries whose outputs may be non-finite for finite inputs, why, and what gradax returns there.
NOT_FINITE: dict[str, str] = {}
# Entries that cannot take random trees, and why (they get the random dtypes and hyperparameters on matrices).
_MINI = "it labels leaves by their key paths and shapes; some labels need n_heads"
MATRICES_ONLY = {
    "contrib.adam_mini": _MINI,
    "contrib.adam_mini[custom]": _MINI,
    "contrib.scale_by_adam_mini": _MINI,
    "contrib.scale_by_adam_mini-2": _MINI,
}
# Bugs this test finds and that are not fixed yet, as strict xfails (entry id -> reason), so that a fix shows. Empty
# now: zero-size leaves in kron, sm3, muon, scion, shampoo and normuon were fixed.
KNOWN_BUGS: dict[str, str] = {}


def _hyperparams(entry, draw):
    kwargs = dict(entry.kwargs)
    if entry.make is None and "learning_rate" in kwargs and not callable(kwargs["learning_rate"]):
        kwargs["learning_rate"] = draw(st.floats(1e-4, 1.0))
    if entry.make is None and isinstance(kwargs.get("weight_decay"), float):
        kwargs["weight_decay"] = draw(st.floats(0.0, 0.5))
    return kwargs


def _skeleton(entry, draw):
    if "awkward_trees" in entry.skip or IDS[ENTRIES.index(entry)] in MATRICES_ONLY:
        return draw(MATRICES)
    seed = zlib.crc32(entry.id.encode()) + draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    return {
        "awkward": _awkward(lambda: draw(_leaf_strategy())),
        "random": _random_skeleton(rng),
        "drawn": draw(TREES),
    }


def _check_finite(entry_id, tree, what):
    if entry_id in NOT_FINITE:
        return
    for path, x in jax.tree_util.tree_leaves_with_path(tree):
        if is_float_array(x):
            assert bool(jnp.all(jnp.isfinite(x))), f"{what} at {jax.tree_util.keystr(path)} is not finite: {x}"


@pytest.mark.parametrize(
    "entry",
    [
        pytest.param(e, marks=pytest.mark.xfail(strict=True, reason=KNOWN_BUGS[i])) if i in KNOWN_BUGS else e
        for i, e in zip(IDS, ENTRIES, strict=True)
    ],
    ids=IDS,
)
@SETTINGS
@given(data=st.data())
def test_random_trees(entry, data):
    entry_id = IDS[ENTRIES.index(entry)]
    dtype = data.draw(st.sampled_from(entry.dtypes), label="dtype")
    kwargs = _hyperparams(entry, data.draw)
    skeleton = _skeleton(entry, data.draw)
    seed = data.draw(st.integers(0, 2**16), label="seed")
    rng = np.random.default_rng(seed)
    with jax.enable_x64(dtype == "float64"):
        tx = entry.build(gradax) if entry.make is not None else entry.factory(gradax)(**kwargs)
        params = _materialize(skeleton, jnp.dtype(dtype), rng)
        grads = [_materialize(skeleton, jnp.dtype(dtype), rng, 0.5), _materialize(skeleton, jnp.dtype(dtype), rng, 0.0)]
        state0 = tx.init(params)
        if "abstract_init" not in entry.skip:
            assert_same_signature(tx.init(sds(params)), state0, "init on ShapeDtypeStruct vs init on arrays")
        update = _update_fn(entry, tx)
        traces = [0]

        @jax.jit
        def step(g, s, p):
            traces[0] += 1
            u, s = update(g, s, p)
            return u, s, gradax.apply_updates(p, u)

        state, p = state0, params
        for k, g in enumerate(grads):
            u, state, p = step(g, state, p)
            assert_same_signature(state, state0, f"state after step {k + 1}")
            assert_same_signature(u, g, f"updates at step {k + 1}")
            assert_same_signature(p, params, f"params at step {k + 1}")
            _check_finite(entry_id, (u, state, p), f"step {k + 1} ({'zero' if k else 'random'} gradients)")
        assert traces[0] == 1, f"the jitted update retraced: {traces[0]} traces"
