"""gradax.tree / gradax.tree_utils against Optax 0.2.8 (the oracle), plus state access and errors."""

import collections

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradax

X = {"a": jnp.array([1.0, -2.0, 3.0]), "b": (jnp.array([[0.5, -0.25]]), jnp.array(4.0))}
Y = {"a": jnp.array([0.5, 2.0, -1.0]), "b": (jnp.array([[2.0, 1.0]]), jnp.array(-3.0))}
C = {"a": jnp.array([1.0 + 2.0j, -1.0j])}


def same(a, b):
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for x, y in zip(la, lb, strict=True):
        assert jnp.asarray(x).dtype == jnp.asarray(y).dtype
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-6)


CALLS = {
    "add": lambda t: t.add(X, Y, X),
    "sub": lambda t: t.sub(X, Y),
    "mul": lambda t: t.mul(X, Y),
    "div": lambda t: t.div(X, Y),
    "scale": lambda t: t.scale(2.5, X),
    "add_scale": lambda t: t.add_scale(X, 0.3, Y),
    "vdot": lambda t: t.vdot(X, Y),
    "vdot_complex": lambda t: t.vdot(C, C),
    "sum": lambda t: t.sum(X),
    "sum_assoc": lambda t: t.sum(X, associative_reduction=True),
    "max": lambda t: t.max(X),
    "min": lambda t: t.min(X),
    "size": lambda t: t.size(X),
    "conj": lambda t: t.conj(C),
    "real": lambda t: t.real(C),
    "norm": lambda t: t.norm(X),
    "norm_sq": lambda t: t.norm(X, squared=True),
    "norm_1": lambda t: t.norm(X, ord=1),
    "norm_inf": lambda t: t.norm(X, ord="inf"),
    "norm_inf_sq": lambda t: t.norm(X, ord=jnp.inf, squared=True),
    "norm_complex": lambda t: t.norm(C),
    "batch_shape": lambda t: t.batch_shape(X, (2, 1)),
    "zeros_like": lambda t: t.zeros_like(X),
    "ones_like": lambda t: t.ones_like(X, jnp.bfloat16),
    "full_like": lambda t: t.full_like(X, 7.0, jnp.float16),
    "clip": lambda t: t.clip(X, -1.0, 1.5),
    "clip_none": lambda t: t.clip(X, None, 0.0),
    "where": lambda t: t.where(jnp.array(True), X, Y),
    "allclose": lambda t: t.allclose(X, X),
    "allclose_false": lambda t: t.allclose(X, Y),
    "update_moment": lambda t: t.update_moment(X, Y, 0.9, 2),
    "update_infinity_moment": lambda t: t.update_infinity_moment(X, Y, 0.9, 1e-3),
    "update_moment_per_elem_norm": lambda t: t.update_moment_per_elem_norm(C, {"a": jnp.ones(2)}, 0.5, 2),
    "update_moment_per_elem_norm_3": lambda t: t.update_moment_per_elem_norm(C, {"a": jnp.ones(2)}, 0.5, 3),
    "bias_correction": lambda t: t.bias_correction(X, 0.9, jnp.int32(3)),
    "cast": lambda t: t.cast(X, jnp.bfloat16),
    "cast_none": lambda t: t.cast(X, None),
    "cast_like": lambda t: t.cast_like(X, t.cast(Y, jnp.float16)),
    "dtype": lambda t: t.dtype(X),
    "dtype_promote": lambda t: t.dtype({"a": jnp.ones(1, jnp.bfloat16), "b": jnp.ones(1, jnp.float16)}, "promote"),
    "dtype_highest": lambda t: t.dtype({"a": jnp.ones(1, jnp.bfloat16), "b": jnp.ones(1)}, "highest"),
    "dtype_lowest": lambda t: t.dtype({"a": jnp.ones(1, jnp.bfloat16), "b": jnp.ones(1)}, "lowest"),
    "dtype_empty": lambda t: t.dtype({}),
    "split_key_like": lambda t: jax.tree.map(jax.random.key_data, t.split_key_like(jax.random.key(1), X)),
    "random_like": lambda t: t.random_like(jax.random.key(2), X),
    "random_like_uniform": lambda t: t.random_like(jax.random.key(2), X, jax.random.uniform, jnp.float16),
    "unwrap_random_key_data": lambda t: t.unwrap_random_key_data({"k": jax.random.key(3), "x": jnp.ones(2)}),
    "empty_sum": lambda t: t.sum({}),
    "empty_max": lambda t: t.max({"a": jnp.ones(0)}),
    "none_leaves": lambda t: t.add_scale({"a": None, "b": jnp.ones(2)}, 2.0, {"a": None, "b": jnp.ones(2)}),
}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_matches_optax(name):
    ours, theirs = CALLS[name](gradax.tree), CALLS[name](optax.tree)
    if name.startswith("dtype"):
        assert ours == theirs
    else:
        same(ours, theirs)


def test_tree_utils_names_are_the_same_objects():
    for name in dir(optax.tree_utils):
        if name.startswith("tree_"):
            assert getattr(gradax.tree_utils, name) is getattr(gradax.tree, name[5:])
    assert gradax.tree_utils.NamedTupleKey("A", "b").__str__() == "A.b"
    assert gradax.tree_map_params is gradax.tree.map_params


