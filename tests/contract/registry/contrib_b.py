"""Registry entries for gradax.contrib, part B (schedule_free, muon, reduce_on_plateau, sam, mechanize, momo,
normalize, prodigy, sophia, split_real_and_imaginary)."""

import jax

from . import Entry

_SCHED = lambda c: 1e-2 / (1.0 + c)  # noqa: E731
_NS_STATIC = "ns_steps is a static loop length: use static_args=('ns_steps',) (tests/contrib/test_muon.py)"
_SF_SCHED = "gradax evaluates the schedule from step 0, Optax 0.2.8 from step 1 (docs/differences.md)"

ENTRIES = [
    # schedule-free
    Entry("contrib.schedule_free_sgd", {"learning_rate": 0.1}, needs_params=True),
    Entry("contrib.schedule_free_sgd", {"learning_rate": 0.1, "weight_decay": 1e-2, "b1": 0.8}, needs_params=True),
    Entry("contrib.schedule_free_adamw", {"learning_rate": 1e-2, "weight_decay": 1e-3}, needs_params=True),
    Entry(
        "contrib.schedule_free_adamw",
        make=lambda ox: ox.contrib.schedule_free_adamw(1e-2, warmup_steps=3),
        needs_params=True,
        skip={"oracle": _SF_SCHED},
    ),
    Entry(
        "contrib.schedule_free",
        make=lambda ox: ox.contrib.schedule_free(ox.sgd(0.1), 0.1, b1=0.5),
        needs_params=True,
    ),
    Entry(
        "contrib.schedule_free",
        make=lambda ox: ox.contrib.schedule_free(ox.sgd(_SCHED), _SCHED),
        needs_params=True,
        skip={"oracle": _SF_SCHED},
    ),
]

COVERED = {
    "contrib.ScheduleFreeState": "tests/contrib/test_schedule_free.py",
    "contrib.schedule_free_eval_params": "tests/contrib/test_schedule_free.py",
}

ENTRIES += [
    # Muon: NS in float32 (no complex), rtol looser for the 5 matrix products
    Entry(
        "contrib.muon",
        {"learning_rate": 1e-2},
        needs_params=True,
        rtol=2e-5,
        atol=2e-6,
        skip={"inject": _NS_STATIC},
    ),
    Entry(
        "contrib.muon",
        make=lambda ox: ox.contrib.muon(_SCHED, weight_decay=1e-3),
        needs_params=True,
        rtol=2e-5,
        atol=2e-6,
    ),
    Entry(
        "contrib.scale_by_muon",
        make=lambda ox: ox.partition(
            {"m": ox.contrib.scale_by_muon(), "o": ox.identity()},
            lambda p: jax.tree.map(lambda x: "m" if x.ndim == 2 else "o", p),
        ),
        rtol=2e-5,
        atol=2e-6,
        skip={
            "awkward_trees": "scale_by_muon takes matrices only (muon routes the rest to AdamW)",
            "oracle": "Optax 0.2.8 scale_by_muon fails inside partition (MaskedNode); compared through contrib.muon",
        },
    ),
]
COVERED.update(
    {
        "contrib.MuonDimensionNumbers": "tests/contrib/test_muon.py",
        "contrib.MuonState": "tests/contrib/test_muon.py",
    }
)
