"""Hutchinson's stochastic estimator of the Hessian's diagonal."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._base import GradientTransformationExtraArgs
from .._checks import check_needs
from ..transforms._adding import key_maker


class HutchinsonState(NamedTuple):
    """State of :func:`hutchinson_estimator_diag_hessian`: the PRNG key of the next step's probes."""

    key: jax.Array


def hutchinson_estimator_diag_hessian(random_seed: jax.Array | int | None = None) -> GradientTransformationExtraArgs:
    r"""Replaces the updates by an unbiased one-probe estimate of the diagonal of the Hessian of ``obj_fn``.

    With a Rademacher probe :math:`v` (entries :math:`\pm 1` with equal probability, one independent array per leaf)
    and the Hessian :math:`H = \nabla^2 f(\theta)` of the objective ``obj_fn`` at ``params``:

    .. math::
      \widehat{\mathrm{diag}}(H) = v \odot (H v), \qquad \mathbb E_v\!\left[v \odot (H v)\right] = \mathrm{diag}(H),

    where :math:`Hv` is a Hessian-vector product (forward-over-reverse differentiation, never forming :math:`H`).
    Each step splits its key into the next step's key and a probe key; the probe key is split into one key per leaf
    (in tree order). The incoming updates are ignored. ``update`` needs ``params`` and the keyword ``obj_fn``
    (``obj_fn(params) -> scalar``).

    Args:
      random_seed: a PRNG key or an int seed; ``0`` when None. The state keeps the key the way it came: a typed key
        (``jax.random.key``) stays typed; an int seed or a raw ``uint32[2]`` key (``jax.random.PRNGKey``) is kept as a
        raw key, as Optax keeps it, so Optax checkpoints load. The numbers are the same either way.

    Returns:
      A :class:`GradientTransformationExtraArgs` with state :class:`HutchinsonState`.

    Example:
      >>> import gradax, jax, jax.numpy as jnp
      >>> tx = gradax.contrib.hutchinson_estimator_diag_hessian(jax.random.key(0))
      >>> f = lambda x: jnp.sum(jnp.array([1.0, 3.0]) * x**2)  # diagonal Hessian: exact for any probe
      >>> x = jnp.ones(2)
      >>> tx.update(jax.grad(f)(x), tx.init(x), x, obj_fn=f)[0]
      Array([2., 6.], dtype=float32)

    References:
      Hutchinson, 1990, "A stochastic estimator of the trace of the influence matrix for Laplacian smoothing
      splines"; Bekas, Kokiopoulou and Saad, 2007, "An estimator for the diagonal of a matrix"; used by Sophia
      (Liu et al., 2023, https://arxiv.org/abs/2305.14342).
    """
    api = "hutchinson_estimator_diag_hessian"
    seed = 0 if random_seed is None else random_seed
    make_key = key_maker(api, seed, "random_seed")
    typed = isinstance(seed, jax.Array) and jnp.issubdtype(seed.dtype, jax.dtypes.prng_key)

    def init(params):
        del params
        return HutchinsonState(key=make_key() if typed else jax.random.key_data(make_key()))

    def update(updates, state, params=None, obj_fn: Any = None, **extra_args):
        del updates, extra_args
        check_needs(api, "params", params)
        check_needs(api, "obj_fn", obj_fn, "(the objective, obj_fn(params) -> scalar)")
        next_key, probe_key = jax.random.split(state.key)
        leaves, treedef = jax.tree.flatten(params)
        keys = jax.random.split(probe_key, len(leaves)) if leaves else []
        probes = jax.tree.unflatten(
            treedef, [jax.random.rademacher(k, np.shape(p), dtype=jnp.asarray(p).dtype) for k, p in zip(keys, leaves)]
        )
        hvp = jax.jvp(jax.grad(obj_fn), (params,), (probes,))[1]
        diag = jax.tree.map(lambda h, v: (h * v).astype(v.dtype), hvp, probes)
        return diag, HutchinsonState(key=next_key)

    return GradientTransformationExtraArgs(init, update)
