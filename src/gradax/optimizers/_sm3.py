"""SM3: memory-efficient adaptive scaling with one accumulator per row, column, ... of each array."""

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from .._base import GradientTransformation, GradientTransformationExtraArgs, MaskOrFn, Params, ScalarOrSchedule
from .._checks import argument_error, check_decay, check_interval, check_non_negative
from .._hyperparams import as_value
from .._maps import map_n
from .._numerics import compute_dtype, leaf_dtype, state_dtype
from .._state import zeros_state_like
from ..transforms._adding import decoupled_weight_decay
from ..transforms._combining import chain
from ..transforms._scaling import scale_by_learning_rate


class ScaleBySM3State(NamedTuple):
    """State of :func:`scale_by_sm3`."""

    mu: Params  # per leaf a list of ndim vectors (the accumulator per index of each axis); [scalar] for 0-d leaves
    nu: Params  # like params: the momentum


def _axis_shape(ndim: int, axis: int, size: int) -> list[int]:
    """The shape that broadcasts a vector along ``axis`` of an ``ndim`` array: 1 everywhere except ``axis``."""
    return [1] * axis + [size] + [1] * (ndim - axis - 1)


def _reject_complex(params) -> None:
    for leaf in jax.tree.leaves(params):
        if jnp.issubdtype(leaf.dtype, jnp.complexfloating):
            raise argument_error(
                "scale_by_sm3", "params", "real", f"a leaf of dtype {leaf.dtype}", "SM3 supports real parameters only"
            )


def scale_by_sm3(b1: ArrayLike = 0.9, b2: ArrayLike = 1.0, eps: ArrayLike = 1e-8) -> GradientTransformation:
    r"""SM3's scaling: AdaGrad with the accumulator of each entry bounded by the cover of its rows, columns, ...

    For an array of rank :math:`k` keep one vector :math:`\mu^{(a)}` per axis :math:`a`. For each entry :math:`i`:

    .. math::
      \nu_t(i) = c\, g_t(i)^2 + \beta_2 \min_a \mu^{(a)}_{t-1}(i_a), \qquad
      \mu^{(a)}_t(j) = \max_{i: i_a = j} \nu_t(i),

    with :math:`c = 1` when :math:`\beta_2 = 1` (the paper's SM3-II) and :math:`c = 1 - \beta_2` otherwise; then
    :math:`u_t = g_t / \sqrt{\nu_t + \epsilon}` (0 where :math:`\nu_t = 0`) and the momentum
    :math:`m_t = \beta_1 m_{t-1} + (1 - \beta_1) u_t` is returned. Vectors and scalars keep a full accumulator.

    Args:
      b1: :math:`\beta_1 \in [0, 1)`, the momentum.
      b2: :math:`\beta_2 \in (0, 1]`, the decay of the accumulator (1: a running sum).
      eps: :math:`\epsilon \ge 0`.

    Returns:
      A :class:`GradientTransformation` with state :class:`ScaleBySM3State`; real parameters only.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> tx = gradax.scale_by_sm3(b1=0.0, eps=0.0)
      >>> tx.update(jnp.array([[3.0, -4.0]]), tx.init(jnp.zeros((1, 2))))[0]
      Array([[ 1., -1.]], dtype=float32)

    References:
      Anil et al., 2019, "Memory-Efficient Adaptive Optimization" (SM3).
    """
    check_decay("scale_by_sm3", "b1", b1)
    check_interval("scale_by_sm3", "b2", b2, 0.0, 1.0, low_closed=False)
    check_non_negative("scale_by_sm3", "eps", eps)

    def init(params):
        _reject_complex(params)

        def accumulators(p):
            dtype = state_dtype(leaf_dtype(p))
            shape = np.shape(p)
            if not shape:
                return [jnp.zeros([], dtype)]
            return [jnp.zeros((n,), dtype) for n in shape]

        mu = jax.tree.map(accumulators, params)
        nu = zeros_state_like(params)
        return ScaleBySM3State(mu=mu, nu=nu)

    def update(updates, state, params=None):
        del params
        beta1, beta2, e = as_value(b1), as_value(b2), as_value(eps)
        coeff = jnp.where(beta2 == 1.0, jnp.ones_like(beta2), 1 - beta2)  # traced b2 (inject_hyperparams) too

        def leaf(g, mus, m):
            dtype = compute_dtype(g.dtype)
            gc = g.astype(dtype)
            ndim = gc.ndim
            if ndim < 2:
                bound = mus[0].astype(dtype)
            else:
                bound = functools.reduce(
                    jnp.minimum, [v.astype(dtype).reshape(_axis_shape(ndim, a, v.shape[0])) for a, v in enumerate(mus)]
                )
            accum = coeff * gc**2 + beta2 * bound
            inv = jnp.where(accum > 0, jax.lax.rsqrt(accum + e), jnp.zeros_like(accum))
            u = gc * inv
            new_m = (1 - beta1) * u + beta1 * m.astype(dtype)
            if ndim < 2:
                new_mus = [accum.astype(mus[0].dtype)]
            elif np.size(accum) == 0:  # an empty leaf: a max over no elements is the accumulators' floor, 0
                new_mus = [jnp.zeros(np.shape(v), v.dtype) for v in mus]
            else:
                new_mus = [
                    jnp.max(accum, axis=tuple(b for b in range(ndim) if b != a)).astype(v.dtype)
                    for a, v in enumerate(mus)
                ]
            return new_m.astype(g.dtype), new_mus, new_m.astype(m.dtype)

        new_updates, mu, nu = map_n(3, leaf, updates, state.mu, state.nu)
        return new_updates, ScaleBySM3State(mu=mu, nu=nu)

    return GradientTransformation(init, update)


