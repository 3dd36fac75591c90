"""Every contrib optimizer with a weight decay takes a schedule for it (gradax.contrib; Optax 0.2.8 takes numbers).

A constant schedule gives the same updates as the number; the contract battery's schedules_everywhere test covers
the registry entries built from keyword arguments, this file every factory (wrappers and extra arguments included).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradax

C = gradax.contrib

FACTORIES = {
    "acprop": lambda wd: C.acprop(1e-2, weight_decay=wd),
    "ademamix": lambda wd: C.ademamix(1e-2, weight_decay=wd),
    "simplified_ademamix": lambda wd: C.simplified_ademamix(1e-2, weight_decay=wd),
    "cocob": lambda wd: C.cocob(weight_decay=wd),
    "dadapt_adamw": lambda wd: C.dadapt_adamw(estim_lr0=1e-2, weight_decay=wd),
    "dog": lambda wd: C.dog(weight_decay=wd),
    "dowg": lambda wd: C.dowg(weight_decay=wd),
    "galore": lambda wd: C.galore(1e-2, rank=1, weight_decay=wd),
    "madgrad": lambda wd: C.madgrad(1e-2, weight_decay=wd),
    "mechanize": lambda wd: C.mechanize(gradax.sgd(0.1), weight_decay=wd, s_init=0.1),
    "momo": lambda wd: C.momo(weight_decay=wd),
    "momo_adam": lambda wd: C.momo_adam(weight_decay=wd),
    "muon": lambda wd: C.muon(1e-2, weight_decay=wd, adam_weight_decay=wd),
    "prodigy": lambda wd: C.prodigy(weight_decay=wd),
    "schedule_free_adamw": lambda wd: C.schedule_free_adamw(0.1, weight_decay=wd),
    "schedule_free_sgd": lambda wd: C.schedule_free_sgd(0.1, weight_decay=wd),
    "sophia": lambda wd: C.sophia(1e-2, weight_decay=wd),
}


def _objective(q):
    return 0.5 * sum(jnp.sum(x**2) for x in jax.tree.leaves(q))


def _updates(tx, steps=3):
    params = {"w": jnp.linspace(-1.0, 1.0, 12).reshape(4, 3), "b": jnp.arange(3.0)}
    state, out = tx.init(params), []
    for _ in range(steps):
        grads = jax.tree.map(lambda x: 0.1 * x + 0.3, params)
        updates, state = tx.update(grads, state, params, value=_objective(params), obj_fn=_objective)
        params = gradax.apply_updates(params, updates)
        out.append(updates)
    return out


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_constant_weight_decay_schedule_equals_number(name):
    make = FACTORIES[name]
    for a, b in zip(_updates(make(0.05)), _updates(make(lambda count: 0.05))):
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
            np.testing.assert_allclose(x, y, rtol=1e-6, atol=1e-7)
