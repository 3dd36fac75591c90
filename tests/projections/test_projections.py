"""Projections: agreement with Optax 0.2.8 (values, Jacobians, jit, vmap), membership and idempotence (hypothesis),
error messages, and where gradax departs from Optax."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gradax

GP, OP = gradax.projections, optax.projections


def _tree(seed):
    k1, k2 = jax.random.split(jax.random.key(seed))
    return {"a": 2.0 * jax.random.normal(k1, (3,)), "b": (2.0 * jax.random.normal(k2, (2, 2)),)}


A = {"a": jnp.array([1.0, -2.0, 0.5]), "b": (jnp.array([[0.3, 1.0], [0.0, -1.0]]),)}

CASES = [
    ("projection_non_negative", lambda x: (x,), {}),
    (
        "projection_box",
        lambda x: (x, jax.tree.map(lambda v: v * 0 - 0.5, x), jax.tree.map(lambda v: v * 0 + 1.0, x)),
        {},
    ),
    ("projection_linf_ball", lambda x: (x,), {"scale": 0.7}),
    ("projection_simplex", lambda x: (x,), {}),
    ("projection_simplex", lambda x: (x,), {"scale": 3.0}),
    ("projection_l1_sphere", lambda x: (x,), {"scale": 2.0}),
    ("projection_l1_ball", lambda x: (x,), {}),
    ("projection_l1_ball", lambda x: (x,), {"scale": 100.0}),
    ("projection_l2_sphere", lambda x: (x,), {"scale": 2.0}),
    ("projection_l2_ball", lambda x: (x,), {}),
    ("projection_l2_ball", lambda x: (x,), {"scale": 100.0}),
    ("projection_hyperplane", lambda x: (x, A, 0.7), {}),
    ("projection_halfspace", lambda x: (x, A, 0.7), {}),
    ("projection_halfspace", lambda x: (x, A, 100.0), {}),
    ("projection_vector", lambda x: (x, A), {}),
]
IDS = [f"{n}-{i}" for i, (n, _, _) in enumerate(CASES)]


def _close(a, b, rtol=1e-5, atol=1e-6):
    jax.tree.map(lambda x, y: np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=rtol, atol=atol), a, b)


@pytest.mark.parametrize("name,make,kwargs", CASES, ids=IDS)
def test_matches_optax(name, make, kwargs):
    for seed in range(3):
        x = _tree(seed)
        ours = lambda x: getattr(GP, name)(*make(x), **kwargs)
        theirs = lambda x: getattr(OP, name)(*make(x), **kwargs)
        _close(ours(x), theirs(x))
        _close(jax.jit(ours)(x), theirs(x))
        _close(jax.jacobian(ours)(x), jax.jacobian(theirs)(x), atol=1e-5)


@pytest.mark.parametrize("name", ["projection_simplex", "projection_l2_ball", "projection_l1_ball", "projection_box"])
def test_vmap(name):
    xs = jax.random.normal(jax.random.key(1), (4, 5)) * 2
    extra = (-0.5, 0.5) if name == "projection_box" else ()
    batched = jax.vmap(lambda x: getattr(GP, name)(x, *extra))(xs)
    for i in range(4):
        _close(batched[i], getattr(OP, name)(xs[i], *extra))


def test_simplex_of_integers_is_float():
    np.testing.assert_allclose(GP.projection_simplex(jnp.array([1, 2, 3])), [0.0, 0.0, 1.0])


# --- properties ---------------------------------------------------------------------------------------------------

floats = st.floats(-10.0, 10.0, allow_nan=False, width=32)
vectors = st.lists(floats, min_size=1, max_size=6).map(lambda v: jnp.array(v, jnp.float32))
scales = st.floats(0.125, 5.0, width=32)


def _flatten(t):
    return jnp.concatenate([jnp.ravel(leaf) for leaf in jax.tree.leaves(t)])


MEMBERSHIP = {
    "projection_simplex": lambda y, s: bool(jnp.all(y >= 0)) and abs(float(jnp.sum(y)) - s) <= 1e-4 * max(1, s),
    "projection_l1_ball": lambda y, s: float(jnp.sum(jnp.abs(y))) <= s * (1 + 1e-5) + 1e-6,
    "projection_l1_sphere": lambda y, s: abs(float(jnp.sum(jnp.abs(y))) - s) <= 1e-4 * max(1, s),
    "projection_l2_ball": lambda y, s: float(jnp.linalg.norm(y)) <= s * (1 + 1e-5),
    "projection_l2_sphere": lambda y, s: abs(float(jnp.linalg.norm(y)) - s) <= 1e-4 * max(1, s),
    "projection_linf_ball": lambda y, s: float(jnp.max(jnp.abs(y))) <= s,
    "projection_hypercube": lambda y, s: bool(jnp.all((y >= 0) & (y <= s))),
    "projection_non_negative": lambda y, s: bool(jnp.all(y >= 0)),
}


@pytest.mark.parametrize("name", sorted(MEMBERSHIP))
@settings(max_examples=15, deadline=None)
@given(x=vectors, s=scales)
def test_in_set_and_idempotent(name, x, s):
    if name == "projection_l2_sphere" and float(jnp.max(jnp.abs(x))) < 1e-3:
        return  # the l2 sphere has no projection formula at 0
    fn = GP.projection_non_negative if name == "projection_non_negative" else (lambda v: getattr(GP, name)(v, s))
    y = fn(x)
    assert MEMBERSHIP[name](y, s), (x, y)
    np.testing.assert_allclose(fn(y), y, rtol=1e-5, atol=1e-5)


@settings(max_examples=15, deadline=None)
@given(x=vectors, b=st.floats(-3.0, 3.0, width=32))
def test_affine_sets(x, b):
    a = jnp.arange(1.0, x.shape[0] + 1.0)
    y = GP.projection_hyperplane(x, a, b)
    np.testing.assert_allclose(jnp.vdot(a, y), b, atol=1e-4 * max(1.0, float(jnp.abs(x).max()) * x.shape[0] ** 2))
    np.testing.assert_allclose(GP.projection_hyperplane(y, a, b), y, rtol=1e-5, atol=1e-4)
    h = GP.projection_halfspace(x, a, b)
    assert float(jnp.vdot(a, h)) <= b + 1e-3
    np.testing.assert_allclose(GP.projection_halfspace(h, a, b), h, rtol=1e-5, atol=1e-4)
    v = GP.projection_vector(x, a)
    np.testing.assert_allclose(GP.projection_vector(v, a), v, rtol=1e-4, atol=1e-4)


@settings(max_examples=5, deadline=None)
@given(x=vectors)
def test_simplex_projection_is_the_closest_point(x):
    # the projection beats random points of the simplex
    y = GP.projection_simplex(x)
    others = jax.random.dirichlet(jax.random.key(0), jnp.ones(x.shape[0]), (20,))
    assert float(jnp.sum((x - y) ** 2)) <= float(jnp.min(jnp.sum((x - others) ** 2, axis=1))) + 1e-4


def test_trees_are_projected_as_one_vector():
    tree = {"a": jnp.array([3.0, 0.0]), "b": jnp.array([[4.0]])}
    np.testing.assert_allclose(_flatten(GP.projection_l2_sphere(tree)), [0.6, 0.0, 0.8], rtol=1e-6)
    np.testing.assert_allclose(float(jnp.sum(_flatten(GP.projection_simplex(tree)))), 1.0, rtol=1e-6)


# --- errors -------------------------------------------------------------------------------------------------------


def test_errors():
    x = {"a": jnp.ones(2), "b": jnp.ones(3)}
    with pytest.raises(ValueError, match=r"projection_hyperplane\(a=\.\.\.\) must have the same structure"):
        GP.projection_hyperplane(x, {"a": jnp.ones(2)}, 1.0)
    with pytest.raises(ValueError, match=r"projection_vector\(a=\.\.\.\) must have the leaf shapes of `x`"):
        GP.projection_vector(jnp.ones(2), jnp.ones(3))
    with pytest.raises(ValueError, match=r"projection_box\(lower=\.\.\.\) must have the same structure"):
        GP.projection_box(x, {"a": 0.0}, 1.0)


# --- differences from Optax 0.2.8 ---------------------------------------------------------------------------------


def test_scalar_bounds_on_trees():
    tree = {"a": jnp.array([-1.0, 2.0]), "b": jnp.array([0.5])}
    with pytest.raises(ValueError):
        OP.projection_hypercube(tree, 1.0)  # Optax 0.2.8 maps over the scalar as if it were a tree
    with pytest.raises(ValueError):
        OP.projection_box(tree, 0.0, 1.0)
    expected = {"a": jnp.array([0.0, 1.0]), "b": jnp.array([0.5])}
    _close(GP.projection_hypercube(tree, 1.0), expected)
    _close(GP.projection_box(tree, 0.0, 1.0), expected)
    # trees of bounds work in both
    bounds = ({"a": 0.0, "b": 0.0}, {"a": 1.0, "b": 1.0})
    _close(GP.projection_box(tree, *bounds), OP.projection_box(tree, *bounds))


def test_l1_sphere_with_zero_coordinates():
    x = jnp.array([0.0, 1.0])
    np.testing.assert_allclose(OP.projection_l1_sphere(x, 2.0), [0.0, 1.5])  # Optax 0.2.8: not on the sphere
    np.testing.assert_allclose(GP.projection_l1_sphere(x, 2.0), [0.5, 1.5])  # on the sphere, and the closest point
    np.testing.assert_allclose(GP.projection_l1_sphere(jnp.zeros(4), 2.0), [0.5] * 4)
