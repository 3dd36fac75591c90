"""PSGD-Kron (Li, 2015/2018): SGD preconditioned by a Kronecker product of triangular factors fitted online.

Shapes (the shared matrix view of :mod:`gradax.contrib._matrix_shapes`): a leaf with dimension numbers (2-D leaves by
default; conv kernels and stacked layers when named) is a batch of ``fan_in x fan_out`` matrices, each with its own
preconditioner :math:`P = (Q_L^\\top Q_L) \\otimes (Q_R^\\top Q_R)`. Each factor is upper triangular, or diagonal when
its side is 1, larger than ``max_size_triangular`` (a 50,000-row embedding gets a 50,000-vector, never a dense
50,000 x 50,000 factor) or chosen by ``memory_save_mode``. Every other leaf (scalars, vectors, leaves whose dimension
numbers are None) gets PSGD's diagonal preconditioner over its elements, a first-order method.
"""

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.linalg import solve_triangular
from jax.typing import ArrayLike

from .._base import GradientTransformation, Params, ScalarOrSchedule
from .._checks import argument_error, check_decay, check_int, check_interval, check_non_negative, check_one_of
from .._hyperparams import as_value, value_at
from .._numerics import compute_dtype, safe_int32_increment, state_dtype
from ..transforms._adding import add_decayed_weights
from ..transforms._combining import chain
from ..transforms._scaling import scale_by_learning_rate
from ._matrix_shapes import MuonDimensionNumbers, by_groups, matrix_dims_tree, matrix_shape, to_matrices

_MEMORY_SAVE_MODES = (None, "smart_one_diag", "one_diag", "all_diag")
_DAMPING = math.sqrt(float(jnp.finfo(jnp.float32).eps))  # the probe's share of a fitted gradient
_BALANCE_EVERY = 100  # preconditioner updates between two rebalancings of the factors' scales


class KronState(NamedTuple):
    """State of :func:`scale_by_kron`: the step ``count`` (int32), the PRNG ``key`` (raw uint32 key data), the
    momentum ``mu`` (the params' shapes) and the factors ``qs``: per leaf a tuple ``(Q_L, Q_R)`` of shape
    ``(batch, d, d)`` (triangular) or ``(batch, d)`` (diagonal), or ``(q,)`` of shape ``(size,)`` for a leaf
    preconditioned elementwise."""

    count: jax.Array
    key: jax.Array
    mu: Any
    qs: Any


def precond_update_prob_schedule(
    max_prob: float = 1.0, min_prob: float = 0.03, decay: float = 0.001, flat_start: int = 500
) -> Callable[[jax.Array], jax.Array]:
    r"""The default probability of a preconditioner update at step :math:`n`:
    :math:`\mathrm{clip}(p_{\max} e^{-\kappa (n - n_0)}, p_{\min}, p_{\max})` (1 for 500 steps, then down to 0.03
    by about step 4,000). Many updates early, while the preconditioner is learned; few once it is.

    Args:
      max_prob: :math:`p_{\max}` in :math:`[0, 1]`.
      min_prob: :math:`p_{\min}` in :math:`[0, p_{\max}]`.
      decay: :math:`\kappa >= 0`.
      flat_start: :math:`n_0`, the steps at :math:`p_{\max}`.

    Returns:
      A schedule ``count -> probability`` for ``preconditioner_update_probability``.

    Example:
      >>> import gradax
      >>> schedule = gradax.contrib.precond_update_prob_schedule(min_prob=0.1)
      >>> float(schedule(0)), round(float(schedule(10_000)), 3)
      (1.0, 0.1)
    """
    api = "precond_update_prob_schedule"
    check_interval(api, "max_prob", max_prob, 0.0, 1.0)
    check_interval(api, "min_prob", min_prob, 0.0, max_prob)
    check_non_negative(api, "decay", decay)

    def schedule(count):
        n = jnp.asarray(count, jnp.float32)
        return jnp.clip(max_prob * jnp.exp(-decay * (n - flat_start)), min_prob, max_prob)

    return schedule


