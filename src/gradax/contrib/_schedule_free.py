"""Schedule-Free learning (Defazio et al., 2024): interpolation and averaging instead of momentum and schedules."""

from typing import Any, NamedTuple, cast

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike, DTypeLike

from .._base import (
    GradientTransformation,
    GradientTransformationExtraArgs,
    Params,
    ScalarOrSchedule,
    Schedule,
    check_transformation,
    with_extra_args_support,
)
from .._checks import check_int, check_interval, check_needs, check_non_negative
from .._dtype_policy import optax_scalar_dtype
from .._hyperparams import as_value, hyperparam_dtype, is_schedule, value_at
from .._numerics import compute_dtype, safe_int32_increment
from ..optimizers._rms import scale_by_rms
from ..optimizers._sgd import sgd
from ..schedules._schedule import warmup_constant_schedule
from ..transforms._adding import add_decayed_weights
from ..transforms._combining import chain
from ..transforms._scaling import scale_by_learning_rate
from ._state_copies import copy_tree


class ScheduleFreeState(NamedTuple):
    """State of :func:`schedule_free`.

    Attributes:
      b1: the interpolation coefficient :math:`\\beta_1` (needed by :func:`schedule_free_eval_params`).
      weight_sum: :math:`\\sum_{i \\le t} w_i`, the total averaging weight so far.
      step_count: ``1 + `` the number of updates applied (int32).
      max_lr: the largest learning rate seen so far.
      base_optimizer_state: the base optimizer's state.
      z: the base optimizer's iterate :math:`z_t`.
    """

    b1: jax.Array
    weight_sum: jax.Array
    step_count: jax.Array
    max_lr: jax.Array
    base_optimizer_state: Any
    z: Params


def _check_common(api: str, learning_rate: Any, b1: Any, weight_lr_power: Any) -> None:
    check_non_negative(api, "learning_rate", learning_rate)
    check_interval(api, "b1", b1, 0.0, 1.0, low_closed=False, high_closed=False)
    check_non_negative(api, "weight_lr_power", weight_lr_power)


