"""L-BFGS: the limited-memory BFGS preconditioner and the optimizer built on it with a line search."""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._base import (
    GradientTransformation,
    GradientTransformationExtraArgs,
    Params,
    ScalarOrSchedule,
    Updates,
    check_transformation,
    identity,
)
from .._checks import check_int, check_needs
from .._numerics import abs_sq, safe_int32_increment
from .._state import zeros_like_params
from ..transforms._combining import chain
from ..transforms._linesearch import scale_by_zoom_linesearch, value_dtype
from ..transforms._scaling import scale, scale_by_learning_rate


class ScaleByLBFGSState(NamedTuple):
    """State of :func:`scale_by_lbfgs`."""

    count: jax.Array  # shape=(), int32: the number of updates so far
    params: Params  # like params: the params at the last update
    updates: Updates  # like params: the incoming updates (gradients) at the last update
    diff_params_memory: Params  # like params with a leading axis memory_size: the last parameter differences s_i
    diff_updates_memory: Params  # like params with a leading axis memory_size: the last gradient differences y_i
    weights_memory: jax.Array  # shape=(memory_size,), value dtype: rho_i = 1 / <y_i, s_i> (0 where undefined)


def _inner(x, y) -> jax.Array:
    """``Re <x, y>`` (conjugating ``x``) over two trees, each leaf product in the highest precision."""

    def leaf(a, b):
        if jnp.iscomplexobj(a):
            a = jnp.conj(a)
        return jnp.tensordot(a, b, a.ndim, precision=jax.lax.Precision.HIGHEST)

    parts = jax.tree.leaves(jax.tree.map(leaf, x, y))
    return jnp.real(sum(parts[1:], parts[0])) if parts else jnp.zeros([])


def _sq_norm(x) -> jax.Array:
    parts = [jnp.sum(abs_sq(leaf)) for leaf in jax.tree.leaves(x)]
    return sum(parts[1:], parts[0]) if parts else jnp.zeros([])


def _axpy(alpha, x, y):
    return jax.tree.map(lambda a, b: (b + alpha * a).astype(b.dtype), x, y)


def two_loop_recursion(updates, diff_params_memory, diff_updates_memory, weights_memory, gamma, oldest):
    r"""The product :math:`H u` of the L-BFGS inverse-Hessian approximation with ``updates``.

    The memory slots hold pairs :math:`(s_i, y_i, \rho_i)`; ``oldest`` is the slot of the oldest pair, the others
    follow cyclically. The first loop runs from the newest pair to the oldest, the second back (Nocedal and Wright,
    Algorithm 7.4); :math:`H_0 = \gamma I`. Empty slots have :math:`\rho_i = 0` and contribute nothing.
    """
    m = weights_memory.shape[0]
    order = (oldest + jnp.arange(m)) % m

    def newest_to_oldest(q, i):
        s_i, y_i = jax.tree.map(lambda x: x[i], (diff_params_memory, diff_updates_memory))
        alpha = weights_memory[i] * _inner(s_i, q)
        return _axpy(-alpha, y_i, q), alpha

    q, alphas = jax.lax.scan(newest_to_oldest, updates, order, reverse=True)
    r = jax.tree.map(lambda x: (gamma * x).astype(x.dtype), q)

    def oldest_to_newest(r, i_alpha):
        i, alpha = i_alpha
        s_i, y_i = jax.tree.map(lambda x: x[i], (diff_params_memory, diff_updates_memory))
        beta = weights_memory[i] * _inner(y_i, r)
        return _axpy(alpha - beta, s_i, r), beta

    r, _ = jax.lax.scan(oldest_to_newest, r, (order, alphas))
    return r


