"""Muon (Jordan et al., 2024): momentum orthogonalized by a Newton-Schulz iteration, for matrix parameters."""

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from .. import _kernels
from .._base import GradientTransformation, Params, ScalarOrSchedule, init_empty_state
from .._checks import argument_error, check_decay, check_int, check_non_negative, check_one_of
from .._hyperparams import as_value
from .._numerics import compute_dtype, safe_int32_increment
from .._state import zeros_state_like
from ..optimizers._adam import adamw
from ..transforms._adding import add_decayed_weights
from ..transforms._combining import chain
from ..transforms._partition import partition
from ..transforms._scaling import scale_by_learning_rate
from ._matrix_shapes import (
    MuonDimensionNumbers,
    by_groups,
    default_dims,
    fans,
    map_matrices,
    matrix_dims_tree,
    matrix_labels,
    resolve_dims,
    to_matrices,
)

_PRECONDITIONINGS = ("frobenius", "spectral", "aol", "schatten")
_DEFAULT_NS_COEFFS = (3.4445, -4.7750, 2.0315)
# per-step coefficients of Ahn et al. (Dion, 2025), used with ``ns_coeffs="dion"``
_NS_PRESETS = {
    "standard": _DEFAULT_NS_COEFFS,
    "dion": (
        (4.0848, -6.8946, 2.9270),
        (3.9505, -6.3029, 2.6377),
        (3.7418, -5.5913, 2.3037),
        (2.8769, -3.1427, 1.2046),
        (2.8366, -3.0525, 1.2012),
    ),
    # Polar Express (Amsel et al., 2025): the greedy minimax-optimal quintic of each step for singular values in
    # [1e-3, 1], with a 1e-2 safety margin; a schedule read from its first row (see _ns_coeffs_array)
    "polar_express": (
        (8.237312490495555, -23.157747414558198, 16.680568411445915),
        (4.082441999064835, -2.893047735332586, 0.5252849256975648),
        (3.9263479922546582, -2.8547468034765298, 0.5318022422894988),
        (3.2982187133085143, -2.424541981026706, 0.48632008358844075),
        (2.2970369434552573, -1.63662558125903, 0.4002628455953627),
        (1.8763805351440397, -1.2347896577722228, 0.35891887501668385),
        (1.8564423485617974, -1.2132449880935525, 0.3568003487825883),
        (1.8749994008682747, -1.2499988017229169, 0.3749994008546422),
    ),
}
# presets whose rows are a schedule from the first step on: ns_steps takes the first rows, repeating the last
_FROM_FIRST = ("polar_express",)


class MuonState(NamedTuple):
    """State of :func:`scale_by_muon`: the step ``count`` (int32), the momentum ``mu`` and the Newton-Schulz
    coefficients ``ns_coeffs`` (shape ``(3,)``, or ``(ns_steps, 3)`` for per-step coefficients)."""

    count: jax.Array
    mu: Any
    ns_coeffs: jax.Array


def _normalized(x: jax.Array, preconditioning: str, eps) -> jax.Array:
    """``x`` over its Frobenius or spectral norm (``preconditioning``; otherwise ``x``), taken before a tall matrix is
    transposed: neither norm sees the transpose, and fused into it XLA:CPU's scaling pass runs at a tenth of a
    copy's speed (7 ms against 0.9 for an 8,192 x 256 float32 matrix)."""
    if preconditioning == "frobenius":
        return x / (jnp.linalg.norm(x) + eps)
    if preconditioning == "spectral":
        return x / (jnp.linalg.norm(x, ord=2) + eps)
    return x


def _transposed_copy(x: jax.Array) -> jax.Array:
    """``x.T`` put in memory once, before the iteration, for products that contract an operand's last axis (or the
    second's first), the only ones XLA:CPU's fast kernels take. The barrier is no guarantee: XLA:CPU drops barriers
    before it fuses (its compiled programs have none); what keeps the transpose a plain copy is that nothing
    element-wise comes between it and the loop (see :func:`_normalized`)."""
    return jax.lax.optimization_barrier(x.T)


