"""apply_if_finite after it has given up: gradax's counter stops at max_consecutive_errors + 1, Optax 0.2.8's grows.

docs/differences.md, "apply_if_finite: the counter stops once it has given up".
"""

import jax.numpy as jnp
import numpy as np
import optax  # the test oracle

import gradax

P = {"w": jnp.array([1.0, -2.0])}
BAD = {"w": jnp.array([jnp.nan, 1.0])}
GOOD = {"w": jnp.array([0.5, 0.5])}


def _counts(lib, grads):
    tx = lib.apply_if_finite(lib.sgd(0.1), 2)
    state = tx.init(P)
    out = []
    for g in grads:
        u, state = tx.update(g, state, P)
        out.append((int(state.notfinite_count), int(state.total_notfinite), bool(np.isnan(u["w"][0]))))
    return out


def test_counter_stops_after_giving_up_and_resets_on_a_finite_update():
    grads = [BAD] * 6 + [GOOD, BAD]
    ours = _counts(gradax, grads)
    theirs = _counts(optax, grads)
    # gradax: skips 2, gives up at the 3rd (applied, NaN update) and stays given up at 3 = max + 1.
    assert [c for c, _, _ in ours] == [1, 2, 3, 3, 3, 3, 0, 1]
    # Optax 0.2.8: the same decisions, but the counter keeps growing while it has given up.
    assert [c for c, _, _ in theirs] == [1, 2, 3, 4, 5, 6, 0, 1]
    # Same updates applied (NaN once given up) and the same total count on both sides.
    assert [n for _, _, n in ours] == [n for _, _, n in theirs] == [False, False, True, True, True, True, False, False]
    assert [t for _, t, _ in ours] == [t for _, t, _ in theirs] == [1, 2, 3, 4, 5, 6, 6, 7]