def schedule_free(
    base_optimizer: GradientTransformation,
    learning_rate: ScalarOrSchedule,
    b1: ArrayLike = 0.9,
    weight_lr_power: ArrayLike = 2.0,
    state_dtype: DTypeLike | None = None,
) -> GradientTransformationExtraArgs:
    r"""Makes ``base_optimizer`` schedule-free: its momentum is replaced by interpolation and averaging.

    The parameters handed to the model are the gradient evaluation point :math:`y_t`; the base optimizer steps the
    sequence :math:`z_t` and the evaluation sequence :math:`x_t` is a weighted running average of the :math:`z`:

    .. math::
        y_t &= (1 - \beta_1) z_t + \beta_1 x_t, \\
        z_{t+1} &= z_t + \mathrm{base}(\nabla f(y_t)) \qquad (= z_t - \gamma_t \nabla f(y_t) \text{ for SGD}), \\
        c_{t+1} &= \frac{w_t}{\sum_{i=0}^{t} w_i}, \quad w_t = (\max_{i \le t} \gamma_i)^{r}, \\
        x_{t+1} &= (1 - c_{t+1}) x_t + c_{t+1} z_{t+1},

    with :math:`r` = ``weight_lr_power`` and :math:`\gamma_t` the learning rate at step :math:`t` (the schedule is
    evaluated at ``t = 0, 1, 2, ...``, as in the paper). The state keeps :math:`z`; :math:`x` is recovered from
    :math:`y` and :math:`z`. Evaluate the model at :math:`x` with :func:`schedule_free_eval_params`.

    Args:
      base_optimizer: the base optimizer, WITHOUT momentum (e.g. ``sgd(lr)``); its learning rate should match
        ``learning_rate``.
      learning_rate: :math:`\gamma_t >= 0`, a number or a schedule; used for the averaging weights.
      b1: :math:`\beta_1 \in (0, 1)`, the interpolation between :math:`z` and :math:`x`.
      weight_lr_power: :math:`r >= 0`, the power of the learning rate in the averaging weights.
      state_dtype: dtype of :math:`z` (default: the parameters' dtype, float32 for bf16/f16 parameters).

    Returns:
      A :class:`GradientTransformationExtraArgs`; ``update`` needs ``params`` (the current :math:`y`).

    Example:
      >>> import gradax, jax, jax.numpy as jnp
      >>> from gradax import contrib
      >>> loss = lambda p: jnp.sum((p - 3.0) ** 2)
      >>> opt = contrib.schedule_free(gradax.sgd(0.2), learning_rate=0.2)
      >>> params = jnp.zeros(2)
      >>> state = opt.init(params)
      >>> for _ in range(100):
      ...     updates, state = opt.update(jax.grad(loss)(params), state, params)
      ...     params = gradax.apply_updates(params, updates)
      >>> eval_params = contrib.schedule_free_eval_params(state, params)  # evaluate the model here
      >>> bool(loss(eval_params) < 1e-2)
      True

    References:
      Defazio, Yang, Mehta, Mishchenko, Khaled, Cutkosky, `The Road Less Scheduled
      <https://arxiv.org/abs/2405.15682>`_, NeurIPS 2024.
    """
    api = "schedule_free"
    check_transformation(api, "base_optimizer", base_optimizer)
    _check_common(api, learning_rate, b1, weight_lr_power)
    base = with_extra_args_support(base_optimizer)

    def init(params):
        dtype = optax_scalar_dtype(params, "lowest", hyperparam_dtype())  # float32 unless the policy is Optax's
        return ScheduleFreeState(
            b1=as_value(b1, dtype),
            weight_sum=jnp.zeros([], dtype),
            step_count=jnp.ones([], jnp.int32),
            max_lr=jnp.zeros([], dtype),
            base_optimizer_state=base.init(params),
            z=copy_tree(params, state_dtype),
        )

    def update(updates, state, params=None, **extra_args):
        check_needs(api, "params", params)
        # the step about to be taken is t = step_count - 1 (step_count starts at 1)
        f = hyperparam_dtype()  # the scalars are computed in it whatever their stored dtype
        lr = value_at(learning_rate, state.step_count - 1, f)
        max_lr = jnp.maximum(state.max_lr.astype(f), lr)
        weight = max_lr ** as_value(weight_lr_power, f)
        weight_sum = state.weight_sum.astype(f) + weight
        ck = weight / jnp.where(weight_sum == 0, jnp.ones_like(weight_sum), weight_sum)
        beta = state.b1.astype(f)
        base_updates, base_state = base.update(updates, state.base_optimizer_state, params, **extra_args)

        def leaf(g, y, z, u):
            cd = compute_dtype(jnp.result_type(y, z))
            yc, zc = y.astype(cd), z.astype(cd)
            z_new = (zc + u.astype(cd)).astype(z.dtype)
            x = (yc - (1.0 - beta) * zc) / beta
            x = (1.0 - ck) * x + ck * z_new.astype(cd)
            y_new = beta * x + (1.0 - beta) * z_new.astype(cd)
            return (y_new - yc).astype(g.dtype), z_new

        pairs = jax.tree.map(lambda g, y, z, u: leaf(g, y, z, u), updates, params, state.z, base_updates)
        treedef = jax.tree.structure(updates)
        flat = treedef.flatten_up_to(pairs)
        new_updates = treedef.unflatten([p[0] for p in flat])
        z = treedef.unflatten([p[1] for p in flat])
        new_state = ScheduleFreeState(
            b1=state.b1,
            weight_sum=weight_sum.astype(state.weight_sum.dtype),
            step_count=safe_int32_increment(state.step_count),
            max_lr=max_lr.astype(state.max_lr.dtype),
            base_optimizer_state=base_state,
            z=z,
        )
        return new_updates, new_state

    return GradientTransformationExtraArgs(init, update)