def _newton_schulz(
    x: jax.Array, coeffs: jax.Array, ns_steps: int, preconditioning: str, eps, ns_dtype: Any | None = None
) -> jax.Array:
    """Approximately ``U V^T`` of one matrix ``x = U S V^T`` by the quintic iteration
    ``X <- a X + (b A + c A^2) X`` with ``A = X X^H`` (memory: ``x`` plus two ``min(m, n)^2`` matrices).

    With ``ns_dtype`` the matrix products take their operands rounded to it and accumulate in ``x``'s dtype (see
    :func:`_low_precision_newton_schulz`)."""
    if ns_dtype is not None:
        return _low_precision_newton_schulz(x, coeffs, ns_steps, preconditioning, eps, ns_dtype)
    x = _normalized(x, preconditioning, eps)
    transposed = x.shape[0] > x.shape[1]
    if transposed:
        x = _transposed_copy(x)

    def step(x, c, first):
        a = x @ x.T.conj()
        if first and preconditioning == "aol":
            # almost-orthogonal-layer rescaling (Prach & Lampert, 2022): a diagonal that bounds the spectral norm
            s = jax.lax.rsqrt(jnp.maximum(jnp.sum(jnp.abs(a), axis=-1), eps))[:, None]
            x, a = x * s, a * s * s.T
        elif first and preconditioning == "schatten":
            s = jax.lax.rsqrt(jnp.maximum(jnp.linalg.norm(a), eps))
            x, a = x * s, a * s**2
        b = c[1] * a + c[2] * (a @ a)
        return c[0] * x + b @ x

    return _iterate(step, x, coeffs, ns_steps, transposed, preconditioning)


def _iterate(
    step: Callable, x: jax.Array, coeffs: jax.Array, ns_steps: int, transposed: bool, preconditioning: str
) -> jax.Array:
    """``ns_steps`` Newton-Schulz steps in a ``scan``. The first runs by itself before it where it preconditions
    (``aol``, ``schatten``); otherwise every step is in the loop (outside it XLA:CPU fuses the first step's operand
    with what precedes it: a transposed read, or a bfloat16 rounding folded into a float32 product)."""
    rest = _coefficient_rows(coeffs, ns_steps).astype(x.dtype)
    if preconditioning in ("aol", "schatten"):
        x, rest = step(x, rest[0], True), rest[1:]
    if rest.shape[0]:
        x = jax.lax.scan(lambda x, c: (step(x, c, False), None), x, rest)[0]
    return x.T if transposed else x


def _coefficient_rows(coeffs: jax.Array, ns_steps: int) -> jax.Array:
    """The iteration's ``(ns_steps, 3)`` coefficients: per-step rows as given, one ``(3,)`` row repeated."""
    return coeffs if coeffs.ndim == 2 else jnp.broadcast_to(coeffs, (ns_steps, 3))


