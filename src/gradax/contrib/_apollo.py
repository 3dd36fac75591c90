"""APOLLO and APOLLO-Mini: SGD-like memory, AdamW-like steps, by scaling the raw gradient with factors estimated in a
random low-rank projection."""

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from .._base import GradientTransformation, GradientTransformationExtraArgs, MaskOrFn, ScalarOrSchedule
from .._checks import argument_error, check_decay, check_int, check_non_negative, check_one_of, check_positive
from .._hyperparams import hyper_values
from .._maps import map_n
from .._numerics import compute_dtype, leaf_dtype, safe_int32_increment, state_dtype, zeros_for
from ..optimizers._moments import debias_factor, ema_leaf, ema_sq_leaf
from ..transforms._adding import add_decayed_weights
from ..transforms._combining import chain
from ..transforms._scaling import scale_by_learning_rate

_LIMIT = 1.01  # the norm-growth limiter's bound on the growth of the step's norm from one step to the next
_TINY = 1e-8  # added to the norms in the scaling ratios


class ScaleByApolloState(NamedTuple):
    """State of :func:`scale_by_apollo`. A *projected* leaf is a matrix whose smaller side exceeds ``rank``; other
    leaves run Adam and hold shape-(1,) placeholders in ``projection`` and a zero ``last_norm``."""

    count: jax.Array  # shape=(), dtype=int32: the number of updates so far
    mu: Any  # (m, rank) or (rank, n) per projected (m, n) leaf, like the param otherwise: the first moment
    nu: Any  # same shapes as mu: the second moment
    projection: Any  # (rank, n) if m >= n else (m, rank) per projected leaf: the random projection in use
    last_norm: Any  # shape=() per leaf: the norm of the previous (scaled) step, for the norm-growth limiter
    key: jax.Array  # a typed PRNG key: the key of the next projection refresh


def _projected(shape: tuple[int, ...], rank: int) -> bool:
    return len(shape) == 2 and min(shape) > rank


def _projection_shape(shape: tuple[int, ...], rank: int) -> tuple[int, int]:
    m, n = shape
    return (rank, n) if m >= n else (m, rank)


def _low_rank(g: jax.Array, p: jax.Array) -> jax.Array:
    """``g P^T`` (an (m, rank) matrix) when the projection acts on the columns, else ``P^T g`` ((rank, n))."""
    m, n = g.shape
    return g @ p.T if m >= n else p.T @ g


def _as_key(api: str, key: Any) -> jax.Array:
    if isinstance(key, int) and not isinstance(key, bool):
        return jax.random.key(key)
    if isinstance(key, jax.Array) and jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        return key
    raise argument_error(api, "key", "an int seed or a typed PRNG key", key, "Pass key=0 or key=jax.random.key(0)")


