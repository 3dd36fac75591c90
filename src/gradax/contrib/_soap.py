"""SOAP (Vyas et al., 2024): Adam run in the eigenbasis of Shampoo's preconditioner, the basis refreshed every few
steps by one step of QR-based power iteration."""

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from .._base import GradientTransformation, MaskOrFn, Params, ScalarOrSchedule
from .._checks import check_decay, check_int, check_non_negative
from .._compat import shard_alike
from .._hyperparams import as_value
from .._numerics import compute_dtype, leaf_dtype, safe_int32_increment, state_dtype, zeros_for
from ..transforms._adding import add_decayed_weights
from ..transforms._combining import chain
from ..transforms._scaling import scale_by_learning_rate
from ._kronecker import Layout, axis_gram, layout, leaf_dims, mode_product
from ._matrix_shapes import MuonDimensionNumbers, by_groups, default_dims

_HIGHEST = jax.lax.Precision.HIGHEST


class SOAPState(NamedTuple):
    """State of :func:`scale_by_soap`.

    Per leaf, ``stats`` and ``bases`` hold one entry per axis of the leaf's tensor view (see ``Layout`` in
    ``_kronecker``): a ``(*batch, d, d)`` array, or None for an axis that is not preconditioned.
    """

    count: jax.Array  # shape=(), int32: the number of updates so far
    mu: Any  # like params: the first moment, in the eigenbasis (like nu)
    nu: Any  # like params: the second moment, in the eigenbasis
    stats: Any  # per leaf, a tuple: the factor statistics L = E[G G^T] of each axis (or None)
    bases: Any  # per leaf, a tuple: the eigenbasis Q of each axis's statistics (or None)


def _null_tolerance(scale: jax.Array, d: int, dtype) -> jax.Array:
    """Values at most ``scale * d * eps`` (NumPy's ``matrix_rank`` rule) are zero to working precision."""
    return scale * d * jnp.finfo(dtype).eps


def _canonical_signs(q: jax.Array) -> jax.Array:
    """``q`` with each column's sign chosen so that its weighted sum (weights ``1 + i / d``) is >= 0: a basis has
    no sign of its own (SOAP's update does not see one); fixing it keeps the state the same whatever the rounding."""
    d = q.shape[-2]
    w = 1.0 + jnp.arange(d, dtype=q.dtype) / d
    return q * jnp.where(w @ q < 0, -1.0, 1.0).astype(q.dtype)[..., None, :]


def _per_matrix(f: Callable, *xs: jax.Array) -> Any:
    """``f`` of one matrix (and its companions) over the leading axes of ``(..., d, d)`` arrays, one matrix after
    another (``lax.map``).

    Not a ``vmap``: that would hand LAPACK (``eigh``, ``qr``) a batch, and jaxlib's CPU kernels split a batch over
    XLA's intra-op thread pool and block a pool thread until the pieces are done. Inside a loop (``lax.map`` or
    ``lax.scan`` over optimizer steps, as the CLI's sweeps run) the kernel itself runs on a pool thread, and two such
    batched calls deadlocked XLA:CPU (every thread waiting on a futex, in ``ParallelBatchMap``). One matrix per call
    never waits on the pool; the loop is one ``while`` in the program whatever the batch size (compile time)."""
    lead = xs[0].shape[:-2]
    flat = [x.reshape(-1, *x.shape[len(lead) :]) for x in xs]
    out = jax.lax.map(lambda a: f(*a), tuple(flat))
    return jax.tree.map(lambda y: y.reshape(*lead, *y.shape[1:]), out)


def _null_space_basis(v: jax.Array, null: jax.Array) -> jax.Array:
    """``v`` (the eigenvectors of one matrix, ascending) with its null columns replaced by the canonical basis of
    their span: the eigenvectors of ``P D P`` of nonzero eigenvalue (its last ``k``, in index order)."""
    d = v.shape[-1]
    weights = jnp.square(jnp.arange(1, d + 1, dtype=v.dtype))
    vn = v * null.astype(v.dtype)
    proj = jnp.matmul(vn, vn.T, precision=_HIGHEST)
    x = jnp.matmul(proj * weights, proj, precision=_HIGHEST)
    u = jnp.linalg.eigh(x, symmetrize_input=True)[1]
    return jnp.where(null, jnp.roll(u, jnp.sum(null), axis=1), v)


