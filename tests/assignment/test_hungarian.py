"""The Hungarian algorithm against brute force, SciPy and Optax 0.2.8 (same pairs), under jit and vmap."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from scipy.optimize import linear_sum_assignment

import gradax

FNS = [gradax.assignment.hungarian_algorithm, gradax.assignment.base_hungarian_algorithm]
SHAPES = [(1, 1), (2, 2), (3, 3), (4, 4), (2, 4), (4, 2), (3, 5), (5, 3), (1, 4)]


def _brute_force(cost):
    n, m = cost.shape
    if n <= m:
        return min(cost[range(n), list(p)].sum() for p in itertools.permutations(range(m), n))
    return min(cost[list(p), range(m)].sum() for p in itertools.permutations(range(n), m))


def _check_valid(rows, cols, n, m):
    rows, cols = np.asarray(rows), np.asarray(cols)
    k = min(n, m)
    assert rows.shape == cols.shape == (k,)
    assert len(set(rows.tolist())) == k and len(set(cols.tolist())) == k
    assert rows.min(initial=0) >= 0 and rows.max(initial=0) < max(n, 1) and cols.max(initial=0) < max(m, 1)
    assert np.all(np.diff(rows) > 0)  # sorted by row


@pytest.mark.parametrize("fn", FNS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("shape", SHAPES)
def test_agrees_with_brute_force(fn, shape):
    for seed in range(4):
        cost = np.asarray(jax.random.normal(jax.random.key(seed), shape))
        if seed == 3:
            cost = np.round(cost)  # ties
        rows, cols = fn(cost)
        _check_valid(rows, cols, *shape)
        np.testing.assert_allclose(cost[np.asarray(rows), np.asarray(cols)].sum(), _brute_force(cost), atol=1e-5)


@pytest.mark.parametrize("fn", FNS, ids=lambda f: f.__name__)
def test_same_pairs_as_optax_and_scipy(fn):
    jitted = jax.jit(fn)
    theirs = getattr(optax.assignment, fn.__name__)
    for seed, shape in enumerate([(6, 9), (9, 6), (7, 7)]):
        cost = jax.random.uniform(jax.random.key(seed), shape)
        rows, cols = jitted(cost)
        r_o, c_o = theirs(cost)
        assert set(zip(rows.tolist(), cols.tolist())) == set(zip(r_o.tolist(), c_o.tolist()))
        r_s, c_s = linear_sum_assignment(np.asarray(cost))
        np.testing.assert_array_equal(rows, r_s)
        np.testing.assert_array_equal(cols, c_s)


def test_vmap_and_integer_costs():
    costs = jax.random.randint(jax.random.key(0), (5, 3, 4), 0, 10)
    rows, cols = jax.vmap(gradax.assignment.hungarian_algorithm)(costs)
    for b in range(5):
        cost = np.asarray(costs[b])
        np.testing.assert_allclose(cost[np.asarray(rows[b]), np.asarray(cols[b])].sum(), _brute_force(cost))


def test_empty_and_errors():
    for shape in [(0, 3), (3, 0), (0, 0)]:
        rows, cols = gradax.assignment.hungarian_algorithm(jnp.zeros(shape))
        assert rows.shape == cols.shape == (0,)
    with pytest.raises(ValueError, match=r"hungarian_algorithm\(cost_matrix=\.\.\.\) must have 2 dimensions"):
        gradax.assignment.hungarian_algorithm(jnp.zeros((2, 2, 2)))
    with pytest.raises(ValueError, match=r"base_hungarian_algorithm\(cost_matrix=\.\.\.\) must have 2 dimensions"):
        gradax.assignment.base_hungarian_algorithm(jnp.zeros(3))