def scale_by_apollo(
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-6,
    *,
    rank: int = 256,
    update_proj_gap: int = 200,
    scale: ArrayLike = 1.0,
    scale_type: str = "channel",
    key: Any = 0,
) -> GradientTransformation:
    r"""Rescales updates with APOLLO: the raw gradient times per-channel (or per-tensor) factors that Adam's update
    would apply, estimated in a random low-rank projection of the gradient.

    For a matrix :math:`G \in \mathbb R^{m \times n}` whose smaller side exceeds ``rank`` :math:`r`, with a
    Gaussian projection :math:`P` (entries :math:`\mathcal N(0, 1/r)`, redrawn every ``update_proj_gap`` steps,
    from ``key``), :math:`R_t = G_t P^\top` (:math:`m \ge n`) or :math:`P^\top G_t`:

    .. math::
      M_t = \beta_1 M_{t-1} + (1-\beta_1) R_t, \quad V_t = \beta_2 V_{t-1} + (1-\beta_2) R_t^2, \quad
      \tilde R_t = \frac{M_t}{\sqrt{V_t} + \varepsilon}, \\
      s_j = \frac{\lVert \tilde R_{t,j} \rVert}{\lVert R_{t,j} \rVert + 10^{-8}} \ \text{(per channel } j
      \text{ of the unprojected side, or one } s \text{ for } \texttt{scale\_type="tensor"}), \qquad
      S_t = G_t \odot s, \\
      S_t \leftarrow S_t / \max\!\left(1, \frac{\lVert S_t \rVert}{1.01 \lVert S_{t-1} \rVert}\right), \qquad
      u_t = \sqrt{\alpha}\, \frac{\sqrt{1-\beta_2^t}}{1-\beta_1^t}\, S_t,

    (the norm-growth limiter of Fira), with :math:`\alpha` = ``scale``. Other leaves take Adam's step
    :math:`\frac{\sqrt{1-\beta_2^t}}{1-\beta_1^t} \frac{m_t}{\sqrt{v_t}+\varepsilon}`. The optimizer state of a
    projected matrix is :math:`2 r \max(m, n) + r \min(m, n)` numbers instead of Adam's :math:`2 m n`. The moments
    are kept across projection refreshes. APOLLO-Mini (:func:`apollo_mini`) is ``rank=1``, ``scale_type="tensor"``,
    ``scale=128``. Use it to pre-train large models with SGD-like optimizer memory.

    Args:
      b1: :math:`\beta_1 \in [0, 1)`, decay of the first moment.
      b2: :math:`\beta_2 \in [0, 1)`, decay of the second moment.
      eps: :math:`\varepsilon \ge 0`, added to the denominator.
      rank: :math:`r \ge 1`, the rank of the projection.
      update_proj_gap: steps between projection refreshes (an int >= 1).
      scale: :math:`\alpha > 0`; the step is multiplied by :math:`\sqrt{\alpha}`.
      scale_type: ``"channel"`` or ``"tensor"``.
      key: an int seed or a typed PRNG key for the projections (an int becomes a key inside ``init``).

    Returns:
      A :class:`GradientTransformation` with state :class:`ScaleByApolloState`.

    Example:
      >>> import gradax, jax, jax.numpy as jnp
      >>> tx = gradax.contrib.scale_by_apollo(rank=2)
      >>> state = tx.init({"w": jnp.zeros((8, 4)), "b": jnp.zeros(4)})
      >>> jax.tree.map(jnp.shape, state.mu)
      {'b': (4,), 'w': (8, 2)}

    References:
      Zhu et al., 2024, "APOLLO: SGD-like Memory, AdamW-level Performance", https://arxiv.org/abs/2412.05270.
    """
    api = "scale_by_apollo"
    check_decay(api, "b1", b1)
    check_decay(api, "b2", b2)
    check_non_negative(api, "eps", eps)
    check_int(api, "rank", rank, low=1)
    check_int(api, "update_proj_gap", update_proj_gap, low=1)
    check_positive(api, "scale", scale)
    check_one_of(api, "scale_type", scale_type, ("channel", "tensor"))
    if not isinstance(key, int):
        _as_key(api, key)

    def projections(params, key):
        leaves, treedef = jax.tree.flatten(params)
        keys = jax.random.split(key, max(len(leaves), 1))
        out = []
        for p, k in zip(leaves, keys):
            shape, dtype = tuple(np.shape(p)), state_dtype(leaf_dtype(p))
            if _projected(shape, rank):
                out.append(jax.random.normal(k, _projection_shape(shape, rank), dtype) / math.sqrt(rank))
            else:
                out.append(jnp.zeros((1,), dtype))
        return treedef.unflatten(out)

    def _refresh(tree, key):
        key_now, key_next = jax.random.split(key)
        return projections(tree, key_now), key_next

    def init(params):
        key_now, key_next = jax.random.split(_as_key(api, key))

        def moment(p):
            shape, dtype = tuple(np.shape(p)), state_dtype(leaf_dtype(p))
            if _projected(shape, rank):
                m, n = shape
                return jnp.zeros((m, rank) if m >= n else (rank, n), dtype)
            return zeros_for(p, dtype)

        return ScaleByApolloState(
            count=jnp.zeros([], jnp.int32),
            mu=jax.tree.map(moment, params),
            nu=jax.tree.map(moment, params),
            projection=projections(params, key_now),
            last_norm=jax.tree.map(lambda p: jnp.zeros([], state_dtype(leaf_dtype(p))), params),
            key=key_next,
        )

    def update(updates, state, params=None):
        del params
        beta1, beta2, e, alpha = hyper_values(b1, b2, eps, scale)
        count = safe_int32_increment(state.count)
        refresh = jnp.mod(count, update_proj_gap) == 0
        projection, key = jax.lax.cond(
            refresh, lambda: _refresh(updates, state.key), lambda: (state.projection, state.key)
        )
        step_scale = jnp.sqrt(debias_factor(beta2, count)) / debias_factor(beta1, count)
        first = state.count == 0

        def leaf(g, m, v, proj, last):
            gc = g.astype(compute_dtype(g.dtype))
            if not _projected(g.shape, rank):
                m_new = ema_leaf(gc, m, beta1, 1 - beta1)
                v_new = ema_sq_leaf(gc, v, beta2, 1 - beta2)
                u = step_scale * m_new / (jnp.sqrt(v_new) + e)
                return u.astype(g.dtype), m_new.astype(m.dtype), v_new.astype(v.dtype), last
            r = _low_rank(gc, proj.astype(gc.dtype))
            m_new = ema_leaf(r, m, beta1, 1 - beta1)
            v_new = ema_sq_leaf(r, v, beta2, 1 - beta2)
            normalized = m_new / (jnp.sqrt(v_new) + e)
            if scale_type == "tensor":
                s = jnp.sqrt(jnp.sum(normalized**2)) / (jnp.sqrt(jnp.sum(r * r)) + _TINY)
            else:
                axis = 1 if g.shape[0] >= g.shape[1] else 0
                s = jnp.sqrt(jnp.sum(normalized**2, axis=axis, keepdims=True)) / (
                    jnp.sqrt(jnp.sum(r * r, axis=axis, keepdims=True)) + _TINY
                )
            scaled = gc * s
            norm = jnp.sqrt(jnp.sum(scaled * scaled))
            limiter = jnp.where(first, 1.0, jnp.maximum(norm / (last + _TINY), _LIMIT) / _LIMIT)
            u = jnp.sqrt(alpha) * step_scale * scaled / limiter
            return u.astype(g.dtype), m_new.astype(m.dtype), v_new.astype(v.dtype), (norm / limiter).astype(last.dtype)

        out, mu, nu, last_norm = map_n(4, leaf, updates, state.mu, state.nu, projection, state.last_norm)
        return out, ScaleByApolloState(count=count, mu=mu, nu=nu, projection=projection, last_norm=last_norm, key=key)

    return GradientTransformation(init, update)


