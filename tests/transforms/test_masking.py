"""masked, MaskedNode, MaskedState and the shared mask resolver, against Optax 0.2.8 and closed forms."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from tests._stepping import run

import gradax
from gradax.transforms._masking import resolve_labels, resolve_mask

PARAMS = {"a": jnp.array([1.0, -2.0]), "b": {"c": jnp.array([0.5, 1.5, -1.0]), "d": jnp.array([3.0])}}
GRADS = jax.tree.map(lambda x: 0.3 * x + 0.1, PARAMS)


def _run(tx, steps=4, params=PARAMS):
    """The params after ``steps`` steps on the gradients ``0.3 p + 0.1``, and the state."""
    _, state, history = run(tx, params, lambda i, p: jax.tree.map(lambda x: 0.3 * x + 0.1, p), steps)
    return history[-1], state


def _close(a, b, rtol=1e-6):
    jax.tree.map(lambda x, y: np.testing.assert_allclose(x, y, rtol=rtol, atol=1e-7), a, b)


MASKS = [
    {"a": True, "b": False},
    {"a": False, "b": {"c": True, "d": False}},
    True,
    False,
    lambda p: jax.tree.map(lambda x: x.size > 1, p),
]


@pytest.mark.parametrize("mask", MASKS)
def test_masked_matches_optax(mask):
    ours, s = _run(gradax.masked(gradax.sgd(0.1, momentum=0.9), mask))
    ref, os = _run(optax.masked(optax.sgd(0.1, momentum=0.9), mask))
    _close(ours, ref)
    assert str(jax.tree.structure(s)).replace("gradax", "") == str(jax.tree.structure(os)).replace("optax", "")


def test_masked_leaves_unmasked_updates_untouched_and_nested():
    tx = gradax.masked(
        gradax.masked(gradax.scale(-1.0), {"a": True, "b": {"c": True, "d": False}}), {"a": False, "b": True}
    )
    u, _ = tx.update(GRADS, tx.init(PARAMS), PARAMS)
    np.testing.assert_array_equal(u["a"], GRADS["a"])
    np.testing.assert_array_equal(u["b"]["c"], -GRADS["b"]["c"])
    np.testing.assert_array_equal(u["b"]["d"], GRADS["b"]["d"])


def test_masked_node_and_state():
    assert jax.tree.leaves(gradax.MaskedNode()) == []
    state = gradax.masked(gradax.trace(0.9), {"a": True, "b": False}).init(PARAMS)
    assert isinstance(state, gradax.MaskedState)
    assert isinstance(state.inner_state.trace["b"], gradax.MaskedNode)


def test_abstract_init():
    shapes = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), PARAMS)
    state = gradax.masked(gradax.trace(0.9), {"a": True, "b": False}).init(shapes)
    assert state.inner_state.trace["a"].shape == (2,)


def test_mask_mismatch_names_key_path():
    with pytest.raises(
        ValueError,
        match=r"masked\(mask=\.\.\.\) must have the params tree or a prefix of it; at "
        r"\['b'\]: expected a dict with children \[\['c'\], \['d'\]\], found a dict with children \[\['c'\]\] "
        r"\(Dict key mismatch\)",
    ):
        gradax.masked(gradax.sgd(0.1), {"a": True, "b": {"c": True}}).init(PARAMS)
    # Optax's words for dicts with other keys (its users match on them), in every mask-taking wrapper
    with pytest.raises(ValueError, match="Dict key mismatch"):
        gradax.freeze({"a": True}).init(PARAMS)
    with pytest.raises(ValueError, match="Dict key mismatch"):
        gradax.selective_transform(gradax.sgd(0.1), freeze_mask={"a": True}).init(PARAMS)


def test_mask_wrong_leaf_type():
    with pytest.raises(TypeError, match=r"must be a pytree of booleans .* at \['a'\] found an array of shape \(2,\)"):
        gradax.masked(gradax.sgd(0.1), PARAMS).init(PARAMS)
    with pytest.raises(TypeError, match=r"at \['b'\] found 1 of type int"):
        gradax.masked(gradax.sgd(0.1), {"a": True, "b": 1}).init(PARAMS)
    with pytest.raises(TypeError, match=r"masked\(mask=\.\.\.\) must be a pytree of booleans or a function"):
        gradax.masked(gradax.sgd(0.1), None)
    with pytest.raises(TypeError, match=r"masked\(inner=\.\.\.\) must be a GradientTransformation"):
        gradax.masked(0.1, True)


def test_traced_mask_is_a_clear_error():
    tx = gradax.masked(gradax.sgd(0.1), lambda p: jax.tree.map(lambda x: x[0] > 0, p))
    with pytest.raises(TypeError, match="must hold concrete booleans; at \\['a'\\] found a traced value"):
        jax.jit(tx.init)(PARAMS)


def test_resolve_labels_rejects_arrays():
    with pytest.raises(TypeError, match=r"partition\(param_labels=\.\.\.\) must be a pytree of hashable labels"):
        resolve_labels("partition", {"a": jnp.ones(2), "b": "x"}, PARAMS)
    assert resolve_mask("masked", {"a": np.bool_(True), "b": jnp.asarray(False)}, PARAMS) == {"a": True, "b": False}


class MLP(eqx.Module):
    layers: list
    act: callable = eqx.field(static=True)

    def __init__(self, key):
        k1, k2 = jax.random.split(key)
        self.layers = [eqx.nn.Linear(2, 3, key=k1), eqx.nn.Linear(3, 1, key=k2)]
        self.act = jax.nn.relu

    def __call__(self, x):
        return self.layers[1](self.act(self.layers[0](x)))


def test_equinox_model_masks():
    model = MLP(jax.random.key(0))
    params = eqx.filter(model, eqx.is_array)
    # a callable module used as a mask is data: it must not be called (Optax calls it)
    mask = jax.tree.map(lambda x: x.ndim > 1, params)
    assert callable(mask)
    ours, _ = _run(gradax.masked(gradax.sgd(0.1, momentum=0.9), mask), params=params)
    ref, _ = _run(optax.masked(optax.sgd(0.1, momentum=0.9), lambda _: mask), params=params)
    _close(ours, ref)
    assert not np.allclose(ours.layers[0].weight, params.layers[0].weight)


def test_nnx_state_params():
    from flax import nnx

    model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    params = nnx.state(model, nnx.Param)
    mask = jax.tree.map(lambda x: x.ndim > 1, params)
    tx = gradax.masked(gradax.scale(0.0), mask)
    u, _ = tx.update(params, tx.init(params), params)
    leaves = jax.tree.leaves(u)
    assert len(leaves) == 2
    for leaf, p in zip(leaves, jax.tree.leaves(params)):
        np.testing.assert_array_equal(leaf, 0.0 if p.ndim > 1 else p)


@pytest.mark.skipif(not hasattr(gradax, "adamw"), reason="adamw not merged yet")
def test_adamw_mask_decays_exactly_where_true():
    params = {"w": jnp.ones((2, 2)), "b": jnp.ones(2)}
    zero = jax.tree.map(jnp.zeros_like, params)
    tx = gradax.adamw(0.1, weight_decay=0.5, mask={"w": True, "b": False})
    u, _ = tx.update(zero, tx.init(params), params)
    np.testing.assert_allclose(u["w"], -0.1 * 0.5 * params["w"], rtol=1e-6)
    np.testing.assert_array_equal(u["b"], 0.0)
    ref = optax.adamw(0.1, weight_decay=0.5, mask={"w": True, "b": False})
    _close(_run(tx, params=params)[0], _run(ref, params=params)[0], rtol=1e-5)


@pytest.mark.skipif(not hasattr(gradax, "inject_hyperparams"), reason="inject_hyperparams not merged yet")
def test_inject_hyperparams_adamw_with_module_mask():
    model = MLP(jax.random.key(1))
    params = eqx.filter(model, eqx.is_array)
    mask = jax.tree.map(lambda x: x.ndim > 1, params)
    tx = gradax.inject_hyperparams(gradax.adamw)(learning_rate=0.1, weight_decay=0.5, mask=mask)
    plain = gradax.adamw(learning_rate=0.1, weight_decay=0.5, mask=mask)
    _close(_run(tx, params=params)[0], _run(plain, params=params)[0])
