"""Shared test configuration: CPU only, deterministic keys, Optax as an oracle."""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")
# the torch references on one thread: two pytest workers share CI's two cores, and torch's OpenMP threads spin
# against the other worker (the benchmarks set their own thread counts)
os.environ.setdefault("OMP_NUM_THREADS", "1")

import jax
import pytest


@pytest.fixture
def key():
    """A fresh PRNG key for each test."""
    return jax.random.key(0)


@pytest.fixture(autouse=True)
def _doctest_namespace(doctest_namespace):
    import jax.numpy as jnp

    import gradax

    doctest_namespace.update(gradax=gradax, jax=jax, jnp=jnp)


_BATTERY = "tests/contract/test_battery.py"


def pytest_configure(config):
    # xdist registers this marker itself; without xdist (-p no:xdist) it is only a grouping hint
    config.addinivalue_line("markers", "xdist_group(name): run with the other tests of this group on one worker")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Work units for `pytest -n N --dist loadgroup` (the Makefile's): one per test file, as `--dist loadfile` gives,
    except the contract battery, the longest file by far, which is split by entry into two units (and its sharding
    subprocess into a third) so that both workers share it."""
    import zlib

    for item in items:
        path = item.nodeid.split("::", 1)[0]
        group = path
        if path == _BATTERY:
            callspec = getattr(item, "callspec", None)
            entry = callspec.params.get("entry") if callspec is not None else None
            group = f"{path}:{zlib.crc32(callspec.id.encode()) % 2}" if entry is not None else f"{path}:rest"
        item.add_marker(pytest.mark.xdist_group(group))
