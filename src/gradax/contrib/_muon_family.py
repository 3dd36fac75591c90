"""The Muon family: NorMuon, AdaMuon and MuonClip, built on Muon's orthogonalization and the shared matrix view.

Every optimizer here sees a leaf through :mod:`gradax.contrib._matrix_shapes` (its :class:`MuonDimensionNumbers`:
batch axes x fan_in x fan_out); the recipes send the leaves that are not matrices (scalars, vectors, and any leaf
whose dimension numbers are None) to :func:`gradax.adamw`. The "neurons" of a weight are its output units, the
``fan_out`` columns of the matrix view (the rows of a PyTorch ``(out, in)`` weight).
"""

import math
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from .._base import GradientTransformation, GradientTransformationExtraArgs, Params, ScalarOrSchedule
from .._checks import check_decay, check_interval, check_non_negative, check_one_of, check_positive
from .._hyperparams import as_value
from .._numerics import compute_dtype, safe_int32_increment, state_dtype
from ..optimizers._adam import adamw
from ..transforms._adding import add_decayed_weights
from ..transforms._combining import chain
from ..transforms._masking import resolve_labels
from ..transforms._partition import partition, path_string
from ..transforms._scaling import scale_by_learning_rate
from ._matrix_shapes import (
    MuonDimensionNumbers,
    default_dims,
    matrix_dims_tree,
    matrix_labels,
    matrix_shape,
    resolve_dims,
    to_matrices,
)
from ._muon import (
    _DEFAULT_NS_COEFFS,
    _check,
    _ns_coeffs_array,
    _ns_dtype,
    _scale_by_shape,
    muon,
    orthogonalize_leaves,
    preset_rows,
)

_NS_EPS = 1e-7  # the floor of the Frobenius norm before the iteration
_BATCHED = MuonDimensionNumbers(1, 2)  # a (batch, fan_in, fan_out) array of matrices
_UPDATE_SCALES = ("rms", "preserve_norm")
_QK_ROLES = ("query", "key", "query_rotary", "key_rotary", "none")


class NorMuonState(NamedTuple):
    """State of :func:`scale_by_normuon`: the step ``count`` (int32), the momentum ``mu`` (the params' shapes), the
    per-neuron second moment ``nu`` (shape ``(batch, 1, fan_out)`` per leaf, float32 for bf16/f16) and the
    Newton-Schulz coefficients ``ns_coeffs``."""

    count: jax.Array
    mu: Any
    nu: Any
    ns_coeffs: jax.Array


class AdaMuonState(NamedTuple):
    """State of :func:`scale_by_adamuon`: the step ``count`` (int32), the momentum ``mu`` and the elementwise second
    moment ``nu`` of the orthogonalized update (both the params' shapes) and the Newton-Schulz ``ns_coeffs``."""

    count: jax.Array
    mu: Any
    nu: Any
    ns_coeffs: jax.Array


def _orthogonalized(batches: list, coeffs, ns_steps, ns_dtype=None) -> list:
    """The Newton-Schulz polar factor of every matrix of each ``(batch, fan_in, fan_out)`` array of ``batches``
    (Frobenius normalization first), all of them in one :func:`orthogonalize_leaves`."""
    return orthogonalize_leaves(batches, [_BATCHED] * len(batches), coeffs, ns_steps, "frobenius", _NS_EPS, ns_dtype)


def _leaf_dims(d, g):
    return default_dims(g.ndim, "scale_by_normuon") if d is None else d


