"""Battery kind: ``where=`` masks on every loss that takes one (found by introspection, so a new loss joins).

Optax 0.2.8's own suite found masks that gradax's losses handled differently (a mask per row, a row with every
entry masked, gradients through masked entries). For each loss: an all-True mask changes nothing, and the value
and gradient under a per-entry mask (one row wholly masked) and under a per-row mask agree with Optax's wherever
Optax's are finite (and are finite there too; a zero vector under cosine_similarity's default epsilon=0 is nan in
both, as documented).
"""

from __future__ import annotations

import inspect

import jax
import jax.numpy as jnp
import numpy as np
import optax  # the oracle (tests only)
import pytest

import gradax

LOGITS = np.array([[2.0, 1.0, -1.0], [0.5, -0.3, 0.2], [1.0, 3.0, 0.1]], np.float32)
PROBS = np.array([[0.2, 0.7, 0.1], [0.5, 0.25, 0.25], [0.0, 1.0, 0.0]], np.float32)
INTS = np.array([1, 0, 2], np.int32)
ENTRY_MASK = np.array([[True, True, False], [False, False, False], [True, False, True]])
ROW_MASK = np.array([True, False, True])


def _args(name):
    """(first argument, the other positional arguments) for the loss ``name``."""
    log_probs = np.asarray(jax.nn.log_softmax(LOGITS), np.float32)
    if name.startswith(("kl_divergence_with_log", "convex_kl", "generalized_kl", "kl_divergence")):
        second = np.log(np.clip(PROBS, 1e-6, None)) if name == "kl_divergence_with_log_targets" else PROBS
        return log_probs, (second,)
    if name == "softmax_cross_entropy_with_integer_labels":
        return LOGITS, (INTS,)
    if name == "smooth_labels":
        return PROBS, (0.1,)
    return LOGITS, (PROBS,)


NAMES = sorted(
    n
    for n in dir(gradax.losses)
    if not n.startswith("_")
    and callable(getattr(gradax.losses, n))
    and "where" in inspect.signature(getattr(gradax.losses, n)).parameters
)


def _value_and_grad(lib, name, where):
    f = getattr(lib.losses, name)
    first, rest = _args(name)
    value = f(first, *rest, where=where)
    grad = jax.grad(lambda x: jnp.sum(f(x, *rest, where=where)))(first)
    return value, grad


def test_every_loss_with_where_is_listed():
    assert {"softmax_cross_entropy", "softmax_cross_entropy_with_integer_labels", "ranking_softmax_loss"} <= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_all_true_mask_changes_nothing(name):
    f = getattr(gradax.losses, name)
    first, rest = _args(name)
    np.testing.assert_allclose(f(first, *rest, where=np.ones_like(ENTRY_MASK)), f(first, *rest), rtol=1e-6)


@pytest.mark.parametrize("mask", [ENTRY_MASK, ROW_MASK], ids=["per_entry", "per_row"])
@pytest.mark.parametrize("name", NAMES)
def test_masked_value_and_gradient_like_optax(name, mask):
    try:
        o_value, o_grad = _value_and_grad(optax, name, mask)
    except (ValueError, TypeError) as err:  # a mask form Optax refuses: gradax may refuse it too
        pytest.skip(f"Optax refuses this mask: {err}")
    value, grad = _value_and_grad(gradax, name, mask)
    o_value, o_grad, value, grad = map(np.asarray, (o_value, o_grad, value, grad))
    finite = np.isfinite(o_value)
    np.testing.assert_allclose(value[finite], o_value[finite], rtol=1e-5, atol=1e-6)
    assert np.all(np.isfinite(value[finite])), f"{name}: non-finite value where Optax's is finite: {value}"
    g_finite = np.isfinite(o_grad)
    np.testing.assert_allclose(grad[g_finite], o_grad[g_finite], rtol=1e-5, atol=1e-6)
    assert np.all(np.isfinite(grad[g_finite])), f"{name}: non-finite gradient where Optax's is finite: {grad}"