def _eigenbasis(s: jax.Array) -> jax.Array:
    """The eigenvectors of each symmetric ``(..., d, d)`` matrix, by decreasing eigenvalue; a null space gets a
    canonical basis.

    A statistic built from few gradients is rank-deficient (``G G^T`` of an ``m x n`` gradient, ``m > n``, has an
    ``(m - n)``-dimensional null space), and ``eigh`` returns for it an orthonormal basis that rounding alone picks:
    the last bit of ``s`` (another device partitioning, another backend) rotates it arbitrarily, and Adam's
    element-wise step in the rotated basis changes by O(1). Every basis of the null space is an eigenbasis; this one
    is the eigenvectors of ``P D P`` (``P`` the projector on the null space, ``D = diag((i + 1)^2)``) of nonzero
    eigenvalue, a continuous function of the null space itself. That second ``eigh`` (and its projector) runs only
    when some matrix of the batch is rank-deficient.
    """
    d = s.shape[-1]
    if d == 0:
        return jnp.linalg.eigh(s)[1]
    w, v = _per_matrix(lambda m: jnp.linalg.eigh(m, symmetrize_input=True), s)  # ascending: a null space first
    null = w <= _null_tolerance(jnp.max(jnp.abs(w), axis=-1, keepdims=True), d, s.dtype)
    q = jax.lax.cond(jnp.any(null), lambda: _per_matrix(_null_space_basis, v, null), lambda: v)
    return _canonical_signs(q[..., ::-1])


# from this size on, Q is formed from LAPACK's Householder reflectors by matrix products, in at most 8 panels of
# at least 256 reflectors (the panels are unrolled in the program: more of them cost compile time, not speed)
_BLOCKED_Q_FROM = 1024
_PANEL = 256
_MAX_PANELS = 8


def _compact_wy(rows: jax.Array, tau: jax.Array) -> tuple[jax.Array, jax.Array]:
    """One panel of Householder reflectors in compact WY form, ``I - V T V^T``: ``rows`` holds the panel's
    ``kb`` reflectors as rows, each right of its diagonal entry (the layout of ``geqrf``'s result transposed),
    ``tau`` their scales. Returns ``V^T`` (unit diagonal; a reflector with ``tau = 0`` is the identity and its row
    is zero) and ``T``, from ``T^{-1} = diag(1 / tau) + triu(V^T V, 1)``."""
    kb, dt = rows.shape[0], rows.dtype
    live = tau != 0
    vt = (jnp.triu(rows, 1) + jnp.eye(kb, rows.shape[1], dtype=dt)) * live[:, None]
    tinv = jnp.triu(jnp.matmul(vt, vt.T, precision=_HIGHEST), 1) + jnp.diag(1 / jnp.where(live, tau, 1))
    return vt, jax.lax.linalg.triangular_solve(tinv, jnp.eye(kb, dtype=dt), left_side=True, lower=False)


def _householder_q(h: jax.Array, tau: jax.Array, panel: int) -> jax.Array:
    """The orthogonal factor ``Q`` of one square matrix from its Householder reflectors (``h`` as LAPACK's
    ``geqrf`` leaves the matrix, the reflectors below the diagonal; ``tau`` their scales): the same ``Q`` as
    ``orgqr`` to rounding, accumulated backward ``panel`` reflectors at a time, each panel applied as
    ``I - V T V^T`` (compact WY, ``T`` from ``T^{-1} = diag(1 / tau) + triu(V^T V, 1)``) by matrix products.

    ``orgqr`` applies the reflectors with smaller products; at 8,192 x 8,192 this takes a third of its time on a
    CPU. A reflector with ``tau = 0`` is the identity (its column is dropped from ``V``)."""
    n = h.shape[-1]
    dt = h.dtype

    def reflectors(k: int) -> tuple[jax.Array, jax.Array, int]:
        kb = min(panel, n - k)
        vt, t = _compact_wy(h[k:, k : k + kb].T, tau[k : k + kb])
        return vt.T, t, kb

    starts = list(range(0, n, panel))
    v, t, _ = reflectors(starts[-1])  # the last panel acts on the identity
    q = jnp.eye(v.shape[0], dtype=dt) - jnp.matmul(v, jnp.matmul(t, v.T, precision=_HIGHEST), precision=_HIGHEST)
    for k in reversed(starts[:-1]):
        v, t, kb = reflectors(k)
        m = q.shape[0]
        block = jnp.block([[jnp.eye(kb, dtype=dt), jnp.zeros((kb, m), dt)], [jnp.zeros((m, kb), dt), q]])
        vtb = jnp.concatenate([v[:kb].T, jnp.matmul(v[kb:].T, q, precision=_HIGHEST)], axis=1)
        q = block - jnp.matmul(v, jnp.matmul(t, vtb, precision=_HIGHEST), precision=_HIGHEST)
    return q


