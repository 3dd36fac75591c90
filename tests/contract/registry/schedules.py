"""Registry entries for tree utilities, schedules and inject_hyperparams."""

from . import Entry

ENTRIES = [
    Entry("inject_hyperparams", make=lambda ox: ox.inject_hyperparams(ox.sgd)(learning_rate=0.1, momentum=0.9)),
    Entry(
        "inject_stateful_hyperparams",
        make=lambda ox: ox.inject_stateful_hyperparams(ox.sgd)(learning_rate=0.1, momentum=0.9),
        inject=False,
    ),
]

_SCHEDULES = [
    "constant_schedule",
    "cosine_decay_schedule",
    "cosine_onecycle_schedule",
    "exponential_decay",
    "join_schedules",
    "linear_onecycle_schedule",
    "linear_schedule",
    "piecewise_constant_schedule",
    "piecewise_interpolate_schedule",
    "polynomial_schedule",
    "sgdr_schedule",
    "warmup_constant_schedule",
    "warmup_cosine_decay_schedule",
    "warmup_exponential_decay_schedule",
]
_INJECT = ["InjectHyperparamsState", "InjectStatefulHyperparamsState", "WrappedSchedule"]

COVERED = {}
COVERED.update({name: "tests/schedules/test_schedules.py" for name in _SCHEDULES})
COVERED.update({f"schedules.{name}": "tests/schedules/test_schedules.py" for name in _SCHEDULES + ["Schedule"]})
COVERED.update({name: "tests/schedules/test_inject.py" for name in _INJECT})
COVERED.update({f"schedules.{name}": "tests/schedules/test_inject.py" for name in _INJECT + ["StatefulSchedule"]})
COVERED.update(
    {
        "schedules.inject_hyperparams": "tests/schedules/test_inject.py",
        "schedules.inject_stateful_hyperparams": "tests/schedules/test_inject.py",
    }
)
_TREE = (
    "add add_scale allclose batch_shape bias_correction cast cast_like clip conj div dtype full_like get "
    "get_all_with_path map_params max min mul norm ones_like random_like real scale set size split_key_like sub sum "
    "unwrap_random_key_data update_infinity_moment update_moment update_moment_per_elem_norm vdot where zeros_like"
).split()
COVERED.update({f"tree.{name}": "tests/tree/test_tree.py" for name in _TREE})
COVERED.update({f"tree_utils.tree_{name}": "tests/tree/test_tree.py" for name in _TREE})
COVERED["tree_utils.NamedTupleKey"] = "tests/tree/test_tree.py"
COVERED["tree_map_params"] = "tests/tree/test_tree.py"
