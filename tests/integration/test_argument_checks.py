"""Argument checks at their boundaries (issue 24), with Optax 0.2.8 as the oracle of what it accepts.

Each case is ``(factory, argument, value, gradax accepts?)``. A value gradax refuses while Optax accepts it must be
listed in docs/differences.md ("Argument checks"); a value gradax accepts must also be accepted by Optax and build a
working transformation (one update, finite or as Optax's).
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradax

INF = math.inf
OK, REFUSED = True, False

# (dotted factory name, base kwargs, argument, value, gradax accepts)
CASES = [
    # line searches: inf switches the curvature condition off (Optimistix), any positive growth factor
    ("scale_by_zoom_linesearch", {"max_linesearch_steps": 5}, "curv_rtol", INF, OK),
    ("scale_by_zoom_linesearch", {"max_linesearch_steps": 5}, "curv_rtol", 1.0, OK),
    ("scale_by_zoom_linesearch", {"max_linesearch_steps": 5}, "curv_rtol", 0.0, OK),
    ("scale_by_zoom_linesearch", {"max_linesearch_steps": 5}, "curv_rtol", -1.0, REFUSED),
    ("scale_by_zoom_linesearch", {"max_linesearch_steps": 5}, "increase_factor", INF, OK),
    ("scale_by_zoom_linesearch", {"max_linesearch_steps": 5}, "increase_factor", 1.0, OK),
    ("scale_by_zoom_linesearch", {"max_linesearch_steps": 5}, "increase_factor", 1e-5, OK),
    ("scale_by_zoom_linesearch", {"max_linesearch_steps": 5}, "increase_factor", 0.0, REFUSED),
    ("scale_by_zoom_linesearch", {"max_linesearch_steps": 5}, "slope_rtol", 0.0, OK),
    ("scale_by_zoom_linesearch", {"max_linesearch_steps": 5}, "slope_rtol", 1.0, REFUSED),
    ("scale_by_zoom_linesearch", {"max_linesearch_steps": 5}, "tol", INF, OK),
    ("scale_by_zoom_linesearch", {"max_linesearch_steps": 5}, "tol", 0.0, OK),
    ("scale_by_backtracking_linesearch", {"max_backtracking_steps": 5}, "increase_factor", INF, OK),
    ("scale_by_backtracking_linesearch", {"max_backtracking_steps": 5}, "increase_factor", 1.0, OK),
    ("scale_by_backtracking_linesearch", {"max_backtracking_steps": 5}, "increase_factor", 1e-5, OK),
    ("scale_by_backtracking_linesearch", {"max_backtracking_steps": 5}, "increase_factor", -1.0, REFUSED),
    ("scale_by_backtracking_linesearch", {"max_backtracking_steps": 5}, "max_learning_rate", INF, OK),
    ("scale_by_backtracking_linesearch", {"max_backtracking_steps": 5}, "atol", 0.0, OK),
    ("scale_by_backtracking_linesearch", {"max_backtracking_steps": 5}, "decrease_factor", 1.0, REFUSED),
    # decay rates: 0 is plain (no averaging), 1 / inf / negative are meaningless
    ("scale_by_adam", {}, "b1", 0.0, OK),
    ("scale_by_adam", {}, "b1", 1.0, REFUSED),
    ("scale_by_adam", {}, "b2", INF, REFUSED),
    ("scale_by_adam", {}, "b2", -1.0, REFUSED),
    ("scale_by_lion", {}, "b1", 1.0, REFUSED),
    ("scale_by_rms", {}, "decay", 0.0, OK),
    ("scale_by_rms", {}, "decay", 1.0, REFUSED),
    ("trace", {}, "decay", 1.0, OK),
    ("trace", {}, "decay", 0.0, OK),
    ("trace", {}, "decay", -1.0, REFUSED),
    ("ema", {}, "decay", 1.0, OK),
    ("scale_by_sm3", {}, "b2", 1.0, OK),
    ("scale_by_sm3", {}, "b2", 0.0, REFUSED),
    # floors and offsets: 0 disables, negative is meaningless
    ("scale_by_adam", {}, "eps", 0.0, OK),
    ("scale_by_adam", {}, "eps", -1.0, REFUSED),
    ("scale_by_adam", {}, "eps_root", 0.0, OK),
    ("clip_by_global_norm", {}, "max_norm", INF, OK),
    ("clip_by_global_norm", {}, "max_norm", 0.0, OK),
    ("clip_by_global_norm", {}, "max_norm", -1.0, REFUSED),
    ("clip", {}, "max_delta", INF, OK),
    ("clip", {}, "max_delta", -1.0, REFUSED),
    ("add_decayed_weights", {}, "weight_decay", 0.0, OK),
    ("add_decayed_weights", {}, "weight_decay", -1.0, OK),  # negative decay on purpose: accepted
    ("adamw", {"learning_rate": 0.1}, "weight_decay", 0.0, OK),
    ("sgd", {}, "learning_rate", -1.0, OK),  # gradient ascent
    ("sgd", {"learning_rate": 0.1}, "momentum", 0.0, OK),
    ("adam", {}, "learning_rate", 0.0, OK),
    ("adam", {}, "learning_rate", -1.0, OK),
    ("scale_by_rss", {}, "initial_accumulator_value", 0.0, OK),
    ("scale_by_rss", {}, "initial_accumulator_value", -1.0, REFUSED),
    ("scale_by_yogi", {}, "initial_accumulator_value", 0.0, REFUSED),
    ("scale_by_trust_ratio", {}, "min_norm", 0.0, OK),
    ("scale_by_trust_ratio", {}, "min_norm", -1.0, REFUSED),
    # step-size methods
    ("scale_by_rprop", {"learning_rate": 0.1}, "eta_minus", 1.0, OK),
    ("scale_by_rprop", {"learning_rate": 0.1}, "eta_minus", 0.0, REFUSED),
    ("scale_by_rprop", {"learning_rate": 0.1}, "eta_plus", 1.0, OK),
    ("scale_by_rprop", {"learning_rate": 0.1}, "eta_plus", 0.0, REFUSED),
    ("scale_by_rprop", {"learning_rate": 0.1}, "max_step_size", INF, OK),
    ("scale_by_rprop", {}, "learning_rate", 0.0, REFUSED),
    ("scale_by_polyak", {}, "max_learning_rate", INF, OK),
    ("scale_by_polyak", {}, "max_learning_rate", 0.0, REFUSED),
    # sizes
    ("scale_by_lbfgs", {}, "memory_size", 1, OK),
    ("scale_by_lbfgs", {}, "memory_size", INF, REFUSED),
    ("apply_every", {}, "k", 1, OK),
    ("apply_every", {}, "k", 0, REFUSED),
]


def _factory(lib, name):
    obj = lib
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


def _accepts(lib, name, kwargs):
    try:
        return _factory(lib, name)(**kwargs), None
    except (ValueError, TypeError) as err:
        return None, err


def _ids():
    return [f"{c[0]}-{c[2]}={c[3]}" for c in CASES]


@pytest.mark.parametrize(("name", "base", "arg", "value", "ours"), CASES, ids=_ids())
def test_boundary(name, base, arg, value, ours):
    kwargs = {**base, arg: value}
    tx, err = _accepts(gradax, name, kwargs)
    ref, ref_err = _accepts(optax, name, kwargs)
    if ours:
        assert err is None, f"gradax refuses {name}({arg}={value!r}): {err}"
        assert ref_err is None, f"Optax refuses {name}({arg}={value!r}) too: the case is wrong"
        if "linesearch" in name or "polyak" in name:
            return  # update needs value (and value_fn): the line searches are run in the test below
        params = {"w": jnp.asarray([1.0, -2.0, 3.0])}
        updates, _ = tx.update(params, tx.init(params), params)
        assert updates["w"].shape == (3,)
    else:
        assert err is not None, f"gradax accepts {name}({arg}={value!r}), which the table says it refuses"
        assert re.search(rf"{re.escape(name.split('.')[-1])}\({arg}=\.\.\.\) must be", str(err)), str(err)
        if ref_err is None:  # Optax accepts it: the refusal must be written down
            assert f"{arg}" in _DIFFERENCES, f"{name}({arg}={value!r}) is refused but not in docs/differences.md"


_DIFFERENCES = (
    (Path(__file__).resolve().parents[2] / "docs" / "differences.md").read_text().split("## Argument checks", 1)[-1]
)


@pytest.mark.parametrize("kind", ["zoom", "backtracking"])
def test_line_searches_with_inf_and_small_factors(kind):
    """The newly accepted values work and give Optax's numbers: curv_rtol=inf (sufficient decrease only),
    increase_factor=inf and increase_factor<1."""

    def f(x):
        return jnp.sum((x - 1.0) ** 2 * jnp.arange(1.0, 4.0))

    x0 = jnp.asarray([0.0, 3.0, -1.0])
    if kind == "zoom":
        kws = [{"curv_rtol": INF}, {"increase_factor": INF}, {"increase_factor": 0.5}]
        make = lambda lib, kw: lib.chain(lib.sgd(1.0), lib.scale_by_zoom_linesearch(8, **kw))
    else:
        kws = [{"increase_factor": INF}, {"increase_factor": 0.5}]
        make = lambda lib, kw: lib.chain(lib.sgd(1.0), lib.scale_by_backtracking_linesearch(8, **kw))
    for kw in kws:
        out = []
        for lib in (gradax, optax):
            tx = make(lib, kw)
            x, state = x0, tx.init(x0)
            for _ in range(3):
                v, g = f(x), jax.grad(f)(x)
                u, state = tx.update(g, state, x, value=v, grad=g, value_fn=f)
                x = lib.apply_updates(x, u)
            out.append(np.asarray(x))
        assert np.all(np.isfinite(out[0]))
        assert f(jnp.asarray(out[0])) < f(x0)
        np.testing.assert_allclose(out[0], out[1], rtol=1e-5, atol=1e-6, err_msg=str(kw))
