"""Second-order quantities of a loss ``loss(params, inputs, targets)``: Hessian-vector products, the Hessian's
diagonal, and the diagonal of the empirical Fisher information."""

from __future__ import annotations

from typing import Any, Protocol

import jax
import jax.numpy as jnp
from jax import flatten_util


class LossFn(Protocol):
    """A loss ``loss(params, inputs, targets) -> scalar``."""

    def __call__(self, params: Any, inputs: jax.Array, targets: jax.Array) -> jax.Array: ...


def _flat(tree: Any) -> jax.Array:
    return flatten_util.ravel_pytree(tree)[0]


def hvp(loss: LossFn, v: jax.Array, params: Any, inputs: jax.Array, targets: jax.Array) -> Any:
    r"""The Hessian-vector product :math:`\nabla^2_\theta \ell(\theta; x, y)\, v`, by forward-over-reverse AD.

    Args:
      loss: ``loss(params, inputs, targets) -> scalar``.
      v: a flat vector with as many entries as ``params`` has (in ``jax.flatten_util.ravel_pytree`` order).
      params: the parameters (a pytree).
      inputs: the inputs :math:`x`.
      targets: the targets :math:`y`.

    Returns:
      The product, a pytree shaped like ``params``.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> loss = lambda w, x, y: jnp.sum((x @ w - y) ** 2)
      >>> x, y = jnp.eye(2), jnp.zeros(2)
      >>> gradax.second_order.hvp(loss, jnp.array([1.0, 0.0]), jnp.ones(2), x, y)
      Array([2., 0.], dtype=float32)

    References:
      Pearlmutter, 1994, "Fast Exact Multiplication by the Hessian".
    """
    flat, unravel = flatten_util.ravel_pytree(params)
    v = jnp.asarray(v)
    if v.shape != flat.shape:
        raise ValueError(
            f"hvp(v=...) must be a flat vector of shape {flat.shape} (the number of parameters); got shape "
            f"{v.shape}. Flatten it with jax.flatten_util.ravel_pytree."
        )
    grad_fn = jax.grad(lambda p: loss(p, inputs, targets))
    return jax.jvp(grad_fn, (params,), (unravel(v),))[1]


def hessian_diag(loss: LossFn, params: Any, inputs: jax.Array, targets: jax.Array) -> jax.Array:
    r"""The diagonal of the Hessian :math:`\operatorname{diag} \nabla^2_\theta \ell(\theta; x, y)`, as a flat vector.

    Computed exactly with one Hessian-vector product per parameter (vectorized): use it on small models.

    Args:
      loss: ``loss(params, inputs, targets) -> scalar``.
      params: the parameters (a pytree).
      inputs: the inputs.
      targets: the targets.

    Returns:
      A flat vector (``jax.flatten_util.ravel_pytree`` order) of the Hessian's diagonal.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> loss = lambda w, x, y: jnp.sum((x * w - y) ** 2)
      >>> gradax.second_order.hessian_diag(loss, jnp.ones(2), jnp.array([1.0, 3.0]), jnp.zeros(2))
      Array([ 2., 18.], dtype=float32)
    """
    n = _flat(params).size

    def diagonal_entry(e):
        return jnp.vdot(e, _flat(hvp(loss, e, params, inputs, targets)))

    return jax.vmap(diagonal_entry)(jnp.eye(n))


def fisher_diag(negative_log_likelihood: LossFn, params: Any, inputs: jax.Array, targets: jax.Array) -> jax.Array:
    r"""The diagonal of the empirical Fisher information, :math:`(\nabla_\theta\, \mathrm{nll}(\theta; x, y))^2`,
    as a flat vector.

    Args:
      negative_log_likelihood: ``nll(params, inputs, targets) -> scalar``.
      params: the parameters (a pytree).
      inputs: the inputs.
      targets: the targets.

    Returns:
      A flat vector (``jax.flatten_util.ravel_pytree`` order) of squared gradient entries.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> nll = lambda w, x, y: jnp.sum(x * w)
      >>> gradax.second_order.fisher_diag(nll, jnp.ones(2), jnp.array([1.0, -3.0]), None)
      Array([1., 9.], dtype=float32)

    References:
      Martens, 2020, "New insights and perspectives on the natural gradient method".
    """
    return jnp.square(_flat(jax.grad(negative_log_likelihood)(params, inputs, targets)))
