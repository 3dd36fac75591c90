"""Registry of gradax.microbatching (no gradient transformations: functions, an enum and a dataclass)."""

ENTRIES = []

_TEST = "tests/microbatching/test_microbatching.py"

COVERED = {
    "microbatch": _TEST,
    "microbatching.AccumulationType": _TEST,
    "microbatching.Accumulator": _TEST,
    "microbatching.micro_grad": _TEST,
    "microbatching.micro_vmap": _TEST,
    "microbatching.microbatch": _TEST,
    "microbatching.reshape_batch_axis": _TEST,
}
