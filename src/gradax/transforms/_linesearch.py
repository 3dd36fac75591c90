"""Line searches: scale an update direction by a step size chosen on the objective (backtracking, zoom).

Both transformations need, at ``update``, the objective's ``value`` and ``grad`` at the current params and the
objective itself, ``value_fn``; other keyword arguments of ``update`` that ``value_fn`` accepts (data batches...)
are passed on to it. :func:`value_and_grad_from_state` reuses the value and gradient that the line search computed
at the accepted step, so a deterministic objective is evaluated once per iteration.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from .._base import GradientTransformationExtraArgs, Params, Updates
from .._checks import argument_error, check_int, check_interval, check_needs, check_non_negative, check_positive
from .._dtype_policy import optax_scalar_dtype
from .._numerics import compute_dtype
from .._state import zeros_like_params

# --- tree helpers (one pass per leaf) ------------------------------------------------------------------------------


def _slope(grad, direction) -> jax.Array:
    """The directional derivative ``Re sum(grad * direction)`` over two trees (JAX's gradients of real functions
    of complex inputs are conjugated, so no conjugation here), each leaf product in the highest precision."""

    def leaf(g, u):
        g, u = jnp.asarray(g), jnp.asarray(u)
        return jnp.tensordot(g, u, g.ndim, precision=jax.lax.Precision.HIGHEST)

    parts = jax.tree.leaves(jax.tree.map(leaf, grad, direction))
    return jnp.real(sum(parts[1:], parts[0])) if parts else jnp.zeros([])


def _axpy(alpha, x, y):
    """``y + alpha * x`` leafwise, keeping ``y``'s dtypes."""
    return jax.tree.map(lambda a, b: (b + alpha * a).astype(b.dtype), x, y)


def _scale(alpha, x):
    return jax.tree.map(lambda a: (alpha * a).astype(a.dtype), x)


def _like(old: Any, new: Any) -> Any:
    """``new`` with the dtypes of ``old``, leaf by leaf: a loop carry keeps its types whatever dtypes the value
    function or the hyperparameters bring in (float64 values with float32 params under x64, ...)."""
    return jax.tree.map(lambda o, n: jnp.asarray(n).astype(jnp.result_type(o)), old, new)


def _select(pred, on_true: list, on_false: list) -> list:
    """Elementwise choice between two lists of trees by a scalar predicate."""
    return [jax.tree.map(lambda a, b: jnp.where(pred, a, b), t, f) for t, f in zip(on_true, on_false)]


def _cast_like(tree, like):
    return jax.tree.map(lambda a, b: jnp.asarray(a).astype(jnp.asarray(b).dtype), tree, like)


def value_dtype(params: Params) -> jnp.dtype:
    """The real dtype in which a line search keeps values, slopes and step sizes: at least float32."""
    leaves = jax.tree.leaves(params)
    if not leaves:
        return jnp.dtype(jnp.float32)
    return jnp.result_type(*[compute_dtype(jnp.real(jnp.zeros([], leaf.dtype)).dtype) for leaf in leaves])


def _split_fn_kwargs(value_fn: Callable, extra_args: dict) -> dict:
    """The keyword arguments of ``extra_args`` that ``value_fn`` accepts (all of them if it takes ``**kwargs``)."""
    try:
        parameters = inspect.signature(value_fn).parameters
    except (TypeError, ValueError):
        return dict(extra_args)
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return dict(extra_args)
    return {k: v for k, v in extra_args.items() if k in parameters}


def _check_needs_all(api: str, value, grad, value_fn: Callable[..., Any] | None) -> Callable[..., Any]:
    """Raises when ``value``, ``grad`` or ``value_fn`` is missing; returns ``value_fn``."""
    for name, given, what in (
        ("value", value, "(the objective at params)"),
        ("grad", grad, "(the objective's gradient at params)"),
    ):
        check_needs(api, name, given, what)
    return check_needs(api, "value_fn", value_fn, "(the objective, a function of params)")


# --- backtracking ----------------------------------------------------------------------------------------------------


class BacktrackingLinesearchInfo(NamedTuple):
    """Diagnostics of :func:`scale_by_backtracking_linesearch`'s last search."""

    num_linesearch_steps: jax.Array  # shape=(), int32: objective evaluations made
    decrease_error: jax.Array  # shape=(), value dtype: > 0 when no step met the sufficient-decrease test


