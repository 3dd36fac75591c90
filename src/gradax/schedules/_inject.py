"""Hyperparameters kept in the optimizer state: ``inject_hyperparams`` and its state types.

``inject_hyperparams(factory)(**kwargs)`` builds ``factory`` afresh at every step with its numeric hyperparameters
read from the state, so they can be scheduled, inspected (``state.hyperparams["learning_rate"]``) and changed
between steps. Which arguments become hyperparameters is decided per argument, without the user listing them, by
one rule:

    An argument is a hyperparameter when its parameter takes numbers and the value is a number, a numeric array
    or a callable (then evaluated as a schedule at every step); names in ``static_args`` and PRNG keys never are.

* *Takes numbers* is read from the factory's evaluated annotation (``inspect.signature(..., eval_str=True)``): it
  holds when ``float``, ``complex`` or an array type (``jax.Array``, ``numpy.ndarray``, a NumPy float type) is among
  the members of the annotation's union, as in ``ScalarOrSchedule``, ``ArrayLike`` and ``float``. So ``int``
  (sizes, step counts), ``bool``, ``str``, masks (``MaskOrFn``), other ``Callable`` types and a bare ``Schedule`` (a
  function that the factory calls itself, such as ``scale_by_schedule``'s ``step_size_fn``) do not take numbers.
* Fallback, for a parameter whose annotation says nothing (none, ``Any``, ``Any | None``, a string that does not
  evaluate, or an entry of ``**kwargs``): Optax's rule, numbers and callables are hyperparameters, narrowed in two
  ways that keep working code working: the parameter takes numbers only if it has no default or a float default
  (an int default is a size), and never if its name marks a mask or a function (it contains ``mask`` or
  ``labels``, or ends with ``fn``).
* A PRNG key is a value of a key dtype, or the argument of a parameter named ``key``, ``seed`` or ``rng``, or
  ending with ``_key``, ``_seed`` or ``_rng`` (``rng_key``, ``random_seed``...: a seed, a raw ``uint32`` key).
* Values that are not numbers or callables (bools, None, strings, dtypes, tuples, pytrees) are passed to the
  factory unchanged, whatever the parameter. A callable with ``init``/``update`` is a stateful schedule, whose state
  is kept in ``hyperparams_states``.

Hyperparameters are stored in float32 (float64 under x64) whatever the params' dtype, unless ``hyperparam_dtype`` is
given (or ``gradax.state_dtype_policy("optax")`` asks for Optax's default, the params' highest float dtype), so
bfloat16 params never round ``b2=0.999`` to 1; Python ints given to a parameter that takes numbers are
stored as floats too, and arrays with a strong dtype (a bfloat16 array included) keep theirs. Because gradax's
optimizers convert their hyperparameters to arrays of that same dtype, the injected optimizer computes exactly what
the plain one does.
"""

from __future__ import annotations

import functools
import inspect
import types
import typing
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._base import (
    GradientTransformation,
    GradientTransformationExtraArgs,
    OptState,
    Schedule,
    is_transformation,
    with_extra_args_support,
)
from .._checks import argument_error
from .._dtype_policy import optax_scalar_dtype
from .._fused_step import FusedGradientTransformation, flat_step_of, is_fused_factory
from .._hyperparams import hyperparam_dtype as default_hyperparam_dtype
from .._hyperparams import is_schedule
from .._numerics import safe_int32_increment


class InjectHyperparamsState(NamedTuple):
    """A state that exposes hyperparameters: the step count, their values, and the inner transformation's state."""

    count: jax.Array  # shape=(), dtype=int32: the number of updates so far
    hyperparams: dict[str, Any]  # name -> scalar array, the values used by the last update (or init)
    inner_state: OptState  # the state of the wrapped transformation


class InjectStatefulHyperparamsState(NamedTuple):
    """The state of :func:`inject_hyperparams`: like :class:`InjectHyperparamsState`, plus the states of the
    schedules (``hyperparams_states``, keyed by hyperparameter name)."""

    count: jax.Array  # shape=(), dtype=int32: the number of updates so far
    hyperparams: dict[str, Any]  # name -> scalar array, the values used by the last update (or init)
    hyperparams_states: dict[str, Any]  # name -> state of that hyperparameter's schedule
    inner_state: OptState  # the state of the wrapped transformation


class WrappedScheduleState(NamedTuple):
    """The state of a :class:`WrappedSchedule`: its own step count."""

    count: jax.Array  # shape=(), dtype=int32


