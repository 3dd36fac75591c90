"""Registry entries for the core contract (issue: foundation)."""

from . import Entry

ENTRIES = [
    Entry("identity"),
    Entry("set_to_zero"),
    Entry("scale", {"step_size": -0.3}),
    Entry("scale_by_schedule", {"step_size_fn": lambda c: 0.1 / (1.0 + c)}, inject=False),
    Entry("scale_by_learning_rate", {"learning_rate": 0.1}),
    Entry("scale_by_learning_rate", make=lambda ox: ox.scale_by_learning_rate(lambda c: 0.1 * 0.9**c), inject=False),
    Entry("trace", {"decay": 0.9}),
    Entry("trace", make=lambda ox: ox.trace(0.9, nesterov=True)),
    Entry("sgd", {"learning_rate": 0.1}),
    Entry("sgd", make=lambda ox: ox.sgd(lambda c: 0.1 / (1.0 + c), momentum=0.9, nesterov=True)),
    Entry("stateless", make=lambda ox: ox.stateless(lambda g, p: g)),
    Entry("stateless_with_tree_map", make=lambda ox: ox.stateless_with_tree_map(lambda g, p: 2 * g)),
    Entry("with_extra_args_support", make=lambda ox: ox.with_extra_args_support(ox.scale(2.0))),
    Entry("chain", make=lambda ox: ox.chain(ox.trace(0.5), ox.scale(-0.1))),
    Entry("named_chain", make=lambda ox: ox.named_chain(("t", ox.trace(0.5)), ("s", ox.scale(-0.1)))),
]

COVERED = {
    name: "tests/test_core.py"
    for name in [
        "EmptyState",
        "GradientTransformation",
        "GradientTransformationExtraArgs",
        "MaskOrFn",
        "OptState",
        "Params",
        "ScalarOrSchedule",
        "Schedule",
        "TransformInitFn",
        "TransformUpdateExtraArgsFn",
        "TransformUpdateFn",
        "Updates",
        "init_empty_state",
        "global_norm",
        "safe_increment",
        "safe_int32_increment",
        "safe_norm",
        "safe_root_mean_squares",
        "apply_updates",
        "incremental_update",
        "periodic_update",
        "TraceState",
        "ScaleByScheduleState",
        "ScaleState",
    ]
}
COVERED["state_dtype_policy"] = "tests/test_dtype_policy.py"
