"""Gradient accumulation: ``MultiSteps`` (k micro-steps make one optimizer step), ``apply_every``, skip functions."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from .._base import (
    GradientTransformation,
    GradientTransformationExtraArgs,
    OptState,
    Params,
    Updates,
    check_transformation,
    with_extra_args_support,
)
from .._checks import check_callable_or_none, check_int, check_positive
from .._dtype_policy import current_state_dtype_policy
from .._hyperparams import is_schedule
from .._numerics import abs_sq, safe_int32_increment
from .._state import zeros_like_params, zeros_state_like


class ShouldSkipUpdateFunction(Protocol):
    """``fn(updates, gradient_step, params) -> (should_skip, skip_state)``: decides whether :class:`MultiSteps`
    ignores a micro-step's gradient. ``should_skip`` is a boolean scalar; ``skip_state`` a pytree of arrays kept in
    :attr:`MultiStepsState.skip_state` for inspection."""

    def __call__(self, updates: Updates, gradient_step: ArrayLike, params: Params | None) -> tuple[ArrayLike, Any]: ...


def skip_not_finite(updates: Updates, gradient_step: ArrayLike, params: Params | None) -> tuple[jax.Array, Any]:
    """A :class:`ShouldSkipUpdateFunction` that skips micro-steps with any NaN or infinite entry.

    Returns:
      ``(should_skip, {"should_skip": should_skip, "num_not_finite": n})`` with ``n`` the number of non-finite
      entries in ``updates`` (int32).

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> gradax.skip_not_finite(jnp.array([1.0, jnp.nan]), 0, None)[0]
      Array(True, dtype=bool)
    """
    del gradient_step, params
    counts = [jnp.sum(~jnp.isfinite(x)).astype(jnp.int32) for x in jax.tree.leaves(updates)]
    num_not_finite = sum(counts[1:], counts[0]) if counts else jnp.zeros([], jnp.int32)
    should_skip = num_not_finite > 0
    return should_skip, dict(should_skip=should_skip, num_not_finite=jnp.asarray(num_not_finite, jnp.int32))


def skip_large_updates(
    updates: Updates, gradient_step: ArrayLike, params: Params | None, max_squared_norm: ArrayLike
) -> tuple[jax.Array, Any]:
    r"""A :class:`ShouldSkipUpdateFunction` (after ``functools.partial`` on ``max_squared_norm``) that skips
    micro-steps whose squared global norm :math:`\sum_i \|g_i\|^2` exceeds ``max_squared_norm``, or is not finite.

    Returns:
      ``(should_skip, {"should_skip": should_skip, "norm_squared": norm_squared})``.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> gradax.skip_large_updates(jnp.array([3.0, 4.0]), 0, None, 24.0)[0]
      Array(True, dtype=bool)
    """
    del gradient_step, params
    squares = [jnp.sum(abs_sq(x)) for x in jax.tree.leaves(updates)]
    norm_squared = sum(squares[1:], squares[0]) if squares else jnp.zeros([], jnp.float32)
    should_skip = jnp.logical_or(~jnp.isfinite(norm_squared), norm_squared > max_squared_norm)
    return should_skip, dict(should_skip=should_skip, norm_squared=norm_squared)


class MultiStepsState(NamedTuple):
    """State of :class:`MultiSteps`."""

    mini_step: jax.Array  # shape=(), int32: micro-steps accumulated since the last optimizer step
    gradient_step: jax.Array  # shape=(), int32: optimizer steps taken
    inner_opt_state: Any  # the inner optimizer's state (changes only on the last micro-step of a step)
    # like params, dtype=accumulator_dtype: the running mean (or sum) of this step's micro-step gradients; after the
    # last micro-step it holds the update just emitted (the next micro-step overwrites it; Optax: zeros)
    acc_grads: Any
    skip_state: Any = ()  # what should_skip_update_fn returned at the last micro-step; () without one


def _same_types(new: Any, like: Any) -> Any:
    """``new`` with every leaf cast to the dtype of the matching leaf of ``like`` (strongly typed), so that the two
    branches of a ``lax.cond`` agree even when an inner transformation promotes bfloat16 to float32."""
    return jax.tree.map(lambda n, o: jnp.asarray(n, jnp.result_type(o)), new, like)


def _strong(tree: Any) -> Any:
    return jax.tree.map(lambda x: jnp.asarray(x, jnp.result_type(x)), tree)


class MultiSteps:
    r"""Accumulates gradients over ``k`` micro-steps and applies the inner optimizer once, to their mean.

    .. math::
      \bar g = \frac{1}{k} \sum_{j=1}^{k} g_j, \qquad
      u_j = 0 \ (j < k), \qquad u_k = \mathrm{opt}(\bar g).

    The state holds one accumulator (``acc_grads``) besides the inner state. The inner update runs inside a
    ``lax.cond`` only on the last micro-step; the other micro-steps return zero updates and leave the inner state
    untouched. Both branches keep the dtypes of the updates and of the state, so bfloat16 params work under ``jit``.

    Args:
      opt: the inner transformation.
      every_k_schedule: ``k``, an int >= 1, or a function of the optimizer step count (``gradient_step``) giving it.
      use_grad_mean: average the micro-step gradients (True) or sum them (False).
      should_skip_update_fn: optional :class:`ShouldSkipUpdateFunction`; a skipped micro-step leaves the whole state
        (counters, accumulator, inner state) unchanged except ``skip_state``, and returns zero updates.
      accumulator_dtype: dtype of ``acc_grads``; default None gives float32 for bfloat16/float16 params and the
        params' dtype otherwise (float64 params keep float64); float32 for all params (Optax's default) under
        ``gradax.state_dtype_policy("optax")``.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> ms = gradax.MultiSteps(gradax.sgd(1.0), every_k_schedule=2)
      >>> state = ms.init(jnp.zeros(1))
      >>> u, state = ms.update(jnp.array([1.0]), state)
      >>> u, state = ms.update(jnp.array([3.0]), state)
      >>> u
      Array([-2.], dtype=float32)

    References:
      Ott et al., 2018, "Scaling neural machine translation" (gradient accumulation).
    """

    def __init__(
        self,
        opt: GradientTransformation,
        every_k_schedule: int | Callable[[jax.Array], ArrayLike],
        use_grad_mean: bool = True,
        should_skip_update_fn: ShouldSkipUpdateFunction | None = None,
        accumulator_dtype: Any | None = None,
    ):
        check_transformation("MultiSteps", "opt", opt, "Pass an optimizer such as gradax.adam(1e-3)")
        if not is_schedule(every_k_schedule):
            check_int("MultiSteps", "every_k_schedule", every_k_schedule, low=1)
        check_callable_or_none("MultiSteps", "should_skip_update_fn", should_skip_update_fn)
        self._opt = with_extra_args_support(opt)
        self._every_k = every_k_schedule
        self._use_grad_mean = use_grad_mean
        self._should_skip = should_skip_update_fn
        self._acc_dtype = None if accumulator_dtype is None else jnp.dtype(accumulator_dtype)

    @property
    def inner_opt(self) -> GradientTransformationExtraArgs:
        """The inner optimizer."""
        return self._opt

    def _k(self, gradient_step: jax.Array) -> jax.Array:
        k = self._every_k(gradient_step) if is_schedule(self._every_k) else self._every_k
        return jnp.asarray(k, jnp.int32)

    def init(self, params: Params) -> MultiStepsState:
        """The state: zero counters, the inner optimizer's state and a zero accumulator shaped like ``params``."""
        acc_dtype = self._acc_dtype
        if acc_dtype is None and current_state_dtype_policy() == "optax":
            acc_dtype = jnp.float32  # Optax 0.2.8's default accumulator_dtype
        acc = zeros_state_like(params, acc_dtype)
        skip_state = ()
        if self._should_skip is not None:
            zeros = zeros_like_params(params)
            skip_state = _strong(self._should_skip(zeros, jnp.zeros([], jnp.int32), zeros)[1])
        return MultiStepsState(
            mini_step=jnp.zeros([], jnp.int32),
            gradient_step=jnp.zeros([], jnp.int32),
            inner_opt_state=self._opt.init(params),
            acc_grads=acc,
            skip_state=skip_state,
        )

    def update(
        self, updates: Updates, state: MultiStepsState, params: Params | None = None, **extra_args: Any
    ) -> tuple[Updates, MultiStepsState]:
        """Accumulates ``updates``; on the last micro-step of a step returns the inner optimizer's update."""
        skip = jnp.zeros([], bool)
        skip_state = state.skip_state
        if self._should_skip is not None:
            skip, skip_state = self._should_skip(updates, state.gradient_step, params)
            skip = jnp.asarray(skip, bool)
            skip_state = _same_types(skip_state, state.skip_state)

        k = self._k(state.gradient_step)
        mini = state.mini_step
        emit = jnp.logical_and(mini + 1 >= k, ~skip)
        n = (mini + 1).astype(jnp.float32)
        first = mini == 0

        # The accumulator is never reset to zeros: the first micro-step of a step overwrites it. So a micro-step
        # that only accumulates is one elementwise pass (read gradient and accumulator, write the accumulator in
        # place when the state is donated: 12 bytes per float32 parameter). The inner optimizer runs in a lax.cond
        # on the last micro-step only and writes its update into the accumulator's buffer (whose content the next
        # micro-step overwrites anyway); the other branch passes accumulator and inner state through untouched. The
        # returned updates select that buffer or zero, which fuses into the caller's apply_updates: no zero tree is
        # materialized and no state is copied.
        def accumulate(g, a):
            g = jnp.asarray(g, a.dtype)
            total = a + (g - a) / n.astype(a.dtype) if self._use_grad_mean else a + g
            return jnp.where(skip, a, jnp.where(first, g, total))

        acc = jax.tree.map(accumulate, updates, state.acc_grads)

        def step(acc, inner_state):
            mean = jax.tree.map(lambda a, g: a.astype(jnp.result_type(g)), acc, updates)
            new_updates, new_inner = self._opt.update(mean, inner_state, params, **extra_args)
            new_updates = jax.tree.map(lambda u, g: jnp.asarray(u, jnp.result_type(g)), new_updates, updates)
            return _same_types(new_updates, acc), _same_types(new_inner, inner_state)

        def hold(acc, inner_state):
            return acc, inner_state

        out, new_inner = jax.lax.cond(emit, step, hold, acc, _strong(state.inner_opt_state))
        new_updates = jax.tree.map(
            lambda o, g: jnp.where(emit, o.astype(jnp.result_type(g)), jnp.zeros((), jnp.result_type(g))), out, updates
        )
        keep = lambda new, old: jnp.where(skip, old, new)
        new_state = MultiStepsState(
            mini_step=jnp.where(emit, 0, keep(mini + 1, mini)).astype(jnp.int32),
            gradient_step=jnp.where(emit, safe_int32_increment(state.gradient_step), state.gradient_step),
            inner_opt_state=new_inner,
            acc_grads=out,
            skip_state=skip_state,
        )
        return new_updates, new_state

    def has_updated(self, state: MultiStepsState | OptState) -> jax.Array:
        """Whether the last call to :meth:`update` applied the inner optimizer (a boolean scalar)."""
        return jnp.logical_and(state.mini_step == 0, state.gradient_step > 0)

    def gradient_transformation(self) -> GradientTransformationExtraArgs:
        """This accumulator as a :class:`GradientTransformationExtraArgs` (for ``chain`` and friends)."""
        return GradientTransformationExtraArgs(init=self.init, update=self.update)


