"""Decoupled weight decay on the Optax recipes that lack it (issue 18, item 5): keyword-only ``weight_decay``,
``weight_decay_mask`` and ``cautious_weight_decay``; the default (``None``) keeps Optax's chain, state and numbers."""

import jax
import jax.numpy as jnp
import numpy as np
import optax  # the test oracle
import pytest

import gradax

P = {"w": jnp.array([[0.5, -1.0], [2.0, -0.25]]), "b": jnp.array([0.3, -0.7])}
G = [jax.tree.map(lambda x, i=i: jnp.cos(3 * x * (i + 1)) + 0.1 * i, P) for i in range(4)]
LR, WD = 0.1, 0.05

RECIPES = {
    "sgd": {"momentum": 0.9},
    "rmsprop": {},
    "adagrad": {},
    "amsgrad": {},
    "radam": {},
    "adabelief": {},
    "yogi": {},
    "sign_sgd": {},
    "signum": {},
    "sm3": {},
    "noisy_sgd": {"eta": 0.0, "key": 0},
    "optimistic_gradient_descent": {},
}


def _updates(tx, params=P):
    state = tx.init(params)
    out = []
    for g in G:  # the params stay fixed, so each step's preconditioner is the same with and without decay
        u, state = tx.update(g, state, params)
        out.append(u)
    return out, state


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_default_is_optax(name):
    kw = RECIPES[name]
    ours, s1 = _updates(getattr(gradax, name)(LR, **kw))
    theirs, s2 = _updates(getattr(optax, name)(LR, **kw))
    for a, b in zip(ours, theirs):
        jax.tree.map(lambda x, y: np.testing.assert_allclose(x, y, rtol=2e-5, atol=1e-7), a, b)  # the battery's
    assert [type(x).__name__ for x in s1] == [type(x).__name__ for x in s2]  # the same chain: no extra element


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_decoupled_decay_masked_and_scheduled(name):
    kw = RECIPES[name]
    plain, _ = _updates(getattr(gradax, name)(LR, **kw))
    mask = {"w": True, "b": False}
    decayed, _ = _updates(getattr(gradax, name)(LR, **kw, weight_decay=lambda c: WD * (c + 1), weight_decay_mask=mask))
    for i, (u, d) in enumerate(zip(plain, decayed)):
        np.testing.assert_allclose(d["w"], u["w"] - LR * WD * (i + 1) * P["w"], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(d["b"], u["b"], rtol=1e-6)


def test_cautious_weight_decay_on_a_recipe():
    plain, _ = _updates(gradax.sgd(LR))
    cautious, _ = _updates(gradax.sgd(LR, weight_decay=WD, cautious_weight_decay=True))
    for u, c in zip(plain, cautious):
        for k in P:
            # the update before the learning rate is -u / LR; decay where it has the parameter's sign
            agree = (-u[k] / LR) * P[k] >= 0
            np.testing.assert_allclose(c[k], u[k] - LR * WD * jnp.where(agree, P[k], 0), rtol=1e-5, atol=1e-7)


def test_injected_default_keeps_optax_hyperparams():
    tx = gradax.inject_hyperparams(gradax.sgd)(learning_rate=LR, momentum=0.9)
    ref = optax.inject_hyperparams(optax.sgd)(learning_rate=LR, momentum=0.9)
    assert sorted(tx.init(P).hyperparams) == sorted(ref.init(P).hyperparams)
    tx = gradax.inject_hyperparams(gradax.sgd)(learning_rate=LR, weight_decay=WD)
    assert "weight_decay" in tx.init(P).hyperparams


def test_non_finite_weight_decay_is_an_error():
    with pytest.raises(ValueError, match=r"add_decayed_weights\(weight_decay=\.\.\.\) must be finite"):
        gradax.sgd(LR, weight_decay=float("nan"))


WITH_DECAY = {
    "adamw": {"weight_decay": WD},
    "nadamw": {"weight_decay": WD},
    "adamaxw": {"weight_decay": WD},
    "adan": {"weight_decay": WD},
    "lamb": {"weight_decay": WD},
    "lion": {"weight_decay": WD},
    "lars": {"weight_decay": WD},
    "adadelta": {"weight_decay": WD},
    "adafactor": {"weight_decay_rate": WD},
}


@pytest.mark.parametrize("name", sorted(WITH_DECAY))
def test_cautious_weight_decay_option_on_recipes_with_weight_decay(name):
    kw = WITH_DECAY[name]
    plain, _ = _updates(getattr(gradax, name)(LR, **kw))
    default, _ = _updates(getattr(gradax, name)(LR, **kw, cautious_weight_decay=False))
    cautious, _ = _updates(getattr(gradax, name)(LR, **kw, cautious_weight_decay=True))
    for a, b in zip(plain, default):
        jax.tree.map(np.testing.assert_array_equal, a, b)
    assert any(not np.allclose(a["w"], c["w"]) or not np.allclose(a["b"], c["b"]) for a, c in zip(plain, cautious))


@pytest.mark.parametrize("name", ["adamw", "lion"])
def test_cautious_adamw_and_lion_closed_form(name):
    nodecay, _ = _updates(getattr(gradax, name)(LR, weight_decay=0.0))
    cautious, _ = _updates(getattr(gradax, name)(LR, weight_decay=WD, cautious_weight_decay=True))
    for u, c in zip(nodecay, cautious):
        for k in P:
            agree = (-u[k] / LR) * P[k] >= 0
            np.testing.assert_allclose(c[k], u[k] - LR * WD * jnp.where(agree, P[k], 0), rtol=1e-5, atol=1e-7)