class ScaleByBacktrackingLinesearchState(NamedTuple):
    """State of :func:`scale_by_backtracking_linesearch`."""

    learning_rate: jax.Array  # shape=(), value dtype: the accepted step size
    value: jax.Array  # shape=(), value dtype: the objective at the accepted step (inf before the first)
    grad: Updates | None  # like params: the gradient at the accepted step when store_grad, else None
    info: BacktrackingLinesearchInfo


class _BacktrackingCarry(NamedTuple):
    learning_rate: jax.Array
    new_value: jax.Array
    new_grad: Updates
    decrease_error: jax.Array
    iter_num: jax.Array


def scale_by_backtracking_linesearch(
    max_backtracking_steps: int,
    slope_rtol: ArrayLike = 0.0001,
    decrease_factor: ArrayLike = 0.8,
    increase_factor: ArrayLike = 1.5,
    max_learning_rate: ArrayLike = 1.0,
    atol: ArrayLike = 0.0,
    rtol: ArrayLike = 0.0,
    store_grad: bool = False,
    verbose: bool = False,
) -> GradientTransformationExtraArgs:
    r"""Backtracking line search: shrinks the step along ``updates`` until the objective decreases enough.

    Starting from :math:`\eta = \min(\kappa_+ \eta_{\text{prev}}, \eta_{\max})`, tries
    :math:`\eta, \kappa_- \eta, \kappa_-^2 \eta, \dots` until the (relaxed) Armijo condition holds:

    .. math::
      f(w + \eta u) \le (1 + \text{rtol})\, f(w) + \eta\, c\, \langle u, \nabla f(w) \rangle + \text{atol},

    and returns :math:`\eta u`. A step whose value is NaN or infinite is never taken (step size 0).

    ``update(updates, state, params, *, value, grad, value_fn, **fn_kwargs)`` needs the objective's value and
    gradient at ``params`` and the objective ``value_fn`` (called as ``value_fn(params, **fn_kwargs)``).

    Args:
      max_backtracking_steps: the largest number of step reductions (int >= 0).
      slope_rtol: :math:`c \in [0, 1)`, the fraction of the predicted decrease required.
      decrease_factor: :math:`\kappa_- \in (0, 1)`.
      increase_factor: :math:`\kappa_+ > 0` (usually :math:`\ge 1`), applied to the previous accepted step to start
        the next search; ``inf`` starts every search at ``max_learning_rate``.
      max_learning_rate: :math:`\eta_{\max} > 0`.
      atol: absolute tolerance on the decrease (>= 0).
      rtol: relative tolerance on the decrease (>= 0).
      store_grad: also compute and store the gradient at the accepted step (for :func:`value_and_grad_from_state`).
      verbose: print a diagnostic when the search fails.

    Returns:
      A :class:`GradientTransformationExtraArgs` with state :class:`ScaleByBacktrackingLinesearchState`.

    Example:
      >>> import gradax, jax, jax.numpy as jnp
      >>> f = lambda w: jnp.sum(w**2)
      >>> tx = gradax.chain(gradax.sgd(1.0), gradax.scale_by_backtracking_linesearch(max_backtracking_steps=15))
      >>> w = jnp.array([1.0, -2.0])
      >>> state = tx.init(w)
      >>> value, grad = jax.value_and_grad(f)(w)
      >>> updates, state = tx.update(grad, state, w, value=value, grad=grad, value_fn=f)
      >>> bool(f(gradax.apply_updates(w, updates)) < value)
      True

    References:
      Armijo, 1966, "Minimization of functions having Lipschitz continuous first partial derivatives";
      Nocedal and Wright, 2006, "Numerical Optimization", Algorithm 3.1.
    """
    api = "scale_by_backtracking_linesearch"
    check_int(api, "max_backtracking_steps", max_backtracking_steps, low=0)
    check_interval(api, "slope_rtol", slope_rtol, 0.0, 1.0, high_closed=False)
    check_interval(api, "decrease_factor", decrease_factor, 0.0, 1.0, low_closed=False, high_closed=False)
    check_positive(api, "increase_factor", increase_factor)  # < 1 shrinks the next start, inf starts at the max
    check_positive(api, "max_learning_rate", max_learning_rate)
    check_non_negative(api, "atol", atol)
    check_non_negative(api, "rtol", rtol)

    def init(params):
        dt = optax_scalar_dtype(params, "first", value_dtype(params))  # value_dtype unless the policy is Optax's
        return ScaleByBacktrackingLinesearchState(
            learning_rate=jnp.asarray(1.0, dt),
            value=jnp.asarray(jnp.inf, dt),
            grad=zeros_like_params(params) if store_grad else None,
            info=BacktrackingLinesearchInfo(
                num_linesearch_steps=jnp.zeros([], jnp.int32), decrease_error=jnp.asarray(jnp.inf, dt)
            ),
        )

    def update(updates, state, params=None, *, value=None, grad=None, value_fn=None, **extra_args):
        check_needs(api, "params", params)
        value_fn = _check_needs_all(api, value, grad, value_fn)
        fn = functools.partial(value_fn, **_split_fn_kwargs(value_fn, extra_args))
        # a state edited with tree.set may hold Python scalars; a bfloat16 state (Optax's dtypes) computes in float32
        dt = jnp.promote_types(jnp.asarray(state.value).dtype, value_dtype(params))
        value = jnp.asarray(value).astype(dt)
        slope = _slope(grad, updates).astype(dt)

        def decrease_error(lr, new_value):
            err = new_value - (1.0 + rtol) * value - lr * slope_rtol * slope
            return jnp.maximum(jnp.where(jnp.isnan(err), jnp.inf, err), 0.0)

        def cond(c):
            return ~(c.decrease_error <= atol) & (c.iter_num <= max_backtracking_steps)

        def body(c):
            lr = jnp.where(c.iter_num > 0, decrease_factor * c.learning_rate, c.learning_rate)
            candidate = _axpy(lr, updates, params)
            if store_grad:
                new_value, new_grad = jax.value_and_grad(fn)(candidate)
            else:
                new_value, new_grad = fn(candidate), c.new_grad
            new_value = jnp.asarray(new_value).astype(dt)
            out = _BacktrackingCarry(lr, new_value, new_grad, decrease_error(lr, new_value), c.iter_num + 1)
            return _cast_like(out, c)

        start = _BacktrackingCarry(
            learning_rate=jnp.minimum(increase_factor * state.learning_rate, max_learning_rate).astype(dt),
            new_value=value,
            new_grad=zeros_like_params(params),
            decrease_error=jnp.asarray(jnp.inf, dt),
            iter_num=jnp.zeros([], jnp.int32),
        )
        final = jax.lax.while_loop(cond, body, start)
        lr = jnp.where(jnp.isinf(final.decrease_error), 0.0, final.learning_rate).astype(dt)
        if verbose:
            jax.lax.cond(
                final.decrease_error > atol,
                lambda: jax.debug.print(
                    "scale_by_backtracking_linesearch: no step size met the sufficient-decrease test "
                    "(value {v}, slope {s}, last step size {lr}, decrease error {e}); a NaN/inf value gives step 0.",
                    v=value,
                    s=slope,
                    lr=final.learning_rate,
                    e=final.decrease_error,
                ),
                lambda: None,
            )
        new_state = ScaleByBacktrackingLinesearchState(
            learning_rate=lr,
            value=final.new_value,
            grad=final.new_grad if store_grad else None,
            info=BacktrackingLinesearchInfo(num_linesearch_steps=final.iter_num, decrease_error=final.decrease_error),
        )
        return _scale(lr, updates), _cast_like(new_state, state)

    return GradientTransformationExtraArgs(init, update)