class WrappedSchedule:
    """A plain schedule ``f(count)`` seen as a stateful schedule that counts its own steps.

    ``init()`` gives a zero count, ``update(state)`` increments it (saturating), ``__call__(state)`` is
    ``schedule_fn(state.count)``.

    Example:
      >>> import gradax
      >>> wrapped = gradax.schedules.WrappedSchedule(gradax.linear_schedule(1.0, 0.0, 4))
      >>> state = wrapped.update(wrapped.init())
      >>> wrapped(state)
      Array(0.75, dtype=float32)
    """

    def __init__(self, schedule_fn: Schedule):
        if not callable(schedule_fn):
            raise TypeError(f"WrappedSchedule(schedule_fn=...) must be callable; got {schedule_fn!r}.")
        self.schedule_fn = schedule_fn

    def init(self) -> WrappedScheduleState:
        return WrappedScheduleState(count=jnp.zeros([], jnp.int32))

    def update(self, state: WrappedScheduleState, **extra_args: Any) -> WrappedScheduleState:
        del extra_args
        return WrappedScheduleState(count=safe_int32_increment(state.count))

    def __call__(self, state: WrappedScheduleState, **extra_args: Any):
        del extra_args
        return self.schedule_fn(state.count)


# --- the rule: which arguments are hyperparameters (see the module docstring) ----------------------------------------

_STATIC, _NUMERIC, _SCHEDULE, _STATEFUL = "static", "numeric", "schedule", "stateful"
_NUMBER_TYPES = (float, complex, np.inexact, jax.Array, np.ndarray)
_KEY_WORDS = ("key", "seed", "rng")
_EMPTY = inspect.Parameter.empty


def _members(annotation: Any) -> tuple[Any, ...]:
    """The members of a union annotation (``float | jax.Array | Schedule`` gives its three members), else itself."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return tuple(member for arg in typing.get_args(annotation) for member in _members(arg))
    return (annotation,)


def _says_nothing(annotation: Any) -> bool:
    """Whether an annotation tells nothing about the values: none, ``Any``, ``Any | None``, or an unevaluated string."""
    if annotation is _EMPTY or isinstance(annotation, str):
        return True
    return all(member is Any or member is type(None) for member in _members(annotation))


def takes_numbers(name: str, param: inspect.Parameter | None) -> bool:
    """Whether the parameter ``name`` (``param`` is None for an entry of ``**kwargs``) takes numbers.

    It does when its evaluated annotation has ``float``, ``complex`` or an array type among its union's members;
    for an annotation that says nothing, when it has no default or a float default and its name marks neither a mask
    nor a function. Parameters of PRNG keys and seeds never take numbers.
    """
    if any(name == word or name.endswith("_" + word) for word in _KEY_WORDS):
        return False
    annotation = _EMPTY if param is None else param.annotation
    if not _says_nothing(annotation):
        return any(isinstance(m, type) and issubclass(m, _NUMBER_TYPES) for m in _members(annotation))
    if "mask" in name or "labels" in name or name.endswith("fn"):
        return False
    default = _EMPTY if param is None else param.default
    return default is _EMPTY or isinstance(default, (float, np.floating))


def _is_prng_key(value: Any) -> bool:
    return isinstance(value, jax.Array) and jnp.issubdtype(value.dtype, jax.dtypes.prng_key)


def _is_stateful_schedule(value: Any) -> bool:
    return callable(value) and is_transformation(value)


def _kind(value: Any, numbers: bool) -> str:
    """What ``value`` is for a parameter that takes numbers (``numbers``) or not: static, numeric or a schedule."""
    if not numbers or value is None or isinstance(value, (bool, np.bool_)) or _is_prng_key(value):
        return _STATIC
    if _is_stateful_schedule(value):
        return _STATEFUL
    if is_schedule(value):
        return _SCHEDULE
    if isinstance(value, (int, float, complex, np.number)):
        return _NUMERIC
    # jnp.issubdtype, not numpy's dtype kind: bfloat16 (an ml_dtypes type) has numpy kind "V"
    if isinstance(value, (jax.Array, np.ndarray)) and jnp.issubdtype(value.dtype, jnp.number):
        return _NUMERIC
    return _STATIC


class _Arguments(NamedTuple):
    """A call's arguments, sorted by the rule."""

    positional: tuple  # the values of a ``*args`` parameter, passed on unchanged
    static: dict[str, Any]  # name -> value passed to the factory unchanged
    numeric: dict[str, Any]  # name -> number or array, stored in ``state.hyperparams``
    schedules: dict[str, Any]  # name -> stateful schedule (plain schedules wrapped in WrappedSchedule)
    real_numbers: frozenset[str]  # names of the numeric ones given as real numbers: stored in the float dtype


