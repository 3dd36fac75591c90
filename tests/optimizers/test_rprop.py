"""Tests of scale_by_rprop and rprop (gradax.optimizers._rprop)."""

import jax
import jax.numpy as jnp
import numpy as np
import optax  # the test oracle
import pytest

import gradax
from tests._stepping import run
from tests.optimizers._other_helpers import converges, random_grads, random_tree


def reference_rprop(grads, lr, eta_minus=0.5, eta_plus=1.2, lo=1e-6, hi=50.0):
    """iRprop- in float64 NumPy (Igel & Huesken 2000; torch.optim.Rprop): the step to subtract at each step."""
    step = np.full_like(grads[0], lr, dtype=np.float64)
    prev = np.zeros_like(step)
    out = []
    for g in grads:
        g = np.asarray(g, np.float64)
        s = g * prev
        step = np.where(s > 0, np.minimum(step * eta_plus, hi), np.where(s < 0, np.maximum(step * eta_minus, lo), step))
        g = np.where(s < 0, 0.0, g)
        u = step * np.sign(g)
        prev = u
        out.append(u)
    return out


def test_matches_reference_and_optax_state():
    """gradax's updates follow iRprop-; its state equals Optax's; Optax's updates lag one step (differences.md)."""
    params = random_tree()
    kwargs = {"learning_rate": 0.1, "eta_minus": 0.4, "eta_plus": 1.3, "max_step_size": 0.3}
    ours, our_state, _ = run(gradax.scale_by_rprop(**kwargs), params, random_grads(), 12)
    theirs, their_state, _ = run(optax.scale_by_rprop(**kwargs), params, random_grads(), 12)
    grads = [random_tree(1 + 100 * i) for i in range(12)]
    for name in params:
        ref = reference_rprop([g[name] for g in grads], 0.1, 0.4, 1.3, 1e-6, 0.3)
        for i in range(12):
            np.testing.assert_allclose(ours[i][name], ref[i], rtol=1e-6)
            # Optax 0.2.8 emits the previous step's update (zeros first)
            lagged = np.zeros_like(ref[0]) if i == 0 else np.where(grads[i][name] * ref[i - 1] < 0, 0.0, ref[i - 1])
            np.testing.assert_allclose(theirs[i][name], lagged, rtol=1e-6)
    for a, b in zip(jax.tree.leaves(our_state), jax.tree.leaves(their_state)):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def test_torch_sequence():
    tx = gradax.scale_by_rprop(learning_rate=0.1, eta_minus=0.5, eta_plus=1.2)
    s = tx.init(jnp.zeros(1))
    got = []
    for g in [1.0, 1.0, 1.0, -1.0, 1.0]:
        u, s = tx.update(jnp.array([g]), s)
        got.append(float(u[0]))
    np.testing.assert_allclose(got, [0.1, 0.12, 0.144, 0.0, 0.072], rtol=1e-6)


def test_rprop_descends_and_schedule():
    u, _ = gradax.rprop(0.1).update(jnp.array([2.0, -1.0]), gradax.rprop(0.1).init(jnp.zeros(2)))
    np.testing.assert_allclose(u, [-0.1, 0.1])
    opt = gradax.rprop(lambda c: 0.1 / (1.0 + c))  # schedule: initial step size = schedule(0)
    state = opt.init(jnp.zeros(2))
    np.testing.assert_allclose(state[0].step_sizes, [0.1, 0.1])
    with pytest.raises(TypeError):
        optax.rprop(lambda c: 0.1).init(jnp.zeros(2))


def test_converges():
    assert converges(gradax.rprop(0.1), steps=100)[0]


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: gradax.rprop(0.0), r"rprop\(learning_rate=\.\.\.\) must be > 0"),
        (lambda: gradax.rprop(0.1, eta_minus=1.5), r"rprop\(eta_minus=\.\.\.\) must be in \(0, 1\]"),
        (lambda: gradax.scale_by_rprop(0.1, eta_plus=0.5), r"scale_by_rprop\(eta_plus=\.\.\.\) must be >= 1"),
        (lambda: gradax.rprop(0.1, min_step_size=-1.0), r"rprop\(min_step_size=\.\.\.\) must be >= 0"),
        (lambda: gradax.rprop(0.1, max_step_size=0.0), r"rprop\(max_step_size=\.\.\.\) must be > 0"),
    ],
)
def test_errors(call, match):
    with pytest.raises(ValueError, match=match):
        call()
