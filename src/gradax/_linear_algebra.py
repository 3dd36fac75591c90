"""Linear algebra helpers: power iteration, inverse p-th roots, non-negative least squares, a diagonal Gaussian."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
from jax.typing import ArrayLike

from . import _kernels
from ._checks import argument_error, check_int
from ._numerics import abs_sq


def _tree_norm(x) -> jax.Array:
    parts = [jnp.sum(abs_sq(leaf)) for leaf in jax.tree.leaves(x)]
    return jnp.sqrt(sum(parts[1:], parts[0]))


def _normalize(x):
    inv = 1.0 / _tree_norm(x)
    return jax.tree.map(lambda a: (inv * a).astype(a.dtype), x)


def _tree_vdot(x, y) -> jax.Array:
    def leaf(a, b):
        if jnp.iscomplexobj(a):
            a = jnp.conj(a)
        return jnp.tensordot(a, b, a.ndim, precision=lax.Precision.HIGHEST)

    parts = jax.tree.leaves(jax.tree.map(leaf, x, y))
    return sum(parts[1:], parts[0])


def power_iteration(
    matrix: ArrayLike | Callable[[Any], Any],
    *,
    v0: Any | None = None,
    num_iters: ArrayLike = 100,
    error_tolerance: ArrayLike = 1e-6,
    precision: lax.Precision = lax.Precision.HIGHEST,
    key: jax.Array | None = None,
) -> tuple[jax.Array, Any]:
    r"""The dominant eigenvalue of a diagonalizable matrix and its eigenvector, by power iteration.

    .. math::
      v_{k+1} = \frac{A v_k}{\|A v_k\|}, \qquad \lambda_k = \langle v_k, A v_k\rangle,

    stopped when :math:`\|A v_k - \lambda_k v_k\| < \text{tol}\, |\lambda_k|` or after ``num_iters`` products.

    Args:
      matrix: a square array, or a function computing the product with a vector (a pytree).
      v0: the starting vector (a pytree shaped like the function's input when ``matrix`` is a function, where it
        is required); by default uniform in :math:`[-1, 1]^n` drawn with ``key``.
      num_iters: the largest number of iterations.
      error_tolerance: the relative residual that ends the iteration.
      precision: the matmul precision for an array ``matrix``.
      key: the PRNG key for the default ``v0`` (``jax.random.PRNGKey(0)`` when None).

    Returns:
      ``(eigenvalue, eigenvector)``, the eigenvector of unit norm.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> value, vector = gradax.power_iteration(jnp.diag(jnp.array([1.0, 3.0, 2.0])))
      >>> round(float(value), 4)
      3.0

    References:
      Golub and Van Loan, 2013, "Matrix Computations", section 7.3.1 (the power method).
    """
    if callable(matrix):
        product = matrix
        if v0 is None:
            raise ValueError(
                "power_iteration(v0=...) must be given when matrix is a function; got None. "
                "Pass a starting vector shaped like the function's input."
            )
    else:
        matrix = jnp.asarray(matrix)
        if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1]:
            raise argument_error("power_iteration", "matrix", "a square 2-D array or a function", matrix.shape)

        def product(v):
            return jnp.matmul(matrix, v, precision=precision)

        if v0 is None:
            v0 = _default_start(matrix.shape[-1], matrix.dtype, key)
    v0 = _normalize(v0)

    def keep_going(carry):
        vec, prod, eig, i = carry
        residual = _tree_norm(jax.tree.map(lambda p, v: p - eig * v, prod, vec))
        return ~(jnp.abs(residual / eig) < error_tolerance) & (i < num_iters)

    def step(carry):
        _, prod, _, i = carry
        vec = _normalize(prod)
        prod = product(vec)
        return vec, prod, _tree_vdot(vec, prod), i + 1

    start = (v0, product(v0), jnp.asarray(0.0), jnp.asarray(0))
    _, prod, eig, _ = lax.while_loop(keep_going, step, start)
    return eig, _normalize(prod)


def matrix_inverse_pth_root(
    matrix: ArrayLike,
    p: ArrayLike,
    num_iters: ArrayLike = 100,
    ridge_epsilon: ArrayLike = 1e-06,
    error_tolerance: ArrayLike = 1e-06,
    precision: lax.Precision = lax.Precision.HIGHEST,
):
    r"""The inverse p-th root :math:`(A + \epsilon I)^{-1/p}` of a symmetric PSD matrix, by coupled Newton iterations.

    With :math:`\alpha = -1/p`, :math:`z = (1 + p) / (2 \|A_\epsilon\|_F)`, :math:`M_0 = z A_\epsilon`,
    :math:`H_0 = z^{1/p} I`:

    .. math::
      T_k = (1 - \alpha) I + \alpha M_k, \qquad M_{k+1} = T_k^p M_k, \qquad H_{k+1} = H_k T_k,

    until :math:`\max |M_k - I| \le` ``error_tolerance``, the error stops decreasing, or ``num_iters`` steps. The
    ridge :math:`\epsilon` is ``ridge_epsilon`` times the largest eigenvalue (by :func:`power_iteration`).

    Args:
      matrix: a symmetric positive semi-definite ``(n, n)`` matrix.
      p: the root, a positive power of two up to 8 for ``n > 1`` (1, 2, 4, 8).
      num_iters: the largest number of iterations.
      ridge_epsilon: the relative ridge added to make the matrix positive definite.
      error_tolerance: the error that ends the iteration.
      precision: the matmul precision.

    Returns:
      ``(root, error)``: :math:`(A + \epsilon I)^{-1/p}` in ``matrix``'s dtype and :math:`\max|M - I|`.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> root, error = gradax.matrix_inverse_pth_root(jnp.diag(jnp.array([4.0, 16.0])), 2, ridge_epsilon=0.0)
      >>> jnp.round(jnp.diag(root), 4)
      Array([0.5 , 0.25], dtype=float32)

    References:
      Higham, 2008, "Functions of Matrices: Theory and Computation", eq. 7.18;
      Gupta et al., 2018, "Shampoo: Preconditioned Stochastic Tensor Optimization".
    """
    matrix = jnp.asarray(matrix)
    if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1]:
        raise argument_error("matrix_inverse_pth_root", "matrix", "a square 2-D array", matrix.shape)
    n = matrix.shape[0]
    if isinstance(p, (int, float)) and n > 1 and p not in (1, 2, 4, 8):
        raise argument_error("matrix_inverse_pth_root", "p", "one of 1, 2, 4, 8", p)
    if n == 1:
        max_ev, _ = power_iteration(matrix, num_iters=100, error_tolerance=1e-6, precision=precision)
        return (matrix + ridge_epsilon * jnp.maximum(max_ev, 1e-16)) ** jnp.asarray(-1.0 / p, jnp.float32), 0
    if _kernel_root_applies(matrix):
        return _kernel_inverse_pth_root(matrix, p, num_iters, ridge_epsilon, error_tolerance, precision)
    return _newton_inverse_root(matrix, p, num_iters, ridge_epsilon, error_tolerance, precision)


# the largest side the kernel takes (its work space is 9 float32 copies of the matrix per thread)
_KERNEL_MAX_SIDE = 1024


def _kernel_root_applies(matrix: jax.Array) -> bool:
    """Whether :func:`matrix_inverse_pth_root` runs in the CPU kernel: a float32 matrix of side at most 1,024, on a
    CPU with AVX-512, with the kernels built, outside a GSPMD-partitioned ``jit``
    (:func:`gradax._kernels.kernel_applies`)."""
    return (
        matrix.dtype == jnp.float32
        and matrix.shape[-1] <= _KERNEL_MAX_SIDE
        and _kernels.kernel_applies()
        and _kernels.avx512_available()
    )


def _default_start(n: int, dtype: Any, key: jax.Array | None = None) -> jax.Array:
    """:func:`power_iteration`'s default start vector before it is normalized: uniform in [-1, 1]^n."""
    key = jax.random.PRNGKey(0) if key is None else key
    return jax.random.uniform(key, (n,), dtype, minval=-1.0, maxval=1.0)


