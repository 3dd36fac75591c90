"""Every registry entry on extreme gradients (issue 23): exact zeros, 1e-30, float32 subnormals, 1e30, and ordinary
values with a single inf or a single NaN, one step from ``init`` on ``simple_tree`` (float32), under ``jit``.

* Finite outputs for zeros, 1e-30 and subnormals (nothing overflows there), except :data:`TINY_NOT_FINITE`.
* 1e30: squares overflow float32 (1e60), so some states hold inf; no NaN in the updates or the state, except
  :data:`OVERFLOW_NAN`, which says why and what gradax returns.
* One inf or one NaN propagates: the updates or the state are not finite afterwards, except in the entries that
  contain it by design (clipping, signs, skipping, zeroing NaNs): :data:`CONTAINS_INF`, :data:`CONTAINS_NAN`.
* ``apply_if_finite`` around every entry: on finite gradients exactly the entry's updates and state, on the others
  zero updates and exactly the previous state (bit for bit).
* ``gradax.fused`` steps (CPU kernels) give bit for bit the XLA path's params and state on every one of them.

Each table must match what is observed (an entry listed that no longer behaves so fails too), so they stay the
written-down behaviour of each entry.
"""

from __future__ import annotations

import collections

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradax

from ._helpers import assert_trees_equal as _assert_trees_equal
from ._helpers import is_float_array, simple_tree
from .registry import entries

ENTRIES = entries()


def _ids(items):
    seen = collections.Counter()
    out = []
    for e in items:
        seen[e.id] += 1
        out.append(e.id if seen[e.id] == 1 else f"{e.id}-{seen[e.id]}")
    return out


IDS = _ids(ENTRIES)


def assert_trees_equal(a, b, what):
    """Bit for bit, NaNs where NaNs are; PRNG keys by their data."""
    data = lambda x: jax.random.key_data(x) if jnp.issubdtype(jnp.result_type(x), jax.dtypes.prng_key) else x
    _assert_trees_equal(jax.tree.map(data, a), jax.tree.map(data, b), what)


def _update_fn(entry, tx):
    def update(g, s, p):
        extra = dict(entry.extra_args(p, g, gradax)) if entry.extra_args is not None else {}
        return tx.update(g, s, p if entry.needs_params else None, **extra)

    return update


_ADAFACTOR = "factored second moments of 1e60 (inf) rows and columns: inf/inf = NaN updates"
OVERFLOW_NAN = {
    "adafactor": _ADAFACTOR,
    "adafactor[custom]": _ADAFACTOR,
    "fused.adafactor[custom]": _ADAFACTOR,
    "fused.adafactor[custom]-2": _ADAFACTOR,
    "scale_by_factored_rms": _ADAFACTOR,
    "contrib.came": _ADAFACTOR + " (CAME's confidence factors too)",
    "contrib.came[custom]": _ADAFACTOR + " (CAME's confidence factors too)",
    "contrib.scale_by_came": _ADAFACTOR + " (CAME's confidence factors too)",
    "contrib.kron": "the preconditioner's factors of a 1e60 outer product overflow: NaN updates and state",
    "contrib.scale_by_kron": "the preconditioner's factors of a 1e60 outer product overflow: NaN updates and state",
    "contrib.mechanize[custom]": "its products of 1e30 gradients and deltas overflow: inf - inf = NaN",
    "contrib.simplified_ademamix": "mu / sqrt(nu) with both overflowed: inf/inf = NaN updates",
    "contrib.scale_by_simplified_ademamix": "mu / sqrt(nu) with both overflowed: inf/inf = NaN updates",
    "contrib.scale_by_shampoo": "the 1e60 statistics overflow: the preconditioner (state) is NaN, updates finite",
    "contrib.scale_by_soap": "the 1e60 statistics overflow: the eigenbases (state) are NaN, updates finite",
    "contrib.soap": "the 1e60 statistics overflow: the eigenbases (state) are NaN, updates finite",
    "contrib.soap-2": "the 1e60 statistics overflow: the eigenbases (state) are NaN, updates finite",
}
TINY_NOT_FINITE = {
    "contrib.dadapt_adamw": "zero gradients: the D-Adaptation estimate is 0/0 = NaN in the state (updates finite; "
    "as Optax 0.2.8), so later steps are NaN",
}
_SIGN = "the sign of inf is 1: updates finite"
_SOAP = "the first step only builds the eigenbases and returns zero updates; the eigendecomposition of a non-finite "
_SOAP += "statistic falls back to the identity"
CONTAINS_INF = {
    "clip": "clipped to max_delta",
    "rprop": _SIGN,
    "scale_by_rprop": _SIGN,
    "scale_by_sign": _SIGN,
    "sign_sgd": _SIGN,
    "sign_sgd-2": _SIGN,
    "contrib.scale_by_spam": "spike clipping bounds each coordinate by its second moment",
    "set_to_zero": "zero updates, no state",
    "freeze[custom]": "the leaf holding the inf is frozen: zero updates",
    "transforms.freeze[custom]": "the leaf holding the inf is frozen: zero updates",
    "apply_if_finite[custom]": "the step is skipped",
    "MultiSteps[custom]-2": "should_skip_update_fn=skip_not_finite skips the micro-batch",
    "contrib.hutchinson_estimator_diag_hessian": "it reads the Hessian-vector products, not the gradients",
    "contrib.scale_by_soap": _SOAP,
    "contrib.soap": _SOAP,
    "contrib.soap-2": _SOAP,
}
CONTAINS_NAN = {
    name: CONTAINS_INF[name]
    for name in (
        "set_to_zero",
        "freeze[custom]",
        "transforms.freeze[custom]",
        "apply_if_finite[custom]",
        "MultiSteps[custom]-2",
        "contrib.hutchinson_estimator_diag_hessian",
        "contrib.scale_by_soap",
        "contrib.soap",
        "contrib.soap-2",
    )
} | {"zero_nans": "NaNs become zeros"}


