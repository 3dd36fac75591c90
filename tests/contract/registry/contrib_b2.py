"""Registry entries for gradax.contrib, part B2 (reduce_on_plateau, sam, mechanize, momo, momo_adam)."""

import jax.numpy as jnp

from . import Entry


def _value(params, grads, lib):
    return {"value": jnp.asarray(1.0)}


ENTRIES = [
    Entry("contrib.reduce_on_plateau", {"patience": 2, "factor": 0.5}, extra_args=_value),
]

COVERED = {
    "contrib.ReduceLROnPlateauState": "tests/contrib/test_reduce_on_plateau.py",
}

ENTRIES += [
    Entry(
        "contrib.sam",
        make=lambda ox: ox.contrib.sam(ox.adam(1e-2), ox.chain(ox.contrib.normalize(), ox.adam(0.05))),
        needs_params=True,
    ),
]
COVERED["contrib.SAMState"] = "tests/contrib/test_sam.py"

ENTRIES += [
    Entry("contrib.mechanize", make=lambda ox: ox.contrib.mechanize(ox.adam(1e-2)), needs_params=True),
]
COVERED["contrib.MechanicState"] = "tests/contrib/test_mechanic.py"

ENTRIES += [
    Entry("contrib.momo", {"learning_rate": 0.5}, needs_params=True, extra_args=_value),
]
COVERED["contrib.MomoState"] = "tests/contrib/test_momo.py"

ENTRIES += [
    Entry("contrib.momo_adam", {"learning_rate": 0.1}, needs_params=True, extra_args=_value),
]
COVERED["contrib.MomoAdamState"] = "tests/contrib/test_momo.py"