# --- zoom (strong Wolfe) -------------------------------------------------------------------------------------------


class ZoomLinesearchInfo(NamedTuple):
    """Diagnostics of :func:`scale_by_zoom_linesearch`'s last search."""

    num_linesearch_steps: jax.Array  # shape=(), int32: objective evaluations made
    decrease_error: jax.Array  # shape=(), value dtype: > 0 when the sufficient-decrease test failed
    curvature_error: jax.Array  # shape=(), value dtype: > 0 when the curvature test failed


class ScaleByZoomLinesearchState(NamedTuple):
    """State of :func:`scale_by_zoom_linesearch`."""

    learning_rate: jax.Array  # shape=(), value dtype: the accepted step size
    value: jax.Array  # shape=(), value dtype: the objective at the accepted step (inf before the first)
    grad: Updates  # like params: the gradient at the accepted step
    info: ZoomLinesearchInfo


class _ZoomCarry(NamedTuple):
    """The search's loop state: the bracket [low, high], the last trial, and the best safe step so far."""

    count: jax.Array
    stepsize_guess: jax.Array
    stepsize: jax.Array
    value: jax.Array
    grad: Updates
    slope: jax.Array
    decrease_error: jax.Array
    curvature_error: jax.Array
    interval_found: jax.Array
    done: jax.Array
    failed: jax.Array
    low: jax.Array
    value_low: jax.Array
    slope_low: jax.Array
    high: jax.Array
    value_high: jax.Array
    slope_high: jax.Array
    cubic_ref: jax.Array
    value_cubic_ref: jax.Array
    safe_stepsize: jax.Array
    safe_value: jax.Array
    safe_grad: Updates


