"""The fused-step interface (``gradax._fused_step``) and the one table of kernel scalars (``gradax._kernels._scalars``):
wrappers find a fused step by name (``flat_step_of``, ``is_fused_factory``), a factory of one's own declared with
``fused_factory`` keeps its step under ``inject_hyperparams``, and the C enums come from the Python table (no enum
kept by hand in a C source; the generated header is part of the library's cache key)."""

import copy
import re
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradax
from gradax import _kernels
from gradax._fused_step import FusedGradientTransformation, flat_step_of, fused_factory, is_fused_factory
from gradax._kernels import _scalars


def test_the_fused_factories_are_declared():
    for factory in (gradax.fused.adamw, gradax.fused.lion, gradax.fused.adafactor):
        assert is_fused_factory(factory)
    assert not is_fused_factory(gradax.adamw)
    assert not is_fused_factory(1)  # not weakly referenceable: not declared


def test_a_declared_factory_keeps_its_step_under_inject_hyperparams():
    calls = []

    @fused_factory
    def my_sgd(learning_rate: float) -> FusedGradientTransformation:
        tx = gradax.sgd(learning_rate)

        def step(params, state, grads):
            calls.append(learning_rate)
            updates, state = tx.update(grads, state, params)
            return gradax.apply_updates(params, updates), state

        return FusedGradientTransformation(tx.init, tx.update, step)

    assert my_sgd.__name__ == "my_sgd"  # the decorator returns the factory itself
    opt = gradax.inject_hyperparams(my_sgd)(learning_rate=0.5)
    assert isinstance(opt, FusedGradientTransformation)
    params = {"w": jnp.ones(2)}
    new_params, state = opt.step(params, opt.init(params), {"w": jnp.ones(2)})
    np.testing.assert_array_equal(new_params["w"], [0.5, 0.5])
    assert len(calls) == 1 and int(state.count) == 1


def test_flat_step_of_and_copies():
    opt = gradax.fused.adamw(learning_rate=0.1)
    assert flat_step_of(opt) is opt.flat_step is not None
    assert flat_step_of(gradax.adamw(0.1)) is None
    assert flat_step_of(gradax.fused.adafactor(learning_rate=0.1)) is None  # no flat kernel
    assert copy.copy(opt).flat_step is opt.flat_step
    # a copy made with _replace (whose update may differ) has neither the kernel step nor a flat step
    other = opt._replace(init=opt.init)
    assert flat_step_of(other) is None
    params = {"w": jnp.ones(2)}
    text = jax.jit(other.step).lower(params, other.init(params), params).as_text()
    assert "gradax_" not in text
    flat = gradax.flatten(opt)
    assert isinstance(flat, FusedGradientTransformation) and flat_step_of(flat) is None
    assert not isinstance(gradax.flatten(gradax.adamw(0.1)), FusedGradientTransformation)


_SOURCES = {path.name: path.read_text() for path in (*_kernels.SOURCES, *_kernels.HEADERS)}


def test_the_c_enums_come_from_the_table():
    header = _scalars.header()
    for table in _scalars.TABLES:
        body = re.search(rf"enum {table.enum_name} \{{(.*?)\}};", header, re.S).group(1)
        constants = re.findall(r"^\s+(\w+)", body, re.M)
        assert constants == [table.prefix + name.upper() for name in table.names] + [table.count]
        for name, text in _SOURCES.items():  # no source keeps its own copy of the order
            assert f"enum {table.enum_name} {{" not in text, name
        used = " ".join(_SOURCES.values())
        for constant in constants:  # and every scalar of the table is read by a kernel
            assert re.search(rf"\b{constant}\b", used), constant
    assert _kernels.ADAMW_SCALARS == _scalars.ADAMW.names
    assert _kernels.LION_SCALARS == _scalars.LION.names
    assert _kernels.ADAFACTOR_SCALARS == _scalars.ADAFACTOR.names


@pytest.mark.skipif(not shutil.which("cc"), reason="no C compiler: the cache key asks the compiler's version")
def test_the_generated_header_is_part_of_the_cache_key(monkeypatch):
    cc = shutil.which("cc")
    key = _kernels._key(cc)
    monkeypatch.setattr(_scalars, "header", lambda: "/* another order */\n")
    assert _kernels._key(cc) != key


def test_the_kernel_step_is_the_one_compiled():
    status = gradax.fused.kernel_status()
    if not status.available:
        pytest.skip(f"the CPU kernels are not available: {status.reason}")
    assert "fused_kernels-" in status.path
    opt = gradax.fused.adamw(learning_rate=0.1)
    params = {"w": jnp.ones(3)}
    text = jax.jit(opt.step).lower(params, opt.init(params), params).as_text()
    assert "gradax_adamw_step" in text
