"""Every registered optimizer takes a schedule wherever it takes a learning rate (or a weight decay).

For each registry entry built from keyword arguments whose factory has a ``learning_rate`` (or ``weight_decay``)
parameter, replacing the number by a constant schedule of the same value gives the same updates.
"""

from __future__ import annotations

import inspect

import jax
import pytest

import gradax

from ._helpers import assert_trees_close, simple_tree
from .registry import entries
from .test_battery import _grads, _unrolled, _update_fn

SCHEDULABLE = ("learning_rate", "weight_decay")


def _cases():
    out = []
    for entry in entries():
        if entry.make is not None:
            continue
        params = inspect.signature(entry.factory(gradax)).parameters
        for name in SCHEDULABLE:
            value = entry.kwargs.get(name, params[name].default if name in params else None)
            if f"schedule_{name}" in entry.skip:  # the entry says why this argument takes no schedule
                continue
            if name in params and isinstance(value, (int, float)) and not isinstance(value, bool):
                out.append(pytest.param(entry, name, value, id=f"{entry.id}-{name}"))
    return out


@pytest.mark.parametrize(("entry", "name", "value"), _cases())
def test_constant_schedule_equals_number(entry, name, value):
    as_number = entry.factory(gradax)(**entry.kwargs)
    as_schedule = entry.factory(gradax)(**{**entry.kwargs, name: lambda count, v=value: v})
    params = simple_tree()
    grads = _grads(simple_tree, params["w"].dtype, 3)

    @jax.jit
    def both(params, grads):
        outs = []
        for tx in (as_number, as_schedule):
            ups, _, _ = _unrolled(_update_fn(entry, tx), tx.init(params), params, grads)
            outs.append(ups)
        return outs

    number_updates, schedule_updates = both(params, grads)
    assert_trees_close(
        schedule_updates, number_updates, rtol=1e-6, atol=1e-7, what=f"{entry.id} with {name} as a schedule"
    )