def _cubic_minimizer(a, fa, fpa, b, fb, c, fc):
    """Stationary point of the cubic through (a, fa), (b, fb), (c, fc) with slope fpa at a (NaN if none)."""
    db, dc = b - a, c - a
    denom = (db * dc) ** 2 * (db - dc)
    rb, rc = fb - fa - fpa * db, fc - fa - fpa * dc
    cubic = (dc**2 * rb - db**2 * rc) / denom
    quad = (-(dc**3) * rb + db**3 * rc) / denom
    return a + (-quad + jnp.sqrt(quad * quad - 3.0 * cubic * fpa)) / (3.0 * cubic)


def _quadratic_minimizer(a, fa, fpa, b, fb):
    """Stationary point of the quadratic through (a, fa), (b, fb) with slope fpa at a."""
    db = b - a
    curv = (fb - fa - fpa * db) / (db**2)
    return a - fpa / (2.0 * curv)


class _ZoomSettings(NamedTuple):
    """The search's hyperparameters as given to :func:`scale_by_zoom_linesearch` (Python numbers or arrays)."""

    max_linesearch_steps: int
    max_learning_rate: ArrayLike | None
    tol: ArrayLike
    increase_factor: ArrayLike
    slope_rtol: ArrayLike
    curv_rtol: ArrayLike
    approx_dec_rtol: ArrayLike | None
    stepsize_precision: ArrayLike
    verbose: bool


class _Line(NamedTuple):
    """The objective along the search line ``params + stepsize * updates``, in the value dtype."""

    at: Callable[[jax.Array], tuple[jax.Array, Updates, jax.Array]]  # stepsize -> (value, grad, slope)
    value0: jax.Array  # the value at stepsize 0
    slope0: jax.Array  # the slope at stepsize 0


def _line_through(value_fn, fn_kwargs: dict, params, updates, value, grad, dt) -> _Line:
    """The line through ``params`` along ``updates``; gradients keep the params' dtypes."""
    value_and_grad = jax.value_and_grad(functools.partial(value_fn, **fn_kwargs))
    value0 = jnp.asarray(value).astype(dt)
    slope0 = _slope(grad, updates).astype(dt)

    def at(stepsize):
        v, g = value_and_grad(_axpy(stepsize, updates, params))
        g = _cast_like(g, params)
        return jnp.asarray(v).astype(dt), g, _slope(g, updates).astype(dt)

    return _Line(at, value0, slope0)


def _decrease_error(cfg: _ZoomSettings, line: _Line, stepsize, v, s):
    """How far ``stepsize`` (value ``v``, slope ``s``) is from sufficient decrease (0 when met, inf for NaN)."""
    err = v - line.value0 - cfg.slope_rtol * stepsize * line.slope0
    if cfg.approx_dec_rtol is not None:
        approx = jnp.maximum(
            s - (2 * cfg.slope_rtol - 1.0) * line.slope0, v - line.value0 - cfg.approx_dec_rtol * jnp.abs(line.value0)
        )
        err = jnp.minimum(approx, err)
    err = jnp.maximum(err, 0.0)
    return jnp.where(jnp.isnan(err), jnp.inf, err)


def _curvature_error(cfg: _ZoomSettings, line: _Line, s):
    """How far slope ``s`` is from the curvature condition (0 when met, inf for NaN)."""
    err = jnp.maximum(jnp.abs(s) - cfg.curv_rtol * jnp.abs(line.slope0), 0.0)
    return jnp.where(jnp.isnan(err), jnp.inf, err)


def _trial(cfg: _ZoomSettings, line: _Line, stepsize):
    """Value, gradient, slope and the two test errors at ``stepsize``."""
    v, g, s = line.at(stepsize)
    return v, g, s, _decrease_error(cfg, line, stepsize, v, s), _curvature_error(cfg, line, s)


def _capped(cfg: _ZoomSettings, step):
    """``step`` bounded by ``max_learning_rate``, and whether the bound was reached."""
    if cfg.max_learning_rate is None:
        return step, jnp.asarray(False)
    at_max = step >= cfg.max_learning_rate
    return jnp.minimum(step, cfg.max_learning_rate), at_max


