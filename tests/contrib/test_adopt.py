"""ADOPT (gradax.contrib.adopt) against Optax 0.2.8 and the paper's update rule."""

import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradax
from tests._stepping import run
from tests.contrib._common import check_abstract_and_bf16, check_oracle, converges


@pytest.mark.parametrize(
    "kw",
    [{}, {"nesterov": True}, {"use_clipping": False}, {"b1": 0.5, "b2": 0.9, "clip_value_fn": lambda c: 1.0 + 0 * c}],
)
def test_matches_optax(kw):
    check_oracle(gradax.contrib.adopt(1e-2, **kw), optax.contrib.adopt(1e-2, **kw))
    check_oracle(gradax.contrib.scale_by_adopt(**kw), optax.contrib.scale_by_adopt(**kw))


def test_schedule_and_mu_dtype():
    sched = lambda c: 1e-2 / (1.0 + c)
    check_oracle(gradax.contrib.adopt(sched), optax.contrib.adopt(sched))
    state = gradax.contrib.adopt(0.1, mu_dtype=jnp.bfloat16).init(jnp.zeros(3))
    assert state[0].mu.dtype == jnp.bfloat16 and state[0].nu.dtype == jnp.float32


def test_paper_rule_first_step_only_initializes_nu():
    rng = np.random.default_rng(0)
    grads = [rng.normal(size=3) for _ in range(6)]
    ups, _, _ = run(gradax.contrib.scale_by_adopt(use_clipping=False), jnp.zeros(3), [jnp.asarray(g) for g in grads])
    v, m = grads[0] ** 2, np.zeros(3)
    np.testing.assert_array_equal(ups[0], 0.0)
    for t in range(1, 6):
        m = 0.9 * m + 0.1 * grads[t] / np.maximum(np.sqrt(v), 1e-6)
        np.testing.assert_allclose(ups[t], m, rtol=1e-5, atol=1e-5)
        v = 0.9999 * v + 1e-4 * grads[t] ** 2


def test_abstract_init_and_bf16():
    check_abstract_and_bf16(gradax.contrib.adopt(1e-2))


def test_converges_on_quadratic():
    # the paper's convergence analysis is for smooth nonconvex problems; a convex quadratic is the simplest case
    a = jnp.array([1.0, 10.0, 0.1])
    loss = lambda x: 0.5 * jnp.sum(a * x**2)
    assert converges(gradax.contrib.adopt(0.05), loss, jnp.array([1.0, -1.0, 2.0]), 500) < 1e-2


@pytest.mark.parametrize(
    ("kw", "msg"),
    [
        ({"b1": 1.0}, r"scale_by_adopt\(b1=\.\.\.\) must be in \[0, 1\); got 1\.0"),
        ({"b2": 1.5}, r"scale_by_adopt\(b2=\.\.\.\) must be in \[0, 1\)"),
        ({"eps": -1.0}, r"scale_by_adopt\(eps=\.\.\.\) must be >= 0"),
    ],
)
def test_errors(kw, msg):
    with pytest.raises(ValueError, match=msg):
        gradax.contrib.adopt(0.1, **kw)
    with pytest.raises(TypeError, match=r"scale_by_adopt\(clip_value_fn=\.\.\.\) must be callable"):
        gradax.contrib.scale_by_adopt(clip_value_fn=3.0)