def scale_by_normuon(
    ns_coeffs: Any = _DEFAULT_NS_COEFFS,
    ns_steps: int = 5,
    beta: ArrayLike = 0.95,
    b2: ArrayLike = 0.95,
    eps: ArrayLike = 1e-10,
    mu_dtype: Any | None = None,
    *,
    nesterov: bool = True,
    update_scale: str = "rms",
    target_rms: ArrayLike = 0.2,
    weight_dimension_numbers: MuonDimensionNumbers | Params | Callable[[Params], Any] | None = None,
    ns_dtype: Any | None = None,
) -> GradientTransformation:
    r"""NorMuon's direction: Muon's orthogonalized momentum, normalized neuron by neuron by a second moment.

    For each matrix (``fan_in x fan_out``; its ``fan_out`` columns are the output neurons):

    .. math::
        m_t &= \beta m_{t-1} + (1 - \beta) g_t, \quad
            \tilde m_t = (1 - \beta) g_t + \beta m_t \ (\text{Nesterov; else } m_t), \quad
            O_t = \mathrm{NS}_K(\tilde m_t), \\
        v_t &= \beta_2 v_{t-1} + (1 - \beta_2)\, \mathrm{mean}_{\text{rows}}(O_t \odot O_t), \quad
            \hat O_t = O_t / (\sqrt{v_t} + \epsilon), \\
        u_t &= \hat O_t \cdot \frac{r \sqrt{mn}}{\|\hat O_t\|_F + \epsilon} \ (\texttt{'rms'}) \quad\text{or}\quad
            \hat O_t \cdot \frac{\|O_t\|_F}{\|\hat O_t\|_F + \epsilon} \ (\texttt{'preserve_norm'}).

    ``'rms'`` is Algorithm 1 of the paper (update RMS :math:`r = 0.2`, AdamW's); ``'preserve_norm'`` keeps the norm
    of Muon's update, as the authors' modded-nanogpt code does.

    Args:
      ns_coeffs, ns_steps, mu_dtype, nesterov, weight_dimension_numbers, ns_dtype: as in :func:`scale_by_muon` (presets
        ``'standard'``, ``'dion'``, ``'polar_express'``).
      beta: momentum decay in :math:`[0, 1)`.
      b2: decay of the per-neuron second moment in :math:`[0, 1)`.
      eps: :math:`\epsilon >= 0`.
      update_scale: ``'rms'`` or ``'preserve_norm'``.
      target_rms: :math:`r > 0`, the update RMS of ``'rms'``.

    Returns:
      A :class:`GradientTransformation` with state :class:`NorMuonState`.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> tx = gradax.contrib.scale_by_normuon()
      >>> u, _ = tx.update(jnp.ones((4, 2)), tx.init(jnp.zeros((4, 2))))
      >>> float(jnp.sqrt(jnp.mean(u**2))).__round__(3)
      0.2

    References:
      Li et al., `NorMuon: Making Muon more efficient and scalable <https://arxiv.org/abs/2510.05491>`_, 2025.
    """
    api = "scale_by_normuon"
    _check(api, ns_coeffs, ns_steps, beta, eps, "frobenius")
    ns_dtype = _ns_dtype(api, ns_dtype)
    check_decay(api, "b2", b2)
    check_one_of(api, "update_scale", update_scale, _UPDATE_SCALES)
    check_positive(api, "target_rms", target_rms)

    def init(params):
        dims = resolve_dims(weight_dimension_numbers, params, api)

        def nu(p, d):
            b, _, fan_out = matrix_shape(np.shape(p), _leaf_dims(d, p))
            return jnp.zeros((b, 1, fan_out), state_dtype(p.dtype, mu_dtype))

        mu = jax.tree.map(lambda p: jnp.zeros(np.shape(p), state_dtype(p.dtype, mu_dtype)), params)
        flat, treedef = jax.tree.flatten(params)
        nus = treedef.unflatten([nu(p, d) for p, d in zip(flat, treedef.flatten_up_to(dims))])
        return NorMuonState(jnp.zeros([], jnp.int32), mu, nus, _ns_coeffs_array(api, ns_coeffs, ns_steps))

    def update(updates, state, params=None):
        del params
        dims = resolve_dims(weight_dimension_numbers, updates, api)
        b, beta2 = as_value(beta), as_value(b2)

        def momentum(g, m, d):
            cd = compute_dtype(jnp.result_type(g, m))
            gc = g.astype(cd)
            m_new = b * m.astype(cd) + (1 - b) * gc
            mt = (1 - b) * gc + b * m_new if nesterov else m_new
            return m_new, *to_matrices(mt, _leaf_dims(d, g))

        def leaf(g, m, v, m_new, o, restore):
            cd = o.dtype
            # rows of zero length (an empty leaf) have mean square 0, not 0/0
            row_sq = jnp.mean(o * o, axis=1, keepdims=True) if o.shape[1] else jnp.zeros(v.shape, cd)
            v_new = beta2 * v.astype(cd) + (1 - beta2) * row_sq
            e = as_value(eps, cd)
            o_hat = o / (jnp.sqrt(v_new) + e)
            norm_hat = jnp.sqrt(jnp.sum(o_hat * o_hat, axis=(1, 2), keepdims=True)) + e
            if update_scale == "rms":
                target = as_value(target_rms, cd) * math.sqrt(o.shape[1] * o.shape[2])
            else:
                target = jnp.sqrt(jnp.sum(o * o, axis=(1, 2), keepdims=True))
            u = restore(o_hat * (target / norm_hat))
            return u.astype(g.dtype), m_new.astype(m.dtype), v_new.astype(v.dtype)

        flat_u, treedef = jax.tree.flatten(updates)
        flat_m, flat_v = treedef.flatten_up_to(state.mu), treedef.flatten_up_to(state.nu)
        moments = [momentum(g, m, d) for g, m, d in zip(flat_u, flat_m, treedef.flatten_up_to(dims))]
        os = _orthogonalized([flat for _, flat, _ in moments], state.ns_coeffs, ns_steps, ns_dtype)
        outs = [
            leaf(g, m, v, m_new, o, restore)
            for g, m, v, o, (m_new, _, restore) in zip(flat_u, flat_m, flat_v, os, moments)
        ]
        new = [treedef.unflatten([o[i] for o in outs]) for i in range(3)]
        return new[0], NorMuonState(safe_int32_increment(state.count), new[1], new[2], state.ns_coeffs)

    return GradientTransformation(init, update)


