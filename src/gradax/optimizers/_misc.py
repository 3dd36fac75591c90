"""Small per-array building blocks: scale_gradient, normalize_by_update_norm, centralize, parameter-block scaling."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from .._base import GradientTransformation, init_empty_state
from .._checks import check_needs, check_non_negative
from .._hyperparams import as_value, is_concrete
from .._numerics import abs_sq, compute_dtype, safe_norm, safe_root_mean_squares


@jax.custom_vjp
def _scaled_identity(inputs, scale):
    del scale
    return inputs


def _scaled_identity_fwd(inputs, scale):
    return inputs, scale


def _scaled_identity_bwd(scale, cotangents):
    scaled = jax.tree.map(lambda c: (c * scale).astype(c.dtype), cotangents)
    return scaled, jnp.zeros_like(scale)


_scaled_identity.defvjp(_scaled_identity_fwd, _scaled_identity_bwd)


def scale_gradient(inputs, scale: ArrayLike):
    r"""The identity in the forward pass; multiplies the gradient flowing back through ``inputs`` by ``scale``.

    .. math::
      f(x) = x, \qquad \frac{\partial L}{\partial x} \leftarrow s\, \frac{\partial L}{\partial f(x)}.

    ``scale=1`` returns ``inputs`` unchanged and ``scale=0`` stops the gradient.

    Args:
      inputs: a pytree of arrays.
      scale: :math:`s`, a number or scalar array.

    Returns:
      ``inputs``, with the gradient scaled.

    Example:
      >>> import gradax, jax, jax.numpy as jnp
      >>> jax.grad(lambda x: gradax.scale_gradient(x, 0.5) ** 2)(3.0)
      Array(3., dtype=float32)
    """
    if is_concrete(scale) and np.ndim(scale) == 0:
        if float(np.asarray(scale)) == 1.0:
            return inputs
        if float(np.asarray(scale)) == 0.0:
            return jax.lax.stop_gradient(inputs)
    return _scaled_identity(inputs, jnp.asarray(scale))


def normalize_by_update_norm(scale_factor: ArrayLike = 1.0, eps: ArrayLike = 1e-6) -> GradientTransformation:
    r"""Divides the updates by their global L2 norm: :math:`u \leftarrow s\, u / (\|u\|_2 + \epsilon)`.

    Args:
      scale_factor: :math:`s`, the norm of the result (up to :math:`\epsilon`).
      eps: :math:`\epsilon \ge 0`, avoids dividing by zero.

    Returns:
      A :class:`GradientTransformation` with an empty state.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> tx = gradax.normalize_by_update_norm(eps=0.0)
      >>> tx.update(jnp.array([3.0, 4.0]), tx.init(None))[0]
      Array([0.6, 0.8], dtype=float32)
    """
    check_non_negative("normalize_by_update_norm", "eps", eps)

    def update(updates, state, params=None):
        del params
        leaves = jax.tree.leaves(updates)
        if not leaves:
            return updates, state
        total = sum(jnp.sum(abs_sq(x.astype(compute_dtype(x.dtype)))) for x in leaves)
        g_norm = (jnp.sqrt(total) + as_value(eps)) / as_value(scale_factor)
        return jax.tree.map(lambda g: (g / g_norm).astype(g.dtype), updates), state

    return GradientTransformation(init_empty_state, update)


def centralize() -> GradientTransformation:
    r"""Gradient centralization: subtracts from each array of rank > 1 its mean over all axes but the first.

    .. math::
      u_{i,\dots} \leftarrow u_{i,\dots} - \mathrm{mean}_{\dots}(u_{i,\dots}); \quad \text{vectors and scalars are
      unchanged.}

    Returns:
      A :class:`GradientTransformation` with an empty state.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> tx = gradax.centralize()
      >>> tx.update(jnp.array([[1.0, 3.0], [0.0, 2.0]]), tx.init(None))[0]
      Array([[-1.,  1.],
             [-1.,  1.]], dtype=float32)

    References:
      Yong et al., 2020, "Gradient Centralization: A New Optimization Technique for Deep Neural Networks".
    """

    def leaf(g):
        if np.ndim(g) < 2:
            return g
        return g - g.mean(axis=tuple(range(1, g.ndim)), keepdims=True)

    def update(updates, state, params=None):
        del params
        return jax.tree.map(leaf, updates), state

    return GradientTransformation(init_empty_state, update)


def _scale_by_param_block(api, min_scale, block_factor):
    """Multiplies each array of updates by ``block_factor(param, min_scale)``, a scalar of its parameter array (checks
    ``min_scale >= 0``; ``update`` needs ``params``)."""
    check_non_negative(api, "min_scale", min_scale)

    def update(updates, state, params=None):
        check_needs(api, "params", params)
        m = as_value(min_scale)
        return jax.tree.map(lambda u, p: (u * block_factor(p, m)).astype(u.dtype), updates, params), state

    return GradientTransformation(init_empty_state, update)


def scale_by_param_block_norm(min_scale: ArrayLike = 1e-3) -> GradientTransformation:
    r"""Multiplies each array of updates by the L2 norm of its parameters: :math:`u \leftarrow u \max(\|\theta\|,
    m)`.

    Args:
      min_scale: :math:`m \ge 0`, the smallest factor.

    Returns:
      A :class:`GradientTransformation` with an empty state; ``update`` needs ``params``.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> tx = gradax.scale_by_param_block_norm()
      >>> tx.update(jnp.ones(2), tx.init(None), jnp.array([3.0, 4.0]))[0]
      Array([5., 5.], dtype=float32)
    """
    return _scale_by_param_block("scale_by_param_block_norm", min_scale, safe_norm)


def scale_by_param_block_rms(min_scale: ArrayLike = 1e-3) -> GradientTransformation:
    r"""Multiplies each array of updates by the RMS of its parameters: :math:`u \leftarrow u \max(\mathrm{RMS}(\theta),
    m)` (Adafactor's relative step size).

    Args:
      min_scale: :math:`m \ge 0`, the smallest factor.

    Returns:
      A :class:`GradientTransformation` with an empty state; ``update`` needs ``params``.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> tx = gradax.scale_by_param_block_rms()
      >>> tx.update(jnp.ones(2), tx.init(None), jnp.array([3.0, -3.0]))[0]
      Array([3., 3.], dtype=float32)

    References:
      Shazeer and Stern, 2018, "Adafactor: Adaptive Learning Rates with Sublinear Memory Cost".
    """
    return _scale_by_param_block("scale_by_param_block_rms", min_scale, safe_root_mean_squares)