def _low_precision_newton_schulz(
    x: jax.Array, coeffs: jax.Array, ns_steps: int, preconditioning: str, eps, ns_dtype: Any, kernel: bool | None = None
) -> jax.Array:
    """:func:`_newton_schulz` with every matrix product's operands rounded to ``ns_dtype`` (bfloat16 in Keller
    Jordan's Muon) and accumulated in ``x``'s dtype, in which ``X``, ``A`` and the sums stay between products: the
    products at the speed of the low precision (tensor cores, AVX-512 BF16), the iterate not rounded to it.

    A tall matrix is transposed into memory (the barriers keep XLA from folding the transpose into the products):
    XLA:CPU's low-precision kernels take a product only when it contracts each operand's last axis or the second's
    first, which ``X^T X`` of a row-major tall ``X`` does not.

    ``kernel`` (default: where it applies, :func:`_kernel_applies`) runs the iteration in gradax's CPU kernel on AMX
    tiles or with AVX-512 BF16 instead (:func:`gradax._kernels.newton_schulz`: the same roundings, the float32 sums
    in another order, each matrix in the cache), with this function's ``vmap`` and derivative."""
    if kernel is None:
        kernel = _kernel_applies(x, preconditioning, ns_dtype)
    if kernel:
        return _kernel_newton_schulz(x, coeffs, ns_steps, preconditioning, eps, ns_dtype)
    if jnp.iscomplexobj(x):
        raise ValueError(
            f"ns_dtype={jnp.dtype(ns_dtype).name} rounds the Newton-Schulz products of real matrices; this one is "
            f"{x.dtype.name}: leave ns_dtype=None for complex parameters"
        )
    acc = x.dtype
    x = _normalized(x, preconditioning, eps)
    transposed = x.shape[0] > x.shape[1]
    if transposed:
        x = _transposed_copy(x)

    def mm(a, b, contract=((1,), (0,))):
        return jax.lax.dot_general(
            a.astype(ns_dtype), b.astype(ns_dtype), (contract, ((), ())), preferred_element_type=acc
        )

    def step(x, c, first):
        xl = x.astype(ns_dtype)
        a = mm(xl, xl, ((1,), (1,)))  # X X^T
        if first and preconditioning == "aol":
            s = jax.lax.rsqrt(jnp.maximum(jnp.sum(jnp.abs(a), axis=-1), eps))[:, None]
            x, a = x * s, a * s * s.T
            xl = x.astype(ns_dtype)
        elif first and preconditioning == "schatten":
            s = jax.lax.rsqrt(jnp.maximum(jnp.linalg.norm(a), eps))
            x, a = x * s, a * s**2
            xl = x.astype(ns_dtype)
        b = c[1] * a + c[2] * mm(a, a)
        return c[0] * x + mm(b, xl)

    x = _iterate(step, x, coeffs, ns_steps, False, preconditioning)
    return jax.lax.optimization_barrier(x).T if transposed else x


def _kernel_applies(x: jax.Array, preconditioning: str, ns_dtype: Any) -> bool:
    """Whether :func:`_low_precision_newton_schulz` runs in the CPU kernel: bfloat16 products of a float32 matrix
    normalized by a norm (the iteration's first step is not special), on a CPU that has AMX or AVX-512 BF16
    (:func:`gradax._kernels.bf16_products`), with the kernels built,
    outside a GSPMD-partitioned ``jit`` (:func:`gradax._kernels.kernel_applies`)."""
    return (
        jnp.dtype(ns_dtype) == jnp.bfloat16
        and x.dtype == jnp.float32
        and preconditioning in ("frobenius", "spectral")
        and _kernels.kernel_applies()
        and _kernels.bf16_products() is not None
    )


def _kernel_newton_schulz(x, coeffs, ns_steps, preconditioning, eps, ns_dtype):
    """:func:`_low_precision_newton_schulz` by the CPU kernel, batched by the kernel under ``vmap`` and differentiated
    as the XLA iteration."""
    return _kernel_iterate(_normalized(x, preconditioning, eps), coeffs, ns_steps, ns_dtype)


def _kernel_iterate(x, coeffs, ns_steps, ns_dtype):
    """The iteration (no normalization) of one matrix by the CPU kernel; under ``vmap`` one kernel call takes the
    batch. No derivative of its own: its jvp is the XLA iteration's."""
    products = _kernels.bf16_products()
    if products is None:
        raise RuntimeError("gradax's Newton-Schulz kernel runs only where _kernel_applies says so")

    @jax.custom_jvp
    def iterate(x, rows):
        return _kernels.newton_schulz(x, rows, x.shape[-2] > x.shape[-1], products)

    @iterate.defjvp
    def _jvp(primals, tangents):
        reference = lambda x, rows: _low_precision_newton_schulz(x, rows, ns_steps, "", 0.0, ns_dtype, kernel=False)
        return jax.jvp(reference, primals, tangents)

    return iterate(x, _coefficient_rows(coeffs, ns_steps))


def _ns_dtype(api: str, ns_dtype: Any) -> Any:
    """``ns_dtype`` as a NumPy dtype (None stays None); anything but a real floating dtype is an error."""
    if ns_dtype is None:
        return None
    try:
        dt = jnp.dtype(ns_dtype)
    except TypeError:
        dt = None
    if dt is None or not jnp.issubdtype(dt, jnp.floating):
        raise argument_error(api, "ns_dtype", "None or a real floating dtype such as jnp.bfloat16", ns_dtype)
    return dt


