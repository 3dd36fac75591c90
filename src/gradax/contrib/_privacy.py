"""Differentially private aggregation of per-example gradients (DP-SGD)."""

import warnings
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from .._base import GradientTransformation, ScalarOrSchedule, identity
from .._checks import argument_error, check_decay, check_non_negative, check_positive
from .._hyperparams import as_value
from .._numerics import compute_dtype
from ..transforms._accumulation import trace
from ..transforms._adding import key_maker
from ..transforms._combining import chain
from ..transforms._scaling import scale_by_learning_rate


class DifferentiallyPrivateAggregateState(NamedTuple):
    """State of :func:`differentially_private_aggregate`: the PRNG key of the next step's noise."""

    rng_key: jax.Array


def differentially_private_aggregate(
    l2_norm_clip: ArrayLike,
    noise_multiplier: ArrayLike,
    key: jax.Array | int | None = None,
    *,
    seed: int | None = None,
) -> GradientTransformation:
    r"""Clips each example's gradient, sums them, adds Gaussian noise and averages over the batch.

    The incoming updates hold per-example gradients :math:`g^{(i)}`, :math:`i = 1..B`, stacked on axis 0 of every
    leaf. With :math:`C` = ``l2_norm_clip`` and :math:`\sigma` = ``noise_multiplier``:

    .. math::
      \bar g^{(i)} = \frac{g^{(i)}}{\max\!\left(1, \lVert g^{(i)} \rVert_2 / C\right)}, \qquad
      u = \frac{1}{B}\left(\sum_{i=1}^{B} \bar g^{(i)} + \mathcal N(0, \sigma^2 C^2 I)\right),

    where :math:`\lVert g^{(i)} \rVert_2` is the norm of example :math:`i` over all leaves. Each leaf's noise has its
    own key: the step's key is split into a key for the next step followed by one key per leaf (in tree order). The
    returned updates have the leaves' shapes without the batch axis, so this must come first in a chain.

    Args:
      l2_norm_clip: :math:`C > 0`, the largest l2 norm a per-example gradient keeps.
      noise_multiplier: :math:`\sigma \ge 0`, the noise's standard deviation relative to :math:`C`.
      key: a PRNG key or an int seed (``jax.random.key(seed)``); 0 with a warning when omitted.
      seed: deprecated spelling of an int ``key``.

    Returns:
      A :class:`GradientTransformation` with state :class:`DifferentiallyPrivateAggregateState`.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> tx = gradax.contrib.differentially_private_aggregate(1.0, 0.0, key=0)
      >>> per_example = jnp.array([[3.0, 4.0], [0.1, 0.0]])
      >>> tx.update(per_example, tx.init(jnp.zeros(2)))[0]
      Array([0.35, 0.4 ], dtype=float32)

    References:
      Abadi et al., 2016, "Deep Learning with Differential Privacy" (ACM CCS), https://arxiv.org/abs/1607.00133.
    """
    api = "differentially_private_aggregate"
    check_positive(api, "l2_norm_clip", l2_norm_clip)
    check_non_negative(api, "noise_multiplier", noise_multiplier)
    if seed is not None:
        if key is not None:
            raise argument_error(api, "seed", "None when key is given", seed, "Pass only key=...")
        warnings.warn(f"{api}(seed=...) is deprecated; pass key=... instead.", DeprecationWarning, stacklevel=2)
        key = seed
    if key is None:
        warnings.warn(f"{api}: no key given; using key=0. Pass key=jax.random.key(...).", stacklevel=2)
        key = 0
    make_key = key_maker(api, key)

    def init(params):
        del params
        return DifferentiallyPrivateAggregateState(rng_key=make_key())

    def update(updates, state, params=None):
        del params
        leaves, treedef = jax.tree.flatten(updates)
        if not leaves:
            return updates, state
        clip = as_value(l2_norm_clip)
        std = clip * as_value(noise_multiplier)
        sizes = sorted({np.shape(g)[0] if np.ndim(g) else None for g in leaves}, key=str)
        if len(sizes) != 1 or sizes[0] is None:
            raise ValueError(
                "differentially_private_aggregate: update(updates=...) must be per-example gradients, every leaf "
                f"with the same leading batch axis; got leading sizes {sizes} (None: a scalar leaf). Pass the "
                "gradients of each example stacked along axis 0 (e.g. from jax.vmap(jax.grad(loss))), not their mean."
            )
        batch = leaves[0].shape[0]
        sq = [jnp.sum(jnp.square(g.astype(compute_dtype(g.dtype))).reshape(batch, -1), axis=1) for g in leaves]
        norms = jnp.sqrt(sum(sq))
        divisor = jnp.maximum(norms / clip, 1.0)
        keys = jax.random.split(state.rng_key, len(leaves) + 1)

        def leaf(g, k):
            gc = g.astype(compute_dtype(g.dtype))
            clipped = gc / divisor.reshape((batch,) + (1,) * (g.ndim - 1)).astype(gc.dtype)
            noise = jax.random.normal(k, g.shape[1:], gc.dtype)
            return ((jnp.sum(clipped, axis=0) + std * noise) / batch).astype(g.dtype)

        out = [leaf(g, k) for g, k in zip(leaves, keys[1:])]
        return jax.tree.unflatten(treedef, out), DifferentiallyPrivateAggregateState(rng_key=keys[0])

    return GradientTransformation(init, update)


