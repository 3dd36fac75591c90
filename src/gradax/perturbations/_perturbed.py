"""Smoothing a (possibly non-differentiable) function by random perturbations of its input."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from .._checks import check_int, check_positive


class Normal:
    """The standard normal distribution, as a perturbation noise (``sample`` and an unnormalized ``log_prob``).

    Example:
      >>> import gradax, jax
      >>> gradax.perturbations.Normal().sample(jax.random.key(0), (2,)).shape
      (2,)
    """

    def sample(self, key: ArrayLike, sample_shape: Sequence[int] = (), dtype: Any = float) -> jax.Array:
        """Standard normal samples of shape ``sample_shape``."""
        return jax.random.normal(key, sample_shape, dtype)

    def log_prob(self, inputs: ArrayLike) -> jax.Array:
        r"""Elementwise :math:`-z^2 / 2` (the log-density up to a constant)."""
        inputs = jnp.asarray(inputs)
        return -0.5 * inputs * inputs


class Gumbel:
    """The standard Gumbel distribution, as a perturbation noise (``sample`` and ``log_prob``).

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> print(gradax.perturbations.Gumbel().log_prob(jnp.array(0.0)))
      -1.0
    """

    def sample(self, key: ArrayLike, sample_shape: Sequence[int] = (), dtype: Any = float) -> jax.Array:
        """Standard Gumbel samples of shape ``sample_shape``."""
        return jax.random.gumbel(key, sample_shape, dtype)

    def log_prob(self, inputs: ArrayLike) -> jax.Array:
        r"""Elementwise :math:`-z - e^{-z}` (the log-density)."""
        inputs = jnp.asarray(inputs)
        return -inputs - jnp.exp(-inputs)


def _noise_like(key: jax.Array, tree: Any, sampler: Callable[..., jax.Array]) -> Any:
    """One noise draw per leaf of ``tree``, from one sub-key per leaf (``jax.random.split(key, num_leaves)``)."""
    leaves, treedef = jax.tree.flatten(tree)
    keys = jax.random.split(key, len(leaves)) if leaves else []
    return treedef.unflatten([sampler(k, np.shape(x), jnp.result_type(x)) for k, x in zip(keys, leaves)])


def _values_only(fun: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``fun`` with zero derivatives, at every order, that never differentiates ``fun`` itself (its own JVP rule, if
    it has one, is not called): the perturbed estimate needs only its values."""

    @jax.custom_jvp
    def values(x):
        return fun(x)

    @values.defjvp
    def values_jvp(primals, tangents):
        del tangents
        out = values(*primals)  # through ``values`` again, so that higher orders stay zero too
        return out, jax.tree.map(_zero_tangent, out)

    return values


def _zero_tangent(x: Any) -> Any:
    x = jnp.asarray(x)
    if jnp.issubdtype(x.dtype, jnp.inexact):
        return jnp.zeros(x.shape, x.dtype)
    return np.zeros(x.shape, jax.dtypes.float0)


def make_perturbed_fun(
    fun: Callable[[Any], Any],
    num_samples: int = 1000,
    sigma: ArrayLike = 0.1,
    noise: Any = Gumbel(),  # noqa: B008 - a stateless default, as in Optax
    use_baseline: bool = True,
) -> Callable[[jax.Array, Any], Any]:
    r"""A differentiable Monte-Carlo approximation of :math:`f_\sigma(x) = \mathbb{E}_z f(x + \sigma z)`.

    With samples :math:`z_k` of ``noise`` and :math:`y_k = x + \sigma z_k`, the value is
    :math:`\frac1K \sum_k f(y_k)`; derivatives (of any order) are score-function (REINFORCE) estimates, obtained by
    weighting each :math:`f(y_k) - b` by the "magic box" :math:`\exp(\ell_k - \bot(\ell_k))` (equal to 1, with
    the derivatives of :math:`\ell_k = \log p((y_k - x)/\sigma)` in :math:`x`; :math:`\bot` stops gradients):

    .. math::
        \nabla f_\sigma(x) \approx \frac{1}{K\sigma} \sum_k \big(f(y_k) - b\big)\,
        \big(-\nabla \log p\big)(z_k)

    Only values of ``fun`` are used, so ``fun`` need not be differentiable. The baseline :math:`b = f(x)`
    (``use_baseline``) reduces the variance and leaves the value unchanged.

    Args:
      fun: a function from a pytree of arrays to a pytree of arrays.
      num_samples: the number of perturbations ``K >= 1``.
      sigma: the perturbation scale ``> 0``.
      noise: an object with ``sample(key, sample_shape, dtype)`` and ``log_prob(z)`` (:class:`Gumbel`, the default,
        or :class:`Normal`).
      use_baseline: subtract :math:`f(x)` inside the estimator.

    Returns:
      ``perturbed(key, x)``: the estimate, with the structure of ``fun(x)``. Sample ``k`` uses
      ``jax.random.split(key, num_samples)[k]``, split once more per leaf of ``x`` (the same draws as Optax).

    Example:
      >>> import gradax, jax, jax.numpy as jnp
      >>> f = gradax.perturbations.make_perturbed_fun(lambda x: jnp.sum(jnp.maximum(x, 0.0)), 2000, 0.5)
      >>> g = jax.grad(f, argnums=1)(jax.random.key(0), jnp.zeros(2))
      >>> bool(jnp.all((g > 0.3) & (g < 0.9)))
      True

    References:
      Berthet et al., `Learning with Differentiable Perturbed Optimizers <https://arxiv.org/abs/2002.08676>`_, 2020;
      Foerster et al., `DiCE <https://arxiv.org/abs/1802.05098>`_, 2018.
    """
    check_int("make_perturbed_fun", "num_samples", num_samples, low=1)
    check_positive("make_perturbed_fun", "sigma", sigma)
    fun = _values_only(fun)

    def one_sample(key, x, baseline):
        z = _noise_like(key, x, noise.sample)
        shifted = jax.lax.stop_gradient(jax.tree.map(lambda xi, zi: xi + sigma * zi, x, z))
        z = jax.tree.map(lambda xi, yi: (yi - xi) / sigma, x, shifted)
        log_prob = sum(jnp.sum(lp) for lp in jax.tree.leaves(jax.tree.map(noise.log_prob, z)))
        box = jnp.exp(log_prob - jax.lax.stop_gradient(log_prob))
        out = fun(shifted)
        if baseline is not None:
            out = jax.tree.map(lambda o, b: o - b, out, baseline)
        return jax.tree.map(lambda o: box * o, out)

    def perturbed(key: jax.Array, x: Any) -> Any:
        baseline = jax.lax.stop_gradient(fun(x)) if use_baseline else None
        keys = jax.random.split(key, num_samples)
        outs = jax.vmap(one_sample, in_axes=(0, None, None))(keys, x, baseline)
        mean = jax.tree.map(lambda o: jnp.mean(o, axis=0), outs)
        if baseline is not None:
            mean = jax.tree.map(lambda m, b: m + b, mean, baseline)
        return mean

    return perturbed
