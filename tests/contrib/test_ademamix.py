"""AdEMAMix and simplified AdEMAMix (gradax.contrib) against Optax 0.2.8 and the papers' update rules."""

import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradax
from tests._stepping import run
from tests.contrib._common import check_abstract_and_bf16, check_oracle, converges

_SCHED = lambda c: 1e-2 / (1.0 + c)


@pytest.mark.parametrize("kw", [{}, {"b3": 0.99, "alpha": 2.0, "eps_root": 1e-8}, {"b3": lambda c: 0.9 + 0 * c}])
def test_ademamix_matches_optax(kw):
    check_oracle(gradax.contrib.ademamix(1e-2, **kw), optax.contrib.ademamix(1e-2, **kw))
    check_oracle(gradax.contrib.scale_by_ademamix(**kw), optax.contrib.scale_by_ademamix(**kw))
    check_oracle(gradax.contrib.ademamix(_SCHED, weight_decay=0.1), optax.contrib.ademamix(_SCHED, weight_decay=0.1))


@pytest.mark.parametrize("kw", [{}, {"alpha": 3.0, "b1": 0.9}, {"alpha": lambda c: 0.5 * c}])
def test_simplified_matches_optax(kw):
    check_oracle(gradax.contrib.simplified_ademamix(1e-2, **kw), optax.contrib.simplified_ademamix(1e-2, **kw))
    check_oracle(gradax.contrib.scale_by_simplified_ademamix(**kw), optax.contrib.scale_by_simplified_ademamix(**kw))


def test_ademamix_paper_rule():
    rng = np.random.default_rng(0)
    grads = [rng.normal(size=3) for _ in range(5)]
    ups, _, _ = run(gradax.contrib.scale_by_ademamix(b3=0.99, alpha=2.0), jnp.zeros(3), [jnp.asarray(g) for g in grads])
    m1 = m2 = v = np.zeros(3)
    for t, g in enumerate(grads, start=1):
        m1, m2, v = 0.9 * m1 + 0.1 * g, 0.99 * m2 + 0.01 * g, 0.999 * v + 0.001 * g**2
        ref = (m1 / (1 - 0.9**t) + 2.0 * m2) / (np.sqrt(v / (1 - 0.999**t)) + 1e-8)
        np.testing.assert_allclose(ups[t - 1], ref, rtol=1e-5)


def test_mu_dtype_and_abstract_bf16():
    state = gradax.contrib.scale_by_ademamix(mu_dtype=jnp.bfloat16).init(jnp.zeros(2))
    assert state.m1.dtype == state.m2.dtype == state.nu.dtype == jnp.bfloat16
    check_abstract_and_bf16(gradax.contrib.ademamix(1e-2))
    check_abstract_and_bf16(gradax.contrib.simplified_ademamix(1e-2))


def test_converges_on_quadratic():
    a = jnp.array([1.0, 10.0, 0.1])
    loss = lambda x: 0.5 * jnp.sum(a * x**2)
    x0 = jnp.array([1.0, -1.0, 2.0])
    assert converges(gradax.contrib.ademamix(0.02, b3=0.99, alpha=1.0), loss, x0, 500) < 1e-2
    assert converges(gradax.contrib.simplified_ademamix(0.002, b1=0.9, alpha=1.0), loss, x0, 500) < 1e-2


@pytest.mark.parametrize(
    ("factory", "kw", "msg"),
    [
        ("scale_by_ademamix", {"b3": 1.0}, r"scale_by_ademamix\(b3=\.\.\.\) must be in \[0, 1\); got 1\.0"),
        ("scale_by_ademamix", {"alpha": -1.0}, r"scale_by_ademamix\(alpha=\.\.\.\) must be >= 0"),
        ("scale_by_ademamix", {"b1": 2.0}, r"scale_by_ademamix\(b1=\.\.\.\) must be in \[0, 1\)"),
        ("scale_by_simplified_ademamix", {"b2": 1.0}, r"scale_by_simplified_ademamix\(b2=\.\.\.\) must be in"),
        ("scale_by_simplified_ademamix", {"eps": -1.0}, r"scale_by_simplified_ademamix\(eps=\.\.\.\) must be >= 0"),
    ],
)
def test_errors(factory, kw, msg):
    with pytest.raises(ValueError, match=msg):
        getattr(gradax.contrib, factory)(**kw)
