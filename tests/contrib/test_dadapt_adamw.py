"""D-Adapt AdamW (gradax.contrib.dadapt_adamw) against Optax 0.2.8."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradax
from tests.contrib._common import check_abstract_and_bf16, check_oracle, converges

_SCHED = lambda c: 1.0 / (1.0 + c)


@pytest.mark.parametrize("kw", [{}, {"estim_lr0": 1e-3, "weight_decay": 0.1}, {"learning_rate": _SCHED}])
def test_matches_optax(kw):
    check_oracle(gradax.contrib.dadapt_adamw(**kw), optax.contrib.dadapt_adamw(**kw), rtol=1e-5)


def test_abstract_init_and_bf16():
    check_abstract_and_bf16(gradax.contrib.dadapt_adamw())


def test_converges_on_quadratic():
    a = jnp.array([1.0, 10.0, 0.1])
    loss = lambda x: 0.5 * jnp.sum(a * (x - 1.0) ** 2)
    assert converges(gradax.contrib.dadapt_adamw(), loss, jnp.zeros(3), 500) < 5e-2


def test_errors():
    with pytest.raises(ValueError, match=r"dadapt_adamw\(betas\[1\]=\.\.\.\) must be in \[0, 1\); got 1\.0"):
        gradax.contrib.dadapt_adamw(betas=(0.9, 1.0))
    with pytest.raises(ValueError, match=r"dadapt_adamw\(betas=\.\.\.\) must be a pair"):
        gradax.contrib.dadapt_adamw(betas=0.9)
    with pytest.raises(ValueError, match=r"dadapt_adamw\(estim_lr0=\.\.\.\) must be > 0"):
        gradax.contrib.dadapt_adamw(estim_lr0=0.0)
    tx = gradax.contrib.dadapt_adamw()
    with pytest.raises(ValueError, match="params"):
        tx.update(jnp.ones(2), tx.init(jnp.ones(2)))


def test_weight_decay_schedule_evaluated_before_the_increment():
    """weight_decay only enters the update: with params held fixed, step k with the schedule wd(k) equals step k
    with the number wd(k)."""
    wd = lambda c: 0.1 * (c + 1.0)
    params, grads = {"w": jnp.array([1.0, -2.0, 0.5])}, [{"w": jnp.array([0.3, -0.1, 0.2]) * (i + 1)} for i in range(3)]
    sched = gradax.contrib.dadapt_adamw(estim_lr0=1e-2, weight_decay=wd)
    s = sched.init(params)
    for k, g in enumerate(grads):
        number = gradax.contrib.dadapt_adamw(estim_lr0=1e-2, weight_decay=wd(k))
        sn = sched.init(params)
        for g_prev in grads[: k + 1]:
            un, sn = number.update(g_prev, sn, params)
        us, s = sched.update(g, s, params)
        np.testing.assert_allclose(us["w"], un["w"], rtol=1e-6)


def _trajectory(tx, lib, steps=40):
    a = jnp.array([1.0, 10.0, 0.1])
    loss = lambda x: 0.5 * jnp.sum(a * (x - 1.0) ** 2)
    x = jnp.zeros(3)
    state = tx.init(x)
    step = jax.jit(lambda x, s: tx.update(jax.grad(loss)(x), s, x))
    out = []
    for _ in range(steps):
        u, state = step(x, state)
        x = lib.apply_updates(x, u)
        out.append(x)
    return np.array(out), state


@pytest.mark.parametrize(
    ("name", "kw"),
    [
        ("dadapt_adamw", {}),
        ("dadapt_adamw", {"weight_decay": 0.1, "estim_lr0": 1e-4}),
        ("prodigy", {}),
        ("prodigy", {"weight_decay": 0.1, "safeguard_warmup": True}),
    ],
)
def test_growing_estimate_matches_optax(name, kw):
    """40 steps on a quadratic, where d_k grows by orders of magnitude (the random-gradient tests keep d_k ~ d_0)."""
    xg, sg = _trajectory(getattr(gradax.contrib, name)(**kw), gradax)
    xo, so = _trajectory(getattr(optax.contrib, name)(**kw), optax)
    assert float(so.estim_lr) > 10 * (kw.get("estim_lr0", 1e-6))
    np.testing.assert_allclose(xg, xo, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(sg.estim_lr, so.estim_lr, rtol=1e-5)