# from this size on, the QR itself (LAPACK's geqrf) runs on panels of 512 columns, the rest of the matrix updated
# by matrix products (see _geqrf_by_panels)
_PANELS_FROM = 4096
_QR_PANEL = 512


def _geqrf_by_panels(a: jax.Array, panel: int) -> tuple[jax.Array, jax.Array]:
    """LAPACK's ``geqrf`` of one square matrix, ``(h, tau)`` (``R`` on and above the diagonal of ``h``, the
    Householder vectors below it, as :func:`_householder_q` takes them), computed ``panel`` columns at a time:
    LAPACK factors each panel, and the columns right of it are updated by the panel's reflectors as
    ``I - V T V^T`` (compact WY, as in :func:`_householder_q`) in two matrix products.

    LAPACK's blocked ``geqrf`` updates the rest of the matrix 32 reflectors at a time, products too thin to run at
    the speed of a matrix product. The matrix is held transposed (rows are its columns), which is the memory
    order LAPACK reads and writes a panel in, so that a panel goes to LAPACK and back without a transpose. The same
    factors to rounding (each panel is LAPACK's own)."""
    n = a.shape[-1]
    at = a.T
    taus = []
    for k in range(0, n, panel):
        kb = min(panel, n - k)
        h, tau = jnp.linalg.qr(at[k : k + kb, k:].T, mode="raw")  # h as LAPACK leaves it: (kb, n - k), Fortran order
        at = at.at[k : k + kb, k:].set(h)
        taus.append(tau)
        if k + kb == n:
            break
        vt, t = _compact_wy(h, tau)
        rest = at[k + kb :, k:]  # the columns right of the panel, as rows: rest <- rest (I - V T V^T)
        w = jnp.matmul(jnp.matmul(rest, vt.T, precision=_HIGHEST), t, precision=_HIGHEST)
        at = at.at[k + kb :, k:].set(rest - jnp.matmul(w, vt, precision=_HIGHEST))
    return at.T, jnp.concatenate(taus)


