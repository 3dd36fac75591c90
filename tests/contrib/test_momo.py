"""momo (gradax.contrib) against Optax 0.2.8 and on a quadratic."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradax

A = jnp.array([1.0, 4.0, 0.5])


def _loss(x):
    return 0.5 * jnp.sum(A * x**2) + 0.1


def _run(tx, steps=8):
    x = jnp.array([1.0, -2.0, 0.5])
    state = tx.init(x)
    out = []
    for _ in range(steps):
        v, g = jax.value_and_grad(_loss)(x)
        u, state = tx.update(g, state, x, value=v)
        out.append(np.asarray(u))
        x = x + u
    return np.array(out), state


@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"learning_rate": 0.3, "beta": 0.8, "lower_bound": 0.1},
        {"learning_rate": 0.3, "beta": 0.8, "lower_bound": 0.05, "adapt_lower_bound": True},
    ],
)
def test_matches_optax(kw):
    ug, sg = _run(gradax.contrib.momo(**kw))
    uo, so = _run(optax.contrib.momo(**kw))
    np.testing.assert_allclose(ug, uo, rtol=1e-5, atol=1e-6)
    assert sg._fields == so._fields == ("exp_avg", "barf", "gamma", "lb", "count")


def test_missing_value_and_params():
    tx = gradax.contrib.momo()
    with pytest.raises(ValueError, match=r"momo: update\(...\) needs `value`"):
        tx.update(jnp.ones(2), tx.init(jnp.zeros(2)), jnp.zeros(2))
    with pytest.raises(ValueError, match=r"momo: update\(...\) needs `params`"):
        tx.update(jnp.ones(2), tx.init(jnp.zeros(2)), value=1.0)


def test_converges_with_schedule():
    tx = gradax.contrib.momo(learning_rate=lambda c: 1.0 / (1.0 + 0.01 * c), lower_bound=0.1)
    step = jax.jit(lambda x, s: tx.update(jax.grad(_loss)(x), s, x, value=_loss(x)))
    x = jnp.array([1.0, -2.0, 0.5])
    state = tx.init(x)
    for _ in range(100):
        u, state = step(x, state)
        x = x + u
    assert float(_loss(x)) < 0.11


@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"learning_rate": 0.3, "lower_bound": 0.05},
        {"learning_rate": 0.3, "b1": 0.8, "b2": 0.99, "lower_bound": 0.05, "adapt_lower_bound": True},
        {"learning_rate": 1.0, "lower_bound": 0.1},
    ],
)
def test_momo_adam_matches_optax(kw):
    ug, sg = _run(gradax.contrib.momo_adam(**kw))
    uo, so = _run(optax.contrib.momo_adam(**kw))
    # rtol 1e-4: gradax's 1 - b2 is float32 (1.3e-5 from Optax's, docs/differences.md "Adam family") and the Polyak
    # numerator's cancellation amplifies it to ~5e-5 by step 4 (b2 = 0.999; the same order of operations as Optax)
    np.testing.assert_allclose(ug, uo, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(sg.lb, so.lb, rtol=1e-5)
    assert sg._fields == so._fields == ("exp_avg", "exp_avg_sq", "barf", "gamma", "lb", "count")


def test_momo_adam_missing_value():
    tx = gradax.contrib.momo_adam()
    with pytest.raises(ValueError, match=r"momo_adam: update\(...\) needs `value`"):
        tx.update(jnp.ones(2), tx.init(jnp.zeros(2)), jnp.zeros(2))
    with pytest.raises(ValueError, match=r"momo_adam: update\(...\) needs `params`"):
        tx.update(jnp.ones(2), tx.init(jnp.zeros(2)), value=1.0)


def test_momo_adam_schedule():
    sched = lambda c: 0.1 / (1.0 + c)
    ug, _ = _run(gradax.contrib.momo_adam(learning_rate=sched))
    uo, _ = _run(optax.contrib.momo_adam(learning_rate=sched))
    np.testing.assert_allclose(ug, uo, rtol=1e-5, atol=1e-6)


# --- weight decay and the online lower bound: gradax follows the paper (docs/differences.md, "contrib.momo") ---

_X0 = np.array([1.0, -2.0, 0.5])
_A64 = np.asarray(A, np.float64)


def _reference(adam, kw, steps, proximal):
    """Float64 MoMo / MoMo-Adam on ``_loss``. ``proximal``: x+ = (x - tau p)/(1 + lr wd) (paper, Lemma 3.1; the
    authors' code); else x+ = x/(1 + lr wd) - tau p (Optax 0.2.8). Step size and lower-bound rules are the paper's."""
    lr, wd, lb0 = kw["learning_rate"], kw.get("weight_decay", 0.0), kw.get("lower_bound", 0.0)
    b1, b2, eps = (kw.get("b1", 0.9), kw.get("b2", 0.999), kw.get("eps", 1e-8)) if adam else (kw["beta"], 0.0, 0.0)
    x, d, v, barf, gamma, lb = _X0.copy(), np.zeros(3), np.zeros(3), 0.0, 0.0, lb0
    updates, lbs = [], []
    for k in range(steps):
        f, g = 0.5 * np.sum(_A64 * x**2) + 0.1, _A64 * x
        b = b1 if (adam or k > 0) else 0.0
        d, barf, gamma = b * d + (1 - b) * g, b * barf + (1 - b) * f, b * gamma + (1 - b) * (g @ x)
        if adam:
            v = b2 * v + (1 - b2) * g * g
            rho, precond = 1 - b1 ** (k + 1), eps + np.sqrt(v / (1 - b2 ** (k + 1)))
        else:
            rho, precond = 1.0, 1.0
        fh, gh, p = barf / rho, gamma / rho, d / rho / precond
        s, dx, nn = 1 + lr * wd, (d / rho) @ x, (d / rho) @ p
        if kw.get("adapt_lower_bound") and s * (fh - gh) + dx < s * lb:
            lb = max((s * (fh - gh) + dx) / (2 * s), lb0)
        tau = min(lr, max(s * (fh - gh - lb) + dx, 0.0) / nn)
        if kw.get("adapt_lower_bound"):
            lb = max(fh + dx - gh - 0.5 * tau * nn, lb0)
        x_new = (x - tau * p) / s if proximal else x / s - tau * p
        updates.append(x_new - x)
        lbs.append(lb)
        x = x_new
    return np.array(updates), np.array(lbs)


_WD_CASES = [
    ("momo", {"learning_rate": 0.3, "beta": 0.8, "lower_bound": 0.05, "weight_decay": 0.1, "adapt_lower_bound": True}),
    ("momo", {"learning_rate": 1.0, "beta": 0.9, "lower_bound": 0.0, "weight_decay": 0.05, "adapt_lower_bound": True}),
    ("momo", {"learning_rate": 0.3, "beta": 0.8, "lower_bound": 0.1, "weight_decay": 0.1}),
    (
        "momo_adam",
        {
            "learning_rate": 0.3,
            "b1": 0.8,
            "b2": 0.99,
            "lower_bound": 0.05,
            "weight_decay": 0.1,
            "adapt_lower_bound": True,
        },
    ),
    ("momo_adam", {"learning_rate": 0.1, "b2": 0.99, "weight_decay": 0.5, "adapt_lower_bound": True}),
    ("momo_adam", {"learning_rate": 0.3, "weight_decay": 0.1, "lower_bound": 0.05}),
]


@pytest.mark.parametrize(("name", "kw"), _WD_CASES)
def test_weight_decay_follows_the_paper_and_optax_differs_only_in_the_last_step(name, kw):
    steps = 12
    adam = name == "momo_adam"
    # the Polyak numerator (1 + lr wd)(f - lb - gamma) + <d, x> cancels: float32 Adam paths (gradax and Optax alike,
    # same order of operations) drift ~1e-4 from float64 over 12 steps; momo stays within 1e-5
    rtol = 5e-4 if adam else 1e-5
    ug, sg = _run(getattr(gradax.contrib, name)(**kw), steps)
    ref_u, ref_lb = _reference(adam, kw, steps, proximal=True)
    np.testing.assert_allclose(ug, ref_u, rtol=rtol, atol=1e-6)
    np.testing.assert_allclose(sg.lb, ref_lb[-1], rtol=rtol, atol=1e-6)
    # Optax 0.2.8: same step size, same lower-bound reset and estimate, but x/(1 + lr wd) - tau p.
    uo, so = _run(getattr(optax.contrib, name)(**kw), steps)
    opt_u, opt_lb = _reference(adam, kw, steps, proximal=False)
    np.testing.assert_allclose(uo, opt_u, rtol=rtol, atol=1e-6)
    np.testing.assert_allclose(so.lb, opt_lb[-1], rtol=rtol, atol=1e-6)


@pytest.mark.parametrize(("name", "kw"), _WD_CASES)
def test_weight_decay_each_step_from_optax_state(name, kw):
    """Differential test with Optax on every step of its own trajectory: from Optax's state and params, gradax gives
    the same state (lower bound included) and the paper's step with Optax's tau p, where Optax's update is
    u_o = -(lr wd / s) x - tau p (s = 1 + lr wd) and the paper's is u = (u_o + (lr wd / s) x) / s - (lr wd / s) x."""
    gx, ox = getattr(gradax.contrib, name)(**kw), getattr(optax.contrib, name)(**kw)
    state_cls = type(gx.init(jnp.zeros(3)))
    rtol = 2e-5 if name == "momo_adam" else 1e-5  # exp_avg_sq: float32 1 - b2 (docs/differences.md, "Adam family")
    decay = kw["learning_rate"] * kw["weight_decay"]
    s = 1.0 + decay
    x = jnp.array([1.0, -2.0, 0.5])
    so = ox.init(x)
    for _ in range(12):
        v, g = jax.value_and_grad(_loss)(x)
        ug, sg = gx.update(g, state_cls(*so), x, value=v)
        uo, so = ox.update(g, so, x, value=v)
        for a, b in zip(sg, so):
            np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), rtol=rtol, atol=1e-7)
        expected = (np.asarray(uo, np.float64) + decay / s * np.asarray(x)) / s - decay / s * np.asarray(x)
        np.testing.assert_allclose(ug, expected, rtol=rtol, atol=1e-7)
        x = x + uo


def test_weight_decay_one_step_closed_form():
    """f = ||x||^2 from [1, 2, 3], lr 1, wd 0.1: tau = 0.225, x+ = (x - tau 2x)/1.1 = x/2 (Optax 0.2.8: 0.4591 x)."""
    f = lambda x: jnp.sum(x**2)
    x = jnp.array([1.0, 2.0, 3.0])
    for lib, factor in ((gradax, 0.5), (optax, 1 / 1.1 - 0.45)):
        tx = lib.contrib.momo(learning_rate=1.0, weight_decay=0.1)
        v, g = jax.value_and_grad(f)(x)
        u, _ = tx.update(g, tx.init(x), x, value=v)
        np.testing.assert_allclose(x + u, factor * x, rtol=1e-6)