def _extreme_grads(params):
    """Gradients by name, each a tree of params' structure (float32): every entry the same magnitude with mixed
    signs, or ordinary values with one inf or one NaN in the first leaf."""
    rng = np.random.default_rng(7)
    signs = jax.tree.map(lambda p: np.where(rng.random(jnp.shape(p)) < 0.5, -1.0, 1.0), params)
    ordinary = jax.tree.map(lambda p: rng.normal(size=jnp.shape(p)) + 0.5, params)

    def filled(value):
        return jax.tree.map(lambda s: jnp.asarray(value * s, jnp.float32), signs)

    def one(value):
        leaves, treedef = jax.tree.flatten(ordinary)
        first = np.array(leaves[0], copy=True).reshape(-1)
        first[0] = value
        leaves = [first.reshape(np.shape(leaves[0])), *leaves[1:]]
        return jax.tree.map(lambda x: jnp.asarray(x, jnp.float32), jax.tree.unflatten(treedef, leaves))

    subnormal = float(np.float32(1e-40))
    assert 0 < subnormal < np.finfo(np.float32).tiny
    return {
        "zeros": filled(0.0),
        "1e-30": filled(1e-30),
        "subnormal": filled(subnormal),
        "1e30": filled(1e30),
        "one_inf": one(np.inf),
        "one_nan": one(np.nan),
    }


FINITE_INPUTS = ("zeros", "1e-30", "subnormal", "1e30")


def _kind(tree) -> str:
    leaves = [np.asarray(x, np.float64) for x in jax.tree.leaves(tree) if is_float_array(x)]
    if any(np.isnan(x).any() for x in leaves):
        return "nan"
    if any(np.isinf(x).any() for x in leaves):
        return "inf"
    return "finite"


def _extreme_run(entry):
    """For each extreme gradient: (updates, state, new params) of one step of the entry, and of apply_if_finite
    around it, from the same state; one jitted program for both, compiled once."""
    params = simple_tree(jnp.float32)
    tx = entry.build(gradax)
    guarded = gradax.apply_if_finite(tx, max_consecutive_errors=3)
    update, guarded_update = _update_fn(entry, tx), _update_fn(entry, guarded)
    state, guarded_state = tx.init(params), guarded.init(params)

    @jax.jit
    def step(g, s, gs, p):
        u, s = update(g, s, p)
        gu, gs = guarded_update(g, gs, p)
        return (u, s, gradax.apply_updates(p, u)), (gu, gs)

    return params, state, {name: step(g, state, guarded_state, params) for name, g in _extreme_grads(params).items()}