def test_errors():
    with pytest.raises(
        ValueError, match=r"tree\.norm\(ord=\.\.\.\) must be one of None, 1, 2, inf, 'inf', 'infinity'; got 3\."
    ):
        gradax.tree.norm(X, ord=3)
    with pytest.raises(
        ValueError,
        match=r"tree\.dtype\(tree=\.\.\.\) leaves must share one dtype \(float32, from the "
        r"first leaf\); got \['b'\]: bfloat16\. Pass mixed_dtype_handler=",
    ):
        gradax.tree.dtype({"a": jnp.ones(1), "b": jnp.ones(1, jnp.bfloat16)})
    with pytest.raises(
        ValueError,
        match=r"tree\.dtype\(mixed_dtype_handler=\.\.\.\) must be one of None, 'promote', "
        r"'highest', 'lowest'; got 'max'\.",
    ):
        gradax.tree.dtype(X, "max")
    with pytest.raises(ValueError, match=r"cannot order dtypes .* neither promotes to the other"):
        gradax.tree.dtype({"a": jnp.ones(1, jnp.bfloat16), "b": jnp.ones(1, jnp.float16)}, "highest")
    with pytest.raises(ValueError, match=r"tree\.vdot\(tree_x=\.\.\., tree_y=\.\.\.\) leaves must have equal shapes"):
        gradax.tree.vdot([jnp.ones(2)], [jnp.ones(3)])
    with pytest.raises(KeyError, match=r"tree\.set\(lr=\.\.\.\) found no value named 'lr' in the tree"):
        gradax.tree.set(gradax.sgd(0.1, momentum=0.9).init(X), lr=1.0)
    with pytest.raises(KeyError, match=r"found no value named 'trace' matching the filtering"):
        gradax.tree.set(gradax.sgd(0.1, momentum=0.9).init(X), lambda p, v: False, trace=1.0)


def test_jit_and_vmap():
    f = jax.jit(lambda x, y: (gradax.tree.vdot(x, y), gradax.tree.norm(x), gradax.tree.add_scale(x, 2.0, y)))
    same(f(X, Y), (optax.tree.vdot(X, Y), optax.tree.norm(X), optax.tree.add_scale(X, 2.0, Y)))
    batched = gradax.tree.batch_shape(X, (3,))
    np.testing.assert_allclose(jax.vmap(gradax.tree.sum)(batched), 3 * [float(gradax.tree.sum(X))], rtol=1e-6)


# --- state access -------------------------------------------------------------------------------------------------


def _state():
    opt = gradax.chain(gradax.sgd(0.1, momentum=0.9), gradax.inject_hyperparams(gradax.sgd)(learning_rate=0.3))
    return opt, opt.init(X)


def _oracle_state():
    opt = optax.chain(optax.sgd(0.1, momentum=0.9), optax.inject_hyperparams(optax.sgd)(learning_rate=0.3))
    return opt.init(X)


def _paths(found):
    return sorted(
        jax.tree_util.keystr(tuple(str(e) if type(e).__name__ == "NamedTupleKey" else e for e in p)) for p, _ in found
    )


@pytest.mark.parametrize("key", ["trace", "learning_rate", "TraceState", "count", "hyperparams", "nothing"])
def test_get_all_with_path_matches_optax(key):
    _, state = _state()
    ours = gradax.tree.get_all_with_path(state, key)
    theirs = optax.tree.get_all_with_path(_oracle_state(), key)
    assert [str(p) for p in _paths(ours)] == [str(p) for p in _paths(theirs)]
    for (_, a), (_, b) in zip(ours, theirs):
        jax.tree.map(np.testing.assert_array_equal, jax.tree.leaves(a), jax.tree.leaves(b))


def test_get_default_and_set_keep_types():
    _, state = _state()
    assert gradax.tree.get(state, "nope", default=7) == 7
    np.testing.assert_array_equal(gradax.tree.get(state, "trace")["a"], jnp.zeros(3))
    new = gradax.tree.set(state, trace={"a": jnp.ones(3), "b": (jnp.ones((1, 2)), jnp.ones(()))})
    assert type(new[0][0]).__name__ == "TraceState" and float(new[0][0].trace["a"][0]) == 1.0
    od = collections.OrderedDict([("z", {"lr": 1.0}), ("a", {"lr": 2.0})])
    out = gradax.tree.set(od, lambda path, v: path[0].key == "a", lr=5.0)
    assert type(out) is collections.OrderedDict and list(out) == ["z", "a"] and out["a"]["lr"] == 5.0
    assert out["z"]["lr"] == 1.0
    replaced = gradax.tree.set(state, TraceState="x")
    assert replaced[0][0] == "x"


def test_map_params_matches_optax():
    opt, state = _state()
    oopt = optax.chain(optax.sgd(0.1, momentum=0.9), optax.inject_hyperparams(optax.sgd)(learning_rate=0.3))
    ours = gradax.tree.map_params(opt, lambda x: x + 1, state, transform_non_params=lambda x: x)
    theirs = optax.tree.map_params(oopt, lambda x: x + 1, _oracle_state(), transform_non_params=lambda x: x)
    same(jax.tree.leaves(ours), jax.tree.leaves(theirs))
    assert float(ours[1].count) == 0  # counters are not params-shaped
    sharded = gradax.tree.map_params(opt.init, lambda x, y: x + y, state, X)
    np.testing.assert_allclose(sharded[0][0].trace["a"], X["a"])
