"""Schedules: functions of the step count that return a hyperparameter's value (usually a learning rate).

Conventions shared by every schedule here:
  * ``schedule(count)`` takes the step count (a Python int or an int32 array, traced or not) and is safe under
    ``jit`` and ``vmap``; optimizers call it with the count *before* the step's increment, so the first update uses
    ``schedule(0)``.
  * Transitions are closed on the left: a transition of ``transition_steps`` steps that begins at step ``b`` gives
    the initial value at ``b`` and reaches the end value at ``b + transition_steps``, and keeps it afterwards.
  * A length ``transition_steps <= 0`` gives the constant ``init_value`` and a negative ``transition_begin`` counts
    as 0, as in Optax 0.2.8 (both logged at INFO level on the ``gradax.schedules`` logger): a negative length can
    come from arithmetic such as ``total_steps - warmup_steps`` in a short run.
  * Other invalid arguments raise ``ValueError`` at construction (see ``docs/differences.md``, "Schedules", for
    where this differs from Optax 0.2.8).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import jax.numpy as jnp
from jax.typing import ArrayLike

from .._base import Schedule
from .._checks import argument_error, check_interval, check_non_negative, check_positive
from .._hyperparams import is_concrete
from ._join import join_schedules


def _concrete_number(x) -> float | None:
    if not is_concrete(x):
        return None
    try:
        return float(x)
    except (TypeError, ValueError):
        return None


_log = logging.getLogger("gradax.schedules")


def _is_empty_transition(kind: str, transition_steps) -> bool:
    """True (and logged, as Optax 0.2.8 does) when a concrete ``transition_steps`` is ``<= 0``."""
    steps = _concrete_number(transition_steps)
    if steps is None or steps > 0:
        return False
    _log.info(
        "%s schedule with a non-positive `transition_steps` (%s): the schedule is the constant `init_value`.",
        kind,
        transition_steps,
    )
    return True


def _begin_or_zero(kind: str, transition_begin):
    """``transition_begin``, or 0 (logged, as Optax 0.2.8 does) when it is a concrete negative number."""
    begin = _concrete_number(transition_begin)
    if begin is None or begin >= 0:
        return transition_begin
    _log.info("%s schedule with a negative `transition_begin` (%s): it counts as 0.", kind, transition_begin)
    return 0


def constant_schedule(value: ArrayLike) -> Schedule:
    """A schedule that returns ``value`` at every step.

    Example:
      >>> import gradax
      >>> schedule = gradax.constant_schedule(0.1)
      >>> schedule(0), schedule(1000)
      (0.1, 0.1)
    """
    return lambda count: value


def _polynomial(init_value, end_value, power, transition_steps, transition_begin) -> Schedule:
    if _is_empty_transition("A polynomial", transition_steps):
        return lambda count: init_value
    transition_begin = _begin_or_zero("A polynomial", transition_begin)

    def schedule(count):
        done = jnp.clip(count - transition_begin, 0, transition_steps)
        # Clamped at 0: under jit XLA turns ``done / T`` into ``done * (1/T)``, which can exceed 1 at the end, and a
        # fractional power of the tiny negative base is NaN (Optax 0.2.8's behaviour under jit).
        remaining = jnp.maximum(1 - done / transition_steps, 0)
        return (init_value - end_value) * (remaining**power) + end_value

    return schedule


def polynomial_schedule(
    init_value: ArrayLike,
    end_value: ArrayLike,
    power: ArrayLike,
    transition_steps: int,
    transition_begin: int = 0,
) -> Schedule:
    r"""Polynomial interpolation from ``init_value`` to ``end_value`` over ``transition_steps`` steps.

    .. math::
      v(t) = (v_0 - v_1)\left(1 - \frac{\min(\max(t - b, 0), T)}{T}\right)^{p} + v_1

    The value is ``init_value`` up to step ``transition_begin`` (:math:`b`), reaches ``end_value`` at step
    ``transition_begin + transition_steps`` and stays there.

    Args:
      init_value: :math:`v_0`, the value at step 0.
      end_value: :math:`v_1`, the value from step ``transition_begin + transition_steps`` on.
      power: the exponent :math:`p \ge 0` (1 is linear).
      transition_steps: :math:`T`; :math:`T \le 0` gives the constant schedule ``init_value`` (as in Optax).
      transition_begin: :math:`b`, the number of steps at ``init_value`` before the transition; negative counts
        as 0 (as in Optax).

    Example:
      >>> import gradax
      >>> schedule = gradax.polynomial_schedule(1.0, 0.0, power=2, transition_steps=4)
      >>> [float(schedule(t)) for t in range(6)]
      [1.0, 0.5625, 0.25, 0.0625, 0.0, 0.0]
    """
    check_non_negative("polynomial_schedule", "power", power, fix="A negative power is infinite at the end value")
    return _polynomial(init_value, end_value, power, transition_steps, transition_begin)


def linear_schedule(
    init_value: ArrayLike,
    end_value: ArrayLike,
    transition_steps: int,
    transition_begin: int = 0,
) -> Schedule:
    r"""Linear interpolation from ``init_value`` to ``end_value`` over ``transition_steps`` steps.

    .. math::
      v(t) = v_0 + (v_1 - v_0)\, \frac{\min(\max(t - b, 0), T)}{T}

    Value ``init_value`` up to step ``transition_begin``, ``end_value`` from step
    ``transition_begin + transition_steps`` on. ``transition_steps=0`` gives the constant ``init_value``.

    Args:
      init_value: the value at step 0.
      end_value: the value reached at step ``transition_begin + transition_steps``.
      transition_steps: :math:`T`, the length of the transition; :math:`T \le 0` gives the constant ``init_value``.
      transition_begin: :math:`b`, the number of steps at ``init_value`` first; negative counts as 0.

    Example:
      >>> import gradax
      >>> schedule = gradax.linear_schedule(1.0, 0.0, transition_steps=4, transition_begin=1)
      >>> [float(schedule(t)) for t in range(7)]
      [1.0, 1.0, 0.75, 0.5, 0.25, 0.0, 0.0]
    """
    return _polynomial(init_value, end_value, 1, transition_steps, transition_begin)


def _check_scales(api: str, boundaries_and_scales) -> None:
    if boundaries_and_scales is None:
        return
    for boundary, factor in boundaries_and_scales.items():
        if isinstance(boundary, bool) or not isinstance(boundary, (int, jnp.integer)):
            raise argument_error(api, "boundaries_and_scales", "a dict with int step keys", boundaries_and_scales)
        value = _concrete_number(factor)
        if value is not None and not value >= 0:
            raise argument_error(
                api,
                "boundaries_and_scales",
                "a dict of non-negative scale factors",
                boundaries_and_scales,
                f"Step {boundary} has scale {factor!r}; use a factor >= 0",
            )


def piecewise_constant_schedule(
    init_value: ArrayLike, boundaries_and_scales: dict[int, float] | None = None
) -> Schedule:
    r"""A constant value multiplied by a factor at each boundary: :math:`v(t) = v_0 \prod_{b_i \le t} s_i`.

    The factor of boundary ``b`` applies from step ``b`` on (at step ``b`` itself the new value is in effect).

    Args:
      init_value: the value at step 0.
      boundaries_and_scales: ``{step: factor}`` with factors ``>= 0``; ``None`` gives a constant schedule.

    Example:
      >>> import gradax
      >>> schedule = gradax.piecewise_constant_schedule(1.0, {2: 0.5, 4: 0.1})
      >>> [round(float(schedule(t)), 6) for t in range(6)]
      [1.0, 1.0, 0.5, 0.5, 0.05, 0.05]
    """
    _check_scales("piecewise_constant_schedule", boundaries_and_scales)
    steps = sorted(boundaries_and_scales.items()) if boundaries_and_scales else []

    def schedule(count):
        value = init_value
        for boundary, factor in steps:
            before = jnp.maximum(0.0, jnp.sign(boundary - count))
            value = value * before + (1 - before) * factor * value
        return value

    return schedule


def exponential_decay(
    init_value: ArrayLike,
    transition_steps: int,
    decay_rate: float,
    transition_begin: int = 0,
    staircase: bool = False,
    end_value: ArrayLike | None = None,
) -> Schedule:
    r"""Exponential decay: :math:`v(t) = v_0\, r^{(t - b)/T}` after step :math:`b`, :math:`v_0` before.

    With ``staircase=True`` the exponent is :math:`\lfloor (t-b)/T \rfloor` (the value drops every ``T`` steps).
    With ``end_value`` the value is clipped at it (from below when decaying, from above when ``decay_rate > 1``).

    Args:
      init_value: :math:`v_0`, the value up to and at step ``transition_begin``.
      transition_steps: :math:`T`, the number of steps per factor ``decay_rate``; :math:`T \le 0` gives the constant
        ``init_value`` (Optax's documented rule).
      decay_rate: :math:`r \ge 0`; 0 gives the constant ``init_value`` (as in Optax).
      transition_begin: :math:`b`; negative counts as 0 (as in Optax).
      staircase: decay in discrete jumps.
      end_value: an optional bound on the value.

    Example:
      >>> import gradax
      >>> schedule = gradax.exponential_decay(1.0, transition_steps=2, decay_rate=0.5)
      >>> [round(float(schedule(t)), 4) for t in range(5)]
      [1.0, 0.7071, 0.5, 0.3536, 0.25]
    """
    if _is_empty_transition("An exponential", transition_steps):
        return lambda count: init_value
    check_non_negative("exponential_decay", "decay_rate", decay_rate)
    if _concrete_number(decay_rate) == 0:
        return lambda count: init_value
    transition_begin = _begin_or_zero("An exponential", transition_begin)
    clip_fn = None
    if end_value is not None:
        clip_fn = jnp.maximum if decay_rate < 1.0 else jnp.minimum

    def schedule(count):
        elapsed = count - transition_begin
        p = elapsed / transition_steps
        if staircase:
            p = jnp.floor(p)
        value = jnp.where(elapsed <= 0, init_value, init_value * jnp.power(decay_rate, p))
        if clip_fn is not None and end_value is not None:
            value = clip_fn(value, end_value)
        return value

    return schedule


def _cosine(init_value, decay_steps, alpha, exponent) -> Schedule:
    def schedule(count):
        steps = float(decay_steps) if isinstance(decay_steps, int) else decay_steps
        if isinstance(count, int):
            count = float(count)
        count = jnp.minimum(count, steps)
        cosine = 0.5 * (1 + jnp.cos(jnp.pi * count / steps))
        return init_value * ((1 - alpha) * cosine**exponent + alpha)

    return schedule


def cosine_decay_schedule(
    init_value: ArrayLike,
    decay_steps: int,
    alpha: ArrayLike = 0.0,
    exponent: ArrayLike = 1.0,
) -> Schedule:
    r"""Cosine decay from ``init_value`` to ``alpha * init_value`` over ``decay_steps`` steps.

    .. math::
      v(t) = v_0 \left((1 - \alpha)\left(\tfrac{1}{2}\left(1 + \cos \frac{\pi \min(t, T)}{T}\right)\right)^{e}
      + \alpha\right)

    ``init_value`` at step 0, ``alpha * init_value`` from step ``decay_steps`` on.

    Args:
      init_value: :math:`v_0`.
      decay_steps: :math:`T > 0`.
      alpha: :math:`\alpha \in [0, 1]`, the final value as a fraction of ``init_value``.
      exponent: :math:`e \ge 0`, applied to the cosine factor.

    Example:
      >>> import gradax
      >>> schedule = gradax.cosine_decay_schedule(1.0, decay_steps=4, alpha=0.1)
      >>> [round(float(schedule(t)), 4) for t in range(6)]
      [1.0, 0.8682, 0.55, 0.2318, 0.1, 0.1]

    References:
      Loshchilov and Hutter, 2017, "SGDR: Stochastic Gradient Descent with Warm Restarts".
    """
    api = "cosine_decay_schedule"
    check_positive(api, "decay_steps", decay_steps)
    check_interval(api, "alpha", alpha, 0.0, 1.0)
    check_non_negative(api, "exponent", exponent, fix="A negative exponent is infinite at the end of the decay")
    return _cosine(init_value, decay_steps, alpha, exponent)


def _linear_interpolate(start, end, fraction):
    return (end - start) * fraction + start


def _cosine_interpolate(start, end, fraction):
    return end + (start - end) / 2.0 * (jnp.cos(jnp.pi * fraction) + 1)


def piecewise_interpolate_schedule(
    interpolate_type: str,
    init_value: ArrayLike,
    boundaries_and_scales: dict[int, float] | None = None,
) -> Schedule:
    r"""Interpolates between values that change by a factor at each boundary.

    The value at boundary :math:`b_i` is :math:`v_i = v_0 \prod_{j \le i} s_j`; between two boundaries the value
    moves from one to the next (linearly or along a half cosine); it is ``init_value`` at step 0 (and before the
    first boundary if that boundary is at a later step than 0, moving towards :math:`v_1`), and the last value
    from the last boundary on.

    Args:
      interpolate_type: ``"linear"`` or ``"cosine"``.
      init_value: the value at step 0.
      boundaries_and_scales: ``{step: factor}`` with factors ``>= 0``.

    Example:
      >>> import gradax
      >>> schedule = gradax.piecewise_interpolate_schedule("linear", 1.0, {2: 0.5, 4: 0.5})
      >>> [float(schedule(t)) for t in range(6)]
      [1.0, 0.75, 0.5, 0.375, 0.25, 0.25]
    """
    api = "piecewise_interpolate_schedule"
    if interpolate_type == "linear":
        interpolate = _linear_interpolate
    elif interpolate_type == "cosine":
        interpolate = _cosine_interpolate
    else:
        raise argument_error(api, "interpolate_type", "'linear' or 'cosine'", interpolate_type)
    _check_scales(api, boundaries_and_scales)
    if boundaries_and_scales:
        boundaries, factors = zip(*sorted(boundaries_and_scales.items()))
    else:
        boundaries, factors = (), ()

    def schedule(count):
        bounds = jnp.stack((0,) + tuple(boundaries))
        values = jnp.cumprod(jnp.stack((init_value,) + tuple(factors)))
        lengths = jnp.maximum(bounds[1:] - bounds[:-1], 1)
        inside = jnp.logical_and(bounds[:-1] <= count, count < bounds[1:])
        fraction = (count - bounds[:-1]) / lengths
        between = interpolate(values[:-1], values[1:], fraction)
        return inside.dot(between) + (bounds[-1] <= count) * values[-1]

    return schedule


def _check_onecycle(api, transition_steps, div_factor, final_div_factor):
    check_positive(api, "transition_steps", transition_steps)
    check_positive(api, "div_factor", div_factor)
    check_positive(api, "final_div_factor", final_div_factor)


def linear_onecycle_schedule(
    transition_steps: int,
    peak_value: ArrayLike,
    pct_start: float = 0.3,
    pct_final: float = 0.85,
    div_factor: float = 25.0,
    final_div_factor: float = 1e4,
) -> Schedule:
    r"""The linear one-cycle schedule: up from ``peak/div_factor`` to ``peak``, back down, then to a tiny value.

    Steps: linear from ``peak_value / div_factor`` (at step 0) to ``peak_value`` (at ``int(pct_start * T)``), back
    to ``peak_value / div_factor`` (at ``int(pct_final * T)``), then to
    ``peak_value / (div_factor * final_div_factor)`` (at ``T``), constant afterwards.

    Args:
      transition_steps: :math:`T > 0`.
      peak_value: the largest value.
      pct_start: fraction of ``T`` spent rising, in ``[0, 1]``.
      pct_final: fraction of ``T`` at which the descent back to the initial value ends, in ``[pct_start, 1]``.
      div_factor: ``> 0``; the initial value is ``peak_value / div_factor``.
      final_div_factor: ``> 0``; the final value is ``initial value / final_div_factor``.

    Example:
      >>> import gradax
      >>> schedule = gradax.linear_onecycle_schedule(10, peak_value=1.0, pct_start=0.2, pct_final=0.6, div_factor=10.0)
      >>> [round(float(schedule(t)), 4) for t in (0, 2, 6, 10)]
      [0.1, 1.0, 0.1, 0.0]

    References:
      Smith and Topin, 2017, "Super-Convergence: Very Fast Training of Neural Networks Using Large Learning Rates".
    """
    api = "linear_onecycle_schedule"
    _check_onecycle(api, transition_steps, div_factor, final_div_factor)
    check_interval(api, "pct_start", pct_start, 0.0, 1.0)
    check_interval(api, "pct_final", pct_final, pct_start, 1.0)
    return piecewise_interpolate_schedule(
        "linear",
        peak_value / div_factor,
        {
            int(pct_start * transition_steps): div_factor,
            int(pct_final * transition_steps): 1.0 / div_factor,
            transition_steps: 1.0 / final_div_factor,
        },
    )


def cosine_onecycle_schedule(
    transition_steps: int,
    peak_value: ArrayLike,
    pct_start: float = 0.3,
    div_factor: float = 25.0,
    final_div_factor: float = 1e4,
) -> Schedule:
    r"""The cosine one-cycle schedule: a half cosine up to ``peak_value``, then a half cosine down to a tiny value.

    From ``peak_value / div_factor`` at step 0 to ``peak_value`` at step ``int(pct_start * T)``, then down to
    ``peak_value / (div_factor * final_div_factor)`` at step ``T``, constant afterwards.

    Args:
      transition_steps: :math:`T > 0`.
      peak_value: the largest value.
      pct_start: fraction of ``T`` spent rising, in ``[0, 1]``.
      div_factor: ``> 0``; the initial value is ``peak_value / div_factor``.
      final_div_factor: ``> 0``; the final value is ``initial value / final_div_factor``.

    Example:
      >>> import gradax
      >>> schedule = gradax.cosine_onecycle_schedule(10, peak_value=1.0, pct_start=0.2, div_factor=10.0)
      >>> [round(float(schedule(t)), 4) for t in (0, 1, 2, 10)]
      [0.1, 0.55, 1.0, 0.0]

    References:
      Smith and Topin, 2017, "Super-Convergence: Very Fast Training of Neural Networks Using Large Learning Rates".
    """
    api = "cosine_onecycle_schedule"
    _check_onecycle(api, transition_steps, div_factor, final_div_factor)
    check_interval(api, "pct_start", pct_start, 0.0, 1.0)
    return piecewise_interpolate_schedule(
        "cosine",
        peak_value / div_factor,
        {
            int(pct_start * transition_steps): div_factor,
            int(transition_steps): 1.0 / (div_factor * final_div_factor),
        },
    )


def warmup_constant_schedule(init_value: ArrayLike, peak_value: ArrayLike, warmup_steps: int) -> Schedule:
    """Linear warmup from ``init_value`` (step 0) to ``peak_value`` (step ``warmup_steps``), then constant.

    ``warmup_steps <= 0`` gives the constant ``init_value`` (Optax's rule, kept for compatibility).

    Example:
      >>> import gradax
      >>> schedule = gradax.warmup_constant_schedule(0.0, 1.0, warmup_steps=2)
      >>> [float(schedule(t)) for t in range(4)]
      [0.0, 0.5, 1.0, 1.0]
    """
    return _polynomial(init_value, peak_value, 1, warmup_steps, 0)


def warmup_cosine_decay_schedule(
    init_value: ArrayLike,
    peak_value: ArrayLike,
    warmup_steps: int,
    decay_steps: int,
    end_value: ArrayLike = 0.0,
    exponent: ArrayLike = 1.0,
) -> Schedule:
    r"""Linear warmup to ``peak_value``, then cosine decay to ``end_value``.

    ``init_value`` at step 0, ``peak_value`` at step ``warmup_steps``, ``end_value`` from step ``decay_steps``
    on (``decay_steps`` counts the warmup).

    Args:
      init_value: the value at step 0.
      peak_value: the value at the end of the warmup.
      warmup_steps: with 0 the schedule starts at ``peak_value``; a negative value moves the start of the cosine
        decay before step 0 (as in Optax).
      decay_steps: ``> warmup_steps``: the step at which ``end_value`` is reached.
      end_value: the final value.
      exponent: ``>= 0``, applied to the cosine factor.

    Example:
      >>> import gradax
      >>> schedule = gradax.warmup_cosine_decay_schedule(0.0, 1.0, warmup_steps=2, decay_steps=6)
      >>> [round(float(schedule(t)), 4) for t in range(8)]
      [0.0, 0.5, 1.0, 0.8536, 0.5, 0.1464, 0.0, 0.0]
    """
    api = "warmup_cosine_decay_schedule"
    if _concrete_number(decay_steps) is not None and _concrete_number(warmup_steps) is not None:
        if not decay_steps > warmup_steps:
            raise argument_error(
                api,
                "decay_steps",
                f"> warmup_steps ({warmup_steps})",
                decay_steps,
                "decay_steps counts the warmup steps too; pass warmup_steps + the number of decay steps",
            )
    check_non_negative(api, "exponent", exponent, fix="A negative exponent is infinite at the end of the decay")
    alpha = 0.0 if peak_value == 0.0 else end_value / peak_value
    return join_schedules(
        [
            _polynomial(init_value, peak_value, 1, warmup_steps, 0),
            _cosine(peak_value, decay_steps - warmup_steps, alpha, exponent),
        ],
        [warmup_steps],
    )


def warmup_exponential_decay_schedule(
    init_value: ArrayLike,
    peak_value: ArrayLike,
    warmup_steps: int,
    transition_steps: int,
    decay_rate: float,
    transition_begin: int = 0,
    staircase: bool = False,
    end_value: ArrayLike | None = None,
) -> Schedule:
    """Linear warmup to ``peak_value``, then :func:`exponential_decay` from it (its step 0 is ``warmup_steps``).

    ``init_value`` at step 0, ``peak_value`` at step ``warmup_steps`` (and up to ``warmup_steps +
    transition_begin``), then decaying by ``decay_rate`` every ``transition_steps`` steps.

    Example:
      >>> import gradax
      >>> schedule = gradax.warmup_exponential_decay_schedule(0.0, 1.0, 2, transition_steps=1, decay_rate=0.5)
      >>> [float(schedule(t)) for t in range(5)]
      [0.0, 0.5, 1.0, 0.5, 0.25]
    """
    return join_schedules(
        [
            _polynomial(init_value, peak_value, 1, warmup_steps, 0),
            exponential_decay(peak_value, transition_steps, decay_rate, transition_begin, staircase, end_value),
        ],
        [warmup_steps],
    )


def sgdr_schedule(cosine_kwargs: Iterable[dict[str, Any]]) -> Schedule:
    """Warm restarts: :func:`warmup_cosine_decay_schedule` cycles one after the other.

    Each dict of ``cosine_kwargs`` holds the arguments of one cycle; cycle ``i`` starts at the sum of the
    ``decay_steps`` of the cycles before it and restarts its own step count there.

    Example:
      >>> import gradax
      >>> cycle = dict(init_value=0.0, peak_value=1.0, warmup_steps=1, decay_steps=3)
      >>> schedule = gradax.sgdr_schedule([cycle, cycle])
      >>> [float(schedule(t)) for t in range(7)]
      [0.0, 1.0, 0.5, 0.0, 1.0, 0.5, 0.0]

    References:
      Loshchilov and Hutter, 2017, "SGDR: Stochastic Gradient Descent with Warm Restarts".
    """
    schedules, boundaries, start = [], [], 0
    for i, kwargs in enumerate(cosine_kwargs):
        if not isinstance(kwargs, dict) or "decay_steps" not in kwargs:
            raise argument_error(
                "sgdr_schedule",
                "cosine_kwargs",
                "dicts of warmup_cosine_decay_schedule arguments",
                kwargs,
                f"Entry {i} needs at least init_value, peak_value, warmup_steps and decay_steps",
            )
        schedules.append(warmup_cosine_decay_schedule(**kwargs))
        start += kwargs["decay_steps"]
        boundaries.append(start)
    if not schedules:
        raise argument_error("sgdr_schedule", "cosine_kwargs", "a non-empty list of dicts", cosine_kwargs)
    return join_schedules(schedules, boundaries[:-1])