def _finite(kind: str) -> bool:
    return kind == "finite finite"


@pytest.mark.parametrize("entry", ENTRIES, ids=IDS)
def test_extreme_gradients(entry):
    entry_id = IDS[ENTRIES.index(entry)]
    params, state0, out = _extreme_run(entry)
    seen = {name: f"{_kind(plain[0])} {_kind(plain[1])}" for name, (plain, _) in out.items()}

    tiny = all(_finite(seen[name]) for name in ("zeros", "1e-30", "subnormal"))
    assert tiny != (entry_id in TINY_NOT_FINITE), f"tiny gradients: {seen}"
    overflow_nan = "nan" in seen["1e30"]
    assert overflow_nan == (entry_id in OVERFLOW_NAN), f"1e30: {seen['1e30']}"
    assert _finite(seen["one_inf"]) == (entry_id in CONTAINS_INF), f"one inf: {seen['one_inf']}"
    assert _finite(seen["one_nan"]) == (entry_id in CONTAINS_NAN), f"one NaN: {seen['one_nan']}"

    for name, (plain, (guarded_updates, guarded_state)) in out.items():
        inner = guarded_state.inner_state
        if name in FINITE_INPUTS:
            assert_trees_equal(guarded_updates, plain[0], f"apply_if_finite updates on {name}")
            assert_trees_equal(inner, plain[1], f"apply_if_finite state on {name}")
            assert int(guarded_state.notfinite_count) == 0
        else:
            zeros = jax.tree.map(jnp.zeros_like, guarded_updates)
            assert_trees_equal(guarded_updates, zeros, f"apply_if_finite updates on {name}")
            assert_trees_equal(inner, state0, f"apply_if_finite state on {name}")
            assert int(guarded_state.notfinite_count) == 1


# The gradients on which a fused step is NOT bit for bit the XLA path on these params: none. AdamW's and Lion's
# kernels make XLA:CPU's roundings (the bias corrections as reciprocals or XLA's merged division, the multiply-adds
# XLA contracts on a CPU with FMA, clip_by_global_norm's own float32 norm); Adafactor's step leaves every reduction
# to XLA (the update's own expressions in the step's program) and its kernel makes only the final element-wise pass.
FUSED_NOT_BITWISE: dict[str, set[str]] = {}
FUSED = [(i, e) for i, e in zip(IDS, ENTRIES, strict=True) if i.startswith("fused.")]


@pytest.mark.parametrize("entry", [e for _, e in FUSED], ids=[i for i, _ in FUSED])
def test_fused_steps_match_xla_on_extreme_gradients(entry):
    entry_id = IDS[ENTRIES.index(entry)]
    status = gradax.fused.kernel_status()
    if not status.available:
        pytest.skip(f"the CPU kernels are not available: {status.reason}")
    rng = np.random.default_rng(1)  # "m" is large enough for every kernel (adafactor factors dimensions >= 128)
    params = {**simple_tree(jnp.float32), "m": jnp.asarray(rng.normal(size=(128, 130)), jnp.float32)}
    tx = entry.build(gradax)
    state = tx.init(params)
    fused = jax.jit(tx.step)
    assert "gradax_" in fused.lower(params, state, params).as_text(), "the step did not use a kernel"

    @jax.jit
    def xla(p, s, g):
        u, s = tx.update(g, s, p)
        return gradax.apply_updates(p, u), s

    differ = set()
    for name, g in _extreme_grads(params).items():
        got, want = fused(params, state, g), xla(params, state, g)
        try:
            assert_trees_equal(got, want, f"fused step vs XLA on {name}")
        except AssertionError:
            differ.add(name)
            for x, y in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):  # same non-finite places
                np.testing.assert_array_equal(np.isfinite(np.asarray(x)), np.isfinite(np.asarray(y)), err_msg=name)
    assert differ == FUSED_NOT_BITWISE.get(entry_id, set()), f"not bit for bit the XLA path on: {sorted(differ)}"