def classify(
    signature: inspect.Signature, static_args: Iterable[str], args: tuple, kwargs: dict[str, Any]
) -> _Arguments:
    """Sorts the arguments of ``factory(*args, **kwargs)`` (``signature`` is the factory's) by the rule."""
    bound = signature.bind(*args, **kwargs)
    bound.apply_defaults()
    positional: tuple = ()
    sorted_args: dict[str, dict[str, Any]] = {_STATIC: {}, _NUMERIC: {}, _SCHEDULE: {}}

    def place(name: str, value: Any, param: inspect.Parameter | None) -> None:
        kind = _STATIC if name in static_args else _kind(value, takes_numbers(name, param))
        if kind == _SCHEDULE:
            value = WrappedSchedule(value)
        sorted_args[_SCHEDULE if kind == _STATEFUL else kind][name] = value

    for name, value in bound.arguments.items():
        param = signature.parameters[name]
        if param.kind is param.VAR_POSITIONAL:
            positional = tuple(value)
        elif param.kind is param.VAR_KEYWORD:
            for key, item in value.items():
                place(key, item, None)
        else:
            place(name, value, param)
    numeric = sorted_args[_NUMERIC]
    real = frozenset(k for k, v in numeric.items() if isinstance(v, (int, float, np.integer, np.floating)))
    return _Arguments(positional, sorted_args[_STATIC], numeric, sorted_args[_SCHEDULE], real)


def _as_hyperparam(value: Any, dtype, to_float: bool) -> jax.Array:
    """``value`` as a stored hyperparameter: floats (and ints of float parameters) in ``dtype``; arrays with a
    strong dtype keep it."""
    if isinstance(value, jax.Array) and not getattr(value, "weak_type", False):
        return value
    current = value.dtype if hasattr(value, "dtype") else np.asarray(value).dtype
    floating = jnp.issubdtype(current, jnp.floating)
    if floating or (to_float and jnp.issubdtype(current, jnp.integer)):
        return jnp.asarray(value, dtype=dtype)
    return jnp.asarray(value)


def _init_schedule(schedule: Any, params: Any) -> Any:
    """``schedule.init()``, or ``schedule.init(params)`` for schedules whose ``init`` takes the params."""
    try:
        takes = [
            p
            for p in inspect.signature(schedule.init).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
        ]
    except (TypeError, ValueError):
        takes = []
    return schedule.init(params) if takes else schedule.init()


# --- the injected transformation ---------------------------------------------------------------------------------


