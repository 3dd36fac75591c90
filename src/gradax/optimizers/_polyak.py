"""Parameter-free step sizes: the Polyak step (SPS) and distance-over-gradients (DoG)."""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from .._base import (
    GradientTransformation,
    GradientTransformationExtraArgs,
    OptState,
    ScalarOrSchedule,
    init_empty_state,
)
from .._checks import check_needs, check_non_negative, check_one_of, check_positive
from .._dtype_policy import optax_scalar_dtype
from .._hyperparams import as_value, hyperparam_dtype
from .._maps import map_n
from .._numerics import abs_sq, compute_dtype
from ..transforms._combining import chain
from ..transforms._scaling import scale_by_learning_rate

_TINY = float(np.finfo(np.float64).eps)  # a squared gradient norm below this gives a zero step


def _polyak_step(updates, value, f_min, max_learning_rate, eps, variant):
    """``min((value - f_min) / (||updates||^2 + eps), max_learning_rate)`` (0 when the denominator is ~0)."""
    leaves = jax.tree.leaves(updates)
    dtype = hyperparam_dtype()
    sq_norm = sum(
        (jnp.sum(abs_sq(x.astype(compute_dtype(x.dtype)))).astype(dtype) for x in leaves), jnp.zeros([], dtype)
    )
    gap = (jnp.asarray(value) - f_min).astype(dtype)
    if variant == "sps+":
        gap = jnp.maximum(gap, 0.0)
    denom = sq_norm + eps
    return jnp.where(denom <= _TINY, jnp.zeros([], dtype), jnp.minimum(gap / denom, max_learning_rate))


def scale_by_polyak(
    f_min: ArrayLike = 0.0,
    max_learning_rate: ArrayLike = 1.0,
    eps: ArrayLike = 0.0,
    variant: str = "sps",
) -> GradientTransformationExtraArgs:
    r"""Scales updates by the Polyak step size, computed from the loss value passed to ``update(..., value=...)``.

    .. math::
      u \leftarrow \min\left\{\frac{f(x) - f^\star}{\|u\|^2 + \epsilon}, \gamma_{\max}\right\} u,

    with :math:`f(x) - f^\star` replaced by its positive part for ``variant="sps+"``, and a zero step when
    :math:`\|u\|^2 + \epsilon` is (numerically) zero.

    Args:
      f_min: :math:`f^\star`, a lower bound of the objective.
      max_learning_rate: :math:`\gamma_{\max} > 0`, the largest step.
      eps: :math:`\epsilon \ge 0`, added to the squared norm.
      variant: ``"sps"`` or ``"sps+"``.

    Returns:
      A :class:`GradientTransformationExtraArgs` with an empty state; ``update`` needs ``value`` (the loss).

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> tx = gradax.scale_by_polyak()
      >>> tx.update(jnp.array([2.0]), tx.init(None), value=jnp.asarray(1.0))[0]
      Array([0.5], dtype=float32)

    References:
      Loizou et al., 2021, "Stochastic Polyak Step-size for SGD: An Adaptive Learning Rate for Fast Convergence";
      Garrigos et al., 2023, "Function value learning: Adaptive learning rates based on the Polyak stepsize and
      function splitting in ERM" (SPS+).
    """
    api = "scale_by_polyak"
    check_one_of(api, "variant", variant, ("sps", "sps+"))
    check_positive(api, "max_learning_rate", max_learning_rate)
    check_non_negative(api, "eps", eps)

    def update(updates, state, params=None, *, value=None, **extra_args):
        del params, extra_args
        check_needs(api, "value", value, "(the loss at the current params)")
        step = _polyak_step(updates, value, as_value(f_min), as_value(max_learning_rate), as_value(eps), variant)
        return jax.tree.map(lambda u: (step * u).astype(u.dtype), updates), state

    return GradientTransformationExtraArgs(init_empty_state, update)


def polyak_sgd(
    max_learning_rate: ArrayLike = 1.0,
    scaling: ScalarOrSchedule = 1.0,
    f_min: ArrayLike = 0.0,
    eps: ArrayLike = 0.0,
    variant: str = "sps",
) -> GradientTransformationExtraArgs:
    r"""SGD with the Polyak step size, times a scaling factor (a number, an array or a schedule).

    .. math::
      \theta_{t+1} = \theta_t - s_t \min\left\{\frac{f(\theta_t) - f^\star}{\|g_t\|^2 + \epsilon},
      \gamma_{\max}\right\} g_t.

    The Polyak step is computed from the raw gradient and then multiplied by :math:`s_t` (Optax 0.2.8 computes it
    from :math:`s_t g_t`, which divides the step by :math:`s_t` instead; see docs/differences.md).

    Args:
      max_learning_rate: :math:`\gamma_{\max} > 0`.
      scaling: :math:`s_t`, a number, an array or a schedule of the step count.
      f_min: :math:`f^\star`, a lower bound of the objective.
      eps: :math:`\epsilon \ge 0`.
      variant: ``"sps"`` or ``"sps+"`` (positive part of the gap).

    Returns:
      A :class:`GradientTransformationExtraArgs`; ``update`` needs ``value`` (the loss at the current params).

    Example:
      >>> import gradax, jax, jax.numpy as jnp
      >>> f = lambda x: jnp.sum(x**2)
      >>> opt = gradax.polyak_sgd()
      >>> params = jnp.array([1.0, 2.0, 3.0])
      >>> state = opt.init(params)
      >>> value, grad = jax.value_and_grad(f)(params)
      >>> updates, state = opt.update(grad, state, params, value=value)
      >>> f(gradax.apply_updates(params, updates))
      Array(3.5, dtype=float32)

    References:
      Loizou et al., 2021, "Stochastic Polyak Step-size for SGD: An Adaptive Learning Rate for Fast Convergence".
    """
    return chain(
        scale_by_polyak(f_min=f_min, max_learning_rate=max_learning_rate, eps=eps, variant=variant),
        scale_by_learning_rate(scaling),
    )


