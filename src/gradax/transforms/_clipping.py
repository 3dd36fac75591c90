"""Clipping updates: elementwise, per block, by the global norm, unit-wise relative to the parameters, per example."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from .._base import EmptyState, GradientTransformation
from .._checks import argument_error, check_needs, check_non_negative
from .._hyperparams import as_value
from .._numerics import abs_sq, compute_dtype

ClipState = EmptyState
ClipByGlobalNormState = EmptyState
AdaptiveGradClipState = EmptyState


def _empty_init(params):
    del params
    return EmptyState()


def clip(max_delta: ArrayLike) -> GradientTransformation:
    r"""Clips every element of the updates to :math:`[-\delta, \delta]`.

    .. math::
      u_i \leftarrow \min(\max(u_i, -\delta), \delta).

    Args:
      max_delta: :math:`\delta \ge 0`, the largest absolute value an element may keep.

    Returns:
      A :class:`GradientTransformation` with state :class:`ClipState` (empty).

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> tx = gradax.clip(1.0)
      >>> tx.update(jnp.array([-3.0, 0.5, 2.0]), tx.init(None))[0]
      Array([-1. ,  0.5,  1. ], dtype=float32)
    """
    check_non_negative("clip", "max_delta", max_delta)

    def update(updates, state, params=None):
        del params
        delta = as_value(max_delta)

        def leaf(u):
            dt = compute_dtype(u.dtype)
            return jnp.clip(u.astype(dt), -delta.astype(dt), delta.astype(dt)).astype(u.dtype)

        return jax.tree.map(leaf, updates), state

    return GradientTransformation(_empty_init, update)


def clip_by_block_rms(threshold: ArrayLike) -> GradientTransformation:
    r"""Scales each leaf (block) of the updates down so that its root mean square is at most ``threshold``.

    .. math::
      u \leftarrow \frac{u}{\max\bigl(1, \mathrm{rms}(u) / \tau\bigr)}, \qquad
      \mathrm{rms}(u) = \sqrt{\operatorname{mean}_i |u_i|^2}.

    Args:
      threshold: :math:`\tau \ge 0`, the largest RMS a block may keep.

    Returns:
      A :class:`GradientTransformation` with an empty state.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> tx = gradax.clip_by_block_rms(1.0)
      >>> tx.update(jnp.array([3.0, 4.0]), tx.init(None))[0]
      Array([0.84852815, 1.1313709 ], dtype=float32)
    """
    check_non_negative("clip_by_block_rms", "threshold", threshold)

    def update(updates, state, params=None):
        del params
        tau = as_value(threshold)

        def leaf(u):
            x = u.astype(compute_dtype(u.dtype))
            denom = jnp.maximum(1.0, jnp.sqrt(jnp.mean(abs_sq(x))) / tau)
            return (x / denom).astype(u.dtype)

        return jax.tree.map(leaf, updates), state

    return GradientTransformation(_empty_init, update)


def global_norm_f32(leaves) -> jax.Array:
    """The global L2 norm of ``leaves``, each squared and summed in at least float32 (one read of each leaf)."""
    if not leaves:
        return jnp.zeros([], jnp.float32)
    return jnp.sqrt(sum(jnp.sum(abs_sq(x.astype(compute_dtype(x.dtype)))) for x in leaves))


def global_norm_scale(g_norm: jax.Array, max_norm: jax.Array) -> jax.Array:
    """The factor :func:`clip_by_global_norm` multiplies every update by: 1 below the threshold and for a zero norm
    (0/0 would give NaN), else ``max_norm / g_norm``."""
    keep = (g_norm < max_norm) | (g_norm == 0)
    return jnp.where(keep, jnp.ones_like(g_norm), max_norm.astype(g_norm.dtype) / jnp.where(keep, 1, g_norm))


def clip_by_global_norm(max_norm: ArrayLike) -> GradientTransformation:
    r"""Scales all the updates together so that their global L2 norm is at most ``max_norm``.

    .. math::
      \|u\| = \sqrt{\textstyle\sum_{\text{leaves}} \sum_i |u_i|^2}, \qquad
      u \leftarrow \begin{cases} u & \text{if } \|u\| < c \\ \dfrac{u}{\|u\|}\, c & \text{otherwise.}\end{cases}

    The norm is accumulated in at least float32 (bfloat16/float16 updates are not squared in their own precision),
    and the updates are read once for the norm and once for the scaling. Zero updates stay zero, also with
    ``max_norm=0`` (where Optax 0.2.8 returns NaN; see ``docs/differences.md``).

    Args:
      max_norm: :math:`c \ge 0`, the largest global norm the updates may keep.

    Returns:
      A :class:`GradientTransformation` with state :class:`ClipByGlobalNormState` (empty).

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> tx = gradax.clip_by_global_norm(1.0)
      >>> tx.update({"a": jnp.array([3.0]), "b": jnp.array([4.0])}, tx.init(None))[0]["b"]
      Array([0.8], dtype=float32)

    References:
      Pascanu et al., 2013, "On the difficulty of training recurrent neural networks".
    """
    check_non_negative("clip_by_global_norm", "max_norm", max_norm)

    def update(updates, state, params=None):
        del params
        leaves, treedef = jax.tree.flatten(updates)
        c = as_value(max_norm)
        if np.ndim(c) != 0:
            c = jnp.squeeze(c)
            if np.ndim(c) != 0:
                raise argument_error("clip_by_global_norm", "max_norm", "a scalar", max_norm)
        scale = global_norm_scale(global_norm_f32(leaves), c)

        def leaf(u):
            dt = compute_dtype(u.dtype)
            x = u.astype(dt)
            # one scalar factor: an elementwise multiply (unlike a divide) is cheap enough for XLA to fuse into
            # every consumer instead of writing the clipped tree to memory
            return (x * scale.astype(dt)).astype(u.dtype)

        return treedef.unflatten([leaf(u) for u in leaves]), state

    return GradientTransformation(_empty_init, update)


def unitwise_norm(x: ArrayLike, axis: int | tuple[int, ...] | None = None) -> jax.Array:
    r"""The L2 norm of each unit of ``x``, broadcast back to ``x``'s shape.

    A unit is a slice of ``x`` over the reduced ``axis``. When ``axis`` is None it follows from the rank: scalars and
    vectors (also after squeezing) are one unit; rank 2 and 3 (dense, multi-head dense ``...IO``) reduce axis 0;
    rank 4 (HWIO convolutions) axes (0, 1, 2); rank 5 (DHWIO) axes (0, 1, 2, 3).

    Args:
      x: an array.
      axis: the axes to reduce, or None for the rank-based default.

    Returns:
      An array of ``x``'s shape holding, at each position, the norm of its unit.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> gradax.transforms.unitwise_norm(jnp.array([[3.0, 0.0], [4.0, 1.0]]))
      Array([[5., 1.],
             [5., 1.]], dtype=float32)
    """
    x = jnp.asarray(x)
    if axis is not None:
        sq = jnp.sum(abs_sq(x), axis=axis, keepdims=True)
    elif jnp.squeeze(x).ndim <= 1:
        sq = jnp.sum(abs_sq(x), keepdims=True)
    elif x.ndim in (2, 3):
        sq = jnp.sum(abs_sq(x), axis=0, keepdims=True)
    elif x.ndim == 4:
        sq = jnp.sum(abs_sq(x), axis=(0, 1, 2), keepdims=True)
    elif x.ndim == 5:
        sq = jnp.sum(abs_sq(x), axis=(0, 1, 2, 3), keepdims=True)
    else:
        raise ValueError(
            f"unitwise_norm(x=...) must have rank 1 to 5 when axis is None; got shape {x.shape}. "
            "Pass axis=... to choose the reduced axes."
        )
    return jnp.broadcast_to(jnp.sqrt(sq), x.shape)


def unitwise_clip(g_norm: ArrayLike, max_norm: ArrayLike, grad: ArrayLike, div_eps: ArrayLike = 1e-6) -> jax.Array:
    r"""Scales ``grad`` down where its unit norm exceeds ``max_norm``.

    .. math::
      g \leftarrow \begin{cases} g & \text{if } \|g\| < m \\ g\, m / \max(\|g\|, \epsilon) & \text{otherwise.}
      \end{cases}

    Args:
      g_norm: the unit norms of ``grad`` (as :func:`unitwise_norm` gives), of ``grad``'s shape.
      max_norm: the largest unit norm, of ``grad``'s shape.
      grad: the array to clip.
      div_eps: :math:`\epsilon > 0`, guards the division.

    Returns:
      The clipped array.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> g = jnp.array([3.0, 4.0])
      >>> gradax.transforms.unitwise_clip(jnp.full(2, 5.0), jnp.full(2, 1.0), g)
      Array([0.6, 0.8], dtype=float32)
    """
    g_norm, max_norm, grad = jnp.asarray(g_norm), jnp.asarray(max_norm), jnp.asarray(grad)
    if not (g_norm.shape == max_norm.shape == grad.shape):
        raise ValueError(
            f"unitwise_clip(g_norm=..., max_norm=..., grad=...) must have equal shapes; got {g_norm.shape}, "
            f"{max_norm.shape} and {grad.shape}. Broadcast them with unitwise_norm."
        )
    clipped = grad * (max_norm / jnp.maximum(g_norm, div_eps))
    return jnp.where(g_norm < max_norm, grad, clipped)


def adaptive_grad_clip(
    clipping: ArrayLike, eps: ArrayLike = 1e-3, axis: int | tuple[int, ...] | None = None
) -> GradientTransformation:
    r"""Adaptive gradient clipping: clips each unit of the updates relative to the norm of the same unit of params.

    .. math::
      m = \lambda \max(\|\theta\|_{\text{unit}}, \epsilon), \qquad
      u \leftarrow \begin{cases} u & \text{if } \|u\|_{\text{unit}} < m \\ u\, m / \|u\|_{\text{unit}} &
      \text{otherwise.}\end{cases}

    Units are as in :func:`gradax.transforms.unitwise_norm`.

    Args:
      clipping: :math:`\lambda \ge 0`, the largest ratio of update norm to parameter norm.
      eps: :math:`\epsilon \ge 0`, the smallest parameter norm (so zero-initialised params still move).
      axis: the axes of a unit, or None for the rank-based default.

    Returns:
      A :class:`GradientTransformation` with state :class:`AdaptiveGradClipState` (empty); ``update`` needs params.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> tx = gradax.adaptive_grad_clip(0.1)
      >>> params = jnp.array([3.0, 4.0])
      >>> tx.update(jnp.array([30.0, 40.0]), tx.init(params), params)[0]
      Array([0.29999998, 0.39999998], dtype=float32)

    References:
      Brock et al., 2021, "High-Performance Large-Scale Image Recognition Without Normalization".
    """
    check_non_negative("adaptive_grad_clip", "clipping", clipping)
    check_non_negative("adaptive_grad_clip", "eps", eps)

    def update(updates, state, params=None):
        check_needs("adaptive_grad_clip", "params", params)
        lam, floor = as_value(clipping), as_value(eps)

        def leaf(u, p):
            dt = compute_dtype(u.dtype)
            x = u.astype(dt)
            g_norm = unitwise_norm(x, axis=axis)
            max_norm = lam * jnp.maximum(unitwise_norm(p.astype(compute_dtype(p.dtype)), axis=axis), floor)
            clipped = x * (max_norm / jnp.maximum(g_norm, 1e-6))
            return jnp.where(g_norm < max_norm, x, clipped).astype(u.dtype)

        return jax.tree.map(leaf, updates, params), state

    return GradientTransformation(_empty_init, update)


def _check_batched(api: str, grads) -> list:
    leaves = jax.tree.leaves(grads)
    if not leaves:
        raise ValueError(f"{api}(grads=...) must hold at least one array; got {grads!r:.80}.")
    batch = np.shape(leaves[0])[0] if np.ndim(leaves[0]) >= 1 else None
    if batch is None or any(np.ndim(g) < 1 or np.shape(g)[0] != batch for g in leaves):
        raise ValueError(
            f"{api}(grads=...) must have a batch dimension in axis 0 of every array, of one size; got shapes "
            f"{jax.tree.map(jnp.shape, grads)}. Pass per-example gradients (e.g. from jax.vmap(jax.grad(...)))."
        )
    return leaves


def per_example_global_norm_clip(grads, l2_norm_clip: ArrayLike) -> tuple:
    r"""Clips each example's gradient to a global L2 norm, then sums over the examples.

    .. math::
      m_n = \min\Bigl(1, \frac{C}{\|g_n\|}\Bigr) \ (1 \text{ where undefined}), \qquad
      \text{out} = \sum_n m_n\, g_n.

    Args:
      grads: a pytree of arrays, each with the examples along axis 0.
      l2_norm_clip: :math:`C \ge 0`.

    Returns:
      ``(clipped_sum, num_clipped)``: the sum of the clipped per-example gradients (the structure of ``grads``
      without the batch axis) and the number of examples that were scaled down (int32).

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> grads = [jnp.array([[0.0, 0.0], [3.0, 4.0]])]
      >>> gradax.per_example_global_norm_clip(grads, 1.0)
      ([Array([0.6, 0.8], dtype=float32)], Array(1, dtype=int32))

    References:
      Abadi et al., 2016, "Deep Learning with Differential Privacy".
    """
    _check_batched("per_example_global_norm_clip", grads)
    norms = jax.vmap(lambda g: jnp.sqrt(sum(jnp.sum(abs_sq(x)) for x in jax.tree.leaves(g))))(grads)
    multipliers = jnp.nan_to_num(jnp.minimum(l2_norm_clip / norms, 1.0), nan=1.0)
    num_clipped = jnp.sum(multipliers < 1.0)
    clipped_sum = jax.tree.map(lambda g: jnp.tensordot(multipliers, g, axes=1), grads)
    return clipped_sum, num_clipped


def per_example_layer_norm_clip(grads, global_l2_norm_clip: ArrayLike, uniform: bool = True) -> tuple:
    r"""Clips each example's gradient layer by layer (each leaf is a layer), then sums over the examples.

    With :math:`K` layers, layer :math:`k` is clipped to :math:`C/\sqrt K` (``uniform``) or to
    :math:`C \sqrt{D_k / D}` where :math:`D_k` is its number of parameters and :math:`D` the total.

    Args:
      grads: a pytree of arrays, each with the examples along axis 0.
      global_l2_norm_clip: :math:`C \ge 0`.
      uniform: split the clip norm evenly between layers (True) or by layer size (False).

    Returns:
      ``(clipped_sums, num_clipped)``: two trees of the structure of ``grads``: each layer's sum of clipped
      per-example gradients, and each layer's number of clipped examples.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> grads = [jnp.array([[0.0, 0.0], [3.0, 4.0]])]
      >>> gradax.per_example_layer_norm_clip(grads, 1.0)
      ([Array([0.6, 0.8], dtype=float32)], [Array(1, dtype=int32)])

    References:
      McMahan et al., 2018, "Learning Differentially Private Recurrent Language Models".
    """
    leaves = _check_batched("per_example_layer_norm_clip", grads)
    treedef = jax.tree.structure(grads)
    if uniform:
        clips = [global_l2_norm_clip * (1.0 / len(leaves)) ** 0.5 for _ in leaves]
    else:
        total = sum(g[0].size for g in leaves)
        clips = [global_l2_norm_clip * (g[0].size / total) ** 0.5 for g in leaves]
    results = [per_example_global_norm_clip(g, c) for g, c in zip(leaves, clips)]
    return treedef.unflatten([r[0] for r in results]), treedef.unflatten([r[1] for r in results])
