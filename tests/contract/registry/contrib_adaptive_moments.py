"""Registry entries for the contrib optimizers that rework Adam's moments: ACProp, ADOPT, AdEMAMix and its simplified
form, and MADGRAD (momentumized dual averaging with a cube-root second moment)."""

from . import Entry

_SCHED = lambda c: 1e-2 / (1.0 + c)

ENTRIES = [
    # ACProp: Optax 0.2.8 uses g - m_{t-1} in the residual (docs/differences.md); checked in tests/contrib/test_acprop.py
    Entry("contrib.scale_by_acprop", {"b1": 0.9, "b2": 0.999}, oracle=False),
    Entry("contrib.acprop", {"learning_rate": 1e-2, "weight_decay": 1e-3}, needs_params=True, oracle=False),
    Entry("contrib.acprop", make=lambda ox: ox.contrib.acprop(_SCHED), needs_params=True, oracle=False, inject=False),
    Entry("contrib.scale_by_adopt", {"b1": 0.9, "b2": 0.999}),
    Entry("contrib.adopt", {"learning_rate": 1e-2}),
    Entry("contrib.adopt", make=lambda ox: ox.contrib.adopt(_SCHED, nesterov=True), inject=False),
    Entry("contrib.scale_by_madgrad", {"learning_rate": 1e-2}, needs_params=True),
    Entry("contrib.madgrad", {"learning_rate": 1e-2, "weight_decay": 1e-3}, needs_params=True),
    Entry("contrib.madgrad", make=lambda ox: ox.contrib.madgrad(_SCHED), needs_params=True, inject=False),
    Entry("contrib.scale_by_ademamix", {"b3": 0.99, "alpha": 2.0}),
    Entry("contrib.ademamix", {"learning_rate": 1e-2, "weight_decay": 1e-3}, needs_params=True),
    Entry("contrib.ademamix", make=lambda ox: ox.contrib.ademamix(_SCHED, b3=_SCHED), needs_params=True, inject=False),
    Entry("contrib.scale_by_simplified_ademamix", {"alpha": 1.0}),
    Entry("contrib.simplified_ademamix", {"learning_rate": 1e-2, "weight_decay": 1e-3}, needs_params=True),
]

COVERED = {
    "contrib.ScaleByAdemamixState": "tests/contrib/test_ademamix.py",
    "contrib.ScaleBySimplifiedAdEMAMixState": "tests/contrib/test_ademamix.py",
    "contrib.MadgradState": "tests/contrib/test_madgrad.py",
}
