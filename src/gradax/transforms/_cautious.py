"""The cautious wrapper: keep only the coordinates of an optimizer's update that agree in sign with the gradient."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .._base import (
    GradientTransformation,
    GradientTransformationExtraArgs,
    check_transformation,
    with_extra_args_support,
)
from .._numerics import compute_dtype


def cautious_mask_leaf(u: jax.Array, g: jax.Array, sign: float) -> jax.Array:
    r"""``u`` masked where ``sign * u * g <= 0`` and rescaled by :math:`d / (\mathrm{nnz} + 1)`, for one array.

    ``sign`` is ``-1.0`` for an update that is added to the params (it descends when :math:`u g < 0`) and ``1.0``
    for a direction that is subtracted (a ``scale_by_*`` output, or a momentum inside an optimizer).
    """
    dtype = compute_dtype(u.dtype)
    uc, gc = u.astype(dtype), g.astype(dtype)
    product = jnp.real(uc * jnp.conj(gc)) if jnp.iscomplexobj(uc) else uc * gc
    keep = (sign * product > 0).astype(product.dtype)
    scale = keep.size / (jnp.sum(keep) + 1)
    return (uc * (keep * scale)).astype(u.dtype)


def cautious(inner: GradientTransformation, *, aligned_with_gradient: bool = False) -> GradientTransformationExtraArgs:
    r"""Wraps an optimizer so that it only moves coordinates where its update agrees with the gradient.

    The incoming updates are taken to be the gradient :math:`g` (put ``cautious`` first in a chain). The inner
    transformation computes its update :math:`u`; each coordinate where :math:`u` does not point downhill is zeroed,
    and the rest of the leaf is scaled up so that the mean step size stays about the same:

    .. math::
      \phi = \mathbb 1[-u \odot g > 0], \qquad u \leftarrow u \odot \phi\, \frac{d}{\lVert\phi\rVert_0 + 1},

    with :math:`d` the number of elements of the leaf (the rescaling is per leaf). For a full optimizer (whose
    update is added to the params, ``gradax.adamw(1e-3)``) "downhill" means :math:`u g < 0`. For a building block
    whose output points along the gradient and is negated later (``gradax.scale_by_adam()``), pass
    ``aligned_with_gradient=True``: then coordinates with :math:`u g > 0` are kept. The state is the inner state,
    unchanged in structure. Use it on any optimizer with momentum (AdamW, Lion, LaProp, MARS...): the paper reports
    faster pre-training at no extra cost. Complex leaves compare :math:`\mathrm{Re}(u \bar g)`.

    The mask applies to everything ``inner`` returns, weight decay included. The paper decays outside the mask;
    for that, wrap the building block and decay after it:
    ``chain(cautious(scale_by_adam(), aligned_with_gradient=True), add_decayed_weights(wd), scale_by_learning_rate(lr))``.

    Args:
      inner: the optimizer or transformation to wrap.
      aligned_with_gradient: ``True`` when ``inner``'s output points along the gradient (no descent sign yet).

    Returns:
      A :class:`GradientTransformationExtraArgs` whose state is ``inner``'s state.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> tx = gradax.cautious(gradax.sgd(1.0, momentum=0.9))
      >>> state = tx.init(jnp.zeros(2))
      >>> u, state = tx.update(jnp.array([1.0, 1.0]), state)
      >>> u, state = tx.update(jnp.array([1.0, -0.5]), state)
      >>> u
      Array([-1.9, -0. ], dtype=float32)

    References:
      Liang et al., 2024, "Cautious Optimizers: Improving Training with One Line of Code",
      https://arxiv.org/abs/2411.16085.
    """
    check_transformation("cautious", "inner", inner, "Pass a transformation such as gradax.adamw(1e-3)")
    inner = with_extra_args_support(inner)
    sign = 1.0 if aligned_with_gradient else -1.0

    def update(updates, state, params=None, **extra_args):
        new_updates, new_state = inner.update(updates, state, params, **extra_args)
        out = jax.tree.map(lambda u, g: cautious_mask_leaf(u, g, sign), new_updates, updates)
        return out, new_state

    return GradientTransformationExtraArgs(inner.init, update)
