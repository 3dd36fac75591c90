"""ACProp (gradax.contrib.acprop) against the paper, a NumPy reference and Optax 0.2.8."""

import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradax
from tests._stepping import run
from tests.contrib._common import check_abstract_and_bf16, converges, params_and_grads


def _reference(grads, b1=0.9, b2=0.999, eps=1e-16, eps_root=1e-16, residual_uses_new_m=True):
    m = np.zeros_like(grads[0])
    s = np.zeros_like(grads[0])
    out = []
    for t, g in enumerate(grads, start=1):
        m_new = b1 * m + (1 - b1) * g
        r = g - (m_new if residual_uses_new_m else m)
        s_hat = np.ones_like(g) if t == 1 else s / (1 - b2 ** (t - 1))
        out.append(g / (np.sqrt(s_hat) + eps))
        s = b2 * s + (1 - b2) * r**2 + eps_root
        m = m_new
    return out


def test_matches_paper_reference():
    rng = np.random.default_rng(0)
    grads = [rng.normal(size=4) for _ in range(10)]
    tx = gradax.contrib.scale_by_acprop()
    ups, _, _ = run(tx, jnp.zeros(4), [jnp.asarray(g, jnp.float32) for g in grads])
    for u, r in zip(ups, _reference(grads)):
        np.testing.assert_allclose(u, r, rtol=1e-5)


def test_optax_residual_differs_documented():
    """Optax 0.2.8 uses g_t - m_{t-1} in the residual (docs/differences.md); gradax uses g_t - m_t."""
    rng = np.random.default_rng(1)
    grads = [rng.normal(size=4) for _ in range(10)]
    g32 = [jnp.asarray(g, jnp.float32) for g in grads]
    ox_ups, _, _ = run(optax.contrib.scale_by_acprop(), jnp.zeros(4), g32)
    gx_ups, _, _ = run(gradax.contrib.scale_by_acprop(), jnp.zeros(4), g32)
    for u, r in zip(ox_ups, _reference(grads, residual_uses_new_m=False)):
        np.testing.assert_allclose(u, r, rtol=1e-5)
    # the first step agrees (no second moment is used yet), later ones differ
    np.testing.assert_allclose(gx_ups[0], ox_ups[0], rtol=1e-6)
    assert not np.allclose(gx_ups[5], ox_ups[5], rtol=1e-3)


def test_schedule_weight_decay_and_state_structure():
    params, grads = params_and_grads()
    tx = gradax.contrib.acprop(lambda c: 0.1 / (1 + c), weight_decay=0.01)
    _, state, _ = run(tx, params, grads)
    ox_state = optax.contrib.acprop(0.1, weight_decay=0.01).init(params)
    assert type(state[0]).__name__ == type(ox_state[0]).__name__ == "ScaleByBeliefState"
    assert state[0]._fields == ox_state[0]._fields
    assert int(state[0].count) == 10


def test_abstract_init_and_bf16():
    check_abstract_and_bf16(gradax.contrib.acprop(1e-2, weight_decay=1e-3))


def test_converges_on_quadratic():
    # f(x) = 1/2 sum a_i x_i^2, the convex quadratic of the paper's toy experiments
    a = jnp.array([1.0, 10.0, 0.1])
    loss = lambda x: 0.5 * jnp.sum(a * x**2)
    final = converges(gradax.contrib.acprop(0.05), loss, jnp.array([1.0, -1.0, 2.0]), 400)
    assert final < 1e-2


@pytest.mark.parametrize(
    ("kw", "msg"),
    [
        ({"b1": 1.0}, r"scale_by_acprop\(b1=\.\.\.\) must be in \[0, 1\); got 1\.0"),
        ({"b2": -0.1}, r"scale_by_acprop\(b2=\.\.\.\) must be in \[0, 1\)"),
        ({"eps": -1.0}, r"scale_by_acprop\(eps=\.\.\.\) must be >= 0"),
        ({"eps_root": -1.0}, r"scale_by_acprop\(eps_root=\.\.\.\) must be >= 0"),
    ],
)
def test_errors(kw, msg):
    with pytest.raises(ValueError, match=msg):
        gradax.contrib.acprop(0.1, **kw)