def _bracket(cfg: _ZoomSettings, line: _Line, c: _ZoomCarry) -> _ZoomCarry:
    """Algorithm 3.5: grow the step until [low, high] brackets an acceptable one."""
    step, at_max = _capped(cfg, jnp.where(c.count == 0, c.stepsize_guess, cfg.increase_factor * c.stepsize))
    v, g, s, dec, curv = _trial(cfg, line, step)
    err = jnp.maximum(dec, curv)
    safe = dec <= cfg.tol
    safe_step, safe_value, safe_grad = _select(safe, [step, v, g], [c.safe_stepsize, c.safe_value, c.safe_grad])
    high_is_new = (dec > 0.0) | ((v >= c.value) & (c.count > 0))
    low_is_new = (s >= 0.0) & ~high_is_new
    low, v_low, s_low, high, v_high, s_high = _select(
        low_is_new, [step, v, s, c.stepsize, c.value, c.slope], [c.stepsize, c.value, c.slope, step, v, s]
    )
    found = high_is_new | low_is_new | (err <= cfg.tol)
    done = (err <= cfg.tol) | (at_max & ~found)
    failed = (c.count + 1 >= cfg.max_linesearch_steps) & ~done
    return _like(c, c._replace(
        count=c.count + 1, stepsize=step, value=v, grad=g, slope=s, decrease_error=dec,
        curvature_error=curv, interval_found=found, done=done, failed=failed, low=low, value_low=v_low,
        slope_low=s_low, high=high, value_high=v_high, slope_high=s_high, cubic_ref=low,
        value_cubic_ref=v_low, safe_stepsize=safe_step, safe_value=safe_value, safe_grad=safe_grad,
    ))  # fmt: skip


def _interpolate(c: _ZoomCarry):
    """The next trial inside the bracket: the cubic's minimizer, else the quadratic's, else the midpoint (each only
    when it lies well inside the bracket), and the bracket's width."""
    width = jnp.abs(c.high - c.low)
    left, right = jnp.minimum(c.high, c.low), jnp.maximum(c.high, c.low)
    cubic = _cubic_minimizer(c.low, c.value_low, c.slope_low, c.high, c.value_high, c.cubic_ref, c.value_cubic_ref)
    use_cubic = (cubic > left + 0.2 * width) & (cubic < right - 0.2 * width)
    quad = _quadratic_minimizer(c.low, c.value_low, c.slope_low, c.high, c.value_high)
    use_quad = ~use_cubic & (quad > left + 0.1 * width) & (quad < right - 0.1 * width)
    middle = jnp.where(use_cubic, cubic, c.cubic_ref)
    middle = jnp.where(use_quad, quad, middle)
    return jnp.where(~use_cubic & ~use_quad, (c.low + c.high) / 2.0, middle), width


def _shrink(c: _ZoomCarry, middle, v, s, dec) -> dict:
    """The bracket after a trial at ``middle``: it replaces ``high`` when it did not decrease enough, else
    ``low`` (and the old ``low`` becomes ``high`` when the slope points back past it); the cubic's third point is
    the end that was dropped."""
    high_is_middle = (dec > 0.0) | (v >= c.value_low)
    high_is_low = (s * (c.high - c.low) >= 0.0) & ~high_is_middle
    high, v_high, s_high = _select(high_is_middle, [middle, v, s], [c.high, c.value_high, c.slope_high])
    high, v_high, s_high = _select(high_is_low, [c.low, c.value_low, c.slope_low], [high, v_high, s_high])
    low, v_low, s_low = _select(~high_is_middle, [middle, v, s], [c.low, c.value_low, c.slope_low])
    ref, v_ref = _select(high_is_middle | high_is_low, [c.high, c.value_high], [c.low, c.value_low])
    return dict(
        low=low, value_low=v_low, slope_low=s_low, high=high, value_high=v_high, slope_high=s_high,
        cubic_ref=ref, value_cubic_ref=v_ref,
    )  # fmt: skip


def _zoom(cfg: _ZoomSettings, line: _Line, c: _ZoomCarry) -> _ZoomCarry:
    """Algorithm 3.6: shrink the bracket by interpolation until a step passes both tests."""
    middle, width = _interpolate(c)
    v, g, s, dec, curv = _trial(cfg, line, middle)
    err = jnp.maximum(dec, curv)
    better_safe = (dec <= cfg.tol) & (v < c.safe_value)
    safe_step, safe_value, safe_grad = _select(
        better_safe, [middle, v, g], [c.safe_stepsize, c.safe_value, c.safe_grad]
    )
    done = err <= cfg.tol
    bracket = _shrink(c, middle, v, s, dec)
    stuck = (c.count + 1 >= cfg.max_linesearch_steps) | ((width <= cfg.stepsize_precision) & (safe_step > 0.0))
    return _like(c, c._replace(
        count=c.count + 1, stepsize=middle, value=v, grad=g, slope=s, decrease_error=dec,
        curvature_error=curv, done=done, failed=stuck & ~done, **bracket,
        safe_stepsize=safe_step, safe_value=safe_value, safe_grad=safe_grad,
    ))  # fmt: skip