class _Injected:
    """``factory`` rebuilt at every step from the hyperparameters kept in an :class:`InjectStatefulHyperparamsState`."""

    def __init__(self, factory: Callable[..., GradientTransformation], arguments: _Arguments, dtype: Any):
        self.factory = factory
        self.arguments = arguments
        self.requested_dtype = dtype

    def dtype(self, params: Any = None) -> Any:
        # read at init/update time, not at construction: jax.enable_x64 may change the default in between
        if self.requested_dtype is not None:
            return self.requested_dtype
        # Optax 0.2.8's default under gradax.state_dtype_policy("optax"): the params' highest float dtype
        return optax_scalar_dtype(params, "highest", default_hyperparam_dtype())

    def build(self, hyperparams: dict[str, Any]) -> GradientTransformationExtraArgs:
        """The factory's transformation for these hyperparameter values."""
        a = self.arguments
        return with_extra_args_support(self.factory(*a.positional, **a.static, **hyperparams))

    def stored(self, name: str, value: Any, dtype: Any = None) -> jax.Array:
        """``value`` of the hyperparameter ``name`` as it is kept in the state (in ``dtype``, default
        :meth:`dtype`)."""
        to_float = name in self.arguments.real_numbers or name in self.arguments.schedules
        return _as_hyperparam(value, self.dtype() if dtype is None else dtype, to_float)

    def init(self, params: Any) -> InjectStatefulHyperparamsState:
        schedules = self.arguments.schedules
        dtype = self.dtype(params)
        hyperparams = {k: self.stored(k, v, dtype) for k, v in self.arguments.numeric.items()}
        schedule_states = {k: _init_schedule(s, params) for k, s in schedules.items()}
        hyperparams.update({k: self.stored(k, s(schedule_states[k]), dtype) for k, s in schedules.items()})
        return InjectStatefulHyperparamsState(
            count=jnp.zeros([], jnp.int32),
            hyperparams=hyperparams,
            hyperparams_states=schedule_states,
            # the inner init gets its own copies: a state that keeps a hyperparameter (Prodigy's estim_lr0) must
            # not hold the hyperparams' buffer, which a donated step would then be handed twice
            inner_state=self.build({k: jnp.array(v, copy=True) for k, v in hyperparams.items()}).init(params),
        )

    def advance(
        self, state: InjectStatefulHyperparamsState, extra_args: dict[str, Any], params: Any = None
    ) -> tuple[dict, dict]:
        """The hyperparameter values of this step (schedules at the count before the increment) and the schedules'
        next states."""
        schedules, schedule_states = self.arguments.schedules, state.hyperparams_states
        # an array keeps its dtype; a Python number set by hand and a schedule's value get the dtype init chose
        # (dtype(params), under either dtype policy), so the state's dtypes stay the same from one step to the next
        chosen = self.dtype(params)
        kept = {k: v.dtype if isinstance(v, (jax.Array, np.ndarray)) else chosen for k, v in state.hyperparams.items()}
        hyperparams = {k: self.stored(k, v, kept[k]) for k, v in state.hyperparams.items()}
        hyperparams.update(
            {k: self.stored(k, s(schedule_states[k], **extra_args), kept[k]) for k, s in schedules.items()}
        )
        return hyperparams, {k: s.update(schedule_states[k], **extra_args) for k, s in schedules.items()}

    @staticmethod
    def next_state(state, hyperparams, schedule_states, inner_state) -> InjectStatefulHyperparamsState:
        return InjectStatefulHyperparamsState(
            count=safe_int32_increment(state.count),
            hyperparams=hyperparams,
            hyperparams_states=schedule_states,
            inner_state=inner_state,
        )

    def update(self, updates, state, params=None, **extra_args):
        hyperparams, schedule_states = self.advance(state, extra_args, params)
        updates, inner_state = self.build(hyperparams).update(updates, state.inner_state, params, **extra_args)
        return updates, self.next_state(state, hyperparams, schedule_states, inner_state)


def _with_fused_step(inner_factory: Callable, injected: _Injected) -> GradientTransformationExtraArgs:
    """``injected`` as a transformation; for a factory declared with ``gradax._fused_step.fused_factory`` (those of
    ``gradax.fused``), as a ``FusedGradientTransformation`` keeping its one-pass ``step`` (and its flat step under
    ``gradax.flatten``)."""
    if not is_fused_factory(inner_factory):
        return GradientTransformationExtraArgs(injected.init, injected.update)

    def step(params, state, grads):
        hyperparams, schedule_states = injected.advance(state, {}, params)
        fused = typing.cast(FusedGradientTransformation, injected.build(hyperparams))  # a fused factory builds one
        params, inner_state = fused.step(params, state.inner_state, grads)
        return params, injected.next_state(state, hyperparams, schedule_states, inner_state)

    def flat_step(params, state, grads, flat_reference):
        # the step of gradax.flatten(this): the inner optimizer's flat step on the inner state where it has one,
        # else flatten(this)'s update + apply_updates
        hyperparams, schedule_states = injected.advance(state, {}, params)
        inner_flat = flat_step_of(injected.build(hyperparams))
        if inner_flat is None:
            return flat_reference(GradientTransformationExtraArgs(injected.init, injected.update))(params, state, grads)
        params, inner_state = inner_flat(params, state.inner_state, grads, flat_reference)
        return params, injected.next_state(state, hyperparams, schedule_states, inner_state)

    return FusedGradientTransformation(injected.init, injected.update, step, flat_step)


def _factory_signature(api: str, inner_factory: Callable) -> inspect.Signature:
    """The factory's signature with its annotations evaluated where they can be (string annotations that do not
    evaluate stay strings, and then say nothing)."""
    try:
        return inspect.signature(inner_factory, eval_str=True)
    except (NameError, AttributeError, SyntaxError, TypeError, ValueError):
        pass
    try:
        return inspect.signature(inner_factory)
    except (TypeError, ValueError) as error:
        raise TypeError(
            f"{api}(inner_factory=...) must be a function with a signature; got {inner_factory!r}."
        ) from error


