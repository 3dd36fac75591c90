"""Shared pieces of the contract battery: the pytree catalogue and small comparison helpers."""

from __future__ import annotations

from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np


class Pair(NamedTuple):
    w: jax.Array
    b: jax.Array


class Lin(eqx.Module):
    weight: jax.Array
    bias: jax.Array
    name: str = eqx.field(static=True, default="lin")


def awkward_tree(dtype=jnp.float32, seed=0):
    """One tree holding every awkward feature of the catalogue: nested dict/list/tuple, None leaves, empty
    containers, a NamedTuple and an Equinox module, with a 0-d, a 1-d and 2-d leaves."""
    rng = np.random.default_rng(seed)

    def a(*shape):
        return jnp.asarray(rng.normal(size=shape) + 0.5, dtype)

    return {
        "dense": {"w": a(3, 4), "b": a(4)},
        "list": [a(2), None, (a(), a(2, 2))],
        "empty": ((), {}, []),
        "none": None,
        "nt": Pair(w=a(2, 3), b=a(3)),
        "eqx": Lin(weight=a(2, 2), bias=a(2)),
    }


def python_scalar_tree(seed=0, ints=True):
    """Params (or gradients, ``seed > 0``) whose leaves include Python numbers: a float, and an int unless ``ints``
    is False (Flax's ``Cursor`` and Equinox's examples hand such trees to Optax)."""
    out = {"w": jnp.asarray(np.random.default_rng(seed).normal(size=(3, 4)) + 0.5, jnp.float32), "f": 0.5 + 0.25 * seed}
    if ints:
        out["i"] = 2 + seed
    return out


def simple_tree(dtype=jnp.float32, seed=0, with_none=False):
    rng = np.random.default_rng(seed)

    def a(*shape):
        return jnp.asarray(rng.normal(size=shape) + 0.5, dtype)

    out = {"w": a(3, 4), "b": a(4), "s": a()}
    if with_none:
        out["n"] = None
    return out


def sds(tree):
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(jnp.shape(x), jnp.result_type(x)), tree)


def signature(tree):
    """(treedef, [(shape, dtype)]) of a tree; works on arrays and ShapeDtypeStruct leaves."""
    leaves, treedef = jax.tree.flatten(tree)
    return treedef, [(tuple(np.shape(x)), str(_dtype(x))) for x in leaves]


def _dtype(x):
    if isinstance(x, jax.ShapeDtypeStruct):
        return x.dtype
    return jnp.result_type(x)


def assert_same_signature(a, b, what):
    ta, la = signature(a)
    tb, lb = signature(b)
    assert ta == tb, f"{what}: tree structure changed:\n{ta}\n!=\n{tb}"
    assert la == lb, f"{what}: shapes/dtypes changed:\n{la}\n!=\n{lb}"


def assert_trees_close(a, b, rtol, atol, what):
    ta, tb = jax.tree.structure(a), jax.tree.structure(b)
    assert ta == tb, f"{what}: structures differ: {ta} != {tb}"
    for path, x in jax.tree_util.tree_leaves_with_path(a):
        y = _get(b, path)
        np.testing.assert_allclose(
            np.asarray(x, np.float64), np.asarray(y, np.float64), rtol=rtol, atol=atol, err_msg=f"{what} at {path}"
        )


def assert_trees_equal(a, b, what):
    ta, tb = jax.tree.structure(a), jax.tree.structure(b)
    assert ta == tb, f"{what}: structures differ: {ta} != {tb}"
    for (path, x), y in zip(jax.tree_util.tree_leaves_with_path(a), jax.tree.leaves(b)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y), err_msg=f"{what} at {path}")


def _get(tree, path):
    leaves = dict((p, x) for p, x in jax.tree_util.tree_leaves_with_path(tree))
    return leaves[path]


def is_float_array(x):
    return hasattr(x, "dtype") and jnp.issubdtype(x.dtype, jnp.inexact)


def all_finite(tree):
    return all(bool(jnp.all(jnp.isfinite(x))) for x in jax.tree.leaves(tree) if is_float_array(x))
