"""Hyperparameters kept in the optimizer state: ``inject_hyperparams`` and its state types.

``inject_hyperparams(factory)(**kwargs)`` builds ``factory`` afresh at every step with its numeric hyperparameters
read from the state, so they can be scheduled, inspected (``state.hyperparams["learning_rate"]``) and changed
between steps. Which arguments become hyperparameters is decided per argument, without the user listing them:

* floats, float arrays (and numeric arrays) become entries of ``state.hyperparams``;
* ints become entries only when the factory's parameter takes floats (its annotation mentions ``float``,
  ``ArrayLike``, ``Schedule``..., or, without annotation, it has no default or a float default); ints such as sizes
  and step counts (annotated ``int``) stay static, since factories use them for shapes and Python control flow;
* schedules (any callable, Equinox closures included, passed to a parameter that is not a function-valued one
  such as ``mask`` or ``*_fn``) are evaluated at every step; stateful schedules (``init``/``update``/call) keep
  a state in ``hyperparams_states``;
* everything else (bools, None, strings, dtypes, tuples, masks, PRNG keys, transformations) is passed to the
  factory unchanged.

Hyperparameters are stored in float32 (float64 under x64) whatever the params' dtype, unless ``hyperparam_dtype`` is
given, so bfloat16 params never round ``b2=0.999`` to 1. Because gradax's optimizers convert their
hyperparameters to arrays of that same dtype, the injected optimizer computes exactly what the plain one does.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._base import GradientTransformation, GradientTransformationExtraArgs, OptState, Schedule, with_extra_args_support
from .._checks import argument_error
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


# --- deciding what an argument is --------------------------------------------------------------------------------

_FLOAT_WORDS = ("float", "ArrayLike", "Array", "Schedule", "Numeric", "Scalar", "ndarray", "complex")
_FUNCTION_WORDS = ("Callable", "MaskOrFn", "Mask")
_STATIC, _NUMERIC, _SCHEDULE, _STATEFUL = "static", "numeric", "schedule", "stateful"


def _annotation_text(param: inspect.Parameter | None) -> str:
    if param is None or param.annotation is inspect.Parameter.empty:
        return ""
    ann = param.annotation
    return ann if isinstance(ann, str) else repr(ann)


def _takes_floats(param: inspect.Parameter | None) -> bool:
    """Whether an int passed to ``param`` is a hyperparameter (the parameter takes floats)."""
    if param is None:
        return False
    text = _annotation_text(param)
    if text:
        return any(word in text for word in _FLOAT_WORDS)
    if param.default is inspect.Parameter.empty:
        return True
    return isinstance(param.default, float)


def _takes_functions(name: str, param: inspect.Parameter | None) -> bool:
    """Whether ``param`` takes a function that is not a schedule (a mask, a loss, ``*_fn``...)."""
    text = _annotation_text(param)
    if "Schedule" in text:
        return False
    if any(word in text for word in _FUNCTION_WORDS):
        return True
    return "mask" in name or name.endswith("fn") or name in ("labels", "param_labels", "transforms")


def _is_stateful_schedule(value: Any) -> bool:
    return callable(value) and callable(getattr(value, "init", None)) and callable(getattr(value, "update", None))


_KEY_NAMES = ("key", "seed", "rng", "rng_key", "prng_key", "random_seed")
_KEY_WORDS = ("PRNGKey", "KeyArray", "prng_key")


def _takes_key(name: str, param: inspect.Parameter | None) -> bool:
    """Whether ``param`` takes a random key or seed (by its name, or by an annotation naming a PRNG key)."""
    return name in _KEY_NAMES or any(word in _annotation_text(param) for word in _KEY_WORDS)


def _kind(name: str, value: Any, param: inspect.Parameter | None) -> str:
    if _takes_key(name, param):
        return _STATIC  # random keys and seeds are data for the factory, never hyperparameters
    if isinstance(value, jax.Array) and jnp.issubdtype(value.dtype, jax.dtypes.prng_key):
        return _STATIC  # a typed key, whatever the parameter's name
    if value is None or isinstance(value, (bool, np.bool_, str, bytes, type, np.dtype)):
        return _STATIC
    if callable(value):
        if _takes_functions(name, param):
            return _STATIC
        if _is_stateful_schedule(value):
            return _STATEFUL
        return _SCHEDULE if is_schedule(value) else _STATIC
    if isinstance(value, (float, np.floating, complex, np.complexfloating)):
        return _NUMERIC
    if isinstance(value, (int, np.integer)):
        return _NUMERIC if _takes_floats(param) else _STATIC
    if isinstance(value, (jax.Array, np.ndarray)):
        # jnp.issubdtype, not numpy's dtype kind: bfloat16 (an ml_dtypes type) has numpy kind "V"
        numeric = jnp.issubdtype(value.dtype, jnp.number) and not jnp.issubdtype(value.dtype, jax.dtypes.prng_key)
        return _NUMERIC if numeric else _STATIC
    return _STATIC


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

    Args:
      inner_factory: a function returning a :class:`GradientTransformation` (``gradax.adam``, your own...).
      static_args: names of arguments to pass unchanged even if numeric (most non-numeric arguments and int sizes
        are detected as static anyway; see the module docs).
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
    static = {static_args} if isinstance(static_args, str) else set(static_args)
    try:
        signature = inspect.signature(inner_factory)
    except (TypeError, ValueError) as error:
        raise TypeError(
            f"{api}(inner_factory=...) must be a function with a signature; got {inner_factory!r}."
        ) from error
    parameters = signature.parameters
    unknown = static - set(parameters)
    if unknown:
        raise argument_error(
            api,
            "static_args",
            f"names of parameters of {_factory_name(inner_factory)}",
            sorted(unknown),
            f"Its parameters are {', '.join(parameters)}",
        )

    @functools.wraps(inner_factory)
    def wrapped(*args: Any, **kwargs: Any) -> GradientTransformationExtraArgs:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        positional: tuple = ()
        other: dict[str, Any] = {}
        numeric: dict[str, Any] = {}
        schedules: dict[str, Any] = {}
        float_keys: set[str] = set()

        def classify(name: str, value: Any, param: inspect.Parameter | None) -> None:
            kind = _STATIC if name in static else _kind(name, value, param)
            if kind == _NUMERIC:
                numeric[name] = value
                if isinstance(value, (float, int, np.number)) and not isinstance(value, (np.complexfloating, complex)):
                    float_keys.add(name)
            elif kind == _SCHEDULE:
                schedules[name] = WrappedSchedule(value)
            elif kind == _STATEFUL:
                schedules[name] = value
            else:
                other[name] = value

        for name, value in bound.arguments.items():
            param = parameters[name]
            if param.kind is param.VAR_POSITIONAL:
                positional = tuple(value)
            elif param.kind is param.VAR_KEYWORD:
                for key, item in value.items():
                    classify(key, item, None)
            else:
                classify(name, value, param)

        def dtype():
            return hyperparam_dtype if hyperparam_dtype is not None else default_hyperparam_dtype()

        def build(hyperparams: dict[str, Any]) -> GradientTransformationExtraArgs:
            return with_extra_args_support(inner_factory(*positional, **other, **hyperparams))

        def init(params):
            target = dtype()
            hyperparams = {k: _as_hyperparam(v, target, k in float_keys) for k, v in numeric.items()}
            schedule_states = {k: _init_schedule(s, params) for k, s in schedules.items()}
            for k, s in schedules.items():
                hyperparams[k] = _as_hyperparam(s(schedule_states[k]), target, True)
            return InjectStatefulHyperparamsState(
                count=jnp.zeros([], jnp.int32),
                hyperparams=hyperparams,
                hyperparams_states=schedule_states,
                # the inner init gets its own copies: a state that keeps a hyperparameter (Prodigy's estim_lr0) must
                # not hold the hyperparams' buffer, which a donated step would then be handed twice
                inner_state=build({k: jnp.array(v, copy=True) for k, v in hyperparams.items()}).init(params),
            )

        def advance(state, extra_args):
            target = dtype()
            hyperparams = {k: _as_hyperparam(v, target, k in float_keys) for k, v in state.hyperparams.items()}
            for k, s in schedules.items():
                hyperparams[k] = _as_hyperparam(s(state.hyperparams_states[k], **extra_args), target, True)
            schedule_states = {k: s.update(state.hyperparams_states[k], **extra_args) for k, s in schedules.items()}
            return hyperparams, schedule_states

        def new_state(state, hyperparams, schedule_states, inner_state):
            return InjectStatefulHyperparamsState(
                count=safe_int32_increment(state.count),
                hyperparams=hyperparams,
                hyperparams_states=schedule_states,
                inner_state=inner_state,
            )

        def update(updates, state, params=None, **extra_args):
            hyperparams, schedule_states = advance(state, extra_args)
            updates, inner_state = build(hyperparams).update(updates, state.inner_state, params, **extra_args)
            return updates, new_state(state, hyperparams, schedule_states, inner_state)

        # a factory of gradax.fused names its result class here: keep its one-pass step
        fused_class = getattr(inner_factory, "__gradax_fused__", None)
        if fused_class is None:
            return GradientTransformationExtraArgs(init, update)

        def step(params, state, grads):
            hyperparams, schedule_states = advance(state, {})
            params, inner_state = build(hyperparams).step(params, state.inner_state, grads)
            return params, new_state(state, hyperparams, schedule_states, inner_state)

        def flat_step(params, state, grads, flat_reference):
            # the step of gradax.flatten(this): the inner optimizer's flat step on the inner state where it has one,
            # else flatten(this)'s update + apply_updates
            hyperparams, schedule_states = advance(state, {})
            inner_flat = getattr(build(hyperparams), "__dict__", {}).get("_flat_step")
            if inner_flat is None:
                return flat_reference(GradientTransformationExtraArgs(init, update))(params, state, grads)
            params, inner_state = inner_flat(params, state.inner_state, grads, flat_reference)
            return params, new_state(state, hyperparams, schedule_states, inner_state)

        return fused_class(init, update, step, flat_step)

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