def apollo(
    learning_rate: ScalarOrSchedule = 1e-2,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-6,
    weight_decay: ScalarOrSchedule = 0.0,
    mask: MaskOrFn = None,
    *,
    rank: int = 256,
    update_proj_gap: int = 200,
    scale: ArrayLike = 1.0,
    scale_type: str = "channel",
    key: Any = 0,
    cautious_weight_decay: bool = False,
) -> GradientTransformationExtraArgs:
    r"""The APOLLO optimizer with decoupled weight decay.

    .. math::
      \theta_t = \theta_{t-1} - \eta_t \left(u_t + \lambda_t \theta_{t-1}\right),

    with :math:`u_t` from :func:`scale_by_apollo`.

    Args:
      learning_rate: :math:`\eta`, a number, an array or a schedule of the step count.
      b1: :math:`\beta_1 \in [0, 1)`.
      b2: :math:`\beta_2 \in [0, 1)`.
      eps: :math:`\varepsilon \ge 0`.
      weight_decay: :math:`\lambda \ge 0`, a number, an array or a schedule.
      mask: which leaves to decay (a tree of booleans or a function of the params); ``None`` decays all.
      rank: the rank of the random projection.
      update_proj_gap: steps between projection refreshes.
      scale: :math:`\alpha`; the step is multiplied by :math:`\sqrt{\alpha}`.
      scale_type: ``"channel"`` or ``"tensor"``.
      key: an int seed or a typed PRNG key for the projections.
      cautious_weight_decay: decay only where the update and the parameter have the same sign.

    Returns:
      A :class:`GradientTransformationExtraArgs`.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> opt = gradax.contrib.apollo(learning_rate=0.1, rank=1, eps=0.0)
      >>> opt.update(jnp.array([0.5, -2.0]), opt.init(jnp.zeros(2)), jnp.zeros(2))[0]
      Array([-0.1,  0.1], dtype=float32)

    References:
      Zhu et al., 2024, "APOLLO: SGD-like Memory, AdamW-level Performance", https://arxiv.org/abs/2412.05270.
    """
    return chain(
        scale_by_apollo(
            b1,
            b2,
            eps,
            rank=rank,
            update_proj_gap=update_proj_gap,
            scale=scale,
            scale_type=scale_type,
            key=key,
        ),
        add_decayed_weights(weight_decay, mask, cautious=cautious_weight_decay),
        scale_by_learning_rate(learning_rate),
    )


