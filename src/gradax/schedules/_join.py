"""Joining schedules end to end."""

from __future__ import annotations

from collections.abc import Sequence

import jax.numpy as jnp
from jax.typing import ArrayLike

from .._base import Schedule
from .._checks import argument_error


def join_schedules(schedules: Sequence[Schedule], boundaries: Sequence[int]) -> Schedule:
    """Runs ``schedules[0]`` until ``boundaries[0]``, then ``schedules[1]`` (restarted at its own step 0), ...

    At step ``boundaries[i]`` exactly, schedule ``i + 1`` is in effect and receives step 0: the value is
    ``schedules[i + 1](step - boundaries[i])``.

    Args:
      schedules: the schedules, in order.
      boundaries: ``len(schedules) - 1`` non-decreasing steps at which the next schedule takes over.

    Example:
      >>> import gradax
      >>> schedule = gradax.join_schedules([gradax.constant_schedule(1.0), gradax.linear_schedule(0.5, 0.0, 2)], [2])
      >>> [float(schedule(t)) for t in range(5)]
      [1.0, 1.0, 0.5, 0.25, 0.0]
    """
    schedules = list(schedules)
    boundaries = list(boundaries)
    if not schedules:
        raise argument_error("join_schedules", "schedules", "a non-empty sequence of schedules", schedules)
    if len(boundaries) != len(schedules) - 1:
        raise argument_error(
            "join_schedules",
            "boundaries",
            f"one step fewer than schedules ({len(schedules) - 1})",
            boundaries,
            "Pass the step at which each schedule after the first takes over",
        )
    for earlier, later in zip(boundaries, boundaries[1:]):
        try:
            decreasing = bool(later < earlier)
        except Exception:  # traced boundaries cannot be checked
            decreasing = False
        if decreasing:
            raise argument_error("join_schedules", "boundaries", "non-decreasing", boundaries, "Sort the boundaries")

    def schedule(step: ArrayLike) -> ArrayLike:
        value = schedules[0](step)
        for boundary, following in zip(boundaries, schedules[1:]):
            value = jnp.where(jnp.less(step, boundary), value, following(step - boundary))
        return value

    return schedule
