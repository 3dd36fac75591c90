"""gradax.cautious and cautious weight decay, against pytorch_optimizer's cautious variants (float64, 20 steps)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradax

from ._torch_reference import assert_runs_close, problem, run_gradax, run_torch

torch = pytest.importorskip("torch")
pytorch_optimizer = pytest.importorskip("pytorch_optimizer")

SHAPES = {"w": (4, 3), "b": (3,)}


@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
def test_cautious_lion_matches_pytorch_optimizer(weight_decay):
    params, grads = problem(SHAPES, steps=20)
    if weight_decay:  # the paper (and the reference) decay outside the mask: compose it that way
        tx = gradax.chain(
            gradax.cautious(gradax.scale_by_lion(b1=0.9, b2=0.99), aligned_with_gradient=True),
            gradax.add_decayed_weights(weight_decay),
            gradax.scale_by_learning_rate(1e-2),
        )
    else:
        tx = gradax.cautious(gradax.lion(1e-2, b1=0.9, b2=0.99, weight_decay=0.0))
    ours, _ = run_gradax(tx, params, grads)
    theirs, _ = run_torch(
        lambda ps: pytorch_optimizer.Lion(ps, lr=1e-2, betas=(0.9, 0.99), weight_decay=weight_decay, cautious=True),
        params,
        grads,
    )
    assert_runs_close(ours, theirs, rtol=1e-12, atol=1e-12)


def test_cautious_on_a_building_block_keeps_gradient_aligned_coordinates():
    g = jnp.array([1.0, -1.0, 2.0, 0.5])
    inner = gradax.stateless(lambda u, p: jnp.array([1.0, 1.0, -1.0, 2.0]))
    u, _ = gradax.cautious(inner, aligned_with_gradient=True).update(g, gradax.EmptyState())
    # kept: coordinates 0 and 3 (u * g > 0); rescaled by 4 / (2 + 1)
    np.testing.assert_allclose(u, jnp.array([1.0, 0.0, 0.0, 2.0]) * 4 / 3, rtol=1e-6)
    u, _ = gradax.cautious(inner).update(g, gradax.EmptyState())  # a descent update: keep u * g < 0
    np.testing.assert_allclose(u, jnp.array([0.0, 1.0, -1.0, 0.0]) * 4 / 3, rtol=1e-6)


def test_cautious_keeps_dtypes_and_the_inner_state():
    p = {"a": jnp.ones(3, jnp.bfloat16)}
    inner = gradax.adamw(1e-2)
    tx = gradax.cautious(inner)
    u, s = tx.update({"a": jnp.full(3, 0.5, jnp.bfloat16)}, tx.init(p), p)
    assert u["a"].dtype == jnp.bfloat16
    assert type(s) is type(inner.init(p))


def test_cautious_error():
    with pytest.raises(TypeError, match=r"cautious\(inner=\.\.\.\) must be a GradientTransformation; got int"):
        gradax.cautious(3)


def test_cautious_weight_decay_decays_only_where_update_and_param_agree():
    p = jnp.array([1.0, -1.0, 2.0, -2.0])
    u = jnp.array([0.5, 0.5, -0.5, -0.5])
    tx = gradax.add_decayed_weights(0.1, cautious=True)
    out, _ = tx.update(u, tx.init(p), p)
    np.testing.assert_allclose(out, u + 0.1 * jnp.array([1.0, 0.0, 0.0, -2.0]), rtol=1e-6)
    plain, _ = gradax.add_decayed_weights(0.1).update(u, tx.init(p), p)
    np.testing.assert_allclose(plain, u + 0.1 * p, rtol=1e-6)


def test_cautious_weight_decay_with_schedule_and_mask():
    p = {"w": jnp.array([1.0, -1.0]), "b": jnp.array([3.0])}
    u = {"w": jnp.array([1.0, 1.0]), "b": jnp.array([1.0])}
    tx = gradax.add_decayed_weights(lambda c: 0.5 * (c + 1), mask={"w": True, "b": False}, cautious=True)
    s = tx.init(p)
    out, s = tx.update(u, s, p)
    np.testing.assert_allclose(out["w"], [1.5, 1.0])
    np.testing.assert_allclose(out["b"], [1.0])
    out, s = tx.update(u, s, p)
    np.testing.assert_allclose(out["w"], [2.0, 1.0])


_P = {"w": jnp.array([[0.5, -1.0, 0.2], [2.0, -0.25, -0.6]]), "b": jnp.array([0.3, -0.7, 0.1])}
_G = [{k: jnp.cos(3 * v * (i + 1)) + 0.1 * i for k, v in _P.items()} for i in range(3)]


@pytest.mark.parametrize(
    ("name", "kw"),
    [
        ("acprop", {"learning_rate": 0.1}),
        ("ademamix", {"learning_rate": 0.1}),
        ("simplified_ademamix", {"learning_rate": 0.1}),
        ("cocob", {"learning_rate": 1.0}),
        ("dog", {"learning_rate": 1.0}),
        ("dowg", {"learning_rate": 1.0}),
        ("galore", {"learning_rate": 0.1, "rank": 1}),
        ("muon", {"learning_rate": 0.1}),
    ],
)
def test_contrib_recipes_take_cautious_weight_decay(name, kw):
    def run(**extra):
        tx = getattr(gradax.contrib, name)(**kw, weight_decay=0.1, **extra)
        state, out = tx.init(_P), []
        for g in _G:
            u, state = tx.update(g, state, _P)
            out.append(u)
        return out

    plain, default, cautious = run(), run(cautious_weight_decay=False), run(cautious_weight_decay=True)
    for a, b in zip(plain, default):
        jax.tree.map(np.testing.assert_array_equal, a, b)
    assert any(not np.allclose(a[k], c[k]) for a, c in zip(plain, cautious) for k in _P)


def test_sophia_takes_cautious_weight_decay():
    obj = {"obj_fn": lambda p: 0.5 * sum(jnp.sum(x**2) for x in jax.tree.leaves(p))}

    def run(**extra):
        tx = gradax.contrib.sophia(0.1, weight_decay=0.1, update_interval=1, **extra)
        state, out = tx.init(_P), []
        for g in _G:
            u, state = tx.update(g, state, _P, **obj)
            out.append(u)
        return out

    plain, cautious = run(), run(cautious_weight_decay=True)
    assert any(not np.allclose(a[k], c[k]) for a, c in zip(plain, cautious) for k in _P)


@pytest.mark.parametrize(
    "make",
    [
        lambda: gradax.sgd(0.1, momentum=0.9),
        lambda: gradax.adam(0.1),
        lambda: gradax.adafactor(0.1),
        lambda: gradax.lamb(0.1),
        lambda: gradax.contrib.muon(0.1),
        lambda: gradax.contrib.schedule_free_adamw(0.1),
        lambda: gradax.contrib.prodigy(1.0),
        lambda: gradax.contrib.mars(0.1),
        lambda: gradax.contrib.adam_mini(0.1),
        lambda: gradax.MultiSteps(gradax.adamw(0.1), 2).gradient_transformation(),
    ],
    ids=[
        "sgd",
        "adam",
        "adafactor",
        "lamb",
        "muon",
        "schedule_free_adamw",
        "prodigy",
        "mars",
        "adam_mini",
        "multisteps",
    ],
)
def test_cautious_never_moves_uphill(make):
    tx = gradax.cautious(make())
    state = tx.init(_P)
    for g in _G:
        u, state = tx.update(g, state, _P)
        for k in _P:
            assert bool(jnp.all(u[k] * g[k] <= 0)), k
