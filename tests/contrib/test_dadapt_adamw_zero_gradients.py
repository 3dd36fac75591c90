"""dadapt_adamw on an all-zero gradient: the D-Adaptation estimate ``d = max(d, r / ||s||_1)`` is 0 / 0, as in Optax
0.2.8. Both libraries are pinned here (documented in docs/differences.md, "same as Optax")."""

import jax.numpy as jnp
import numpy as np
import optax

import gradax


def _run(lib, grads):
    tx = lib.contrib.dadapt_adamw(1.0, weight_decay=0.0)
    params = {"w": jnp.ones(3)}
    state = tx.init(params)
    updates = []
    for g in grads:
        u, state = tx.update({"w": jnp.asarray(g, jnp.float32)}, state, params)
        updates.append(np.asarray(u["w"]))
    return updates, state


def test_zero_gradient_gives_a_nan_estimate_like_optax():
    grads = [np.zeros(3), np.array([1.0, -2.0, 0.5])]
    for lib in (gradax, optax):
        (u0, u1), state = _run(lib, grads)
        # the zero step itself is finite (a zero update), but its estimate is 0/0 ...
        np.testing.assert_array_equal(u0, np.zeros(3))
        assert np.isnan(state.estim_lr), lib.__name__
        # ... and every later update is NaN
        assert np.all(np.isnan(u1)), lib.__name__


def test_a_nonzero_first_gradient_keeps_the_estimate_finite():
    for lib in (gradax, optax):
        updates, state = _run(lib, [np.array([1.0, -2.0, 0.5]), np.zeros(3)])
        assert np.isfinite(state.estim_lr), lib.__name__
        assert all(np.all(np.isfinite(u)) for u in updates), lib.__name__