def _probes(key: jax.Array, specs: list[tuple[tuple[int, ...], Any]]) -> list[jax.Array]:
    """The random probe vectors ``V`` of every leaf (standard normal), for ``(shape, dtype)`` in leaf order.

    One draw per dtype, cut into the leaves' shapes: a draw per leaf would compile one random-number generator per
    leaf (three quarters of the compile time of a GPT-2-shaped tree)."""
    groups: dict[Any, list[int]] = {}
    for i, (_, dtype) in enumerate(specs):
        groups.setdefault(jnp.dtype(dtype), []).append(i)
    out: list[Any] = [None] * len(specs)
    for j, (dtype, idx) in enumerate(groups.items()):
        sizes = [math.prod(specs[i][0]) for i in idx]
        flat = jax.random.normal(jax.random.fold_in(key, j), (sum(sizes),), dtype)
        for i, piece in zip(idx, jnp.split(flat, np.cumsum(sizes)[:-1])):
            out[i] = piece.reshape(specs[i][0])
    return out


def _sides_diag(m: int, n: int, max_size: int, mode: str | None) -> tuple[bool, bool]:
    diag = [False, False]
    if mode == "all_diag":
        diag = [True, True]
    elif mode == "one_diag":
        diag[0 if m >= n else 1] = True
    elif mode == "smart_one_diag" and m != n:
        diag[0 if m > n else 1] = True
    return (diag[0] or m == 1 or m > max_size, diag[1] or n == 1 or n > max_size)


def _lower_bound(t: jax.Array, max_abs: jax.Array) -> jax.Array:
    """A cheap lower bound of the spectral norm of the symmetric ``t`` (one power step from its largest column)."""
    a = t / max_abs
    x = a[:, jnp.argmax(jnp.sum(a * a, axis=0))]
    x = x @ a
    x = a @ (x / jnp.linalg.norm(x))
    return jnp.linalg.norm(x) * max_abs


# (size from which, blocks a side): the factors' triangular products by blocks (_triangular_product)
_TRIANGULAR_BLOCKS = ((4096, 8), (512, 4))