def scale_by_adamuon(
    ns_coeffs: Any = _DEFAULT_NS_COEFFS,
    ns_steps: int = 5,
    b1: ArrayLike = 0.95,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-8,
    mu_dtype: Any | None = None,
    *,
    nesterov: bool = True,
    target_rms: ArrayLike = 0.2,
    weight_dimension_numbers: MuonDimensionNumbers | Params | Callable[[Params], Any] | None = None,
    ns_dtype: Any | None = None,
) -> GradientTransformation:
    r"""AdaMuon's direction: an elementwise second moment of the orthogonalized momentum, then an RMS-aligned scale.

    For each matrix (``m x n``):

    .. math::
        m_t &= \beta_1 m_{t-1} + (1 - \beta_1) g_t, \quad
            O_t = \mathrm{NS}_K\left((1 - \beta_1) g_t + \beta_1 m_t\right) \ (\text{Nesterov; else } \mathrm{NS}_K(m_t)), \\
        v_t &= \beta_2 v_{t-1} + (1 - \beta_2) O_t \odot O_t, \quad
            \hat O_t = O_t / (\sqrt{v_t / (1 - \beta_2^t)} + \epsilon), \\
        u_t &= \hat O_t \cdot \frac{r \sqrt{mn}}{\|\hat O_t\|_F + \epsilon},

    so that every update has RMS :math:`r` (0.2, AdamW's typical RMS, which lets AdamW's learning rate and weight
    decay carry over). The defaults are those of the authors' code (Nesterov momentum 0.95, :math:`\beta_2 = 0.999`).

    Args:
      ns_coeffs, ns_steps, mu_dtype, weight_dimension_numbers, ns_dtype: as in :func:`scale_by_muon`.
      b1: momentum decay in :math:`[0, 1)`.
      b2: second-moment decay in :math:`[0, 1)`.
      eps: :math:`\epsilon >= 0`.
      nesterov: orthogonalize :math:`(1-\beta_1) g_t + \beta_1 m_t` instead of :math:`m_t` (as the authors do).
      target_rms: :math:`r > 0`.

    Returns:
      A :class:`GradientTransformation` with state :class:`AdaMuonState`.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> tx = gradax.contrib.scale_by_adamuon()
      >>> u, _ = tx.update(jnp.ones((4, 2)), tx.init(jnp.zeros((4, 2))))
      >>> float(jnp.sqrt(jnp.mean(u**2))).__round__(3)
      0.2

    References:
      Si et al., `AdaMuon: Adaptive Muon Optimizer <https://arxiv.org/abs/2507.11005>`_, 2025.
    """
    api = "scale_by_adamuon"
    _check(api, ns_coeffs, ns_steps, b1, eps, "frobenius")
    ns_dtype = _ns_dtype(api, ns_dtype)
    check_decay(api, "b2", b2)
    check_positive(api, "target_rms", target_rms)

    def init(params):
        zeros = lambda p: jnp.zeros(np.shape(p), state_dtype(p.dtype, mu_dtype))
        mu, nu = jax.tree.map(zeros, params), jax.tree.map(zeros, params)
        return AdaMuonState(jnp.zeros([], jnp.int32), mu, nu, _ns_coeffs_array(api, ns_coeffs, ns_steps))

    def update(updates, state, params=None):
        del params
        dims = resolve_dims(weight_dimension_numbers, updates, api)
        count = safe_int32_increment(state.count)
        beta1, beta2 = as_value(b1), as_value(b2)
        bc2 = 1 - beta2 ** count.astype(beta2.dtype)

        def momentum(g, m, d):
            cd = compute_dtype(jnp.result_type(g, m))
            gc = g.astype(cd)
            m_new = beta1 * m.astype(cd) + (1 - beta1) * gc
            mt = (1 - beta1) * gc + beta1 * m_new if nesterov else m_new
            return m_new, *to_matrices(mt, d)

        def leaf(g, m, v, m_new, o, d):
            cd = o.dtype
            v_new = beta2 * v.astype(cd) + (1 - beta2) * o * o
            e = as_value(eps, cd)
            o_hat, restore = to_matrices(o / (jnp.sqrt(v_new / bc2) + e), d)
            norm = jnp.sqrt(jnp.sum(o_hat * o_hat, axis=(1, 2), keepdims=True)) + e
            scale = as_value(target_rms, cd) * math.sqrt(o_hat.shape[1] * o_hat.shape[2]) / norm
            return restore(o_hat * scale).astype(g.dtype), m_new.astype(m.dtype), v_new.astype(v.dtype)

        flat_u, treedef = jax.tree.flatten(updates)
        flat_m, flat_v, flat_d = (treedef.flatten_up_to(t) for t in (state.mu, state.nu, dims))
        flat_d = [default_dims(g.ndim, api) if d is None else d for g, d in zip(flat_u, flat_d)]
        moments = [momentum(g, m, d) for g, m, d in zip(flat_u, flat_m, flat_d)]
        os = _orthogonalized([flat for _, flat, _ in moments], state.ns_coeffs, ns_steps, ns_dtype)
        outs = [
            leaf(g, m, v, m_new, restore(o), d)
            for g, m, v, d, o, (m_new, _, restore) in zip(flat_u, flat_m, flat_v, flat_d, os, moments)
        ]
        new = [treedef.unflatten([o[i] for o in outs]) for i in range(3)]
        return new[0], AdaMuonState(count, new[1], new[2], state.ns_coeffs)

    return GradientTransformation(init, update)