def orthogonalize(x, coeffs, ns_steps, preconditioning, eps, dims: MuonDimensionNumbers, ns_dtype=None):
    """Orthogonalizes each matrix of ``x`` (batch axes x reduction axes x output axes), one at a time."""
    return map_matrices(lambda m: _newton_schulz(m, coeffs, ns_steps, preconditioning, eps, ns_dtype), x, dims)


def orthogonalize_leaves(xs: list, dims: list, coeffs, ns_steps, preconditioning, eps, ns_dtype=None) -> list:
    """:func:`orthogonalize` of each of the leaves ``xs`` with its dimension numbers ``dims`` (``eps`` one value, or a
    list of one per leaf), every leaf's matrices in one call: where gradax's CPU kernel runs the iteration
    (:func:`_kernel_applies`), the matrices of one shape from all the leaves are stacked into one kernel call, which
    spreads them over the threads itself (a call per leaf left that to XLA:CPU's scheduling of independent calls,
    which at times ran them one after another on one thread); elsewhere each leaf as :func:`orthogonalize`. The
    same numbers either way: each matrix is iterated on its own."""
    eps = list(eps) if isinstance(eps, (list, tuple)) else [eps] * len(xs)
    out: list = [None] * len(xs)
    stacked = []  # (leaf, its matrices normalized, restore)
    for k, (x, d, e) in enumerate(zip(xs, dims, eps)):
        if ns_dtype is not None and x.size and _kernel_applies(x, preconditioning, ns_dtype):
            flat, restore = to_matrices(x, d)
            stacked.append((k, jax.vmap(lambda m, e=e: _normalized(m, preconditioning, e))(flat), restore))
        else:
            out[k] = orthogonalize(x, coeffs, ns_steps, preconditioning, e, d, ns_dtype)
    if stacked:
        iterate = lambda _, m: jax.vmap(lambda x: _kernel_iterate(x, coeffs, ns_steps, ns_dtype))(m)
        done = by_groups([m.shape[1:] for _, m, _ in stacked], iterate, [m for _, m, _ in stacked])
        for (k, _, restore), o in zip(stacked, done):
            out[k] = restore(o)
    return out


def preset_rows(api: str, name: str, ns_steps: ArrayLike) -> tuple:
    """The Newton-Schulz coefficient rows of a named preset for ``ns_steps`` iterations."""
    check_one_of(api, "ns_coeffs", name, tuple(_NS_PRESETS))
    rows = _NS_PRESETS[name]
    if name in _FROM_FIRST and isinstance(ns_steps, int):
        return tuple(rows[min(i, len(rows) - 1)] for i in range(ns_steps))
    return rows


def _ns_coeffs_array(api, ns_coeffs, ns_steps):
    if isinstance(ns_coeffs, str):
        ns_coeffs = preset_rows(api, ns_coeffs, ns_steps)
    c = jnp.asarray(ns_coeffs, jnp.float32)
    if c.ndim not in (1, 2) or c.shape[-1] != 3:
        raise argument_error(api, "ns_coeffs", "of shape (3,) or (n, 3)", ns_coeffs)
    if c.ndim == 2:
        if c.shape[0] < ns_steps:
            raise argument_error(api, "ns_coeffs", f"at least ns_steps={ns_steps} rows", ns_coeffs)
        c = c[c.shape[0] - ns_steps :]
    return c


def _check(api, ns_coeffs, ns_steps, beta, eps, preconditioning):
    check_int(api, "ns_steps", ns_steps, low=1)
    check_decay(api, "beta", beta)
    check_non_negative(api, "eps", eps)
    check_one_of(api, "preconditioning", preconditioning, _PRECONDITIONINGS)
    _ns_coeffs_array(api, ns_coeffs, ns_steps)