class ScaleByDistanceOverGradientsState(NamedTuple):
    """State of :func:`scale_by_distance_over_gradients`."""

    max_dist: OptState  # per leaf, shape=(): the largest distance from the initial params so far
    grad_sum_of_squares: OptState  # per leaf, shape=(1,): the running sum of squared gradients
    init_params: OptState  # like params, dtype=param_dtype: the initial params


def scale_by_distance_over_gradients(
    reps_rel: ArrayLike = 1e-6,
    eps: ArrayLike = 1e-8,
    param_dtype=jnp.float32,
    global_scale: ArrayLike = 1.0,
) -> GradientTransformation:
    r"""Layer-wise DoG: each array's step is its largest distance travelled over the root of its summed squared
    gradients.

    .. math::
      \bar r_t = \max\left(r_\epsilon, \max_{k \le t} \|\theta_k - \theta_0\|\right), \quad
      G_t = \sum_{k \le t} \|g_k\|^2, \quad u_t = c\, \frac{\bar r_t}{\sqrt{G_t + \epsilon}}\, g_t,

    with :math:`r_\epsilon` = ``reps_rel`` :math:`(1 + \|\theta_0\|)`, computed per array (layer).

    Args:
      reps_rel: relative initial distance :math:`> 0` (avoids a zero first step).
      eps: :math:`\epsilon \ge 0`, added to :math:`G_t`.
      param_dtype: dtype in which the initial params are kept.
      global_scale: :math:`c`, multiplies every step.

    Returns:
      A :class:`GradientTransformation` with state :class:`ScaleByDistanceOverGradientsState`; ``update`` needs
      ``params`` and ``init`` needs concrete params (the initial distance depends on their values).

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> tx = gradax.scale_by_distance_over_gradients(reps_rel=0.5, eps=0.0)
      >>> params = jnp.array([3.0, 4.0])
      >>> tx.update(jnp.array([0.0, 2.0]), tx.init(params), params)[0]
      Array([0., 3.], dtype=float32)

    References:
      Ivgi et al., 2023, "DoG is SGD's Best Friend: A Parameter-Free Dynamic Step Size Schedule".
    """
    api = "scale_by_distance_over_gradients"
    check_positive(api, "reps_rel", reps_rel)
    check_non_negative(api, "eps", eps)

    def norm(x):
        x = jnp.asarray(x)
        return jnp.sqrt(jnp.sum(abs_sq(x.astype(compute_dtype(x.dtype)))))

    def start_dist(value, p):
        return value.astype(optax_scalar_dtype(p, "lowest", value.dtype))

    def init(params):
        r = as_value(reps_rel)
        return ScaleByDistanceOverGradientsState(
            max_dist=jax.tree.map(lambda p: start_dist(r * (1 + norm(p)), p), params),
            grad_sum_of_squares=jax.tree.map(lambda p: jnp.zeros((1,), hyperparam_dtype()), params),
            init_params=jax.tree.map(lambda p: jnp.array(p, param_dtype, copy=True), params),  # not the params buffer
        )

    def update(updates, state, params=None):
        check_needs(api, "params", params)
        e, c = as_value(eps), as_value(global_scale)

        def leaf(g, d, sos, p, p0):
            dtype = compute_dtype(g.dtype)
            gc = g.astype(dtype)
            new_d = jnp.maximum(d, norm(p.astype(dtype) - p0.astype(dtype))).astype(d.dtype)
            new_sos = (sos + jnp.sum(abs_sq(gc))).astype(sos.dtype)
            step = c * (new_d / jnp.sqrt(new_sos + e))
            return (jnp.reshape(step, ()).astype(dtype) * gc).astype(g.dtype), new_d, new_sos

        new_updates, max_dist, sos = map_n(
            3, leaf, updates, state.max_dist, state.grad_sum_of_squares, params, state.init_params
        )
        return new_updates, ScaleByDistanceOverGradientsState(max_dist, sos, state.init_params)

    return GradientTransformation(init, update)
