"""Registry entries for gradax.contrib SOAP and Shampoo (issue 17). No Optax oracle: Optax 0.2.8 has neither; both are
checked against their torch references in tests/contrib/test_soap.py and tests/contrib/test_shampoo.py."""

from . import Entry

_SCHED = lambda c: 1e-2 / (1.0 + c)
_WD_SCHED = lambda c: 1e-3 * c

ENTRIES = [
    Entry("contrib.soap", {"learning_rate": 1e-2}, needs_params=True, oracle=False),
    Entry(
        "contrib.soap",
        {"learning_rate": _SCHED, "weight_decay": _WD_SCHED, "precondition_frequency": 2, "one_sided": True},
        needs_params=True,
        oracle=False,
    ),
    Entry("contrib.scale_by_soap", {"precondition_frequency": 2, "merge_dims": True}, oracle=False),
    Entry("contrib.shampoo", {"learning_rate": 1e-2}, needs_params=True, oracle=False),
    Entry(
        "contrib.shampoo",
        {
            "learning_rate": _SCHED,
            "weight_decay": _WD_SCHED,
            "block_size": 2,
            "start_preconditioning_step": 1,
            "preconditioning_compute_steps": 2,
            "graft_type": "rmsprop",
        },
        needs_params=True,
        oracle=False,
    ),
    Entry(
        "contrib.scale_by_shampoo",
        {"start_preconditioning_step": 2, "preconditioning_compute_steps": 1, "graft_type": "sgd", "merge_dims": True},
        oracle=False,
    ),
]

COVERED = {
    "contrib.SOAPState": "tests/contrib/test_soap.py",
    "contrib.ShampooState": "tests/contrib/test_shampoo.py",
}