def _presets(api: str, ns_coeffs: Any, ns_steps: int) -> Any:
    """The coefficient rows of a named Newton-Schulz preset (checked under the recipe's name), else ``ns_coeffs``."""
    return preset_rows(api, ns_coeffs, ns_steps) if isinstance(ns_coeffs, str) else ns_coeffs


def _matrices_and_adamw(api, matrix_side, learning_rate, weight_decay, weight_decay_mask, user_dims, adam):
    """The wiring NorMuon and AdaMuon share: a :func:`gradax.partition` of the leaves into matrices and the rest.

    The matrices get the transformations ``matrix_side``, then decoupled weight decay and the learning rate; every
    other leaf gets :func:`gradax.adamw` with ``adam = (learning_rate (None: the recipe's), b1, b2, eps,
    weight_decay, mu_dtype)``.
    """
    adam_lr, b1, b2, eps, adam_weight_decay, mu_dtype = adam
    adam_lr = learning_rate if adam_lr is None else adam_lr
    rest = adamw(adam_lr, b1=b1, b2=b2, eps=eps, weight_decay=adam_weight_decay, mu_dtype=mu_dtype)
    check_non_negative(api, "learning_rate", learning_rate)
    check_non_negative(api, "weight_decay", weight_decay)
    matrices = chain(
        *matrix_side, add_decayed_weights(weight_decay, weight_decay_mask), scale_by_learning_rate(learning_rate)
    )
    return partition({"muon": matrices, "adam": rest}, lambda p: matrix_labels(user_dims, p, "muon", "adam"))


