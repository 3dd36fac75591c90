"""Shared test configuration: CPU only, deterministic keys, Optax as an oracle."""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")

import jax  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture
def key():
    """A fresh PRNG key for each test."""
    return jax.random.key(0)


@pytest.fixture(autouse=True)
def _doctest_namespace(doctest_namespace):
    import jax.numpy as jnp

    import gradax

    doctest_namespace.update(gradax=gradax, jax=jax, jnp=jnp)