def _fall_back(cfg: _ZoomSettings, line: _Line, c: _ZoomCarry) -> _ZoomCarry:
    """On failure, take the best step with sufficient decrease (or a safe one when values blew up)."""
    use_safe = (c.safe_stepsize > 0.0) | jnp.isinf(c.decrease_error)
    step, v, g = _select(use_safe, [c.safe_stepsize, c.safe_value, c.safe_grad], [c.stepsize, c.value, c.grad])
    if cfg.verbose:
        jax.debug.print(
            "scale_by_zoom_linesearch: no step met both Wolfe tests within the step budget (value {v0}, "
            "slope {s0}, last step {st}, decrease error {de}, curvature error {ce}); taking step {t}. A "
            "non-negative slope means `updates` is not a descent direction.",
            v0=line.value0, s0=line.slope0, st=c.stepsize, de=c.decrease_error, ce=c.curvature_error, t=step,
        )  # fmt: skip
    return c._replace(stepsize=step, value=v, grad=g)


def _search_step(cfg: _ZoomSettings, line: _Line, c: _ZoomCarry) -> _ZoomCarry:
    """One trial: bracketing until a bracket is found, zooming after; the fall-back once the search failed."""
    new = jax.lax.cond(c.interval_found, functools.partial(_zoom, cfg, line), functools.partial(_bracket, cfg, line), c)
    new = jax.lax.cond(new.failed, functools.partial(_fall_back, cfg, line), lambda x: x, new)
    return _cast_like(new, c)


def _search_start(line: _Line, grad, guess) -> _ZoomCarry:
    """The loop state before the first trial: stepsize 0 (value and slope at params), no bracket, no safe step."""
    zero = jnp.zeros([], guess.dtype)
    value0, slope0 = line.value0, line.slope0
    return _ZoomCarry(
        count=jnp.zeros([], jnp.int32), stepsize_guess=guess, stepsize=zero, value=value0, grad=grad,
        slope=slope0, decrease_error=jnp.asarray(jnp.inf, guess.dtype),
        curvature_error=jnp.asarray(jnp.inf, guess.dtype), interval_found=jnp.asarray(False),
        done=jnp.asarray(False), failed=jnp.asarray(False), low=zero, value_low=value0, slope_low=slope0, high=zero,
        value_high=value0, slope_high=slope0, cubic_ref=zero, value_cubic_ref=value0, safe_stepsize=zero,
        safe_value=value0, safe_grad=grad,
    )  # fmt: skip


