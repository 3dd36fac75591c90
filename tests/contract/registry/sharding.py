"""Registry of gradax.sharding (issue 19): no transformations, only functions and the Fallback record."""

COVERED = {
    "sharding.state_shardings": "tests/sharding/test_state_shardings.py",
    "sharding.fallbacks": "tests/sharding/test_state_shardings.py",
    "sharding.Fallback": "tests/sharding/test_state_shardings.py",
    "sharding.bytes_per_device": "tests/sharding/test_state_shardings.py",
    "sharding.collective_bytes": "tests/sharding/test_state_shardings.py",
    "sharding.apply_updates_zero1": "tests/sharding/test_zero.py",
}
