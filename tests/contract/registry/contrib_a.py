"""Registry entries for gradax.contrib, part A (acprop, ademamix, adopt, cocob, dadapt_adamw, privacy, dog, dowg,
galore, hutchinson, madgrad)."""

from . import Entry

_SCHED = lambda c: 1e-2 / (1.0 + c)  # noqa: E731

ENTRIES = [
    # ACProp: Optax 0.2.8 uses g - m_{t-1} in the residual (docs/differences.md); checked in tests/contrib/test_acprop.py
    Entry("contrib.scale_by_acprop", {"b1": 0.9, "b2": 0.999}, oracle=False),
    Entry("contrib.acprop", {"learning_rate": 1e-2, "weight_decay": 1e-3}, needs_params=True, oracle=False),
    Entry("contrib.acprop", make=lambda ox: ox.contrib.acprop(_SCHED), oracle=False, inject=False),
]

COVERED = {}