def scale_by_zoom_linesearch(
    max_linesearch_steps: int,
    max_learning_rate: ArrayLike | None = None,
    tol: ArrayLike = 0.0,
    increase_factor: ArrayLike = 2.0,
    slope_rtol: ArrayLike = 0.0001,
    curv_rtol: ArrayLike = 0.9,
    approx_dec_rtol: ArrayLike | None = 1e-06,
    stepsize_precision: ArrayLike = 1e-05,
    initial_guess_strategy: str = "keep",
    verbose: bool = False,
) -> GradientTransformationExtraArgs:
    r"""Zoom line search: a step size along ``updates`` satisfying the strong Wolfe conditions.

    With :math:`\phi(\eta) = f(w + \eta u)`, looks for :math:`\eta` such that

    .. math::
      \phi(\eta) \le \phi(0) + c_1 \eta \phi'(0) \quad\text{(sufficient decrease)}, \qquad
      |\phi'(\eta)| \le c_2 |\phi'(0)| \quad\text{(small curvature)},

    where, near a minimum (:math:`\phi(\eta) \le \phi(0) + \epsilon |\phi(0)|`), the decrease test may be replaced by
    Hager and Zhang's approximate one, :math:`\phi'(\eta) \le (2 c_1 - 1) \phi'(0)`. The search first grows the
    step by ``increase_factor`` until it brackets an acceptable step, then zooms into the bracket with cubic,
    quadratic or bisection interpolation. If it runs out of steps it returns the best step with sufficient
    decrease found (or the last one tried). It returns :math:`\eta u` and stores the value and gradient at the
    accepted step.

    ``update(updates, state, params, *, value, grad, value_fn, **fn_kwargs)`` needs the objective's value and
    gradient at ``params`` and the objective ``value_fn`` (called as ``value_fn(params, **fn_kwargs)``).

    Args:
      max_linesearch_steps: the largest number of objective evaluations per search (int >= 1).
      max_learning_rate: the largest step size (> 0), or None for no bound.
      tol: tolerance on both tests (>= 0).
      increase_factor: growth of the trial step while bracketing (> 0, usually > 1; a factor <= 1 never grows the
        step, and the search ends after ``max_linesearch_steps``).
      slope_rtol: :math:`c_1 \in [0, 1)`.
      curv_rtol: :math:`c_2 \ge 0`, with :math:`c_1 < c_2` for a solution to exist; :math:`c_2 \ge 1` weakens the
        curvature condition and ``inf`` switches it off (only sufficient decrease is asked).
      approx_dec_rtol: :math:`\epsilon \ge 0` of the approximate decrease test, or None to use only Armijo's.
      stepsize_precision: a bracket shorter than this ends the search (> 0) once a safe step is known.
      initial_guess_strategy: ``"keep"`` starts from the previous accepted step, ``"one"`` from 1.
      verbose: print diagnostics when the search fails.

    Returns:
      A :class:`GradientTransformationExtraArgs` with state :class:`ScaleByZoomLinesearchState`.

    Example:
      >>> import gradax, jax, jax.numpy as jnp
      >>> f = lambda w: jnp.sum((w - 1.0) ** 2)
      >>> tx = gradax.chain(gradax.sgd(1.0), gradax.scale_by_zoom_linesearch(max_linesearch_steps=15))
      >>> w = jnp.zeros(2)
      >>> state = tx.init(w)
      >>> value, grad = jax.value_and_grad(f)(w)
      >>> updates, state = tx.update(grad, state, w, value=value, grad=grad, value_fn=f)
      >>> gradax.apply_updates(w, updates)
      Array([1., 1.], dtype=float32)

    References:
      Nocedal and Wright, 2006, "Numerical Optimization", Algorithms 3.5 and 3.6;
      Hager and Zhang, 2006, "Algorithm 851: CG_DESCENT, a conjugate gradient method with guaranteed descent".
    """
    api = "scale_by_zoom_linesearch"
    check_int(api, "max_linesearch_steps", max_linesearch_steps, low=1)
    if max_learning_rate is not None:
        check_positive(api, "max_learning_rate", max_learning_rate)
    check_non_negative(api, "tol", tol)
    check_positive(api, "increase_factor", increase_factor)  # <= 1 never grows: the bracketing stops at the cap
    check_interval(api, "slope_rtol", slope_rtol, 0.0, 1.0, high_closed=False)
    check_non_negative(api, "curv_rtol", curv_rtol)  # inf switches the curvature condition off (Optimistix)
    if approx_dec_rtol is not None:
        check_non_negative(api, "approx_dec_rtol", approx_dec_rtol)
    check_positive(api, "stepsize_precision", stepsize_precision)
    if initial_guess_strategy not in ("keep", "one"):
        raise argument_error(api, "initial_guess_strategy", "one of 'keep', 'one'", initial_guess_strategy)
    cfg = _ZoomSettings(
        max_linesearch_steps, max_learning_rate, tol, increase_factor, slope_rtol, curv_rtol, approx_dec_rtol,
        stepsize_precision, verbose,
    )  # fmt: skip

    def init(params):
        dt = optax_scalar_dtype(params, "first", value_dtype(params))  # value_dtype unless the policy is Optax's
        return ScaleByZoomLinesearchState(
            learning_rate=jnp.asarray(1.0, dt),
            value=jnp.asarray(jnp.inf, dt),
            grad=zeros_like_params(params),
            info=ZoomLinesearchInfo(
                num_linesearch_steps=jnp.zeros([], jnp.int32),
                decrease_error=jnp.asarray(jnp.inf, value_dtype(params)),
                curvature_error=jnp.asarray(jnp.inf, value_dtype(params)),
            ),
        )

    def update(updates, state, params=None, *, value=None, grad=None, value_fn=None, **extra_args):
        check_needs(api, "params", params)
        value_fn = _check_needs_all(api, value, grad, value_fn)
        # a state edited with tree.set may hold Python scalars; a bfloat16 state (Optax's dtypes) computes in float32
        dt = jnp.promote_types(jnp.asarray(state.value).dtype, value_dtype(params))
        line = _line_through(value_fn, _split_fn_kwargs(value_fn, extra_args), params, updates, value, grad, dt)
        guess = jnp.ones([], dt) if initial_guess_strategy == "one" else jnp.asarray(state.learning_rate).astype(dt)
        start = _search_start(line, _cast_like(grad, params), guess)
        final = jax.lax.while_loop(lambda c: ~(c.done | c.failed), functools.partial(_search_step, cfg, line), start)
        new_state = ScaleByZoomLinesearchState(
            learning_rate=final.stepsize,
            value=final.value,
            grad=final.grad,
            info=ZoomLinesearchInfo(
                num_linesearch_steps=final.count,
                decrease_error=final.decrease_error,
                curvature_error=final.curvature_error,
            ),
        )
        return _scale(final.stepsize, updates), _cast_like(new_state, state)

    return GradientTransformationExtraArgs(init, update)