def schedule_free_eval_params(state: Any, params: Params) -> Params:
    r"""The evaluation point :math:`x_t = (y_t - (1 - \beta_1) z_t) / \beta_1` of a :func:`schedule_free` optimizer.

    Train with the parameters :math:`y_t` that ``update`` produces; evaluate (validation loss, checkpoints for
    inference) at the returned :math:`x_t`. See the example of :func:`schedule_free`.

    Args:
      state: a :class:`ScheduleFreeState` (or a state that has ``b1`` and ``z`` fields).
      params: the current parameters :math:`y_t`.

    Returns:
      :math:`x_t`, with the dtypes of ``params``.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> opt = gradax.contrib.schedule_free_sgd(1.0)
      >>> params = jnp.ones(2)
      >>> gradax.contrib.schedule_free_eval_params(opt.init(params), params)
      Array([1., 1.], dtype=float32)

    References:
      Defazio et al., `The Road Less Scheduled <https://arxiv.org/abs/2405.15682>`_, NeurIPS 2024.
    """
    b1 = getattr(state, "b1", None)
    z = getattr(state, "z", None)
    if b1 is None or z is None:
        raise ValueError(
            f"schedule_free_eval_params(state=...) must be a ScheduleFreeState; got {type(state).__name__}. "
            "Pass the state returned by a schedule_free optimizer."
        )

    def leaf(y, zi):
        cd = compute_dtype(jnp.result_type(y, zi))
        b = jnp.asarray(b1).astype(jnp.result_type(cd, jnp.asarray(b1).dtype))  # a bfloat16 b1 computes in float32
        return ((y.astype(cd) - (1.0 - b) * zi.astype(cd)) / b).astype(y.dtype)

    return jax.tree.map(leaf, params, z)


def _with_warmup(learning_rate: ScalarOrSchedule, warmup_steps: int) -> Schedule:
    """A linear warmup from 0 to ``learning_rate`` over ``warmup_steps`` steps; for a schedule, the schedule times a
    ramp from 0 to 1."""
    if not is_schedule(learning_rate):
        peak = cast(ArrayLike, learning_rate)  # not a schedule: a number or an array
        return warmup_constant_schedule(init_value=0.0, peak_value=peak, warmup_steps=warmup_steps)
    ramp = warmup_constant_schedule(init_value=0.0, peak_value=1.0, warmup_steps=warmup_steps)
    return lambda count: ramp(count) * learning_rate(count)


def _recipe(api, build, learning_rate, warmup_steps, b1, weight_decay, weight_lr_power, state_dtype):
    """The part both recipes share: checks, the optional linear warmup of the learning rate, then
    ``schedule_free(build(lr), lr, ...)``."""
    _check_common(api, learning_rate, b1, weight_lr_power)
    if warmup_steps is not None:
        check_int(api, "warmup_steps", warmup_steps, low=0)
        learning_rate = _with_warmup(learning_rate, warmup_steps)
    if weight_decay is not None:
        check_non_negative(api, "weight_decay", weight_decay)
    return schedule_free(
        build(learning_rate), learning_rate, b1=b1, weight_lr_power=weight_lr_power, state_dtype=state_dtype
    )