def _triangular_product(d: jax.Array, q: jax.Array) -> jax.Array:
    """``d @ q`` of two upper-triangular ``n x n`` matrices, by blocks: block ``(i, j)`` of the product sums only
    over the blocks ``i..j`` between them, and the blocks below the diagonal are zero, so 4 or 8 blocks a side
    (``_TRIANGULAR_BLOCKS``) take a third to a half of the full product's arithmetic.

    Kron's factors are upper triangular (a multiple of the identity at first, each step multiplied by an
    upper-triangular matrix); ``d`` is a ``triu``. The blocks of ``d`` and ``q`` below the diagonal are not read."""
    n = q.shape[-1]
    nb = min(next((b for size, b in _TRIANGULAR_BLOCKS if n >= size), 1), n)
    if nb <= 1:
        return d @ q
    cuts = [n * i // nb for i in range(nb + 1)]
    span = [slice(cuts[i], cuts[i + 1]) for i in range(nb)]
    db = {(i, k): d[span[i], span[k]] for i in range(nb) for k in range(i, nb)}
    qb = {(k, j): q[span[k], span[j]] for k in range(nb) for j in range(k, nb)}
    rows = []
    for i in range(nb):
        blocks = [jnp.zeros((cuts[i + 1] - cuts[i], cuts[i]), d.dtype)] if i else []
        for j in range(i, nb):
            acc = db[i, i] @ qb[i, j]
            for k in range(i + 1, j + 1):
                acc = acc + db[i, k] @ qb[k, j]
            blocks.append(acc)
        rows.append(jnp.concatenate(blocks, axis=1))
    return jnp.concatenate(rows, axis=0)


def _fit(q, diff, total, step, tiny):
    """One step of the factor ``q`` along ``diff`` (the fitting criterion's gradient), normalized by ``total``."""
    if total.size == 0:  # an empty leaf: nothing to fit
        return q
    norm = jnp.max(jnp.abs(total))
    if q.ndim == 1:
        return q - step * diff * q / jnp.maximum(norm, tiny)
    bound = jnp.where(norm > 0, _lower_bound(total, jnp.where(norm > 0, norm, 1)), norm)
    return q - _triangular_product(jnp.triu(step * diff) / jnp.maximum(bound, tiny), q)


def _matrix_update(g, v, ql, qr, step, tiny):
    """New ``(Q_L, Q_R)`` of one matrix from the fitted gradient ``g`` and the probe ``v``."""
    g = g + _DAMPING * jnp.mean(jnp.abs(g)) * v
    a = ql @ g if ql.ndim == 2 else ql[:, None] * g
    a = a @ qr.T if qr.ndim == 2 else a * qr[None, :]
    # Q^T x = v as the lower-triangular solve of Q^T: LAPACK reads its operand column-major, which Q^T is in Q's
    # memory (the solve with trans="T" copied Q into that layout first: 8,192 x 8,192 in 325 ms against 117)
    b = solve_triangular(ql.T, v, lower=True) if ql.ndim == 2 else v / ql[:, None]
    b = solve_triangular(qr.T, b.T, lower=True).T if qr.ndim == 2 else b / qr[None, :]
    if ql.ndim == 2:
        aa, bb = a @ a.T, b @ b.T
    else:
        aa, bb = jnp.sum(a * a, axis=1), jnp.sum(b * b, axis=1)
    new_l = _fit(ql, aa - bb, aa + bb, step, tiny)
    if qr.ndim == 2:
        aa, bb = a.T @ a, b.T @ b
    else:
        aa, bb = jnp.sum(a * a, axis=0), jnp.sum(b * b, axis=0)
    return new_l, _fit(qr, aa - bb, aa + bb, step, tiny)


def _balance(ql, qr):
    """Rescales the two factors to equal largest entries (their Kronecker product is unchanged)."""
    if ql.size == 0 or qr.size == 0:  # an empty leaf: nothing to balance
        return ql, qr
    nl, nr = jnp.max(jnp.abs(ql)), jnp.max(jnp.abs(qr))
    mean = jnp.sqrt(nl * nr)
    return ql * (mean / nl), qr * (mean / nr)


def _precondition(m, ql, qr):
    """:math:`Q_L^\\top Q_L\\, m\\, Q_R^\\top Q_R`, its RMS clipped to 1.1."""
    left = ql.T @ (ql @ m) if ql.ndim == 2 else (ql * ql)[:, None] * m
    out = (left @ qr.T) @ qr if qr.ndim == 2 else left * (qr * qr)[None, :]
    return _clip_rms(out)


def _clip_rms(x):
    return x * jnp.minimum(1.0, 1.1 / (jnp.sqrt(jnp.mean(x * x)) + 1e-12))


def _is_key(key: Any) -> bool:
    """An int seed, a typed PRNG key, or raw uint32 key data of shape (2,)."""
    if isinstance(key, int) and not isinstance(key, bool):
        return True
    dtype, shape = getattr(key, "dtype", None), getattr(key, "shape", None)
    if dtype is None:
        return False
    return jnp.issubdtype(dtype, jax.dtypes.prng_key) and shape == () or (dtype == jnp.uint32 and shape == (2,))


def _key_data(key: Any) -> jax.Array:
    """Raw uint32 key data of an int seed or a (typed or raw) PRNG key."""
    if isinstance(key, int):
        return jax.random.key_data(jax.random.key(key))
    if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        return jax.random.key_data(key)
    return jnp.asarray(key, jnp.uint32)


def scale_by_kron(
    b1: ArrayLike = 0.9,
    preconditioner_update_probability: ScalarOrSchedule | None = None,
    max_size_triangular: int = 8192,
    memory_save_mode: str | None = None,
    momentum_into_precond_update: bool = True,
    precond_lr: ArrayLike = 0.1,
    precond_init_scale: float = 1.0,
    mu_dtype: Any | None = None,
    precond_dtype: Any | None = None,
    key: Any = 0,
    *,
    weight_dimension_numbers: MuonDimensionNumbers | Params | Callable[[Params], Any] | None = None,
) -> GradientTransformation:
    r"""PSGD-Kron's direction: bias-corrected momentum preconditioned by fitted Kronecker factors.

    For each matrix :math:`G` (``m x n``) with factors :math:`Q_L, Q_R`:

    .. math::
        m_t &= \beta_1 m_{t-1} + (1 - \beta_1) g_t, \quad \hat m_t = m_t / (1 - \beta_1^t), \\
        A &= Q_L \tilde G Q_R^\top, \quad B = Q_L^{-\top} V Q_R^{-1}, \quad
            \tilde G = \hat m_t + \sqrt{\epsilon_{32}}\, \overline{|\hat m_t|}\, V, \quad V \sim \mathcal N(0, I), \\
        Q_L &\leftarrow Q_L - \frac{\mu}{\|AA^\top + BB^\top\|}\, \mathrm{triu}(AA^\top - BB^\top)\, Q_L \quad
            (\text{same for } Q_R \text{ with } A^\top A, B^\top B), \\
        u_t &= \mathrm{clip}_{\mathrm{RMS} \le 1.1}\left(Q_L^\top Q_L\, \hat m_t\, Q_R^\top Q_R\right),

    the factors being updated (before preconditioning) with probability :math:`p_t`, drawn from ``key``; with
    :math:`p_t = 1` every step updates and the only randomness is the probe :math:`V`. The norm dividing a
    triangular factor's step is a cheap lower bound of the spectral norm; a diagonal factor uses the largest entry.
    At every 100th step (when it updates) the two factors are first rescaled to equal largest entries (their
    Kronecker product is unchanged; this only keeps their scales apart from under- and overflow).

    Args:
      b1: momentum decay in :math:`[0, 1)`.
      preconditioner_update_probability: :math:`p_t` in :math:`[0, 1]`, a number or a schedule of the step; None is
        :func:`precond_update_prob_schedule`'s default (1 for 500 steps, then down to 0.03).
      max_size_triangular: sides longer than this get a diagonal factor.
      memory_save_mode: None (triangular factors), ``'one_diag'`` (the longer side diagonal),
        ``'smart_one_diag'`` (the longer side diagonal when strictly longer) or ``'all_diag'``.
      momentum_into_precond_update: fit the preconditioner to the momentum (else to the raw gradient).
      precond_lr: :math:`\mu >= 0`, the factors' step size.
      precond_init_scale: the initial preconditioner is this times the identity.
      mu_dtype: dtype of the momentum (default: the params', float32 for bf16/f16).
      precond_dtype: dtype of the factors (default: the params', float32 for bf16/f16).
      key: an int seed or a PRNG key (typed or raw): the source of the probes and of the update draws. Arrays are
        made in ``init``.
      weight_dimension_numbers: :class:`MuonDimensionNumbers` (a tree of them, None for leaves preconditioned
        elementwise, or a function of the params); default: 2-D leaves are matrices, the rest elementwise.

    Returns:
      A :class:`GradientTransformation` with state :class:`KronState`.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> tx = gradax.contrib.scale_by_kron(preconditioner_update_probability=1.0, key=0)
      >>> params = {"w": jnp.ones((3, 2)), "b": jnp.ones(2)}
      >>> state = tx.init(params)
      >>> [q.shape for q in state.qs["w"]], [q.shape for q in state.qs["b"]]
      ([(1, 3, 3), (1, 2, 2)], [(2,)])

    References:
      Li, `Preconditioned Stochastic Gradient Descent <https://arxiv.org/abs/1512.04202>`_, 2015; Li, `Preconditioner
      on Matrix Lie Group for SGD <https://arxiv.org/abs/1809.10232>`_, 2018; Walters,
      `PSGD Kron <https://github.com/evanatyourservice/kron_torch>`_ (this variant).
    """
    api = "scale_by_kron"
    check_decay(api, "b1", b1)
    prob = (
        precond_update_prob_schedule()
        if preconditioner_update_probability is None
        else (preconditioner_update_probability)
    )
    check_interval(api, "preconditioner_update_probability", prob, 0.0, 1.0)
    check_int(api, "max_size_triangular", max_size_triangular, low=1)
    check_one_of(api, "memory_save_mode", memory_save_mode, _MEMORY_SAVE_MODES)
    check_non_negative(api, "precond_lr", precond_lr)
    check_interval(api, "precond_init_scale", precond_init_scale, 0.0, math.inf, low_closed=False)
    if not _is_key(key):
        raise argument_error(api, "key", "an int seed or a PRNG key", key, "Pass e.g. key=0 or jax.random.key(0)")

    def dims_of(tree):
        return matrix_dims_tree(weight_dimension_numbers, tree)

    def init(params):
        def factors(p, d):
            qd = state_dtype(p.dtype, precond_dtype)
            if d is None:
                return (jnp.full((math.prod(np.shape(p)),), precond_init_scale, qd),)
            b, m, n = matrix_shape(np.shape(p), d)
            s = precond_init_scale**0.5
            out = []
            for size, diag in zip((m, n), _sides_diag(m, n, max_size_triangular, memory_save_mode)):
                out.append(
                    jnp.full((b, size), s, qd)
                    if diag
                    else jnp.broadcast_to(s * jnp.eye(size, dtype=qd), (b, size, size))
                )
            return tuple(out)

        flat, treedef = jax.tree.flatten(params)
        qs = treedef.unflatten([factors(p, d) for p, d in zip(flat, treedef.flatten_up_to(dims_of(params)))])
        mu = jax.tree.map(lambda p: jnp.zeros(np.shape(p), state_dtype(p.dtype, mu_dtype)), params)
        return KronState(jnp.zeros([], jnp.int32), _key_data(key), mu, qs)

    def update(updates, state, params=None):
        del params
        count = safe_int32_increment(state.count)
        beta = as_value(b1)
        p_t = value_at(prob, state.count)
        key_next, key_draw, key_probe = jax.random.split(jax.random.wrap_key_data(state.key), 3)
        do_update = jax.random.uniform(key_draw) < p_t
        flat_u, treedef = jax.tree.flatten(updates)
        flat_m = treedef.flatten_up_to(state.mu)
        flat_q = treedef.flatten_up_to(state.qs)
        flat_d = treedef.flatten_up_to(dims_of(updates))
        balance = (count % _BALANCE_EVERY) == 0

        new_m, hats, fits = [], [], []
        for g, m in zip(flat_u, flat_m):
            cd = compute_dtype(jnp.result_type(g, m))
            m_new = beta * m.astype(cd) + (1 - beta) * g.astype(cd)
            new_m.append(m_new.astype(m.dtype))
            hats.append(m_new / (1 - beta ** count.astype(beta.dtype)))
            fits.append(hats[-1] if momentum_into_precond_update else g.astype(cd))

        def fit_matrices(key, gm, v, ql, qr):
            qd = key[-1]
            step, tiny = as_value(precond_lr, qd), jnp.asarray(jnp.finfo(qd).tiny, qd)

            def one(args):
                g1, v1, l1, r1 = args
                l1, r1 = jax.lax.cond(balance, _balance, lambda a, b: (a, b), l1, r1)
                return _matrix_update(g1, v1, l1, r1, step, tiny)

            return tuple(jax.lax.map(one, (gm, v, ql, qr)))

        # the matrices of one shape (a model's layers) share one loop, here and in the preconditioning below: the
        # compiled program grows with the distinct shapes, not with the leaves
        matrices = [i for i, d in enumerate(flat_d) if d is not None]

        def shape_keys(xs, qls, qrs):  # matrices of one key are stacked for one loop
            return [(x.shape[1:], ql.shape[1:], qr.shape[1:], x.dtype) for x, ql, qr in zip(xs, qls, qrs)]

        def fitted(qs_flat):
            # what each leaf fits its factors to, as matrices (or a vector), and its probes, in the factors' dtype
            fit_in = [
                f.reshape(-1).astype(q[0].dtype) if d is None else to_matrices(f.astype(q[0].dtype), d)[0]
                for q, d, f in zip(qs_flat, flat_d, fits)
            ]
            vs = _probes(key_probe, [(x.shape, x.dtype) for x in fit_in])
            out: list[Any] = []
            for q, d, g, v in zip(qs_flat, flat_d, fit_in, vs):
                if d is not None:
                    out.append(None)
                    continue
                qd = q[0].dtype
                step, tiny = as_value(precond_lr, qd), jnp.asarray(jnp.finfo(qd).tiny, qd)
                g = g + _DAMPING * jnp.mean(jnp.abs(g)) * v
                a, b = q[0] * g, v / q[0]
                out.append((_fit(q[0], a * a - b * b, a * a + b * b, step, tiny),))
            gms, qls, qrs = (
                [fit_in[i] for i in matrices],
                [qs_flat[i][0] for i in matrices],
                [qs_flat[i][1] for i in matrices],
            )
            keys = shape_keys(gms, qls, qrs)
            for i, new in zip(matrices, by_groups(keys, fit_matrices, gms, [vs[i] for i in matrices], qls, qrs)):
                out[i] = new
            return out

        new_q = jax.lax.cond(do_update, fitted, lambda qs_flat: [tuple(q) for q in qs_flat], [tuple(q) for q in flat_q])

        new_u: list[Any] = []
        for g, h, q, d in zip(flat_u, hats, new_q, flat_d):
            qd = q[0].dtype
            new_u.append(None if d is not None else _clip_rms(q[0] * q[0] * h.reshape(-1).astype(qd)).reshape(g.shape))
        as_matrices = [to_matrices(hats[i].astype(new_q[i][0].dtype), flat_d[i]) for i in matrices]
        hms, restores = [hm for hm, _ in as_matrices], [restore for _, restore in as_matrices]
        qls, qrs = [new_q[i][0] for i in matrices], [new_q[i][1] for i in matrices]
        preconditioned = by_groups(
            shape_keys(hms, qls, qrs),
            lambda key, hm, ql, qr: jax.lax.map(lambda args: _precondition(*args), (hm, ql, qr)),
            hms,
            qls,
            qrs,
        )
        for i, restore, u in zip(matrices, restores, preconditioned):
            new_u[i] = restore(u)
        new_u = [u.astype(g.dtype) for u, g in zip(new_u, flat_u)]
        return treedef.unflatten(new_u), KronState(
            count, jax.random.key_data(key_next), treedef.unflatten(new_m), treedef.unflatten(list(new_q))
        )

    return GradientTransformation(init, update)


def kron(
    learning_rate: ScalarOrSchedule,
    b1: ArrayLike = 0.9,
    weight_decay: ScalarOrSchedule = 0.0,
    mask: Any = None,
    preconditioner_update_probability: ScalarOrSchedule | None = None,
    max_size_triangular: int = 8192,
    memory_save_mode: str | None = None,
    momentum_into_precond_update: bool = True,
    precond_lr: ArrayLike = 0.1,
    precond_init_scale: float = 1.0,
    mu_dtype: Any | None = None,
    precond_dtype: Any | None = None,
    key: Any = 0,
    *,
    weight_dimension_numbers: Any = None,
) -> GradientTransformation:
    r"""PSGD-Kron: :math:`\theta_{t+1} = \theta_t - \eta_t (u_t + \lambda \theta_t)` with :math:`u_t` from
    :func:`scale_by_kron` (learning rates of about 3e-4, as for Adam, and weight decay applied to ``mask``).

    Args:
      learning_rate: :math:`\eta`, a number or a schedule.
      weight_decay: :math:`\lambda >= 0`, a number or a schedule.
      mask: where weight decay applies (a tree of bools or a function of the params; the reference decays
        only the leaves of rank 2 and more).
      b1, preconditioner_update_probability, max_size_triangular, memory_save_mode, momentum_into_precond_update,
        precond_lr, precond_init_scale, mu_dtype, precond_dtype, key, weight_dimension_numbers: see
        :func:`scale_by_kron`.

    Returns:
      A :class:`GradientTransformation`.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> opt = gradax.contrib.kron(1e-3, preconditioner_update_probability=1.0)
      >>> params = {"w": jnp.ones((3, 2)), "b": jnp.ones(2)}
      >>> u, _ = opt.update(params, opt.init(params), params)
      >>> u["w"].shape
      (3, 2)

    References:
      Li, `Preconditioned Stochastic Gradient Descent <https://arxiv.org/abs/1512.04202>`_, 2015.
    """
    api = "kron"
    check_non_negative(api, "learning_rate", learning_rate)
    check_non_negative(api, "weight_decay", weight_decay)
    return chain(
        scale_by_kron(
            b1,
            preconditioner_update_probability,
            max_size_triangular,
            memory_save_mode,
            momentum_into_precond_update,
            precond_lr,
            precond_init_scale,
            mu_dtype,
            precond_dtype,
            key,
            weight_dimension_numbers=weight_dimension_numbers,
        ),
        add_decayed_weights(weight_decay, mask),
        scale_by_learning_rate(learning_rate),
    )