# --- reuse of the stored value and gradient ---------------------------------------------------------------------------


def _find_fields(tree: Any, name: str) -> list:
    """Every value of a NamedTuple field called ``name`` anywhere in ``tree``."""
    found = []

    def walk(node):
        if isinstance(node, tuple) and hasattr(node, "_fields"):
            if name in node._fields:
                found.append(getattr(node, name))
            for field in node._fields:
                if field != name:
                    walk(getattr(node, field))
            return
        if isinstance(node, (list, tuple)):
            for child in node:
                walk(child)
        elif isinstance(node, dict):
            for child in node.values():
                walk(child)
        elif node is not None and not isinstance(node, (jax.Array, jax.ShapeDtypeStruct)):
            children, treedef = jax.tree_util.tree_flatten(node, is_leaf=lambda x: x is not node)
            if not (treedef.num_nodes == 1 and treedef.num_leaves == 1):
                for child in children:
                    walk(child)

    walk(tree)
    return found


def value_and_grad_from_state(value_fn: Callable[..., ArrayLike]) -> Callable[..., tuple[jax.Array, Updates]]:
    r"""``jax.value_and_grad(value_fn)`` that reuses the value and gradient a line search stored in ``state``.

    The returned function is ``f(params, *fn_args, state, **fn_kwargs) -> (value, grad)``. When the optimizer's
    state holds a finite ``value`` (and its ``grad``) at the current params -- as the zoom line search, or the
    backtracking line search with ``store_grad=True``, leave them after each step -- those are returned; otherwise
    (first step, NaN/inf) they are computed. Use it only for deterministic objectives.

    Args:
      value_fn: the objective, ``value_fn(params, *fn_args, **fn_kwargs) -> scalar``.

    Returns:
      The function ``(params, *fn_args, state, **fn_kwargs) -> (value, grad)``.

    Example:
      >>> import gradax, jax, jax.numpy as jnp
      >>> f = lambda w: jnp.sum(w**2)
      >>> opt = gradax.lbfgs()
      >>> w = jnp.array([1.0, 2.0])
      >>> state = opt.init(w)
      >>> value_and_grad = gradax.value_and_grad_from_state(f)
      >>> for _ in range(2):
      ...     value, grad = value_and_grad(w, state=state)  # computed at step 0, then read from the state
      ...     updates, state = opt.update(grad, state, w, value=value, grad=grad, value_fn=f)
      ...     w = gradax.apply_updates(w, updates)
      >>> float(f(w)) < 1e-6
      True
    """
    if not callable(value_fn):
        raise TypeError(f"value_and_grad_from_state(value_fn=...) must be callable; got {value_fn!r:.80}.")

    def value_and_grad(params, *fn_args, state, **fn_kwargs):
        values, grads = _find_fields(state, "value"), _find_fields(state, "grad")
        if len(values) > 1 or len(grads) > 1:  # KeyError, as tree.get raises for a name found several times
            raise KeyError(
                f"value_and_grad_from_state: the optimizer state must hold exactly one `value` and one `grad`; got "
                f"{len(values)} value and {len(grads)} grad fields (several line searches). Keep one line search in "
                "the optimizer."
            )
        if len(values) != 1 or len(grads) != 1 or values[0] is None or grads[0] is None:
            raise ValueError(
                "value_and_grad_from_state: the optimizer state must hold exactly one `value` and one `grad` "
                f"(found {len(values)} value and {len(grads)} grad fields, None counted as missing); got a state "
                "without them. Use an optimizer ending with scale_by_zoom_linesearch, or "
                "scale_by_backtracking_linesearch(..., store_grad=True)."
            )
        value, grad = values[0], grads[0]
        return jax.lax.cond(
            jnp.isfinite(value),
            lambda p, a, kw: (value, grad),
            lambda p, a, kw: jax.value_and_grad(value_fn)(p, *a, **kw),
            params,
            fn_args,
            fn_kwargs,
        )

    return value_and_grad