def scale_by_muon(
    ns_coeffs: Any = _DEFAULT_NS_COEFFS,
    ns_steps: ArrayLike = 5,
    beta: ArrayLike = 0.95,
    eps: ArrayLike = 1e-8,
    mu_dtype: Any | None = None,
    *,
    nesterov: bool = True,
    adaptive: bool = False,
    preconditioning: str = "frobenius",
    weight_dimension_numbers: MuonDimensionNumbers | Params | Callable[[Params], Any] | None = None,
    ns_dtype: Any | None = None,
) -> GradientTransformation:
    r"""Muon's direction: bias-corrected (Nesterov) momentum, orthogonalized matrix by matrix.

    .. math::
        m_t &= \beta m_{t-1} + (1 - \beta) g_t, \\
        \hat m_t &= \beta \frac{m_t}{1 - \beta^{t+1}} + (1 - \beta)\frac{g_t}{1 - \beta^{t}}
            \quad (\text{or } m_t / (1 - \beta^t) \text{ without Nesterov}), \\
        X_0 &= \hat m_t / (\|\hat m_t\|_F + \epsilon), \quad X_{k+1} = a X_k + (b A_k + c A_k^2) X_k, \quad
            A_k = X_k X_k^\top,

    and the update is :math:`X_K \approx U V^\top` for :math:`\hat m_t = U \Sigma V^\top` (times
    :math:`\langle \hat m_t, X_K\rangle` with ``adaptive``). The iteration runs on the smaller side of each matrix;
    batch axes (stacked layers) are processed one matrix at a time, so memory stays that of a single matrix.

    Args:
      ns_coeffs: :math:`(a, b, c)`, or one triple per step (shape ``(n, 3)`` with ``n >= ns_steps``).
      ns_steps: number of Newton-Schulz iterations :math:`K >= 1`.
      beta: momentum decay in :math:`[0, 1)`.
      eps: :math:`\epsilon >= 0` in the normalization.
      mu_dtype: dtype of the momentum (default: the parameters', float32 for bf16/f16).
      nesterov: use Nesterov momentum.
      adaptive: scale by :math:`\langle \hat m_t, X_K \rangle` (Si et al., AdaMuon-style dual norm scaling).
      preconditioning: the normalization before the iteration: ``'frobenius'``, ``'spectral'``, ``'aol'`` or
        ``'schatten'``.
      weight_dimension_numbers: :class:`MuonDimensionNumbers` for every leaf, a tree of them (a prefix of the
        updates), or a function of the updates returning one. Default: the last two axes are
        (input, output) and any leading axes are stacked layers.
      ns_dtype: None (the iteration in the momentum's dtype, as Optax) or a lower precision such as
        ``jnp.bfloat16`` for the iteration's matrix products: their operands are rounded to it and they accumulate
        in the momentum's dtype, in which the iterate stays (Keller Jordan's Muon runs the whole iteration in
        bfloat16). Use it where low-precision products are faster (GPU tensor cores, TPUs, CPUs with AVX-512 BF16
        or AMX); the orthogonalized update then differs from float32's by about bfloat16's precision (1e-2).

    Returns:
      A :class:`GradientTransformation` with state :class:`MuonState`.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> tx = gradax.contrib.scale_by_muon()
      >>> u, _ = tx.update(jnp.eye(2) * 3.0, tx.init(jnp.zeros((2, 2))))
      >>> bool(jnp.allclose(u, jnp.eye(2), atol=0.3))
      True

    References:
      Jordan et al., `Muon: An optimizer for hidden layers in neural networks
      <https://kellerjordan.github.io/posts/muon/>`_, 2024; Liu et al., `Muon is Scalable for LLM Training
      <https://arxiv.org/abs/2502.16982>`_, 2025.
    """
    api = "scale_by_muon"
    _check(api, ns_coeffs, ns_steps, beta, eps, preconditioning)
    ns_dtype = _ns_dtype(api, ns_dtype)

    def init(params):
        mu = zeros_state_like(params, mu_dtype)
        return MuonState(jnp.zeros([], jnp.int32), mu, _ns_coeffs_array(api, ns_coeffs, ns_steps))

    def update(updates, state, params=None):
        del params
        dims = resolve_dims(weight_dimension_numbers, updates)
        count = safe_int32_increment(state.count)
        b = as_value(beta)
        t = count.astype(b.dtype)

        def momentum(g, m):
            cd = compute_dtype(jnp.result_type(g, m))
            gc = g.astype(cd)
            m_new = b * m.astype(cd) + (1 - b) * gc
            if nesterov:
                m_hat = b * m_new / (1 - b ** (t + 1)) + (1 - b) * gc / (1 - b**t)
            else:
                m_hat = m_new / (1 - b**t)
            return m_hat, m_new, as_value(eps, cd)

        flat_u, treedef = jax.tree.flatten(updates)
        flat_m = treedef.flatten_up_to(state.mu)
        flat_d = [default_dims(g.ndim) if d is None else d for g, d in zip(flat_u, treedef.flatten_up_to(dims))]
        moments = [momentum(g, m) for g, m in zip(flat_u, flat_m)]
        os = orthogonalize_leaves(
            [h for h, _, _ in moments],
            flat_d,
            state.ns_coeffs,
            ns_steps,
            preconditioning,
            [e for *_, e in moments],
            ns_dtype,
        )
        if adaptive:
            os = [jnp.sum(h.conj() * o) * o for o, (h, _, _) in zip(os, moments)]
        new_u = treedef.unflatten([o.astype(g.dtype) for o, g in zip(os, flat_u)])
        new_m = treedef.unflatten([m_new.astype(m.dtype) for (_, m_new, _), m in zip(moments, flat_m)])
        return new_u, MuonState(count, new_m, state.ns_coeffs)

    return GradientTransformation(init, update)


