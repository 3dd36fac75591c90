"""Parameter groups: per-group optimizers, partition/multi_transform, freeze, selective_transform, path labels."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from tests._stepping import run

import gradax

GROUPS = ({"w": jnp.array([1.0, -2.0])}, {"w": jnp.array([0.5, 1.5, -1.0])}, {"w": jnp.array([3.0])})
SCHEDULES = [lambda c: 0.1 * 0.9**c, lambda c: 0.05 + 0.0 * c, lambda c: 0.0 * c]


def _loss(params):
    return sum(jnp.sum((g["w"] - i) ** 2) for i, g in enumerate(params))


def _group_mask(i):
    return tuple(j == i for j in range(len(GROUPS)))


def _opt(lib, lr):
    if hasattr(lib, "adam") and hasattr(lib, "inject_hyperparams"):
        return lib.inject_hyperparams(lib.adam)(learning_rate=lr, eps=1e-6)
    return lib.inject_hyperparams(lib.sgd)(learning_rate=lr)


def _train(tx, steps=5):
    params, state = GROUPS, tx.init(GROUPS)
    step = jax.jit(tx.update)
    for _ in range(steps):
        updates, state = step(jax.grad(_loss)(params), state, params)
        params = jax.tree.map(lambda p, u: p + u, params, updates)
    return params, state


def test_per_group_optimizers_follow_their_own_schedule():
    tx = gradax.chain(*[gradax.masked(_opt(gradax, SCHEDULES[i]), _group_mask(i)) for i in range(3)])
    params, state = _train(tx)
    for i in range(3):
        alone, _ = _train(_opt(gradax, SCHEDULES[i]))
        np.testing.assert_allclose(params[i]["w"], alone[i]["w"], rtol=1e-6)
    np.testing.assert_array_equal(params[2]["w"], GROUPS[2]["w"])  # zero learning rate: stays still
    lrs = [(k, v) for k, v in gradax.tree_utils.tree_get_all_with_path(state, "learning_rate") if hasattr(v, "dtype")]
    assert len(lrs) == 3
    np.testing.assert_allclose([float(v) for _, v in lrs], [0.1 * 0.9**4, 0.05, 0.0], rtol=1e-6)
    # same numbers as Optax, and through partition with labels
    ref = optax.chain(*[optax.masked(_opt(optax, SCHEDULES[i]), _group_mask(i)) for i in range(3)])
    ref_params, _ = _train(ref)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5), params, ref_params)
    part = gradax.partition({f"g{i}": _opt(gradax, SCHEDULES[i]) for i in range(3)}, ("g0", "g1", "g2"))
    part_params, part_state = _train(part)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6), params, part_params)
    found = gradax.tree_utils.tree_get_all_with_path(part_state, "learning_rate")
    assert len([v for _, v in found if hasattr(v, "dtype")]) == 3


PARAMS = {"a": jnp.array([1.0, -2.0]), "b": {"c": jnp.array([0.5, 1.5, -1.0]), "d": jnp.array([3.0])}}


def _run(tx, steps=4):
    """The params after ``steps`` steps on the gradients ``0.3 p + 0.1``, and the state."""
    _, state, params = run(tx, PARAMS, lambda i, p: jax.tree.map(lambda x: 0.3 * x + 0.1, p), steps)
    return params[-1], state


CASES = [
    lambda ox: ox.partition({"x": ox.sgd(0.1, 0.9), "y": ox.sgd(0.3), "z": ox.sgd(1.0)}, {"a": "x", "b": "y"}),
    lambda ox: ox.multi_transform(
        {"x": ox.sgd(0.1, 0.9), "y": ox.sgd(0.3)}, lambda p: jax.tree.map(lambda x: "x" if x.size > 1 else "y", p)
    ),
    lambda ox: ox.freeze({"a": True, "b": {"c": False, "d": True}}),
    lambda ox: ox.selective_transform(ox.sgd(0.1, 0.9), freeze_mask={"a": True, "b": False}),
]


@pytest.mark.parametrize("make", CASES)
def test_matches_optax(make):
    ours, s = _run(make(gradax))
    ref, os = _run(make(optax))
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6), ours, ref)
    assert str(jax.tree.structure(s)).replace("gradax", "") == str(jax.tree.structure(os)).replace("optax", "")


def test_frozen_leaves_exactly_unchanged():
    p, _ = _run(gradax.selective_transform(gradax.sgd(0.1, 0.9), freeze_mask={"a": True, "b": False}))
    np.testing.assert_array_equal(p["a"], PARAMS["a"])
    u, _ = gradax.freeze(gradax.path_mask("^b/")).update(PARAMS, gradax.freeze(True).init(PARAMS))
    np.testing.assert_array_equal(u["b"]["c"], 0.0)
    np.testing.assert_array_equal(u["a"], PARAMS["a"])
    assert gradax.MultiTransformState is gradax.PartitionState


def test_partition_errors():
    with pytest.raises(
        ValueError,
        match=r"partition\(param_labels=\.\.\.\) uses labels with no transformation: "
        r"\['y'\]; transforms has \['x'\]",
    ):
        gradax.partition({"x": gradax.sgd(0.1)}, {"a": "x", "b": "y"}).init(PARAMS)
    with pytest.raises(
        ValueError,
        match=r"multi_transform\(param_labels=\.\.\.\) must have the params tree or a "
        r"prefix of it; at \['b'\]",
    ):
        gradax.multi_transform({"x": gradax.sgd(0.1)}, {"a": "x", "b": {"c": "x"}}).init(PARAMS)
    with pytest.raises(TypeError, match=r"partition\(transforms=\.\.\.\) must be a mapping"):
        gradax.partition([gradax.sgd(0.1)], {"a": "x"})
    with pytest.raises(TypeError, match=r"transforms\['x'\] is float"):
        gradax.partition({"x": 0.1}, "x")
    with pytest.raises(TypeError, match=r"param_labels=\.\.\.\) must be a pytree of labels .*; got None"):
        gradax.partition({"x": gradax.sgd(0.1)}, None)
    with pytest.raises(TypeError, match=r"selective_transform\(freeze_mask=\.\.\.\) must be a pytree of booleans"):
        gradax.selective_transform(gradax.sgd(0.1), freeze_mask={"a": "yes", "b": False}).init(PARAMS)


def test_path_labels_and_describe():
    params = {
        "embed": {"table": jnp.ones((4, 2))},
        "layers": [
            {"kernel": jnp.ones((2, 2)), "bias": jnp.ones(2)},
            {"kernel": jnp.ones((2, 2)), "norm": jnp.ones(2)},
        ],
    }
    labels = gradax.transforms.path_labels([(r"bias$|norm|embed", "no_decay"), (r"^layers/0/", "slow")], "fast")
    assert gradax.describe_labels(labels, params) == [
        ("embed/table", "no_decay"),
        ("layers/0/bias", "no_decay"),
        ("layers/0/kernel", "slow"),
        ("layers/1/kernel", "fast"),
        ("layers/1/norm", "no_decay"),
    ]
    mask = gradax.path_mask(r"bias$|norm|embed", invert=True)
    assert [v for _, v in gradax.describe_labels(mask, params)] == [False, False, True, True, False]
    tx = gradax.partition({"no_decay": gradax.sgd(1.0), "slow": gradax.sgd(0.1), "fast": gradax.sgd(1.0)}, labels)
    u, _ = tx.update(params, tx.init(params), params)
    np.testing.assert_allclose(u["layers"][0]["kernel"], -0.1)
    with pytest.raises(
        ValueError,
        match=r"path_labels\(rules=\.\.\.\) must match every parameter; no rule matches "
        r"'layers/1/kernel'",
    ):
        gradax.path_labels({"bias|norm|embed": "a", "^layers/0": "b"})(params)
    with pytest.raises(ValueError, match=r"path_mask\(patterns=\.\.\.\) must be a valid regular expression"):
        gradax.path_mask("(")
    with pytest.raises(ValueError, match=r"path_mask\(patterns=\.\.\.\) must have at least one pattern"):
        gradax.path_mask()
    with pytest.raises(TypeError, match=r"path_labels\(rules=\.\.\.\) must be a mapping or a sequence"):
        gradax.path_labels(["bias"])