def _factory_name(factory: Callable) -> str:
    return getattr(factory, "__name__", type(factory).__name__)


def inject_hyperparams(
    inner_factory: Callable[..., GradientTransformation],
    static_args: str | Iterable[str] = (),
    hyperparam_dtype: jnp.dtype | None = None,
) -> Callable[..., GradientTransformationExtraArgs]:
    r"""Wraps an optimizer factory so that its numeric hyperparameters live in the state and may be scheduled.

    ``inject_hyperparams(gradax.adam)(learning_rate=schedule, b1=0.9)`` returns a transformation whose state is an
    :class:`InjectStatefulHyperparamsState`: ``state.hyperparams`` maps each numeric hyperparameter (``learning_rate``,
    ``b1``, ``b2``, ``eps``, ...) to its current value, which may be read, or replaced between steps (e.g. with
    :func:`gradax.tree.set`). At each step, schedules are evaluated at the step count before its increment (the
    first update uses ``schedule(0)``), ``inner_factory`` is called with the current values, and its update applied.
    With constant hyperparameters the updates and inner state are identical to those of ``inner_factory(**kwargs)``.

    Which arguments are hyperparameters: an argument is a hyperparameter when its parameter takes numbers (its
    annotation has ``float``, ``complex`` or an array type among its members, as ``ScalarOrSchedule`` and
    ``ArrayLike`` do) and the value is a number, a numeric array or a callable (a schedule); names in
    ``static_args`` and PRNG keys never are. A parameter without a telling annotation follows Optax's rule
    (numbers and callables are hyperparameters) if it has no default or a float default and its name marks neither
    a mask nor a function; the module docs give the details.

    Args:
      inner_factory: a function returning a :class:`GradientTransformation` (``gradax.adam``, your own...).
      static_args: names of arguments to pass unchanged even if the rule makes them hyperparameters.
      hyperparam_dtype: the dtype of the stored float hyperparameters; default float32 (float64 under x64),
        whatever the dtype of the params.

    Returns:
      A function with the signature of ``inner_factory`` that returns a
      :class:`GradientTransformationExtraArgs` (extra keyword arguments reach the inner transformation and the
      stateful schedules).

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> opt = gradax.inject_hyperparams(gradax.sgd)(learning_rate=gradax.linear_schedule(0.1, 0.0, 10))
      >>> state = opt.init({"w": jnp.ones(2)})
      >>> updates, state = opt.update({"w": jnp.ones(2)}, state)
      >>> updates["w"], state.hyperparams["learning_rate"]  # the value this update used: schedule(0)
      (Array([-0.1, -0.1], dtype=float32), Array(0.1, dtype=float32))
    """
    api = "inject_hyperparams"
    static = frozenset({static_args} if isinstance(static_args, str) else static_args)
    signature = _factory_signature(api, inner_factory)
    unknown = static - set(signature.parameters)
    if unknown:
        raise argument_error(
            api,
            "static_args",
            f"names of parameters of {_factory_name(inner_factory)}",
            sorted(unknown),
            f"Its parameters are {', '.join(signature.parameters)}",
        )

    @functools.wraps(inner_factory)
    def wrapped(*args: Any, **kwargs: Any) -> GradientTransformationExtraArgs:
        arguments = classify(signature, static, args, kwargs)
        return _with_fused_step(inner_factory, _Injected(inner_factory, arguments, hyperparam_dtype))

    return wrapped


def inject_stateful_hyperparams(
    inner_factory: Callable[..., GradientTransformation],
    static_args: str | Iterable[str] = (),
    hyperparam_dtype: jnp.dtype | None = None,
) -> Callable[..., GradientTransformationExtraArgs]:
    """The same as :func:`inject_hyperparams`, which accepts stateful schedules too (Optax keeps this name).

    A stateful schedule has ``init()`` (or ``init(params)``), ``update(state, **extra_args) -> state`` and
    ``__call__(state, **extra_args) -> value``; its state is kept in ``state.hyperparams_states``.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> opt = gradax.inject_stateful_hyperparams(gradax.sgd)(learning_rate=0.1)
      >>> opt.init(jnp.ones(1)).hyperparams
      {'learning_rate': Array(0.1, dtype=float32)}
    """
    return inject_hyperparams(inner_factory, static_args, hyperparam_dtype)