def normuon(
    learning_rate: ScalarOrSchedule,
    ns_coeffs: Any = _DEFAULT_NS_COEFFS,
    ns_steps: int = 5,
    beta: ArrayLike = 0.95,
    b2: ArrayLike = 0.95,
    eps: ArrayLike = 1e-10,
    weight_decay: ScalarOrSchedule = 0.0,
    weight_decay_mask: Any = None,
    mu_dtype: Any | None = None,
    *,
    nesterov: bool = True,
    update_scale: str = "rms",
    target_rms: ArrayLike = 0.2,
    adam_b1: ArrayLike = 0.9,
    adam_b2: ArrayLike = 0.95,
    adam_eps: ArrayLike = 1e-10,
    adam_weight_decay: ScalarOrSchedule = 0.0,
    adam_learning_rate: ScalarOrSchedule | None = None,
    muon_weight_dimension_numbers: Any = None,
    ns_dtype: Any | None = None,
) -> GradientTransformation:
    r"""NorMuon for matrices, AdamW for everything else.

    Matrix parameters (2-D, or the leaves given :class:`MuonDimensionNumbers`) get
    :math:`u_t = -\eta_t (s \cdot d_t + \lambda \theta_t)` with :math:`d_t` from :func:`scale_by_normuon`;
    :math:`s = 1` with ``update_scale='rms'``, and Muon's :math:`\sqrt{\max(1, d_{out}/d_{in})}` with
    ``'preserve_norm'``. Every other leaf is updated by :func:`gradax.adamw`.

    Args:
      learning_rate: :math:`\eta`, a number or a schedule.
      ns_coeffs, ns_steps, beta, b2, eps, mu_dtype, nesterov, update_scale, target_rms, ns_dtype: see
        :func:`scale_by_normuon`.
      weight_decay: :math:`\lambda >= 0` (a number or a schedule); ``weight_decay_mask`` restricts it.
      adam_b1, adam_b2, adam_eps, adam_weight_decay, adam_learning_rate: AdamW's arguments for the other leaves
        (``adam_learning_rate`` defaults to ``learning_rate``).
      muon_weight_dimension_numbers: as in :func:`muon`.

    Returns:
      A :class:`GradientTransformation` (a :func:`gradax.partition`).

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> opt = gradax.contrib.normuon(0.02)
      >>> params = {"w": jnp.ones((3, 2)), "b": jnp.ones(2)}
      >>> u, _ = opt.update(params, opt.init(params), params)
      >>> u["w"].shape, u["b"].shape
      ((3, 2), (2,))

    References:
      Li et al., `NorMuon <https://arxiv.org/abs/2510.05491>`_, 2025.
    """
    api = "normuon"
    _ns_dtype(api, ns_dtype)
    dims = muon_weight_dimension_numbers
    side = [
        scale_by_normuon(
            _presets(api, ns_coeffs, ns_steps),
            ns_steps,
            beta,
            b2,
            eps,
            mu_dtype,
            nesterov=nesterov,
            update_scale=update_scale,
            target_rms=target_rms,
            weight_dimension_numbers=lambda p: matrix_dims_tree(dims, p),
            ns_dtype=ns_dtype,
        )
    ]
    if update_scale == "preserve_norm":
        side.append(_scale_by_shape(lambda p: matrix_dims_tree(dims, p), None))
    adam = (adam_learning_rate, adam_b1, adam_b2, adam_eps, adam_weight_decay, mu_dtype)
    return _matrices_and_adamw(api, side, learning_rate, weight_decay, weight_decay_mask, dims, adam)


