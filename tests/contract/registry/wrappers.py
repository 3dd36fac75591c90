"""Registry entries for wrappers and composition (issue: wrappers and composition)."""

import jax

from . import Entry


def _all_true(p):
    return jax.tree.map(lambda _: True, p)


def _big(p):
    return jax.tree.map(lambda x: x.size > 1, p)


ENTRIES = [
    Entry("masked", make=lambda ox: ox.masked(ox.sgd(0.1), _all_true), inject=False),
    Entry("masked", make=lambda ox: ox.masked(ox.sgd(0.1, momentum=0.9), _big), inject=False),
    Entry(
        "partition",
        make=lambda ox: ox.partition(
            {"a": ox.sgd(0.1), "b": ox.trace(0.5)}, lambda p: jax.tree.map(lambda x: "a" if x.size > 1 else "b", p)
        ),
        inject=False,
    ),
    Entry(
        "multi_transform",
        make=lambda ox: ox.multi_transform({"a": ox.sgd(0.1)}, lambda p: jax.tree.map(lambda _: "a", p)),
        inject=False,
    ),
    Entry("freeze", make=lambda ox: ox.freeze(_big), inject=False),
    Entry(
        "selective_transform", make=lambda ox: ox.selective_transform(ox.sgd(0.1, 0.9), freeze_mask=False), inject=False
    ),
    Entry("MultiSteps", make=lambda ox: ox.MultiSteps(ox.sgd(0.1), 2).gradient_transformation(), inject=False),
    Entry(
        "MultiSteps",
        make=lambda ox: ox.MultiSteps(
            ox.sgd(0.1, 0.9), 3, should_skip_update_fn=ox.skip_not_finite
        ).gradient_transformation(),
        inject=False,
    ),
    Entry("apply_every", {"k": 2}),
    Entry("apply_if_finite", make=lambda ox: ox.apply_if_finite(ox.sgd(0.1, 0.9), 2), inject=False),
    Entry("conditionally_mask", make=lambda ox: ox.conditionally_mask(ox.sgd(0.1), lambda s: s % 2 == 0), inject=False),
    Entry(
        "conditionally_transform",
        make=lambda ox: ox.conditionally_transform(ox.sgd(0.1), lambda s: s % 2 == 0),
        inject=False,
    ),
    Entry("flatten", make=lambda ox: ox.flatten(ox.sgd(0.1, 0.9)), inject=False),
    Entry("ema", {"decay": 0.9}),
    Entry("ema", {"decay": 0.9, "debias": False}),
    Entry(
        "monitor",
        make=lambda ox: ox.monitor({"n": lambda u: sum(jax.numpy.sum(x) for x in jax.tree.leaves(u))}),
        inject=False,
        skip={"dtypes": "the measurement is a float32 scalar whatever the params' dtype"},
    ),
    Entry("snapshot", make=lambda ox: ox.snapshot("n", lambda u: len(jax.tree.leaves(u))), inject=False),
    Entry(
        "measure_with_ema",
        make=lambda ox: ox.chain(
            ox.monitor({"e": ox.measure_with_ema(lambda u: sum(jax.numpy.sum(x) for x in jax.tree.leaves(u)), 0.9)})
        ),
        inject=False,
    ),
    Entry("transforms.masked", make=lambda ox: ox.transforms.masked(ox.sgd(0.1), _all_true), inject=False),
    Entry("transforms.freeze", make=lambda ox: ox.transforms.freeze(_big), inject=False),
]

_TESTS = "tests/transforms/"
COVERED = {
    "MaskedNode": _TESTS + "test_masking.py",
    "MaskedState": _TESTS + "test_masking.py",
    "PartitionState": _TESTS + "test_partition.py",
    "MultiTransformState": _TESTS + "test_partition.py",
    "path_labels": _TESTS + "test_partition.py",
    "path_mask": _TESTS + "test_partition.py",
    "describe_labels": _TESTS + "test_partition.py",
    "MultiStepsState": _TESTS + "test_multisteps.py",
    "ShouldSkipUpdateFunction": _TESTS + "test_multisteps.py",
    "skip_not_finite": _TESTS + "test_multisteps.py",
    "skip_large_updates": _TESTS + "test_multisteps.py",
    "ApplyEvery": _TESTS + "test_multisteps.py",
    "EmaState": _TESTS + "test_multisteps.py",
    "ApplyIfFiniteState": _TESTS + "test_conditionality.py",
    "ConditionallyMaskState": _TESTS + "test_conditionality.py",
    "ConditionallyTransformState": _TESTS + "test_conditionality.py",
    "lookahead": _TESTS + "test_lookahead.py",
    "LookaheadParams": _TESTS + "test_lookahead.py",
    "LookaheadState": _TESTS + "test_lookahead.py",
    "MonitorState": _TESTS + "test_monitoring.py",
    "SnapshotState": _TESTS + "test_monitoring.py",
}
_FILE = {
    "masked": "test_masking.py",
    "chain": "test_masking.py",
    "named_chain": "test_masking.py",
    "partition": "test_partition.py",
    "freeze": "test_partition.py",
    "selective_transform": "test_partition.py",
    "MultiSteps": "test_multisteps.py",
    "trace": "test_multisteps.py",
    "TraceState": "test_multisteps.py",
    "ema": "test_multisteps.py",
    "apply_if_finite": "test_conditionality.py",
    "conditionally_mask": "test_conditionality.py",
    "conditionally_transform": "test_conditionality.py",
    "ConditionFn": "test_conditionality.py",
    "flatten": "test_lookahead.py",
    "monitor": "test_monitoring.py",
    "snapshot": "test_monitoring.py",
    "measure_with_ema": "test_monitoring.py",
}
for _name, _file in list(COVERED.items()) + [(n, _TESTS + f) for n, f in _FILE.items()]:
    if _name not in ("lookahead", "LookaheadParams", "LookaheadState", "ApplyEvery", "MultiTransformState"):
        COVERED["transforms." + _name] = _file
