"""Registry entries for the contrib optimizers and wrappers that set their own step size: the parameter-free ones
(COCOB, DoG, DoWG, D-Adaptation AdamW, Prodigy, Mechanic's ``mechanize``), the Polyak-type Momo and Momo-Adam (which
read the loss ``value``), and ``reduce_on_plateau`` (a step-size scale driven by the loss ``value``)."""

import jax.numpy as jnp

from . import Entry

_SCHED = lambda c: 1e-2 / (1.0 + c)


def _value(params, grads, lib):
    return {"value": jnp.asarray(1.0)}


ENTRIES = [
    Entry("contrib.scale_by_cocob", {"alpha": 100.0}, needs_params=True),
    Entry("contrib.cocob", {"learning_rate": 1.0, "weight_decay": 1e-3}, needs_params=True),
    Entry("contrib.cocob", make=lambda ox: ox.contrib.cocob(_SCHED), needs_params=True, inject=False),
    Entry("contrib.dog", {"learning_rate": 1.0}, needs_params=True),
    Entry(
        "contrib.dog",
        make=lambda ox: ox.contrib.dog(_SCHED, init_step=("distance", 0.1)),
        needs_params=True,
        inject=False,
    ),
    Entry("contrib.dowg", {"learning_rate": 1.0, "weight_decay": 1e-3}, needs_params=True),
    # rtol 1e-4: d is a ratio of tree-wide sums (summation order differs from Optax's)
    Entry("contrib.dadapt_adamw", {"learning_rate": 1.0, "weight_decay": 1e-3}, needs_params=True),
    Entry("contrib.prodigy", {"learning_rate": 1.0, "estim_lr0": 1e-3}, needs_params=True),
    Entry(
        "contrib.prodigy",
        make=lambda ox: ox.contrib.prodigy(lambda c: 1.0 / (1.0 + c), weight_decay=1e-2, safeguard_warmup=True),
        needs_params=True,
        inject=False,
    ),
    Entry("contrib.mechanize", make=lambda ox: ox.contrib.mechanize(ox.adam(1e-2)), needs_params=True),
    Entry("contrib.momo", {"learning_rate": 0.5}, needs_params=True, extra_args=_value),
    Entry("contrib.momo_adam", {"learning_rate": 0.1}, needs_params=True, extra_args=_value),
    Entry("contrib.reduce_on_plateau", {"patience": 2, "factor": 0.5}, extra_args=_value),
]

COVERED = {
    "contrib.COCOBState": "tests/contrib/test_cocob.py",
    "contrib.DoGState": "tests/contrib/test_dog.py",
    "contrib.DoWGState": "tests/contrib/test_dog.py",
    "contrib.DAdaptAdamWState": "tests/contrib/test_dadapt_adamw.py",
    "contrib.ProdigyState": "tests/contrib/test_prodigy.py",
    "contrib.MechanicState": "tests/contrib/test_mechanic.py",
    "contrib.MomoState": "tests/contrib/test_momo.py",
    "contrib.MomoAdamState": "tests/contrib/test_momo.py",
    "contrib.ReduceLROnPlateauState": "tests/contrib/test_reduce_on_plateau.py",
}