def adamuon(
    learning_rate: ScalarOrSchedule,
    ns_coeffs: Any = _DEFAULT_NS_COEFFS,
    ns_steps: int = 5,
    b1: ArrayLike = 0.95,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-8,
    weight_decay: ScalarOrSchedule = 0.0,
    weight_decay_mask: Any = None,
    mu_dtype: Any | None = None,
    *,
    nesterov: bool = True,
    target_rms: ArrayLike = 0.2,
    adam_b1: ArrayLike = 0.9,
    adam_b2: ArrayLike = 0.95,
    adam_eps: ArrayLike = 1e-8,
    adam_weight_decay: ScalarOrSchedule = 0.0,
    adam_learning_rate: ScalarOrSchedule | None = None,
    muon_weight_dimension_numbers: Any = None,
    ns_dtype: Any | None = None,
) -> GradientTransformation:
    r"""AdaMuon for matrices, AdamW for everything else.

    Matrix parameters get :math:`u_t = -\eta_t (d_t + \lambda \theta_t)` with :math:`d_t` from
    :func:`scale_by_adamuon` (RMS :math:`r`, so AdamW's learning rate and weight decay carry over); every other
    leaf is updated by :func:`gradax.adamw`.

    Args:
      learning_rate: :math:`\eta`, a number or a schedule.
      ns_coeffs, ns_steps, b1, b2, eps, mu_dtype, nesterov, target_rms, ns_dtype: see :func:`scale_by_adamuon`.
      weight_decay: :math:`\lambda >= 0` (a number or a schedule); ``weight_decay_mask`` restricts it.
      adam_b1, adam_b2, adam_eps, adam_weight_decay, adam_learning_rate: AdamW's arguments for the other leaves.
      muon_weight_dimension_numbers: as in :func:`muon`.

    Returns:
      A :class:`GradientTransformation` (a :func:`gradax.partition`).

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> opt = gradax.contrib.adamuon(1e-3)
      >>> params = {"w": jnp.ones((3, 2)), "b": jnp.ones(2)}
      >>> u, _ = opt.update(params, opt.init(params), params)
      >>> u["w"].shape
      (3, 2)

    References:
      Si et al., `AdaMuon <https://arxiv.org/abs/2507.11005>`_, 2025.
    """
    api = "adamuon"
    _ns_dtype(api, ns_dtype)
    dims = muon_weight_dimension_numbers
    side = [
        scale_by_adamuon(
            _presets(api, ns_coeffs, ns_steps),
            ns_steps,
            b1,
            b2,
            eps,
            mu_dtype,
            nesterov=nesterov,
            target_rms=target_rms,
            weight_dimension_numbers=lambda p: matrix_dims_tree(dims, p),
            ns_dtype=ns_dtype,
        )
    ]
    adam = (adam_learning_rate, adam_b1, adam_b2, adam_eps, adam_weight_decay, mu_dtype)
    return _matrices_and_adamw(api, side, learning_rate, weight_decay, weight_decay_mask, dims, adam)


def _logits_for(where: str, max_logits: Mapping[str, Any]):
    """The logits of the longest key of ``max_logits`` that is ``where`` or a '/'-prefix of it ('' matches all)."""
    best = None
    for key in max_logits:
        if key == "" or where == key or where.startswith(key.rstrip("/") + "/"):
            if best is None or len(key) > len(best):
                best = key
    return None if best is None else max_logits[best]


