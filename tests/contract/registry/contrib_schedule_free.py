"""Registry entries for contrib's schedule-free optimizers: ``schedule_free`` (wrapping any base optimizer),
``schedule_free_sgd`` and ``schedule_free_adamw``; ``schedule_free_eval_params`` is covered by its own test."""

from . import Entry

_SCHED = lambda c: 1e-2 / (1.0 + c)
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