def scale_by_lbfgs(memory_size: int = 10, scale_init_precond: bool = True) -> GradientTransformation:
    r"""Preconditions the updates by the L-BFGS approximation of the inverse Hessian.

    With :math:`s_k = w_k - w_{k-1}`, :math:`y_k = g_k - g_{k-1}`, :math:`\rho_k = 1/\langle y_k, s_k\rangle` for
    the last ``memory_size`` steps, returns :math:`H_k g_k`, where :math:`H_k` is the BFGS update of
    :math:`H_k^0 = \gamma_k I` by those pairs, computed with the two-loop recursion. With ``scale_init_precond``,
    :math:`\gamma_k = \langle s_k, y_k\rangle / \|y_k\|^2` (Nocedal and Wright, eq. 7.20), and at the first step
    :math:`\gamma_0 = \min(1, 1/\|g_0\|)`; otherwise :math:`\gamma_k = 1`.

    The memory is updated from the params and updates given to ``update`` before preconditioning, so chained with a
    line search it is refreshed once per accepted step. Does not negate: follow it by a negative scaling.

    Args:
      memory_size: the number of pairs kept (int >= 1).
      scale_init_precond: scale :math:`H_k^0` as above.

    Returns:
      A :class:`GradientTransformation` with state :class:`ScaleByLBFGSState`; ``update`` needs params.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> tx = gradax.scale_by_lbfgs()
      >>> w = jnp.array([3.0, 4.0])
      >>> tx.update(jnp.array([3.0, 4.0]), tx.init(w), w)[0]
      Array([0.6, 0.8], dtype=float32)

    References:
      Nocedal and Wright, 2006, "Numerical Optimization", Algorithms 7.4 and 7.5;
      Liu and Nocedal, 1989, "On the limited memory BFGS method for large scale optimization".
    """
    check_int("scale_by_lbfgs", "memory_size", memory_size, low=1)

    def init(params):
        dt = value_dtype(params)
        # one buffer per field (a donated state must not hold one buffer twice)
        zeros = lambda: zeros_like_params(params)
        stacked = lambda: jax.tree.map(lambda p: jnp.zeros((memory_size, *np.shape(p)), p.dtype), params)
        return ScaleByLBFGSState(
            count=jnp.zeros([], jnp.int32),
            params=zeros(),
            updates=zeros(),
            diff_params_memory=stacked(),
            diff_updates_memory=stacked(),
            weights_memory=jnp.zeros([memory_size], dt),
        )

    def update(updates, state, params=None):
        check_needs("scale_by_lbfgs", "params", params)
        dt = state.weights_memory.dtype
        started = state.count > 0
        newest = (state.count - 1) % memory_size

        def diff(a, b):
            return jnp.where(started, a - b, jnp.zeros([], a.dtype)).astype(b.dtype)

        s = jax.tree.map(diff, params, state.params)
        y = jax.tree.map(diff, updates, state.updates)
        sy = _inner(y, s).astype(dt)
        rho = jnp.where(started & (sy != 0.0), 1.0 / jnp.where(sy == 0.0, 1.0, sy), 0.0).astype(dt)
        s_mem = jax.tree.map(lambda mem, x: mem.at[newest].set(x), state.diff_params_memory, s)
        y_mem = jax.tree.map(lambda mem, x: mem.at[newest].set(x), state.diff_updates_memory, y)
        w_mem = state.weights_memory.at[newest].set(rho)
        if scale_init_precond:
            yy = _sq_norm(y).astype(dt)
            gamma = jnp.where(yy > 0.0, sy / jnp.where(yy > 0.0, yy, 1.0), 1.0)
            first = jnp.minimum(1.0, 1.0 / jnp.sqrt(_sq_norm(jax.lax.stop_gradient(updates)))).astype(dt)
            gamma = jnp.where(started, gamma, first)
        else:
            gamma = jnp.ones([], dt)
        direction = two_loop_recursion(updates, s_mem, y_mem, w_mem, gamma, state.count % memory_size)
        return direction, ScaleByLBFGSState(
            count=safe_int32_increment(state.count),
            params=jax.tree.map(lambda p, old: p.astype(old.dtype), params, state.params),
            updates=jax.tree.map(lambda u, old: u.astype(old.dtype), updates, state.updates),
            diff_params_memory=s_mem,
            diff_updates_memory=y_mem,
            weights_memory=w_mem,
        )

    return GradientTransformation(init, update)


# the default line search of lbfgs (a stateless factory result, shared by every call)
_DEFAULT_LINESEARCH = scale_by_zoom_linesearch(max_linesearch_steps=20, initial_guess_strategy="one")


def lbfgs(
    learning_rate: ScalarOrSchedule | None = None,
    memory_size: int = 10,
    scale_init_precond: bool = True,
    linesearch: GradientTransformation | None = _DEFAULT_LINESEARCH,
) -> GradientTransformationExtraArgs:
    r"""L-BFGS: quasi-Newton descent along the L-BFGS direction, with a step size chosen by a line search.

    .. math::
      d_k = -\eta_k H_k g_k, \qquad w_{k+1} = w_k + \alpha_k d_k,

    where :math:`H_k g_k` comes from :func:`scale_by_lbfgs` and :math:`\alpha_k` from ``linesearch`` (the zoom line
    search for the strong Wolfe conditions by default, which keeps :math:`\langle s_k, y_k\rangle > 0`).

    ``update(grads, state, params, *, value, grad, value_fn, **fn_kwargs)`` needs the objective's value and
    gradient at ``params`` and the objective itself; :func:`value_and_grad_from_state` gives the first two for
    free after the first step::

      value_and_grad = gradax.value_and_grad_from_state(f)
      value, grad = value_and_grad(params, state=state)
      updates, state = opt.update(grad, state, params, value=value, grad=grad, value_fn=f)

    Args:
      learning_rate: :math:`\eta_k`, a number or a schedule; None means 1 (the line search picks the step).
      memory_size: the number of pairs kept (int >= 1).
      scale_init_precond: scale the initial inverse Hessian (see :func:`scale_by_lbfgs`).
      linesearch: a line search transformation, or None for none.

    Returns:
      A :class:`GradientTransformationExtraArgs` with state ``(ScaleByLBFGSState, ScaleState | ScaleByScheduleState,
      line search state)``.

    Example:
      >>> import gradax, jax, jax.numpy as jnp
      >>> f = lambda w: jnp.sum((w - 3.0) ** 2)
      >>> opt = gradax.lbfgs()
      >>> w = jnp.zeros(3)
      >>> state = opt.init(w)
      >>> value_and_grad = gradax.value_and_grad_from_state(f)
      >>> for _ in range(3):
      ...     value, grad = value_and_grad(w, state=state)
      ...     updates, state = opt.update(grad, state, w, value=value, grad=grad, value_fn=f)
      ...     w = gradax.apply_updates(w, updates)
      >>> w
      Array([3., 3., 3.], dtype=float32)

    References:
      Liu and Nocedal, 1989, "On the limited memory BFGS method for large scale optimization";
      Nocedal and Wright, 2006, "Numerical Optimization", chapters 3 and 7.
    """
    check_int("lbfgs", "memory_size", memory_size, low=1)
    if linesearch is not None:
        check_transformation(
            "lbfgs",
            "linesearch",
            linesearch,
            "Pass e.g. gradax.scale_by_zoom_linesearch(max_linesearch_steps=20)",
            constraint="a GradientTransformation or None",
        )
    base_scaling = scale(-1.0) if learning_rate is None else scale_by_learning_rate(learning_rate)
    return chain(
        scale_by_lbfgs(memory_size=memory_size, scale_init_precond=scale_init_precond),
        base_scaling,
        identity() if linesearch is None else linesearch,
    )