def _qk_clip(labels, threshold, alpha, user_dims) -> GradientTransformationExtraArgs:
    """Rescales the query/key weights after the step so that the next maximum logit is at most ``threshold``."""
    api = "muon_clip"

    def init(params):
        del params
        return ()

    def update(updates, state, params=None, max_logits=None, **extra_args):
        del extra_args
        if max_logits is None:
            return updates, state
        if not isinstance(max_logits, Mapping):
            raise TypeError(
                f"{api}: update(max_logits=...) must be a mapping from a key path such as 'layers/0/attn' to the "
                f"per-head maximum logits; got {type(max_logits).__name__}. Pass e.g. {{'attn': logits}}."
            )
        roles = resolve_labels(api, labels, params, "qk_clip_labels")
        roles = jax.tree.map(lambda r, sub: jax.tree.map(lambda _: r, sub), roles, params)
        dims = matrix_dims_tree(user_dims, params)
        tau, a = as_value(threshold), as_value(alpha)

        def leaf(path, u, p, role, d):
            check_one_of(api, "qk_clip_labels", role, _QK_ROLES)
            logits = _logits_for(path_string(path), max_logits)
            if role in ("none", "key_rotary") or logits is None:
                return u
            if d is None:
                fix = f"Label {path_string(path)!r} 'none', or name its axes in muon_weight_dimension_numbers."
                d = default_dims(np.ndim(p), api, fix)
            cd = compute_dtype(jnp.result_type(u, p))
            pm, restore = to_matrices(jnp.asarray(p, cd) + u.astype(cd), d)
            heads = jnp.asarray(logits, cd)
            batch, _, fan_out = pm.shape
            n_heads = heads.size if heads.ndim <= 1 else heads.size // batch
            if heads.ndim > 1 and heads.size != batch * n_heads or n_heads == 0 or fan_out % n_heads:
                raise ValueError(
                    f"{api}: max_logits for {path_string(path)!r} must hold one logit per head (shape (heads,) or "
                    f"(layers, heads)) with heads dividing the {fan_out} output columns; got shape "
                    f"{np.shape(logits)}. Give the per-head maximum of the attention logits."
                )
            exponent = {"query": a, "key": 1 - a, "query_rotary": jnp.ones_like(a)}[role]
            gamma = jnp.minimum(1.0, tau / jnp.maximum(heads, tau)) ** exponent
            gamma = jnp.broadcast_to(gamma.reshape(-1, n_heads), (batch, n_heads))
            cols = jnp.repeat(gamma, fan_out // n_heads, axis=1)[:, None, :]
            new_p = restore(pm * cols)
            return (new_p - jnp.asarray(p, cd)).astype(u.dtype)

        paths_u, treedef = jax.tree_util.tree_flatten_with_path(updates)
        flat_p = treedef.flatten_up_to(params)
        flat_r = treedef.flatten_up_to(roles)
        flat_d = treedef.flatten_up_to(dims)
        out = [leaf(path, u, p, r, d) for (path, u), p, r, d in zip(paths_u, flat_p, flat_r, flat_d)]
        return treedef.unflatten(out), state

    return GradientTransformationExtraArgs(init, update)


def muon_clip(
    learning_rate: ScalarOrSchedule,
    qk_clip_labels: Any = "none",
    qk_clip_threshold: ArrayLike = 100.0,
    qk_clip_alpha: ArrayLike = 0.5,
    beta: ArrayLike = 0.95,
    weight_decay: ScalarOrSchedule = 0.0,
    *,
    ns_coeffs: Any = _DEFAULT_NS_COEFFS,
    ns_steps: int = 5,
    consistent_rms: ArrayLike = 0.2,
    adam_b1: ArrayLike = 0.9,
    adam_b2: ArrayLike = 0.95,
    adam_learning_rate: ScalarOrSchedule | None = None,
    adam_weight_decay: ScalarOrSchedule = 0.0,
    muon_weight_dimension_numbers: Any = None,
    ns_dtype: Any | None = None,
) -> GradientTransformationExtraArgs:
    r"""MuonClip (Kimi K2): Muon with an RMS-matched update, then QK-clip of the query and key projections.

    The step is :func:`muon` with plain (not Nesterov) momentum and ``consistent_rms`` (the update of an
    ``m x n`` matrix has RMS 0.2, Moonlight's choice). Then, when ``update`` receives ``max_logits``, each query or
    key weight is rescaled head by head so that the largest attention logit of the next step stays below
    :math:`\tau`:

    .. math::
        \gamma_h = \min\left(1, \tau / S^{h}_{\max}\right), \qquad
        W_q^{h} \leftarrow \gamma_h^{\alpha} W_q^{h}, \quad W_k^{h} \leftarrow \gamma_h^{1 - \alpha} W_k^{h},

    applied to the parameters after the step (the returned update is :math:`\gamma (\theta + u) - \theta` for those
    leaves). Heads whose logit is below :math:`\tau` are untouched.

    Which parameters: those labelled by ``qk_clip_labels`` (a label tree, or a function of the params such as
    :func:`gradax.transforms.path_labels`), with labels ``'query'`` (scaled by :math:`\gamma^\alpha`), ``'key'``
    (:math:`\gamma^{1-\alpha}`), ``'query_rotary'`` (the rotary part of an MLA query, :math:`\gamma`),
    ``'key_rotary'`` (a shared rotary key, never scaled) and ``'none'``. A labelled weight's output columns (its
    :class:`MuonDimensionNumbers` output axes, head-major: ``(d_model, heads * d_head)`` or
    ``(d_model, heads, d_head)``) are split into the heads.

    Where the logits come from: ``update(grads, state, params, max_logits={...})``, a mapping from a key path (as
    written by :func:`gradax.transforms.path_labels`, e.g. ``"layers/0/attn"``) to the per-head maximum
    pre-softmax logits of this step (shape ``(heads,)``, or ``(layers, heads)`` for a stacked ``(layers, d, h*k)``
    weight), maximized over the batch and devices. A labelled weight takes the logits of the longest key that is
    its path or a prefix of it; without ``max_logits`` (or without a key for it) nothing is clipped.

    Args:
      learning_rate: :math:`\eta`, a number or a schedule.
      qk_clip_labels: the roles above; the default ``'none'`` clips nothing.
      qk_clip_threshold: :math:`\tau > 0`.
      qk_clip_alpha: :math:`\alpha` in :math:`[0, 1]`.
      beta, weight_decay, ns_coeffs, ns_steps, consistent_rms, adam_*, muon_weight_dimension_numbers, ns_dtype: see
        :func:`muon`.

    Returns:
      A :class:`GradientTransformationExtraArgs` that takes ``max_logits``.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> params = {"attn": {"q": jnp.ones((4, 4)), "k": jnp.ones((4, 4))}}
      >>> labels = gradax.transforms.path_labels({r"/q$": "query", r"/k$": "key"})
      >>> opt = gradax.contrib.muon_clip(0.0, qk_clip_labels=labels, qk_clip_threshold=10.0)
      >>> logits = {"attn": jnp.array([40.0, 5.0])}  # two heads of width 2
      >>> u, _ = opt.update(params, opt.init(params), params, max_logits=logits)
      >>> gradax.apply_updates(params, u)["attn"]["q"][0]
      Array([0.5, 0.5, 1. , 1. ], dtype=float32)

    References:
      Kimi Team, `Kimi K2: Open Agentic Intelligence <https://arxiv.org/abs/2507.20534>`_, 2025 (QK-clip);
      Liu et al., `Muon is Scalable for LLM Training <https://arxiv.org/abs/2502.16982>`_, 2025.
    """
    api = "muon_clip"
    _ns_dtype(api, ns_dtype)
    check_positive(api, "qk_clip_threshold", qk_clip_threshold)
    check_interval(api, "qk_clip_alpha", qk_clip_alpha, 0.0, 1.0)
    step = muon(
        learning_rate,
        ns_coeffs=ns_coeffs,
        ns_steps=ns_steps,
        beta=beta,
        weight_decay=weight_decay,
        nesterov=False,
        adam_b1=adam_b1,
        adam_b2=adam_b2,
        adam_learning_rate=adam_learning_rate,
        adam_weight_decay=adam_weight_decay,
        muon_weight_dimension_numbers=muon_weight_dimension_numbers,
        consistent_rms=consistent_rms,
        ns_dtype=ns_dtype,
    )
    return chain(step, _qk_clip(qk_clip_labels, qk_clip_threshold, qk_clip_alpha, muon_weight_dimension_numbers))