def schedule_free_sgd(
    learning_rate: ScalarOrSchedule = 1.0,
    warmup_steps: int | None = None,
    b1: ArrayLike = 0.9,
    weight_decay: ScalarOrSchedule | None = None,
    weight_lr_power: ArrayLike = 2.0,
    state_dtype: DTypeLike | None = None,
) -> GradientTransformationExtraArgs:
    r"""Schedule-free SGD: :func:`schedule_free` around plain SGD (optionally with weight decay at :math:`y_t`).

    .. math::
        z_{t+1} = z_t - \gamma_t (\nabla f(y_t) + \lambda y_t),

    then the interpolation and averaging of :func:`schedule_free`.

    Args:
      learning_rate: :math:`\gamma >= 0`, a number or a schedule.
      warmup_steps: when given, a linear warmup from 0 to ``learning_rate`` over this many steps.
      b1: :math:`\beta_1 \in (0, 1)`.
      weight_decay: :math:`\lambda >= 0` or None (no weight decay).
      weight_lr_power: :math:`r >= 0`.
      state_dtype: dtype of :math:`z`.

    Returns:
      A :class:`GradientTransformationExtraArgs`; ``update`` needs ``params``.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> opt = gradax.contrib.schedule_free_sgd(0.5)
      >>> params = jnp.array([1.0])
      >>> opt.update(jnp.array([1.0]), opt.init(params), params)[0]
      Array([-0.5], dtype=float32)

    References:
      Defazio et al., `The Road Less Scheduled <https://arxiv.org/abs/2405.15682>`_, NeurIPS 2024.
    """

    def build(lr):
        return sgd(lr) if weight_decay is None else chain(add_decayed_weights(weight_decay), sgd(lr))

    return _recipe(
        "schedule_free_sgd", build, learning_rate, warmup_steps, b1, weight_decay, weight_lr_power, state_dtype
    )


def schedule_free_adamw(
    learning_rate: ScalarOrSchedule = 0.0025,
    warmup_steps: int | None = None,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-8,
    weight_decay: ScalarOrSchedule = 0.0,
    weight_lr_power: ArrayLike = 2.0,
    state_dtype: DTypeLike | None = None,
) -> GradientTransformationExtraArgs:
    r"""Schedule-free AdamW: :func:`schedule_free` around Adam without momentum, with decoupled weight decay.

    .. math::
        v_{t+1} &= \beta_2 v_t + (1 - \beta_2) g_t^2, \quad \hat v_{t+1} = v_{t+1} / (1 - \beta_2^{t+1}), \\
        z_{t+1} &= z_t - \gamma_t \left(\frac{g_t}{\sqrt{\hat v_{t+1}} + \epsilon} + \lambda y_t\right),

    with :math:`g_t = \nabla f(y_t)`, then the interpolation and averaging of :func:`schedule_free`.

    Args:
      learning_rate: :math:`\gamma >= 0`, a number or a schedule.
      warmup_steps: when given, a linear warmup from 0 to ``learning_rate`` over this many steps.
      b1: :math:`\beta_1 \in (0, 1)`, the interpolation coefficient.
      b2: :math:`\beta_2 \in [0, 1)`, the second-moment decay.
      eps: :math:`\epsilon >= 0`.
      weight_decay: :math:`\lambda >= 0` (a number or a schedule).
      weight_lr_power: :math:`r >= 0`.
      state_dtype: dtype of :math:`z`.

    Returns:
      A :class:`GradientTransformationExtraArgs`; ``update`` needs ``params``.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> opt = gradax.contrib.schedule_free_adamw(0.1)
      >>> params = jnp.array([1.0])
      >>> opt.update(jnp.array([2.0]), opt.init(params), params)[0]
      Array([-0.1], dtype=float32)

    References:
      Defazio et al., `The Road Less Scheduled <https://arxiv.org/abs/2405.15682>`_, NeurIPS 2024.
    """
    api = "schedule_free_adamw"
    check_interval(api, "b2", b2, 0.0, 1.0, high_closed=False)
    check_non_negative(api, "eps", eps)

    def build(lr):
        return chain(
            scale_by_rms(decay=b2, eps=eps, eps_in_sqrt=False, bias_correction=True),
            add_decayed_weights(weight_decay),
            scale_by_learning_rate(lr),
        )

    return _recipe(api, build, learning_rate, warmup_steps, b1, weight_decay, weight_lr_power, state_dtype)
