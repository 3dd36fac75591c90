"""The linear assignment problem, solved by the Hungarian method with shortest augmenting paths (``O(n^2 m)``)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike


def _solve_wide(cost: jax.Array) -> jax.Array:
    """For ``cost`` of shape ``[n, m]`` with ``n <= m``: the column assigned to each row (shape ``[n]``).

    Rows are added one at a time; each is matched by a shortest augmenting path in the reduced costs
    ``cost[i, j] - u[i] - v[j]`` (Dijkstra over the columns), and the dual potentials ``u, v`` are updated so that
    reduced costs stay non-negative and are zero on the matching. Index 0 of ``u``, ``v``, ``match`` is a sentinel
    (rows and columns are numbered from 1).
    """
    n, m = cost.shape
    dtype = cost.dtype
    big = jnp.asarray(jnp.inf, dtype)
    padded = jnp.zeros((n + 1, m + 1), dtype).at[1:, 1:].set(cost)

    def add_row(i, carry):
        u, v, match = carry  # match[j]: the row matched to column j (0 = free)
        match = match.at[0].set(i)
        minv = jnp.full((m + 1,), big)
        way = jnp.zeros((m + 1,), jnp.int32)
        used = jnp.zeros((m + 1,), bool)

        def grow(state):
            u, v, minv, way, used, j0 = state
            used = used.at[j0].set(True)
            i0 = match[j0]
            reduced = padded[i0] - u[i0] - v
            better = (~used) & (reduced < minv)
            minv = jnp.where(better, reduced, minv)
            way = jnp.where(better, j0, way)
            candidates = jnp.where(used, big, minv).at[0].set(big)
            j1 = jnp.argmin(candidates).astype(jnp.int32)
            delta = candidates[j1]
            u = u.at[jnp.where(used, match, n + 1)].add(delta)  # slot n + 1 absorbs the unused columns
            v = jnp.where(used, v - delta, v)
            minv = jnp.where(used, minv, minv - delta)
            return u, v, minv, way, used, j1

        # The loop reads ``match`` (fixed during the search) through the closure of ``grow_cond``/``grow``.
        def cond(state):
            return match[state[5]] != 0

        u, v, minv, way, used, j0 = jax.lax.while_loop(cond, grow, (u, v, minv, way, used, jnp.int32(0)))

        def augment(state):
            match, j0 = state
            j1 = way[j0]
            return match.at[j0].set(match[j1]), j1

        match, _ = jax.lax.while_loop(lambda s: s[1] != 0, augment, (match, j0))
        return u, v, match

    u = jnp.zeros((n + 2,), dtype)
    v = jnp.zeros((m + 1,), dtype)
    match = jnp.zeros((m + 1,), jnp.int32)
    _, _, match = jax.lax.fori_loop(1, n + 1, add_row, (u, v, match))
    rows = jnp.where(match[1:] > 0, match[1:] - 1, n)
    return jnp.zeros((n,), jnp.int32).at[rows].set(jnp.arange(m, dtype=jnp.int32), mode="drop")


def _assign(api: str, cost_matrix: ArrayLike) -> tuple[jax.Array, jax.Array]:
    cost = jnp.asarray(cost_matrix)
    if cost.ndim != 2:
        raise ValueError(
            f"{api}(cost_matrix=...) must have 2 dimensions [n, m]; got shape {cost.shape}. "
            "Use jax.vmap for batches of cost matrices."
        )
    if not jnp.issubdtype(cost.dtype, jnp.floating):
        cost = cost.astype(jnp.float32)
    n, m = cost.shape
    if n == 0 or m == 0:
        empty = jnp.zeros((0,), jnp.int32)
        return empty, empty
    if n <= m:
        return jnp.arange(n, dtype=jnp.int32), _solve_wide(cost)
    rows = _solve_wide(cost.T)  # rows[j]: the row assigned to column j
    order = jnp.argsort(rows)
    return rows[order], order.astype(jnp.int32)


def hungarian_algorithm(cost_matrix: ArrayLike) -> tuple[jax.Array, jax.Array]:
    r"""Solves the linear assignment problem: a minimum-cost matching of ``min(n, m)`` row/column pairs.

    .. math::
        \min_{X \in \{0,1\}^{n \times m}} \sum_{ij} C_{ij} X_{ij} \quad \text{s.t.}\quad
        \sum_j X_{ij} \le 1,\ \sum_i X_{ij} \le 1,\ \sum_{ij} X_{ij} = \min(n, m)

    Hungarian method with shortest augmenting paths and dual potentials (Kuhn-Munkres; Jonker-Volgenant),
    :math:`O(\min(n,m)^2 \max(n,m))`; jit- and vmap-compatible (shapes are static).

    Args:
      cost_matrix: the costs, shape ``[n, m]``.

    Returns:
      ``(row_indices, col_indices)``, each of shape ``[min(n, m)]``: row ``row_indices[k]`` is assigned column
      ``col_indices[k]``. Pairs are sorted by row (Optax 0.2.8 returns the same pairs in an internal order).

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> rows, cols = gradax.assignment.hungarian_algorithm(jnp.array([[4.0, 1.0, 3.0], [2.0, 0.0, 5.0]]))
      >>> print(rows, cols)
      [0 1] [1 0]

    References:
      Kuhn, The Hungarian method for the assignment problem, 1955; Jonker and Volgenant, A shortest augmenting path
      algorithm for dense and sparse linear assignment problems, 1987.
    """
    return _assign("hungarian_algorithm", cost_matrix)


def base_hungarian_algorithm(cost_matrix: ArrayLike) -> tuple[jax.Array, jax.Array]:
    r"""The linear assignment problem, same contract as :func:`hungarian_algorithm` (kept for Optax's name).

    .. math::
        \min_{X} \sum_{ij} C_{ij} X_{ij} \quad \text{over matchings of size } \min(n, m)

    Args:
      cost_matrix: the costs, shape ``[n, m]``.

    Returns:
      ``(row_indices, col_indices)`` of shape ``[min(n, m)]``, sorted by row.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> rows, cols = gradax.assignment.base_hungarian_algorithm(jnp.array([[1.0, 0.0], [0.0, 1.0]]))
      >>> print(rows, cols)
      [0 1] [1 0]
    """
    return _assign("base_hungarian_algorithm", cost_matrix)