def _scale_by_shape(weight_dimension_numbers, consistent_rms) -> GradientTransformation:
    """Scales each orthogonalized update by :math:`\\sqrt{\\max(1, d_{out}/d_{in})}` (width transfer), or by
    ``consistent_rms`` :math:`\\sqrt{\\max(d_{in}, d_{out})}` (an update RMS matching AdamW's, Liu et al., 2025)."""

    def update(updates, state, params=None):
        del params
        dims = resolve_dims(weight_dimension_numbers, updates)

        def leaf(u, d):
            fan_in, fan_out = fans(u.shape, d)
            if consistent_rms is None:
                s = math.sqrt(max(1.0, fan_out / fan_in)) if fan_in else 1.0  # fan_in 0: an empty leaf
            else:
                s = math.sqrt(max(fan_in, fan_out)) * as_value(consistent_rms)
            return (s * u.astype(compute_dtype(u.dtype))).astype(u.dtype)

        flat_u, treedef = jax.tree.flatten(updates)
        flat_d = treedef.flatten_up_to(dims)
        return treedef.unflatten([leaf(u, d) for u, d in zip(flat_u, flat_d)]), state

    return GradientTransformation(init_empty_state, update)


def muon(
    learning_rate: ScalarOrSchedule,
    ns_coeffs: Any = _DEFAULT_NS_COEFFS,
    ns_steps: ArrayLike = 5,
    beta: ArrayLike = 0.95,
    eps: ArrayLike = 1e-8,
    weight_decay: ScalarOrSchedule = 0.0,
    weight_decay_mask: Any = None,
    mu_dtype: Any | None = None,
    *,
    nesterov: bool = True,
    adaptive: bool = False,
    preconditioning: str = "frobenius",
    adam_b1: ArrayLike = 0.9,
    adam_b2: ArrayLike = 0.999,
    adam_eps_root: ArrayLike = 0.0,
    adam_weight_decay: ScalarOrSchedule = 0.0,
    adam_learning_rate: ScalarOrSchedule | None = None,
    muon_weight_dimension_numbers: Any = None,
    consistent_rms: ArrayLike | None = None,
    cautious_weight_decay: bool = False,
    ns_dtype: Any | None = None,
) -> GradientTransformation:
    r"""Muon for matrices, AdamW for everything else.

    Matrix parameters (2-D by default, or the leaves given :class:`MuonDimensionNumbers` in
    ``muon_weight_dimension_numbers``, e.g. ``(layers, d_in, d_out)`` stacks) get

    .. math::
        u_t = -\eta_t \left(s \cdot \mathrm{NS}_K(\hat m_t) + \lambda \theta_t\right), \quad
        s = \sqrt{\max(1, d_{out} / d_{in})},

    with :math:`\mathrm{NS}_K` and :math:`\hat m_t` as in :func:`scale_by_muon` (``consistent_rms=r`` uses
    :math:`s = r\sqrt{\max(d_{in}, d_{out})}` instead); the other leaves (and the leaves whose dimension numbers are
    None) are updated by :func:`gradax.adamw`.

    Args:
      learning_rate: :math:`\eta`, a number or a schedule.
      ns_coeffs, ns_steps, beta, eps, mu_dtype, nesterov, adaptive, preconditioning, ns_dtype: see
        :func:`scale_by_muon`;
        ``ns_coeffs`` may also be ``'standard'``, ``'dion'`` or
        ``'polar_express'`` (Amsel et al., 2025: per-step coefficients read from the first step, the last repeated
        when ``ns_steps`` exceeds 8).
      weight_decay: :math:`\lambda >= 0` for the Muon leaves; ``weight_decay_mask`` restricts it.
      adam_b1, adam_b2, adam_eps_root, adam_weight_decay, adam_learning_rate: AdamW's arguments for the other leaves
        (``adam_learning_rate`` defaults to ``learning_rate``).
      muon_weight_dimension_numbers: a :class:`MuonDimensionNumbers`, a tree of them with None for AdamW leaves, or
        a function of the params returning one.
      consistent_rms: target update RMS, or None for the width-transfer scale.
      cautious_weight_decay: decay only where the update and the parameter have the same sign (Chen et al., 2025).

    Returns:
      A :class:`GradientTransformation` (a :func:`gradax.partition`).

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> opt = gradax.contrib.muon(0.1)
      >>> params = {"w": jnp.ones((2, 2)), "b": jnp.ones(2)}
      >>> u, _ = opt.update(params, opt.init(params), params)
      >>> u["w"].shape, u["b"].shape
      ((2, 2), (2,))

    References:
      Jordan et al., `Muon <https://kellerjordan.github.io/posts/muon/>`_, 2024; Liu et al., `Muon is Scalable for
      LLM Training <https://arxiv.org/abs/2502.16982>`_, 2025.
    """
    api = "muon"
    _check(api, ns_coeffs, ns_steps, beta, eps, preconditioning)
    _ns_dtype(api, ns_dtype)
    check_non_negative(api, "learning_rate", learning_rate)
    check_non_negative(api, "weight_decay", weight_decay)
    if isinstance(ns_coeffs, str):
        ns_coeffs = preset_rows(api, ns_coeffs, ns_steps)
    if adam_learning_rate is None:
        adam_learning_rate = learning_rate
    user_dims = muon_weight_dimension_numbers

    def dims_tree(params):
        return matrix_dims_tree(user_dims, params)

    def labels(params):
        return matrix_labels(user_dims, params, "muon", "adam")

    # inside the partition the Muon side sees MaskedNode in place of the AdamW leaves; dims_tree keeps them
    muon_side = chain(
        scale_by_muon(
            ns_coeffs=ns_coeffs,
            ns_steps=ns_steps,
            beta=beta,
            eps=eps,
            mu_dtype=mu_dtype,
            nesterov=nesterov,
            adaptive=adaptive,
            preconditioning=preconditioning,
            weight_dimension_numbers=dims_tree,
            ns_dtype=ns_dtype,
        ),
        _scale_by_shape(dims_tree, consistent_rms),
        add_decayed_weights(weight_decay, weight_decay_mask, cautious=cautious_weight_decay),
        scale_by_learning_rate(learning_rate),
    )
    adam_side = adamw(
        learning_rate=adam_learning_rate,
        b1=adam_b1,
        b2=adam_b2,
        eps=eps,
        eps_root=adam_eps_root,
        weight_decay=adam_weight_decay,
        mu_dtype=mu_dtype,
        nesterov=nesterov,
    )
    return partition({"muon": muon_side, "adam": adam_side}, labels)
