"""D-Adapt AdamW (gradax.contrib.dadapt_adamw) against Optax 0.2.8."""

import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradax
from tests.contrib._common import check_abstract_and_bf16, check_oracle, converges

_SCHED = lambda c: 1.0 / (1.0 + c)  # noqa: E731


@pytest.mark.parametrize("kw", [{}, {"estim_lr0": 1e-3, "weight_decay": 0.1}, {"learning_rate": _SCHED}])
def test_matches_optax(kw):
    # rtol 1e-4: d is a ratio of sums over the tree (summation order differs); over 10 steps it drifts to ~2e-5
    check_oracle(gradax.contrib.dadapt_adamw(**kw), optax.contrib.dadapt_adamw(**kw), rtol=1e-4)


def test_abstract_init_and_bf16():
    check_abstract_and_bf16(gradax.contrib.dadapt_adamw())


def test_converges_on_quadratic():
    a = jnp.array([1.0, 10.0, 0.1])
    loss = lambda x: 0.5 * jnp.sum(a * (x - 1.0) ** 2)  # noqa: E731
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
    wd = lambda c: 0.1 * (c + 1.0)  # noqa: E731
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