def _qr(
    a: jax.Array,
    panel: int | None = None,
    blocked_from: int | None = None,
    qr_panel: int | None = None,
    panels_from: int | None = None,
) -> tuple[jax.Array, jax.Array]:
    """``Q`` and ``|diag(R)|`` of one square matrix ``a = Q R`` (Householder, LAPACK's signs); ``Q`` by
    :func:`_householder_q` from ``blocked_from`` rows on (default ``_BLOCKED_Q_FROM``), else LAPACK's own; the
    factorization by :func:`_geqrf_by_panels` (``qr_panel`` columns at a time, default ``_QR_PANEL``) from
    ``panels_from`` rows on (default ``_PANELS_FROM``)."""
    panel = max(_PANEL, -(-a.shape[-1] // _MAX_PANELS)) if panel is None else panel
    if a.shape[-1] < (_BLOCKED_Q_FROM if blocked_from is None else blocked_from):
        qq, r = jnp.linalg.qr(a)
        return qq, jnp.abs(jnp.diagonal(r))
    if a.shape[-1] >= (_PANELS_FROM if panels_from is None else panels_from):
        h, tau = _geqrf_by_panels(a, _QR_PANEL if qr_panel is None else qr_panel)
    else:
        h, tau = jnp.linalg.qr(a, mode="raw")
        h = h.T  # NumPy's raw mode: Fortran order
    return _householder_q(h, tau, panel), jnp.abs(jnp.diagonal(h))


def _qr_pass(lq: jax.Array, q: jax.Array, est: jax.Array, bad: jax.Array) -> tuple[jax.Array, jax.Array]:
    """One Gram-Schmidt (QR) pass over one matrix's columns ``L Q`` by decreasing estimate, with the columns known
    to add no direction (``bad``) replaced by the previous basis's and taken last, in index order; the result in the
    columns' own order, and ``bad`` with the columns found to add nothing."""
    d = q.shape[-1]
    order = _pass_order(est, bad)
    qq, diag = _qr(jnp.where(bad, q, lq)[:, order])
    back = jnp.zeros(d, order.dtype).at[order].set(jnp.arange(d, dtype=order.dtype))
    return qq[:, back], bad | _adds_nothing(diag, bad[order], d)[back]


def _pass_order(est: jax.Array, bad: jax.Array) -> jax.Array:
    """The order a pass takes one matrix's columns in: by decreasing estimate, those in ``bad`` last (by index)."""
    return jnp.lexsort((jnp.arange(est.shape[-1]), -jnp.where(bad, -jnp.inf, est)))


def _adds_nothing(diag: jax.Array, bad: jax.Array, d: int) -> jax.Array:
    """Which columns of a pass (its ``|R_jj|`` and ``bad``, in the pass's order) add no direction."""
    # the scale is that of the columns of L Q: a previous basis's column has norm 1 whatever the statistics' scale
    scale = jnp.max(jnp.where(bad, 0, diag))
    return diag <= _null_tolerance(scale, d, diag.dtype)


def _qr_repair(
    lq: jax.Array, q: jax.Array, est: jax.Array, first: jax.Array, bad: jax.Array, seed: jax.Array, passes: jax.Array
) -> jax.Array:
    """The passes after the ``first`` (which was given the columns ``seed`` and found the columns ``bad``; it was
    pass number ``passes``): again while a pass finds columns adding no direction that the pass before did not (three
    passes in all at most)."""

    def body(carry):
        _, found, passes, _ = carry
        qq, now = _qr_pass(lq, q, est, found)
        return qq, now, passes + 1, found

    def again(carry):
        _, found, passes, before = carry
        return (passes < 3) & jnp.any(found & ~before)

    return jax.lax.while_loop(again, body, (first, bad, passes, seed))[0]


# from this size on, the passes that only find columns adding no direction run on a thin QR of 1/_THIN_SHARE of
# the columns, when no more than that many can add one
_THIN_FROM = _BLOCKED_Q_FROM
_THIN_SHARE = 8


def _thin_passes(lq: jax.Array, q: jax.Array, est: jax.Array, seed: jax.Array, width: int) -> tuple:
    """The columns that the passes of :func:`_qr_pass` and :func:`_qr_repair` would be given, found from QRs of
    ``width`` columns where at most ``width`` are not in ``seed``: ``(columns, passes)``, the set the last pass
    takes and its number, so that the full QR runs once, on it.

    A pass puts the columns it may keep first (the others last), and a Householder QR's first ``width`` columns of
    ``R`` depend only on the first ``width`` columns of the matrix: the thin QR finds the same columns as the full
    one (a rank-deficient 8,192 x 8,192 statistic, whose rounding noise leaves a column just over the tolerance, took
    two full QRs a refresh)."""
    d = q.shape[-1]

    def find(bad):
        order = _pass_order(est, bad)[:width]
        diag = jnp.abs(jnp.diagonal(jnp.linalg.qr(jnp.where(bad, q, lq)[:, order], mode="r")))
        return bad.at[order].set(bad[order] | _adds_nothing(diag, bad[order], d))

    def body(carry):  # the next pass takes what this one found
        given, passes, found = carry
        return found, passes + 1, find(found)

    def again(carry):
        given, passes, found = carry
        return (passes < 3) & jnp.any(found & ~given)

    given, passes, _ = jax.lax.while_loop(again, body, (seed, jnp.int32(1), find(seed)))
    return given, passes


def _column_dots(a: jax.Array, b: jax.Array) -> jax.Array:
    """The dot products of the columns of ``a`` and ``b`` (``(..., d, d)`` batches), as an ``einsum``: written as
    ``sum(a * b, axis=-2)``, XLA:CPU's reduction of two arrays with a leading axis of length 1 (a size's batch of
    one factor, like the embedding's) ran 100x slower than without it (4.8 s for ``diag(Q^T L Q)`` at 8,192)."""
    return jnp.einsum("...ij,...ij->...j", a, b, precision=_HIGHEST)


def _zero_columns(lq: jax.Array, est: jax.Array) -> jax.Array:
    """The columns of ``L Q`` (a ``(..., d, d)`` batch) short enough to add no direction to any Gram-Schmidt pass:
    known before the QR, so that the pass can take the previous basis's columns for them at once.

    A column's norm bounds what it adds (``|R_jj| <= ||a_j||``), and the column of largest estimate comes first, so
    its norm is ``|R_11|``, at most the largest ``|R_jj|`` that scales the QR's own test: a column under the tolerance
    for that norm is one the QR would find adding nothing. Such are the columns in the null space of a rank-deficient
    statistic (an embedding's rows that no batch has reached, a gradient repeated step after step): without this,
    every refresh of such a factor ran a QR to find them and a second one without them."""
    norms = jnp.sqrt(_column_dots(lq, lq))
    lead = jnp.take_along_axis(norms, jnp.argmax(est, axis=-1)[..., None], axis=-1)
    return norms <= _null_tolerance(lead, lq.shape[-1], lq.dtype)


def _power_qr(stats: tuple, bases: tuple) -> tuple:
    """One power-iteration step ``Q <- qr(L Q)`` per axis (each a ``(..., d, d)`` batch), the columns of ``L Q``
    taken by decreasing estimated eigenvalue ``diag(Q^T L Q)`` (the order Gram-Schmidt sees them in), then put back
    in their previous order.

    Putting them back keeps each column paired with the same second-moment entry, which is what the reference does by
    permuting the second moment instead: the same update, with the second moment never gathered (it stays laid out,
    and sharded, like the parameters).

    Where ``L`` is rank-deficient, Gram-Schmidt meets columns of ``L Q`` with nothing left beyond the columns before
    them (``|R_jj|`` zero to working precision); the reference normalises their rounding noise into arbitrary
    directions, and orthogonalises every later column against that noise. Here the QR is then taken again, in the
    same order, over the columns that add a direction, followed by the previous basis's columns of the others (in
    index order) for what those leave: a result that does not depend on rounding. Those later passes run only when
    some matrix of the batch needs them.
    """
    out = []
    for s, q in zip(stats, bases):
        if s is None or q.shape[-1] == 0:
            out.append(q)
            continue
        lq = jnp.matmul(s, q, precision=_HIGHEST)
        est = _column_dots(q, lq)
        seed = _zero_columns(lq, est)
        passes = jnp.ones(seed.shape[:-1], jnp.int32)
        d = q.shape[-1]
        if d >= _THIN_FROM:
            width = d // _THIN_SHARE
            thin = functools.partial(_thin_passes, width=width)
            seed, passes = jax.lax.cond(
                jnp.all(jnp.sum(~seed, axis=-1) <= width),
                lambda lq=lq, q=q, est=est, seed=seed: _per_matrix(thin, lq, q, est, seed),
                lambda seed=seed, passes=passes: (seed, passes),
            )
        first, bad = _per_matrix(_qr_pass, lq, q, est, seed)
        qq = jax.lax.cond(
            jnp.any(bad & ~seed),
            lambda lq=lq, q=q, est=est, first=first, bad=bad, seed=seed, passes=passes: _per_matrix(
                _qr_repair, lq, q, est, first, bad, seed, passes
            ),
            lambda first=first: first,
        )
        out.append(_canonical_signs(qq))
    return tuple(out)


def _carry_moment(m: jax.Array, old: tuple, new: tuple) -> jax.Array:
    """A first moment kept in the eigenbasis ``old`` (one factor or None per axis), carried to ``new``:
    ``Q_new^T Q_old M`` along each axis. It is rotated twice at a refresh instead of once at every step."""
    return mode_product(mode_product(m, old, transpose=True), new)


def _refresh(branch: jax.Array, stats: list, bases: list) -> list:
    """The bases of ``stats`` (``(n, d, d)`` arrays): ``bases`` as they are (branch 0), the eigenbases (1) or one
    power-iteration step (2). Factors of one size and dtype are refreshed as one batch: one decomposition call per
    size for the whole tree, whatever its number of leaves (compile time, and the rank repairs' conditions)."""
    keys = [(s.shape[-1], s.dtype) for s in stats]
    return jax.lax.switch(
        branch,
        [
            lambda ss, qs: list(qs),
            lambda ss, qs: by_groups(keys, lambda _, s: _eigenbasis(s), ss),
            lambda ss, qs: by_groups(keys, lambda _, s, q: _power_qr((s,), (q,))[0], ss, qs),
        ],
        list(stats),
        list(bases),
    )


def scale_by_soap(
    b1: ArrayLike = 0.95,
    b2: ArrayLike = 0.95,
    shampoo_beta: ArrayLike | None = None,
    eps: ArrayLike = 1e-8,
    precondition_frequency: int = 10,
    max_precond_dim: int = 10000,
    *,
    merge_dims: bool = False,
    precondition_1d: bool = False,
    one_sided: bool = False,
    mu_dtype: Any | None = None,
    weight_dimension_numbers: MuonDimensionNumbers | Params | Callable[[Params], Any] | None = None,
) -> GradientTransformation:
    r"""SOAP's direction: Adam in the eigenbasis of Shampoo's factor statistics.

    For a matrix gradient :math:`G_t` with factor statistics :math:`L, R` and their eigenbases :math:`Q_L, Q_R`
    (from the previous step):

    .. math::
        G'_t &= Q_L^\top G_t Q_R, \quad M_t = \beta_1 M_{t-1} + (1 - \beta_1) G'_t, \quad
            V_t = \beta_2 V_{t-1} + (1 - \beta_2) G'^2_t, \\
        u_t &= \frac{\sqrt{1 - \beta_2^t}}{1 - \beta_1^t}\,
            Q_L \frac{M_t}{\sqrt{V_t} + \epsilon} Q_R^\top, \\
        L_t &= \beta_s L_{t-1} + (1 - \beta_s) G_t G_t^\top, \quad
            R_t = \beta_s R_{t-1} + (1 - \beta_s) G_t^\top G_t,

    and every ``precondition_frequency`` steps :math:`Q \leftarrow \mathrm{qr}(L Q)` (Gram-Schmidt taking the
    columns by decreasing :math:`\mathrm{diag}(Q^\top L Q)`; each column keeps its entry of :math:`V`, and the
    first moment is carried to the new basis, :math:`M \leftarrow Q_{L,\mathrm{new}}^\top Q_L M Q_R^\top
    Q_{R,\mathrm{new}}`: the paper's momentum of the gradients, kept in the eigenbasis so that a step rotates one
    tensor there and one back, not two there). The first call only builds the statistics and their
    exact eigenbases (``eigh``) and returns a zero update, so a gradient is never projected on a basis built from
    itself; :math:`t` counts the steps after it. A tensor gets one factor per axis; an axis longer than
    ``max_precond_dim`` gets none (identity), so a 50,000-row embedding is preconditioned on its other side only.

    Shapes: a leaf with :class:`MuonDimensionNumbers` is a batch of ``(fan_in, fan_out)`` matrices, each with its
    own factors (stacked layers, conv kernels); by default a leaf of rank >= 2 is its last two axes, its leading
    axes stacked layers (``merge_dims=True`` instead treats it as one tensor with adjacent axes merged while their
    product is at most ``max_precond_dim``); scalars and vectors (unless ``precondition_1d``) have no factor: their
    update is exactly Adam's.

    Args:
      b1: decay of the first moment, in :math:`[0, 1)`.
      b2: decay of the second moment, in :math:`[0, 1)`.
      shampoo_beta: :math:`\beta_s`, decay of the factor statistics in :math:`[0, 1)`; None uses ``b2``.
      eps: :math:`\epsilon >= 0`.
      precondition_frequency: steps between eigenbasis refreshes (an int >= 1).
      max_precond_dim: the largest axis that gets a factor (an int >= 1).
      merge_dims: see Shapes above.
      precondition_1d: also precondition vectors (with a ``(n, n)`` factor).
      one_sided: precondition only the shortest preconditioned axis of each tensor (the paper's one-sided SOAP, for
        very wide matrices: memory ``min(m, n)^2``).
      mu_dtype: dtype of the first moment (default: the parameters', float32 for bf16/f16). The factors and
        the second moment are float32 for bf16/f16 parameters.
      weight_dimension_numbers: a :class:`MuonDimensionNumbers` for every leaf, a tree of them (None for the
        default), or a function of the updates returning one.

    Returns:
      A :class:`GradientTransformation` with state :class:`SOAPState`.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> tx = gradax.contrib.scale_by_soap()
      >>> g = jnp.array([[1.0, 2.0], [3.0, 4.0]])
      >>> s = tx.init(g)
      >>> u, s = tx.update(g, s)  # the first call only builds the eigenbases
      >>> float(jnp.abs(u).max())
      0.0
      >>> u, s = tx.update(g, s)  # then Adam in that basis: a first step of sign-like size
      >>> np.shape(u), bool(jnp.all(jnp.isfinite(u)))
      ((2, 2), True)

    References:
      Vyas et al., `SOAP: Improving and Stabilizing Shampoo using Adam <https://arxiv.org/abs/2409.11321>`_, 2024.
    """
    api = "scale_by_soap"
    check_decay(api, "b1", b1)
    check_decay(api, "b2", b2)
    if shampoo_beta is not None:
        check_decay(api, "shampoo_beta", shampoo_beta)
    check_non_negative(api, "eps", eps)
    check_int(api, "precondition_frequency", precondition_frequency, low=1)
    check_int(api, "max_precond_dim", max_precond_dim, low=1)

    def view(shape, dims) -> tuple[Layout, tuple[bool, ...]]:
        if dims is None and len(shape) >= 2 and not merge_dims:
            dims = default_dims(len(shape))
        lay = layout(tuple(shape), dims, merge_dims, max_precond_dim)
        if len(lay.dims) == 1:
            flags = (precondition_1d and lay.dims[0] <= max_precond_dim,)
        else:
            flags = tuple(d <= max_precond_dim for d in lay.dims)
        if one_sided and sum(flags) > 1:
            keep = min((d, i) for i, (d, f) in enumerate(zip(lay.dims, flags)) if f)[1]
            flags = tuple(i == keep for i in range(len(flags)))
        return lay, flags

    def init(params):
        def leaf(p, dims):
            lay, flags = view(np.shape(p), dims)
            sd = state_dtype(leaf_dtype(p))

            def eye(d):
                return jnp.zeros((*lay.batch, d, d), sd) + jnp.eye(d, dtype=sd)

            stats = tuple(jnp.zeros((*lay.batch, d, d), sd) if f else None for d, f in zip(lay.dims, flags))
            bases = tuple(eye(d) if f else None for d, f in zip(lay.dims, flags))
            return zeros_for(p, state_dtype(leaf_dtype(p), mu_dtype)), zeros_for(p, sd), stats, bases

        flat, treedef = jax.tree.flatten(params)
        outs = [leaf(p, d) for p, d in zip(flat, treedef.flatten_up_to(leaf_dims(weight_dimension_numbers, params)))]
        mu, nu, stats, bases = (treedef.unflatten([o[k] for o in outs]) for k in range(4))
        return SOAPState(jnp.zeros([], jnp.int32), mu, nu, stats, bases)

    def update(updates, state, params=None):
        del params
        count = state.count
        beta1, beta2, epsilon = as_value(b1), as_value(b2), as_value(eps)
        beta_s = beta2 if shampoo_beta is None else as_value(shampoo_beta)
        k = jnp.maximum(count, 1).astype(beta1.dtype)
        step_size = jnp.sqrt(1 - beta2**k) / (1 - beta1**k)
        first = count == 0
        branch = jnp.where(first, 1, jnp.where(count % precondition_frequency == 0, 2, 0))

        def one(g, mu, nu, stats, bases):
            """One tensor of the batch: the update, the new moments (both in the eigenbasis) and statistics."""
            rotated = mode_product(g, bases)
            mu_new = beta1 * mu + (1 - beta1) * rotated
            nu_new = beta2 * nu + (1 - beta2) * jnp.square(rotated)
            u = step_size * mode_product(mu_new / (jnp.sqrt(nu_new) + epsilon), bases, transpose=True)
            u = jnp.where(first, jnp.zeros_like(u), u)
            mu_new, nu_new = jnp.where(first, mu, mu_new), jnp.where(first, nu, nu_new)
            stats = tuple(
                None if s is None else beta_s * s + (1 - beta_s) * axis_gram(g, i) for i, s in enumerate(stats)
            )
            return u, mu_new, nu_new, stats

        def leaf(g, mu, nu, stats, bases, dims):
            lay, _ = view(g.shape, dims)
            cd = compute_dtype(jnp.result_type(g, mu, nu))

            def blocks(x):
                return lay.to_blocks(x.astype(cd))

            def mats(t):
                return tuple(None if s is None else s.astype(cd).reshape(lay.size, *s.shape[-2:]) for s in t)

            u, m, v, s = jax.vmap(one)(blocks(g), blocks(mu), blocks(nu), mats(stats), mats(bases))
            # the second moment comes out of rotations (matmuls): keep it laid out on devices like the gradient
            v, _ = shard_alike(lay.from_blocks(v).astype(nu.dtype), g)

            def finish(m):  # the first moment too, once a refresh has carried it (it stays in blocks until then)
                return shard_alike(lay.from_blocks(m).astype(mu.dtype), g)[0]

            return lay.from_blocks(u).astype(g.dtype), m, v, s, mats(bases), finish

        flat, treedef = jax.tree.flatten(updates)
        dims = treedef.flatten_up_to(leaf_dims(weight_dimension_numbers, updates))
        old_stats, old_bases = treedef.flatten_up_to(state.stats), treedef.flatten_up_to(state.bases)
        parts = (treedef.flatten_up_to(t) for t in (state.mu, state.nu))
        outs = [leaf(*args) for args in zip(flat, *parts, old_stats, old_bases, dims)]
        mus = [o[1] for o in outs]
        # every factor of the tree, refreshed in one switch (outside the vmaps over blocks)
        where = [(i, j) for i, o in enumerate(outs) for j, x in enumerate(o[3]) if x is not None]
        if where:
            refreshed = _refresh(branch, [outs[i][3][j] for i, j in where], [outs[i][4][j] for i, j in where])
            found = dict(zip(where, refreshed))
            moved = sorted({i for i, _ in where})

            def carry(ms):  # each block's first moment to its new bases (None where an axis has no factor)
                new = [tuple(found.get((i, j)) for j in range(len(outs[i][4]))) for i in moved]
                return [jax.vmap(_carry_moment)(m, outs[i][4], n) for m, i, n in zip(ms, moved, new)]

            carried = jax.lax.cond(branch != 0, carry, lambda ms: ms, [mus[i] for i in moved])
            for i, m in zip(moved, carried):
                mus[i] = m
        else:
            found = {}
        mus = [o[5](m) for o, m in zip(outs, mus)]

        def back(x, like):
            return None if x is None else x.reshape(like.shape).astype(like.dtype)

        stats = [tuple(back(x, y) for x, y in zip(o[3], like)) for o, like in zip(outs, old_stats)]
        bases = [tuple(back(found.get((i, j)), y) for j, y in enumerate(like)) for i, like in enumerate(old_bases)]
        new_u, nu = (treedef.unflatten([o[k] for o in outs]) for k in (0, 2))
        mu = treedef.unflatten(mus)
        return new_u, SOAPState(safe_int32_increment(count), mu, nu, treedef.unflatten(stats), treedef.unflatten(bases))

    return GradientTransformation(init, update)


def soap(
    learning_rate: ScalarOrSchedule,
    b1: ArrayLike = 0.95,
    b2: ArrayLike = 0.95,
    shampoo_beta: ArrayLike | None = None,
    eps: ArrayLike = 1e-8,
    weight_decay: ScalarOrSchedule = 0.01,
    mask: MaskOrFn = None,
    precondition_frequency: int = 10,
    max_precond_dim: int = 10000,
    *,
    merge_dims: bool = False,
    precondition_1d: bool = False,
    one_sided: bool = False,
    mu_dtype: Any | None = None,
    weight_dimension_numbers: MuonDimensionNumbers | Params | Callable[[Params], Any] | None = None,
) -> GradientTransformation:
    r"""SOAP with decoupled weight decay: :func:`scale_by_soap`, then AdamW's decay and the learning rate.

    .. math::
        \theta_{t+1} = \theta_t - \eta_t \left(u_t + \lambda \theta_t\right),

    with :math:`u_t` the update of :func:`scale_by_soap`. Matrices (and stacked/conv weights given
    :class:`MuonDimensionNumbers`) are preconditioned; scalars and vectors get Adam (SOAP with an identity basis).

    Args:
      learning_rate: :math:`\eta`, a number or a schedule.
      b1, b2, shampoo_beta, eps, precondition_frequency, max_precond_dim, merge_dims, precondition_1d, one_sided,
        mu_dtype, weight_dimension_numbers: see :func:`scale_by_soap`.
      weight_decay: :math:`\lambda >= 0`, a number or a schedule.
      mask: which leaves are decayed (a tree or a function of the params), as in :func:`gradax.adamw`.

    Returns:
      A :class:`GradientTransformation`.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> opt = gradax.contrib.soap(1e-2, precondition_frequency=2)
      >>> params = {"w": jnp.ones((3, 2)), "b": jnp.zeros(2)}
      >>> state = opt.init(params)
      >>> for _ in range(3):
      ...     u, state = opt.update(params, state, params)
      ...     params = gradax.apply_updates(params, u)
      >>> [x.shape for x in state[0].stats["w"]]
      [(3, 3), (2, 2)]

    References:
      Vyas et al., `SOAP: Improving and Stabilizing Shampoo using Adam <https://arxiv.org/abs/2409.11321>`_, 2024.
    """
    check_non_negative("soap", "learning_rate", learning_rate)
    check_non_negative("soap", "weight_decay", weight_decay)
    return chain(
        scale_by_soap(
            b1,
            b2,
            shampoo_beta,
            eps,
            precondition_frequency,
            max_precond_dim,
            merge_dims=merge_dims,
            precondition_1d=precondition_1d,
            one_sided=one_sided,
            mu_dtype=mu_dtype,
            weight_dimension_numbers=weight_dimension_numbers,
        ),
        add_decayed_weights(weight_decay, mask),
        scale_by_learning_rate(learning_rate),
    )
