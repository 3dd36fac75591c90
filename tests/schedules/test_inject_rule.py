"""inject_hyperparams' rule applied to every parameter of every registered factory.

The rule (``gradax/schedules/_inject.py``): an argument is a hyperparameter when its parameter takes numbers and the
value is a number, a numeric array or a callable (a schedule); ``static_args`` and PRNG keys never are. Here every
parameter of every factory of the contract registry is sorted by its evaluated annotation into the kinds the library
uses (hyperparameters annotated ``ScalarOrSchedule``/``ArrayLike``/``float``, masks, functions, sizes, flags, keys,
dtypes...), and the rule's verdict on probe values is checked against what that annotation says. An annotation that
fits no kind fails the test: the author of a new factory decides which kind its parameter is.
"""

import collections.abc
import functools
import inspect
import types
import typing

import equinox as eqx
import jax
import jax.numpy as jnp
import pytest
from jax.typing import ArrayLike

import gradax
from gradax._base import ScalarOrSchedule
from gradax.schedules import _inject
from tests.contract.registry import entries

HYPERPARAMETER = "hyperparameter"  # takes a number, an array or a schedule: injected
STATIC = "static"  # passed to the factory unchanged, whatever the value
UNTYPED = "untyped"  # the annotation says nothing: the documented fallback decides

# the annotations of hyperparameters in gradax's factories
HYPERPARAMETER_ANNOTATIONS = [
    ScalarOrSchedule,
    ScalarOrSchedule | None,
    ArrayLike,
    ArrayLike | None,
    float,
    float | None,
    ArrayLike | collections.abc.Mapping[str, ArrayLike],  # a scale per group; a mapping value stays static
]
KEY_WORDS = ("key", "seed", "rng")


def is_key_name(name):
    return any(name == w or name.endswith("_" + w) for w in KEY_WORDS)


def _members(annotation):
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return [m for a in typing.get_args(annotation) for m in _members(a)]
    return [annotation]


def _type_hints(factory):
    target = factory.__init__ if isinstance(factory, type) else factory
    while isinstance(target, functools.partial):
        target = target.func
    return typing.get_type_hints(target)


def expected_kind(name, annotation):
    """What the annotation (None: no annotation) says this parameter is."""
    if is_key_name(name):
        return STATIC
    if annotation is None or all(m in (typing.Any, type(None)) for m in _members(annotation)):
        return UNTYPED
    if any(annotation == a for a in HYPERPARAMETER_ANNOTATIONS):
        return HYPERPARAMETER
    members = _members(annotation)
    if float in members or jax.Array in members:
        pytest.fail(f"{name}: {annotation!r} takes numbers; add it to HYPERPARAMETER_ANNOTATIONS if it is one")
    return STATIC  # int, bool, str, Literal, dtype, a transformation, a Callable (a bare Schedule too), a mask...


def _parameters():
    seen = set()
    for entry in entries():
        factory = entry.factory(gradax)
        if entry.name in seen or not callable(factory):
            continue
        seen.add(entry.name)
        hints = _type_hints(factory)
        signature = inspect.signature(factory, eval_str=True)
        for name, param in signature.parameters.items():
            if param.kind not in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                yield entry.name, name, param, hints.get(name)


PARAMETERS = list(_parameters())


class MaskModule(eqx.Module):
    """A callable pytree (an Equinox mask): a schedule where a number is taken, data elsewhere."""

    keep: jax.Array

    def __call__(self, params):
        return jax.tree.map(lambda _: True, params)


def _verdict(name, param, value):
    return _inject._kind(value, _inject.takes_numbers(name, param))