def _start_vector(n: int, dtype: Any) -> jax.Array:
    """:func:`power_iteration`'s default start vector, normalized (the inverse-root kernel's)."""
    return _normalize(_default_start(n, dtype))


def _kernel_inverse_pth_root(matrix, p, num_iters, ridge_epsilon, error_tolerance, precision):
    """:func:`matrix_inverse_pth_root` by the CPU kernel (``_kernels/fused_inverse_root.c``: the same steps, each
    matrix in the cache, half of each product's blocks by symmetry), batched by the kernel under ``vmap`` and
    differentiated as the XLA iteration."""

    @jax.custom_jvp
    def roots(matrix, params):
        return _kernels.inverse_pth_root(matrix, _start_vector(matrix.shape[-1], jnp.float32), params, True)

    @roots.defjvp
    def _jvp(primals, tangents):
        reference = lambda m, q: _newton_inverse_root(m, q[2], q[3], q[0], q[1], precision)
        return jax.jvp(reference, primals, tangents)

    params = jnp.stack([jnp.asarray(x, jnp.float32) for x in (ridge_epsilon, error_tolerance, p, num_iters)])
    return roots(matrix, params)


def _newton_inverse_root(matrix, p, num_iters, ridge_epsilon, error_tolerance, precision):
    """:func:`matrix_inverse_pth_root`'s iteration in XLA (a matrix of side > 1)."""
    n = matrix.shape[0]
    alpha = jnp.asarray(-1.0 / p, jnp.float32)
    eye = jnp.eye(n, dtype=jnp.float32)
    max_ev, _ = power_iteration(matrix, num_iters=100, error_tolerance=1e-6, precision=precision)
    ridge = ridge_epsilon * jnp.maximum(max_ev, 1e-16)

    def power(m):
        """``m ** p`` for p in (1, 2, 4, 8), by repeated squaring."""
        squarings = [lambda x: x]
        for _ in range(3):
            squarings.append(lambda x, f=squarings[-1]: jnp.matmul(f(x), f(x), precision=precision))
        return lax.switch(jnp.asarray(jnp.round(jnp.log2(p)), jnp.int32), squarings, m)

    def keep_going(carry):
        i, _, _, _, error, improving = carry
        return (i < num_iters) & (error > error_tolerance) & improving

    def step(carry):
        i, m, h, _, error, _ = carry
        t = (1 - alpha) * eye + alpha * m
        new_m = jnp.matmul(power(t), m, precision=precision)
        new_h = jnp.matmul(h, t, precision=precision)
        new_error = jnp.max(jnp.abs(new_m - eye))
        return i + 1, new_m, new_h, h, new_error, new_error < error * 1.2

    damped = matrix + ridge * eye
    z = (1 + p) / (2 * jnp.linalg.norm(damped))
    m0 = damped * z
    h0 = eye * jnp.power(z, 1.0 / p)
    start = (0, m0, h0, h0, jnp.max(jnp.abs(m0 - eye)), True)
    _, m, h, previous_h, _, improving = lax.while_loop(keep_going, step, start)
    error = jnp.max(jnp.abs(m - eye))
    # when the last step made the error grow, return the previous iterate
    root = jnp.where(improving, h, previous_h).astype(matrix.dtype)
    return root, error