def dpsgd(
    learning_rate: ScalarOrSchedule,
    l2_norm_clip: ArrayLike,
    noise_multiplier: ArrayLike,
    seed: int,
    momentum: ArrayLike | None = None,
    nesterov: bool = False,
) -> GradientTransformation:
    r"""DP-SGD: :func:`differentially_private_aggregate` of per-example gradients, then SGD (with momentum).

    .. math::
      u_t = \frac{1}{B}\Big(\sum_i \frac{g_t^{(i)}}{\max(1, \lVert g_t^{(i)} \rVert_2 / C)}
      + \mathcal N(0, \sigma^2 C^2 I)\Big), \quad m_t = \mu m_{t-1} + u_t, \quad \theta_t = \theta_{t-1} - \eta_t m_t

    (:math:`m_t = u_t` without momentum; Nesterov uses :math:`\mu m_t + u_t`).

    Args:
      learning_rate: :math:`\eta`, a number, an array or a schedule of the step count.
      l2_norm_clip: :math:`C > 0`, the per-example clipping norm.
      noise_multiplier: :math:`\sigma \ge 0`, noise standard deviation relative to :math:`C`.
      seed: int seed of the noise's key (``jax.random.key(seed)``), or a PRNG key.
      momentum: :math:`\mu \in [0, 1)`, or None for plain SGD.
      nesterov: use Nesterov momentum.

    Returns:
      A :class:`GradientTransformation`; its updates have the params' shapes (the batch axis is reduced).

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> opt = gradax.contrib.dpsgd(learning_rate=0.1, l2_norm_clip=1.0, noise_multiplier=0.0, seed=0)
      >>> opt.update(jnp.array([[3.0, 4.0], [0.0, 0.0]]), opt.init(jnp.zeros(2)))[0]
      Array([-0.03, -0.04], dtype=float32)

    References:
      Abadi et al., 2016, "Deep Learning with Differential Privacy" (ACM CCS), https://arxiv.org/abs/1607.00133.
    """
    if momentum is not None:
        check_decay("dpsgd", "momentum", momentum)
    return chain(
        differentially_private_aggregate(l2_norm_clip=l2_norm_clip, noise_multiplier=noise_multiplier, key=seed),
        trace(decay=momentum, nesterov=nesterov) if momentum is not None else identity(),
        scale_by_learning_rate(learning_rate),
    )