class ApplyEvery(NamedTuple):
    """State of :func:`apply_every`."""

    count: jax.Array  # shape=(), int32: micro-steps since the last emitted update
    grad_acc: Updates  # like params: the sum of the updates since the last emitted update


def apply_every(k: int = 1) -> GradientTransformation:
    r"""Sums the updates of ``k`` consecutive steps and emits the sum every ``k``-th step (zeros in between).

    .. math::
      a \leftarrow a + u_t, \qquad \text{output } a \text{ (then } a \leftarrow 0) \text{ when } t \equiv 0
      \pmod k, \ 0 \text{ otherwise}.

    Args:
      k: the period, an int >= 1.

    Returns:
      A :class:`GradientTransformation` with state :class:`ApplyEvery`.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> tx = gradax.apply_every(2)
      >>> state = tx.init(jnp.zeros(1))
      >>> u, state = tx.update(jnp.ones(1), state)
      >>> u, state = tx.update(jnp.ones(1), state)
      >>> u
      Array([2.], dtype=float32)
    """
    check_positive("apply_every", "k", k)

    def init(params):
        return ApplyEvery(count=jnp.zeros([], jnp.int32), grad_acc=zeros_like_params(params))

    def update(updates, state, params=None):
        del params
        c = state.count % k
        keep = c != 0
        acc = jax.tree.map(lambda g, a: (g + a * keep).astype(a.dtype), updates, state.grad_acc)
        emit = c == k - 1
        out = jax.tree.map(lambda a, g: (a * emit).astype(g.dtype), acc, updates)
        return out, ApplyEvery(count=(c + 1).astype(jnp.int32) % k, grad_acc=acc)

    return GradientTransformation(init, update)