def test_every_registered_parameter_is_classified_as_its_annotation_says():
    schedule = gradax.linear_schedule(0.1, 0.0, 10)
    callable_mask = MaskModule(jnp.ones(1))
    checked = collections.Counter()
    for factory, name, param, annotation in PARAMETERS:
        where = f"{factory}({name}: {annotation!r})"
        kind = expected_kind(name, annotation)
        checked[kind] += 1
        if kind == HYPERPARAMETER:
            assert _inject.takes_numbers(name, param), where
            for value in (0.5, 3, jnp.float32(0.5), jnp.asarray(0.5, jnp.bfloat16)):
                assert _verdict(name, param, value) == _inject._NUMERIC, (where, value)
            assert _verdict(name, param, schedule) == _inject._SCHEDULE, where
            assert _verdict(name, param, True) == _inject._STATIC, where
        elif kind == STATIC:
            assert not _inject.takes_numbers(name, param), where
            for value in (0.5, 3, jnp.ones(2), schedule, callable_mask, jax.random.key(0)):
                assert _verdict(name, param, value) == _inject._STATIC, (where, value)
        else:  # the fallback: masks, labels and functions stay data; numbers are hyperparameters by their default
            callable_data = "mask" in name or "labels" in name or name.endswith("fn")
            float_default = isinstance(param.default, float) or param.default is param.empty
            assert _inject.takes_numbers(name, param) == (float_default and not callable_data), where
            if callable_data:
                assert _verdict(name, param, callable_mask) == _inject._STATIC, where
    # the registry holds every kind, and most parameters are typed
    assert checked[HYPERPARAMETER] > 300 and checked[STATIC] > 200 and checked[UNTYPED] < checked[STATIC], checked


def test_every_scalar_or_schedule_annotation_is_the_evaluated_object():
    # Optax's suite compares inspect.signature(opt).parameters["learning_rate"].annotation with `is`
    typed = [(f, n) for f, n, _, a in PARAMETERS if a in (ScalarOrSchedule, ScalarOrSchedule | None)]
    assert len(typed) > 100
    for factory, name in typed:
        obj = gradax
        for part in factory.split("."):
            obj = getattr(obj, part)
        annotation = inspect.signature(obj).parameters[name].annotation
        assert not isinstance(annotation, str), (factory, name, annotation)
        if name == "learning_rate" and annotation == ScalarOrSchedule:
            assert annotation is ScalarOrSchedule, factory


def test_every_mask_and_every_key_is_static():
    masks = [(f, n, p) for f, n, p, _ in PARAMETERS if "mask" in n]
    keys = [(f, n, p) for f, n, p, _ in PARAMETERS if is_key_name(n)]
    assert len(masks) > 20 and len(keys) >= 4
    for factory, name, param in masks:
        for value in (lambda params: params, MaskModule(jnp.ones(1)), {"w": True}):
            assert _verdict(name, param, value) == _inject._STATIC, (factory, name, value)
    for factory, name, param in keys:
        for value in (0, jax.random.PRNGKey(0), jax.random.key(0)):
            assert _verdict(name, param, value) == _inject._STATIC, (factory, name, value)


def test_a_bare_schedule_parameter_is_a_function_the_factory_calls():
    # scale_by_schedule(step_size_fn: Schedule) evaluates the schedule itself: injecting a value would break it
    schedule = gradax.linear_schedule(1.0, 0.0, 4)
    opt = gradax.inject_hyperparams(gradax.scale_by_schedule)(schedule)
    state = opt.init(jnp.ones(2))
    assert state.hyperparams == {}
    updates, _ = opt.update(jnp.ones(2), state)
    assert jnp.array_equal(updates, jnp.ones(2))


def _typed(learning_rate: jax.Array, size: int, key: jax.Array | int | None = None, **kwargs):
    del size, key
    return gradax.scale(learning_rate)


def _untyped(learning_rate, weight=0.5, steps=3, mask_fn=None, param_labels=None):
    del steps, mask_fn, param_labels
    return gradax.scale(learning_rate * weight)


def test_user_factories_typed_and_untyped():
    state = gradax.inject_hyperparams(_typed)(0.5, 3, key=7, extra=2.0).init(jnp.ones(1))
    assert sorted(state.hyperparams) == ["extra", "learning_rate"]  # a **kwargs entry follows the fallback
    state = gradax.inject_hyperparams(_untyped)(0.5, weight=2, steps=4, mask_fn=abs, param_labels=abs).init(jnp.ones(1))
    assert sorted(state.hyperparams) == ["learning_rate", "weight"]
    assert state.hyperparams["weight"].dtype == jnp.float32  # an int given to a float parameter is stored as a float


def test_an_annotation_that_does_not_evaluate_says_nothing():
    namespace: dict = {}
    # a factory whose annotation names a type that is not importable at run time
    exec(
        "from __future__ import annotations\n"
        "import gradax\n"
        "def factory(learning_rate: NotDefined, mask: NotDefined = None):\n"
        "    return gradax.scale(learning_rate)\n",
        namespace,
    )
    state = gradax.inject_hyperparams(namespace["factory"])(0.25, mask=abs).init(jnp.ones(1))
    assert sorted(state.hyperparams) == ["learning_rate"]