def apollo_mini(
    learning_rate: ScalarOrSchedule = 1e-2,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-6,
    weight_decay: ScalarOrSchedule = 0.0,
    mask: MaskOrFn = None,
    *,
    update_proj_gap: int = 200,
    scale: ArrayLike = 128.0,
    key: Any = 0,
    cautious_weight_decay: bool = False,
) -> GradientTransformationExtraArgs:
    r"""APOLLO-Mini: :func:`apollo` with a rank-1 projection and one scaling factor per tensor.

    Its optimizer state for an :math:`m \times n` matrix is :math:`2\max(m, n) + \min(m, n)` numbers; the step is
    multiplied by :math:`\sqrt{128}` (``scale``) to make up for the rank-1 estimate.

    Args:
      learning_rate: :math:`\eta`, a number, an array or a schedule of the step count.
      b1: :math:`\beta_1 \in [0, 1)`.
      b2: :math:`\beta_2 \in [0, 1)`.
      eps: :math:`\varepsilon \ge 0`.
      weight_decay: :math:`\lambda \ge 0`, a number, an array or a schedule.
      mask: which leaves to decay; ``None`` decays all.
      update_proj_gap: steps between projection refreshes.
      scale: :math:`\alpha`; the step is multiplied by :math:`\sqrt{\alpha}`.
      key: an int seed or a typed PRNG key for the projections.
      cautious_weight_decay: decay only where the update and the parameter have the same sign.

    Returns:
      A :class:`GradientTransformationExtraArgs`.

    Example:
      >>> import gradax, jax, jax.numpy as jnp
      >>> opt = gradax.contrib.apollo_mini(learning_rate=1e-3)
      >>> jax.tree.map(jnp.shape, opt.init({"w": jnp.zeros((8, 4))})[0].mu)
      {'w': (8, 1)}

    References:
      Zhu et al., 2024, "APOLLO: SGD-like Memory, AdamW-level Performance", https://arxiv.org/abs/2412.05270.
    """
    return apollo(
        learning_rate,
        b1,
        b2,
        eps,
        weight_decay,
        mask,
        rank=1,
        update_proj_gap=update_proj_gap,
        scale=scale,
        scale_type="tensor",
        key=key,
        cautious_weight_decay=cautious_weight_decay,
    )
