"""Counting XLA compilations in a test."""

import contextlib

import jax

_EVENT = "/jax/core/compile/backend_compile_duration"


@contextlib.contextmanager
def backend_compiles():
    """The names of the functions XLA compiles inside the block (jax.monitoring's backend-compile events:
    ``"jit(f)"`` for a jitted function ``f``).

    Unlike a jitted function's ``_cache_size()`` (its entries in a process-wide LRU of compiled calls, which a long
    test run evicts: it read 0 after a step's fourth call), this does not depend on what else the process compiled.
    """
    names = []

    def listener(event, duration, **kwargs):
        if event == _EVENT:
            names.append(kwargs.get("fun_name", ""))

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        yield names
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
