"""The cautious wrapper: keep only the coordinates of an optimizer's update that agree in sign with the gradient.

Performance (XLA:CPU). The rescaling needs a count per leaf before the update can be written, so a step is two
passes at least. Two things made the first version 4-5x AdamW's step: the count was a float32 sum, which XLA:CPU
neither fuses with the comparison that feeds it (the 0/1 mask was written out, then summed), and the inner update
was read by two kernels (the count and the final product), so XLA kept it in a full-size temporary buffer, freshly
allocated (page faults) at every step. Here the count is an int32 sum over rows of :data:`COUNT_ROW` elements,
which XLA fuses with its producers, and when the inner update is element-wise (AdamW, Lion, SGD...: only
element-wise operations on arrays, see :func:`elementwise`) the count is taken on a second evaluation of the
inner update, which XLA fuses into one read-only pass over the state, grads and params, while the real update is
computed after it (:func:`after`: its grads depend on the count, so the state is still updated in place) and
fused with the mask: no temporary array at all.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.extend.core import ClosedJaxpr, Jaxpr, jaxpr_as_fun

from .._base import (
    GradientTransformation,
    GradientTransformationExtraArgs,
    check_transformation,
    with_extra_args_support,
)
from .._numerics import compute_dtype

# elements per row of the count's first, fused stage (an int32 sum over the rows' minor dimension)
COUNT_ROW = 32

# primitives applied element by element (or moving no data): an update made of these is cheap to evaluate twice
ELEMENTWISE = frozenset(
    """abs acos acosh add and asin asinh atan atan2 atanh broadcast_in_dim cbrt ceil clamp complex conj
    convert_element_type copy copy_p cos cosh digamma div eq erf erf_inv erfc exp exp2 expand_dims expm1 floor ge gt
    imag integer_pow is_finite le lgamma log log1p logistic lt max min mul ne neg nextafter not or pow real
    reduce_precision rem reshape round rsqrt select_n sign sin sinh sqrt square squeeze sub tan tanh xor""".split()
)
# primitives that only call a sub-jaxpr once (looked into)
CALLS = frozenset("pjit jit closed_call core_call custom_jvp_call custom_vjp_call custom_vjp_call_jaxpr remat".split())


def _sub_jaxprs(params: dict) -> list[Jaxpr | ClosedJaxpr]:
    """The jaxprs an equation's parameters hold (jax.extend.core.jaxprs_in_params, which JAX 0.5.3 lacks)."""
    return [
        sub
        for value in params.values()
        for sub in (value if isinstance(value, (tuple, list)) else (value,))
        if isinstance(sub, (Jaxpr, ClosedJaxpr))
    ]


def elementwise(jaxpr: Jaxpr | ClosedJaxpr) -> bool:
    """Whether every operation of ``jaxpr`` on arrays (anything but scalars) is element-wise: evaluating it a second
    time then costs one more fused pass over its inputs, never a second reduction, product or loop."""
    jaxpr = jaxpr.jaxpr if isinstance(jaxpr, ClosedJaxpr) else jaxpr
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        if name in CALLS:
            if not all(elementwise(sub) for sub in _sub_jaxprs(eqn.params)):
                return False
            continue
        avals = [getattr(v, "aval", None) for v in (*eqn.invars, *eqn.outvars)]
        if all(getattr(a, "shape", None) == () for a in avals):
            continue  # scalar work: counters, schedules, bias corrections
        if name not in ELEMENTWISE:
            return False
    return True


def count_true(mask: jax.Array) -> jax.Array:
    """The number of True elements of a boolean array, as int32: exact, and fused by XLA:CPU with the operations
    that compute ``mask`` (an int32 sum over rows of :data:`COUNT_ROW` elements, then over the row sums; a float32
    sum or a sum over the whole array is not fused there)."""
    flat = jnp.reshape(mask, (-1,))
    bulk = flat.size - flat.size % COUNT_ROW
    total = jnp.zeros([], jnp.int32)
    if bulk:
        rows = jnp.sum(jnp.reshape(flat[:bulk], (-1, COUNT_ROW)), axis=1, dtype=jnp.int32)
        # kept apart, or XLA merges the two sums into one that it does not fuse
        total = jnp.sum(jax.lax.optimization_barrier(rows), dtype=jnp.int32)
    if flat.size - bulk:
        total = total + jnp.sum(flat[bulk:], dtype=jnp.int32)
    return total


def agrees(u: jax.Array, g: jax.Array, sign: float) -> jax.Array:
    r"""Where ``sign * u * g > 0`` (:math:`\mathrm{Re}(u \bar g)` for complex leaves), in ``u``'s compute dtype."""
    dtype = compute_dtype(u.dtype)
    uc, gc = u.astype(dtype), g.astype(dtype)
    product = jnp.real(uc * jnp.conj(gc)) if jnp.iscomplexobj(uc) else uc * gc
    return sign * product > 0


def rescaled(u: jax.Array, g: jax.Array, sign: float, count: jax.Array) -> jax.Array:
    r"""``u`` zeroed where it disagrees with ``g`` and scaled by :math:`d / (\mathrm{count} + 1)` elsewhere."""
    dtype = compute_dtype(u.dtype)
    keep = agrees(u, g, sign)
    scale = keep.size / (count.astype(jnp.finfo(dtype).dtype) + 1)
    return (u.astype(dtype) * jnp.where(keep, scale, 0)).astype(u.dtype)


def cautious_mask_leaf(u: jax.Array, g: jax.Array, sign: float) -> jax.Array:
    r"""``u`` masked where ``sign * u * g <= 0`` and rescaled by :math:`d / (\mathrm{nnz} + 1)`, for one array.

    ``sign`` is ``-1.0`` for an update that is added to the params (it descends when :math:`u g < 0`) and ``1.0``
    for a direction that is subtracted (a ``scale_by_*`` output, or a momentum inside an optimizer).
    """
    return rescaled(u, g, sign, count_true(agrees(u, g, sign)))


def after(x: jax.Array, count: jax.Array) -> jax.Array:
    """``x`` bit for bit (``x - 0 * count``: -0 stays -0, NaN stays NaN), but computed after ``count``, which XLA
    cannot tell: what reads it is scheduled after the count, so the count's reads of the old state come first and
    the state is still updated in place."""
    return x - jnp.zeros([], x.dtype) * count.astype(x.dtype)


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
        def run(u, s, p):
            return inner.update(u, s, p, **extra_args)

        closed, out_shape = jax.make_jaxpr(run, return_shape=True)(updates, state, params)
        if not elementwise(closed):  # evaluated once; the count reads the update it keeps
            new_updates, new_state = run(updates, state, params)
            out = jax.tree.map(lambda u, g: cautious_mask_leaf(u, g, sign), new_updates, updates)
            return out, new_state
        # element-wise: the count from one evaluation (one fused read-only pass), the update from another after it
        call, out_tree = jaxpr_as_fun(closed), jax.tree.structure(out_shape)
        first, _ = out_tree.unflatten(call(*jax.tree.leaves((updates, state, params))))
        counts = jax.tree.map(lambda u, g: count_true(agrees(u, g, sign)), first, updates)
        later = jax.tree.map(after, updates, counts)
        new_updates, new_state = out_tree.unflatten(call(*jax.tree.leaves((later, state, params))))
        out = jax.tree.map(lambda u, g, c: rescaled(u, g, sign, c), new_updates, updates, counts)
        return out, new_state

    return GradientTransformationExtraArgs(inner.init, update)