def nnls(A: jax.Array, b: jax.Array, iters: int, unroll: int | bool = 1, L: ArrayLike | None = None) -> jax.Array:
    r"""Non-negative least squares, :math:`\min_{x \ge 0} \|A x - b\|_2`, by accelerated projected gradient.

    With :math:`Q = A^\top A`, :math:`q = A^\top b` and :math:`L \ge \lambda_{\max}(Q)`:

    .. math::
      x_{k+1} = \max\bigl(0,\ y_k - (Q y_k - q)/L\bigr), \quad
      c_{k+1} = \tfrac{1 + \sqrt{1 + 4 c_k^2}}{2}, \quad
      y_{k+1} = x_{k+1} + \tfrac{c_k - 1}{c_{k+1}} (x_{k+1} - x_k).

    Args:
      A: an ``(M, N)`` matrix.
      b: an ``(M,)`` vector or an ``(M, K)`` matrix (K problems at once).
      iters: the number of iterations.
      unroll: passed to ``lax.scan``.
      L: a bound on the spectral radius of :math:`A^\top A`; by default the smaller of its Frobenius and 1-norms.

    Returns:
      The solution, ``(N,)`` or ``(N, K)``.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> x = gradax.nnls(jnp.array([[1.0, 2.0], [3.0, 4.0]]), jnp.array([5.0, 6.0]), 1000)
      >>> jnp.round(x, 2)
      Array([0. , 1.7], dtype=float32)

    References:
      Polyak, 2015, "Projected gradient method for non-negative least square";
      Beck and Teboulle, 2009, "A Fast Iterative Shrinkage-Thresholding Algorithm for Linear Inverse Problems".
    """
    A, b = jnp.asarray(A), jnp.asarray(b)
    if A.ndim != 2:
        raise argument_error("nnls", "A", "a 2-D array", A.shape)
    if b.ndim not in (1, 2) or b.shape[0] != A.shape[0]:
        raise argument_error("nnls", "b", f"an array of shape ({A.shape[0]},) or ({A.shape[0]}, K)", b.shape)
    check_int("nnls", "iters", iters, low=0)
    Q = A.mT @ A
    q = A.mT @ b
    if L is None:
        frobenius = jnp.linalg.matrix_norm(Q, ord="fro")
        L = jnp.minimum(frobenius, jnp.linalg.matrix_norm(Q, ord=1)) if Q.size else frobenius
    L = jnp.where(L == 0, 1, L)

    def step(carry, _):
        x, y, c = carry
        c_next = (1 + jnp.sqrt(1 + 4 * c**2)) / 2
        x_next = jnp.clip(y - (Q @ y - q) / L, 0)
        return (x_next, x_next + (c - 1) / c_next * (x_next - x), c_next), None

    x0 = jnp.zeros(A.shape[-1:] + b.shape[1:], b.dtype)
    (x, _, _), _ = lax.scan(step, (x0, x0, 0.0), length=iters, unroll=unroll)
    return x