def sm3(
    learning_rate: ScalarOrSchedule,
    momentum: ArrayLike = 0.9,
    *,
    weight_decay: ScalarOrSchedule | None = None,
    weight_decay_mask: MaskOrFn = None,
    cautious_weight_decay: bool = False,
) -> GradientTransformationExtraArgs:
    r"""SM3: :func:`scale_by_sm3` (with :math:`\beta_1` = ``momentum``, :math:`\beta_2 = 1`) and a descent step.

    .. math::
      \theta_{t+1} = \theta_t - \eta_t\, m_t.

    Args:
      learning_rate: :math:`\eta`, a number, an array or a schedule of the step count.
      momentum: :math:`\beta_1 \in [0, 1)`.
      weight_decay: :math:`\lambda \ge 0`, decoupled weight decay added to the update before the learning rate
        (:math:`\theta \leftarrow \theta - \eta_t (u_t + \lambda_t \theta)`): a number, an array or a schedule.
        ``None`` (the default) adds nothing: the chain, its state and its numbers are Optax's.
      weight_decay_mask: which leaves to decay (a tree of booleans or a function of the params); ``None`` decays all.
      cautious_weight_decay: decay only where the update and the parameter have the same sign (Chen et al., 2025).

    Returns:
      A :class:`GradientTransformationExtraArgs`.

    Example:
      >>> import gradax, jax, jax.numpy as jnp
      >>> params = jnp.array([[1.0, -2.0], [0.5, 1.0]])
      >>> opt = gradax.sm3(learning_rate=0.5, momentum=0.5)
      >>> state = opt.init(params)
      >>> for _ in range(200):
      ...     grads = jax.grad(lambda p: jnp.sum(p**2))(params)
      ...     updates, state = opt.update(grads, state)
      ...     params = gradax.apply_updates(params, updates)
      >>> bool(jnp.all(jnp.abs(params) < 0.1))
      True

    References:
      Anil et al., 2019, "Memory-Efficient Adaptive Optimization".
    """
    return chain(
        scale_by_sm3(momentum),
        *decoupled_weight_decay(weight_decay, weight_decay_mask, cautious_weight_decay),
        scale_by_learning_rate(learning_rate),
    )