class MultiNormalDiagFromLogScale:
    """A Gaussian with diagonal covariance, parameterized by its mean and the log of its standard deviations."""

    def __init__(self, loc: ArrayLike, log_scale: ArrayLike):
        self._mean = jnp.asarray(loc)
        self._log_scale = jnp.asarray(log_scale)
        self._scale = jnp.exp(self._log_scale)
        self._param_shape = lax.broadcast_shapes(self._mean.shape, self._scale.shape)

    def sample(self, shape: Sequence[int], key: jax.Array) -> jax.Array:
        """``shape + param_shape`` samples: ``mean + exp(log_scale) * N(0, 1)``."""
        noise = jax.random.normal(key, tuple(shape) + self._param_shape)
        return noise * self._scale + self._mean

    def log_prob(self, x: ArrayLike) -> jax.Array:
        """The log density at ``x``, summed over the parameter axes."""
        z = (jnp.asarray(x) - self._mean) / self._scale
        per_dim = -0.5 * z**2 - self._log_scale - 0.5 * math.log(2 * math.pi)
        return jnp.sum(per_dim, axis=tuple(-(i + 1) for i in range(len(self._param_shape))))

    @property
    def log_scale(self) -> jax.Array:
        return self._log_scale

    @property
    def params(self) -> list[jax.Array]:
        return [self._mean, self._log_scale]


def multi_normal(loc: ArrayLike, log_scale: ArrayLike) -> MultiNormalDiagFromLogScale:
    r"""A diagonal Gaussian :math:`\mathcal N(\mu, \operatorname{diag}(e^{2 s}))` with ``sample``, ``log_prob``,
    ``params`` (``[loc, log_scale]``) and ``log_scale``.

    Args:
      loc: the mean :math:`\mu`.
      log_scale: :math:`s`, the log of the standard deviations (broadcast with ``loc``).

    Returns:
      A :class:`MultiNormalDiagFromLogScale`.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> dist = gradax.multi_normal(jnp.zeros(2), jnp.zeros(2))
      >>> round(float(dist.log_prob(jnp.zeros(2))), 4)
      -1.8379
    """
    return MultiNormalDiagFromLogScale(loc=loc, log_scale=log_scale)
