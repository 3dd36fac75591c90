"""Aggregators: transformations from per-element (per-example) gradients to one update, and their plumbing.

An :class:`Aggregator` has the ``init``/``update`` pair of a gradient transformation, but its ``update`` receives
per-element updates of shape ``[*batch_shape, *param_shape]`` and returns updates of shape ``param_shape``.
:func:`process` composes a per-element preprocessor, an aggregator and an ordinary postprocessor (an optimizer);
when the aggregator accumulates micro-batches, the postprocessor only runs on the steps where the aggregate is ready.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple, Protocol, TypeAlias

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from .._base import (
    GradientTransformation,
    GradientTransformationExtraArgs,
    identity,
    init_empty_state,
    with_extra_args_support,
)
from .._checks import argument_error, check_int, check_interval
from .._numerics import safe_int32_increment
from .._state import zeros_state_like
from ..transforms._combining import chain

PerElementUpdates: TypeAlias = Any
AggregatedUpdates: TypeAlias = Any
MaybeAxis: TypeAlias = int | Sequence[int] | None


class AggregatorUpdateFn(Protocol):
    """``update(per_elt_updates, state, params=None, **extra_args) -> (aggregated_updates, state)``."""

    def __call__(
        self, per_elt_updates: PerElementUpdates, state: Any, /, params: Any = None, **extra_args: Any
    ) -> tuple[AggregatedUpdates, Any]: ...


class Aggregator(GradientTransformationExtraArgs):
    """A transformation whose ``update`` maps per-element updates ``[*batch, *shape]`` to one update ``[*shape]``.

    Attributes:
      init: ``init(params) -> state``.
      update: ``update(per_elt_updates, state, params=None) -> (updates, state)``.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> from gradax.experimental import aggregating
      >>> agg = aggregating.average_per_element_updates(0)
      >>> agg.update(jnp.array([[1.0, 2.0], [3.0, 4.0]]), agg.init(jnp.zeros(2)))[0]
      Array([2., 3.], dtype=float32)
    """

    update: AggregatorUpdateFn  # pyrefly: ignore[bad-override] - narrows the field's type (per-element updates)


class AccumulateAvgUpdatesState(NamedTuple):
    """State of :func:`accumulate_avg_updates`: micro-step in the cycle, whether the last update was emitted, and the
    running average."""

    micro_step: jax.Array
    ready: jax.Array
    avg_grad: Any


class PerElementMeanAndSumSqDiffGradsState(NamedTuple):
    """State of :func:`get_per_element_mean_and_sum_sq_diff_grads`: running mean and sum of squared deviations."""

    micro_step: jax.Array
    ready: jax.Array
    mean_grads: Any
    sum_sq_diff_grads: Any


class PerElementMeanAndVarianceEMAState(NamedTuple):
    """State of :func:`track_per_element_mean_and_variance_with_ema`: EMAs of the mean and of the variance."""

    count: jax.Array
    ema_decay: jax.Array
    mean_grads_ema: Any
    variance_grads_ema: Any


def _axes(api: str, per_elt_axis: Any) -> tuple[int, ...]:
    if isinstance(per_elt_axis, (int, jnp.integer)) and not isinstance(per_elt_axis, bool):
        return (int(per_elt_axis),)
    if isinstance(per_elt_axis, Sequence) and all(isinstance(a, int) for a in per_elt_axis) and per_elt_axis:
        return tuple(per_elt_axis)
    raise argument_error(api, "per_elt_axis", "an int or a non-empty sequence of ints", per_elt_axis)


def get_batch_size_from_per_elt_updates(per_elt_updates: PerElementUpdates, per_elt_axis: int | Sequence[int]) -> int:
    r"""The number of elements in a batch of per-element updates: the product of the sizes of ``per_elt_axis``.

    .. math::
        n = \prod_{a \in \text{axes}} \text{shape}[a]

    Args:
      per_elt_updates: per-element updates (the first leaf is read).
      per_elt_axis: the batch axis or axes.

    Returns:
      The batch size (a Python int).

    Example:
      >>> import jax.numpy as jnp
      >>> from gradax.experimental import aggregating
      >>> aggregating.get_batch_size_from_per_elt_updates({"w": jnp.zeros((4, 2, 3))}, [0, 1])
      8
    """
    axes = _axes("get_batch_size_from_per_elt_updates", per_elt_axis)
    leaves = jax.tree.leaves(per_elt_updates)
    if not leaves:
        return 0
    shape = np.shape(leaves[0])
    return math.prod(shape[a] for a in axes)


def average_per_element_updates(per_elt_axis: int | Sequence[int] = 0) -> Aggregator:
    r"""An aggregator that averages the per-element updates over the batch axes.

    .. math::
        u = \frac1n \sum_{i=1}^n g_i

    Args:
      per_elt_axis: the batch axis or axes.

    Returns:
      A stateless :class:`Aggregator`.

    Example:
      >>> import jax.numpy as jnp
      >>> from gradax.experimental import aggregating
      >>> agg = aggregating.average_per_element_updates()
      >>> agg.update({"w": jnp.array([[1.0], [3.0]])}, agg.init(None))[0]
      {'w': Array([2.], dtype=float32)}
    """
    axes = _axes("average_per_element_updates", per_elt_axis)

    def update(per_elt_updates, state, params=None, **extra_args):
        del params, extra_args
        return jax.tree.map(lambda g: jnp.mean(g, axis=axes), per_elt_updates), state

    return Aggregator(init_empty_state, update)


def accumulate_avg_updates(accumulation_steps: int) -> GradientTransformationExtraArgs:
    r"""Averages the updates of ``k = accumulation_steps`` consecutive calls; emits the average every ``k``-th call.

    .. math::
        \bar g_{j} = \bar g_{j-1} + \frac{g_j - \bar g_{j-1}}{j}, \qquad
        u_j = \begin{cases} \bar g_k & j = k \\ 0 & j < k \end{cases}

    The state resets after each emitted average; ``state.ready`` tells whether this call emitted one (use
    :func:`process` to run an optimizer only then).

    Args:
      accumulation_steps: ``k >= 1``.

    Returns:
      A :class:`GradientTransformationExtraArgs`.

    Example:
      >>> import jax.numpy as jnp
      >>> from gradax.experimental import aggregating
      >>> tx = aggregating.accumulate_avg_updates(2)
      >>> state = tx.init(jnp.zeros(1))
      >>> u, state = tx.update(jnp.array([1.0]), state)
      >>> u, state = tx.update(jnp.array([3.0]), state)
      >>> u, bool(state.ready)
      (Array([2.], dtype=float32), True)
    """
    check_int("accumulate_avg_updates", "accumulation_steps", accumulation_steps, low=1)

    def init(params):
        return AccumulateAvgUpdatesState(
            micro_step=jnp.zeros([], jnp.int32),
            ready=jnp.zeros([], bool),
            avg_grad=zeros_state_like(params),
        )

    def update(updates, state, params=None, **extra_args):
        del params, extra_args
        steps_done = state.micro_step + 1
        ready = steps_done >= accumulation_steps
        weight = 1.0 / steps_done.astype(jnp.float32)

        new_avg = jax.tree.map(
            lambda g, avg: avg + (g.astype(avg.dtype) - avg) * weight.astype(avg.dtype), updates, state.avg_grad
        )
        out = jax.tree.map(lambda a, g: jnp.where(ready, a, jnp.zeros_like(a)).astype(g.dtype), new_avg, updates)
        avg = jax.tree.map(lambda a: jnp.where(ready, jnp.zeros_like(a), a), new_avg)
        micro_step = jnp.where(ready, jnp.zeros([], jnp.int32), steps_done).astype(jnp.int32)
        return out, AccumulateAvgUpdatesState(micro_step=micro_step, ready=ready, avg_grad=avg)

    return GradientTransformationExtraArgs(init, update)


def average_incrementally_updates(
    per_elt_axis: int | Sequence[int] | None, accumulation_steps: int
) -> Aggregator | GradientTransformation:
    r"""Averages per-element updates over the batch axes and/or over ``accumulation_steps`` micro-batches.

    .. math::
        u = \frac{1}{k}\sum_{j=1}^{k} \frac{1}{n}\sum_{i=1}^{n} g_{j,i}

    Args:
      per_elt_axis: the batch axis or axes, or None when the updates are already averaged per micro-batch.
      accumulation_steps: the number of micro-batches ``k >= 1``.

    Returns:
      With ``per_elt_axis=None``: a gradient transformation (the identity for ``k = 1``, else
      :func:`accumulate_avg_updates`); otherwise an :class:`Aggregator` whose state is
      ``(EmptyState(), <accumulation state>)``.

    Example:
      >>> import jax.numpy as jnp
      >>> from gradax.experimental import aggregating
      >>> agg = aggregating.average_incrementally_updates(0, 1)
      >>> agg.update(jnp.array([[1.0], [3.0]]), agg.init(jnp.zeros(1)))[0]
      Array([2.], dtype=float32)
    """
    check_int("average_incrementally_updates", "accumulation_steps", accumulation_steps, low=1)
    accumulate = identity() if accumulation_steps == 1 else accumulate_avg_updates(accumulation_steps)
    if per_elt_axis is None:
        return accumulate
    average = average_per_element_updates(_axes("average_incrementally_updates", per_elt_axis))

    def init(params):
        return (average.init(params), accumulate.init(params))

    def update(per_elt_updates, state, params=None, **extra_args):
        del extra_args
        averaged, avg_state = average.update(per_elt_updates, state[0], params)
        out, acc_state = accumulate.update(averaged, state[1], params)
        return out, (avg_state, acc_state)

    return Aggregator(init, update)


def _batch_mean_and_m2(per_elt_updates, axes):
    mean = jax.tree.map(lambda g: jnp.mean(g, axis=axes), per_elt_updates)
    m2 = jax.tree.map(lambda g, m: jnp.sum(jnp.square(g - jnp.expand_dims(m, axes)), axis=axes), per_elt_updates, mean)
    return mean, m2


def get_per_element_mean_and_sum_sq_diff_grads(
    per_elt_axis: int | Sequence[int] = 0, accumulation_steps: int = 1
) -> Aggregator:
    r"""An aggregator returning the mean of the per-element updates and, as auxiliary output, their sum of squared
    deviations (over ``accumulation_steps`` micro-batches, merged exactly by Chan et al.'s formula).

    For a batch of ``n`` elements, :math:`\mu = \frac1n\sum_i g_i` and :math:`M_2 = \sum_i (g_i - \mu)^2`; merging a
    running :math:`(n_a, \mu_a, M_{2,a})` with a new batch :math:`(n_b, \mu_b, M_{2,b})`,
    :math:`\delta = \mu_b - \mu_a`:

    .. math::
        \mu = \mu_a + \delta \frac{n_b}{n_a + n_b}, \qquad
        M_2 = M_{2,a} + M_{2,b} + \delta^2 \frac{n_a n_b}{n_a + n_b}

    Args:
      per_elt_axis: the batch axis or axes.
      accumulation_steps: the number of micro-batches ``k >= 1``.

    Returns:
      An :class:`Aggregator` whose ``update`` returns ``((mean, {"sum_sq_diff_grads": M2, "sample_size": n}),
      state)``; zeros (and ``sample_size`` 0) on the calls that do not complete a cycle of ``k`` micro-batches. Use
      it with ``process(..., aggregator_has_aux=True)``.

    Example:
      >>> import jax.numpy as jnp
      >>> from gradax.experimental import aggregating
      >>> agg = aggregating.get_per_element_mean_and_sum_sq_diff_grads()
      >>> (mean, aux), _ = agg.update(jnp.array([[1.0], [3.0]]), agg.init(jnp.zeros(1)))
      >>> mean, aux["sum_sq_diff_grads"], aux["sample_size"]
      (Array([2.], dtype=float32), Array([2.], dtype=float32), 2)

    References:
      Chan, Golub and LeVeque, Updating formulae and a pairwise algorithm for computing sample variances, 1979.
    """
    api = "get_per_element_mean_and_sum_sq_diff_grads"
    axes = _axes(api, per_elt_axis)
    check_int(api, "accumulation_steps", accumulation_steps, low=1)

    if accumulation_steps == 1:

        def update_single(per_elt_updates, state, params=None, **extra_args):
            del params, extra_args
            mean, m2 = _batch_mean_and_m2(per_elt_updates, axes)
            size = get_batch_size_from_per_elt_updates(per_elt_updates, axes)
            return (mean, {"sum_sq_diff_grads": m2, "sample_size": size}), state

        return Aggregator(init_empty_state, update_single)

    def init(params):
        return PerElementMeanAndSumSqDiffGradsState(
            micro_step=jnp.zeros([], jnp.int32),
            ready=jnp.zeros([], bool),
            mean_grads=zeros_state_like(params),
            sum_sq_diff_grads=zeros_state_like(params),
        )

    def update(per_elt_updates, state, params=None, **extra_args):
        del params, extra_args
        batch_mean, batch_m2 = _batch_mean_and_m2(per_elt_updates, axes)
        n_b = get_batch_size_from_per_elt_updates(per_elt_updates, axes)
        n_a = (state.micro_step * n_b).astype(jnp.float32)
        total = n_a + n_b
        steps_done = state.micro_step + 1
        ready = steps_done >= accumulation_steps

        def merge_mean(mean_a, mean_b):
            return mean_a + (mean_b - mean_a) * (n_b / total).astype(mean_a.dtype)

        def merge_m2(m2_a, m2_b, mean_a, mean_b):
            delta = mean_b - mean_a
            return m2_a + m2_b + jnp.square(delta) * (n_a * n_b / total).astype(m2_a.dtype)

        mean = jax.tree.map(merge_mean, state.mean_grads, batch_mean)
        m2 = jax.tree.map(merge_m2, state.sum_sq_diff_grads, batch_m2, state.mean_grads, batch_mean)
        emit = lambda x: jnp.where(ready, x, jnp.zeros_like(x))
        keep = lambda x: jnp.where(ready, jnp.zeros_like(x), x)
        out_mean = jax.tree.map(lambda x, g: emit(x).astype(g.dtype), mean, batch_mean)
        aux = {
            "sum_sq_diff_grads": jax.tree.map(emit, m2),
            "sample_size": jnp.where(ready, steps_done * n_b, 0).astype(jnp.int32),
        }
        new_state = PerElementMeanAndSumSqDiffGradsState(
            micro_step=jnp.where(ready, 0, steps_done).astype(jnp.int32),
            ready=ready,
            mean_grads=jax.tree.map(keep, mean),
            sum_sq_diff_grads=jax.tree.map(keep, m2),
        )
        return (out_mean, aux), new_state

    return Aggregator(init, update)


def track_per_element_mean_and_variance_with_ema(ema_decay: ArrayLike = 0.9) -> GradientTransformationExtraArgs:
    r"""Tracks EMAs of the mean and of the (unbiased) per-element variance of the gradients; updates pass unchanged.

    With the mean :math:`\mu` (the incoming updates) and the extra arguments ``sum_sq_diff_grads`` :math:`M_2` and
    ``sample_size`` :math:`n` (given by :func:`get_per_element_mean_and_sum_sq_diff_grads` through :func:`process`):

    .. math::
        m \leftarrow \beta m + (1 - \beta) \mu, \qquad v \leftarrow \beta v + (1 - \beta) \frac{M_2}{n - 1}

    Read the debiased values with :func:`get_unbiased_mean_and_variance_ema`.

    Args:
      ema_decay: :math:`\beta \in [0, 1)`.

    Returns:
      A :class:`GradientTransformationExtraArgs` whose ``update`` needs the keyword arguments ``sum_sq_diff_grads``
      and ``sample_size``.

    Example:
      >>> import jax.numpy as jnp
      >>> from gradax.experimental import aggregating
      >>> tx = aggregating.track_per_element_mean_and_variance_with_ema(0.5)
      >>> _, state = tx.update(jnp.array([2.0]), tx.init(jnp.zeros(1)),
      ...                      sum_sq_diff_grads=jnp.array([3.0]), sample_size=4)
      >>> state.mean_grads_ema, state.variance_grads_ema
      (Array([1.], dtype=float32), Array([0.5], dtype=float32))
    """
    api = "track_per_element_mean_and_variance_with_ema"
    check_interval(api, "ema_decay", ema_decay, 0.0, 1.0, high_closed=False)

    def init(params):
        return PerElementMeanAndVarianceEMAState(
            count=jnp.zeros([], jnp.int32),
            ema_decay=jnp.asarray(ema_decay, jnp.float32),
            mean_grads_ema=zeros_state_like(params),
            variance_grads_ema=zeros_state_like(params),
        )

    def update(updates, state, params=None, *, sum_sq_diff_grads=None, sample_size=None, **extra_args):
        del params, extra_args
        for name, value in (("sum_sq_diff_grads", sum_sq_diff_grads), ("sample_size", sample_size)):
            if value is None:
                raise ValueError(
                    f"{api}: update(...) needs `{name}`; got None. Use it after "
                    "get_per_element_mean_and_sum_sq_diff_grads in process(..., aggregator_has_aux=True), or pass "
                    f"update(updates, state, {name}=...)."
                )
        decay = state.ema_decay
        denominator = jnp.asarray(sample_size) - 1
        new_mean = jax.tree.map(
            lambda m, g: ((1 - decay) * g + decay * m).astype(m.dtype), state.mean_grads_ema, updates
        )
        new_var = jax.tree.map(
            lambda v, s: ((1 - decay) * (s / denominator) + decay * v).astype(v.dtype),
            state.variance_grads_ema,
            sum_sq_diff_grads,
        )
        return updates, PerElementMeanAndVarianceEMAState(
            count=safe_int32_increment(state.count),
            ema_decay=decay,
            mean_grads_ema=new_mean,
            variance_grads_ema=new_var,
        )

    return GradientTransformationExtraArgs(init, update)


def get_unbiased_mean_and_variance_ema(state: Any) -> tuple[Any, Any]:
    r"""The bias-corrected mean and variance EMAs held in an optimizer state.

    .. math::
        \hat m = \frac{m}{1 - \beta^t}, \qquad \hat v = \frac{v}{1 - \beta^t}

    Args:
      state: an optimizer state containing one :class:`PerElementMeanAndVarianceEMAState` (anywhere in the tree).

    Returns:
      ``(mean, variance)``, trees like the parameters.

    Example:
      >>> import jax.numpy as jnp
      >>> from gradax.experimental import aggregating
      >>> tx = aggregating.track_per_element_mean_and_variance_with_ema(0.5)
      >>> _, state = tx.update(jnp.array([2.0]), tx.init(jnp.zeros(1)),
      ...                      sum_sq_diff_grads=jnp.array([3.0]), sample_size=4)
      >>> aggregating.get_unbiased_mean_and_variance_ema(state)
      (Array([2.], dtype=float32), Array([1.], dtype=float32))
    """
    found = [
        s
        for s in jax.tree.leaves(state, is_leaf=lambda x: isinstance(x, PerElementMeanAndVarianceEMAState))
        if isinstance(s, PerElementMeanAndVarianceEMAState)
    ]
    if len(found) != 1:
        raise argument_error(
            "get_unbiased_mean_and_variance_ema",
            "state",
            "a state holding exactly one PerElementMeanAndVarianceEMAState",
            f"{len(found)} such states",
            "Pass the state of an optimizer built with add_mean_variance_to_opt",
        )
    ema = found[0]
    correction = 1 - ema.ema_decay ** ema.count.astype(jnp.float32)
    mean = jax.tree.map(lambda m: (m / correction).astype(m.dtype), ema.mean_grads_ema)
    var = jax.tree.map(lambda v: (v / correction).astype(v.dtype), ema.variance_grads_ema)
    return mean, var


def _find_ready(state: Any) -> jax.Array | None:
    """The ``ready`` flag of the first state in ``state`` that has one (accumulating aggregators), else None."""
    nodes = jax.tree.leaves(state, is_leaf=lambda x: hasattr(x, "_fields") and "ready" in x._fields)
    for node in nodes:
        if hasattr(node, "_fields") and "ready" in node._fields:
            return node.ready
    return None


def process(
    preprocessor: GradientTransformation,
    aggregator: GradientTransformation | Aggregator,
    postprocessor: GradientTransformation,
    aggregator_has_aux: bool = False,
) -> GradientTransformation | Aggregator:
    r"""Composes a per-element preprocessor, an aggregator and a postprocessor (an optimizer).

    .. math::
        u = \mathrm{post}\big(\mathrm{agg}(\mathrm{pre}(g_1, \dots, g_n))\big)

    When the aggregator accumulates micro-batches (its state has a ``ready`` flag), the postprocessor runs only on
    the calls that complete a cycle (via ``lax.cond``; its state is unchanged otherwise) and the other calls return
    zero updates. With ``aggregator_has_aux`` the aggregator returns ``(updates, aux)`` and the dict ``aux`` reaches
    the postprocessor as keyword arguments.

    Args:
      preprocessor: maps per-element updates to per-element updates (e.g. per-example clipping).
      aggregator: maps per-element updates to one update (an :class:`Aggregator`), or a transformation.
      postprocessor: maps the aggregated update to the final update.
      aggregator_has_aux: whether the aggregator returns auxiliary outputs.

    Returns:
      An :class:`Aggregator` when ``aggregator`` is one, else a :class:`GradientTransformationExtraArgs`; its state
      is ``(pre_state, aggregator_state, post_state)``.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> from gradax.experimental import aggregating
      >>> tx = aggregating.process(gradax.identity(), aggregating.average_per_element_updates(), gradax.scale(-1.0))
      >>> tx.update(jnp.array([[1.0], [3.0]]), tx.init(jnp.zeros(1)))[0]
      Array([-2.], dtype=float32)
    """
    pre = with_extra_args_support(preprocessor)
    post = with_extra_args_support(postprocessor)

    def init(params):
        return (pre.init(params), aggregator.init(params), post.init(params))

    def update(per_elt_updates, state, params=None, **extra_args):
        pre_state, agg_state, post_state = state
        pre_updates, pre_state = pre.update(per_elt_updates, pre_state, params, **extra_args)
        aggregated, agg_state = aggregator.update(pre_updates, agg_state, params)
        aux = {}
        if aggregator_has_aux:
            aggregated, aux = aggregated
        ready = _find_ready(agg_state)

        def run(operands):
            agg_updates, post_s = operands
            return post.update(agg_updates, post_s, params, **extra_args, **aux)

        if ready is None:
            updates, post_state = run((aggregated, post_state))
        else:

            def skip(operands):
                agg_updates, post_s = operands
                return jax.tree.map(jnp.zeros_like, agg_updates), post_s

            updates, post_state = jax.lax.cond(ready, run, skip, (aggregated, post_state))
        return updates, (pre_state, agg_state, post_state)

    if isinstance(aggregator, Aggregator):
        return Aggregator(init, update)
    return GradientTransformationExtraArgs(init, update)


def add_mean_variance_to_opt(
    opt: GradientTransformation,
    ema_decay: ArrayLike = 0.9,
    per_elt_axis: int | list[int] = 0,
    accumulation_steps: int = 1,
):
    r"""Wraps an optimizer so that it also tracks EMAs of the per-element gradient mean and variance.

    ``process(identity(), get_per_element_mean_and_sum_sq_diff_grads(per_elt_axis, accumulation_steps),
    chain(track_per_element_mean_and_variance_with_ema(ema_decay), opt), aggregator_has_aux=True)``: the optimizer
    receives the mean gradient; read the statistics with :func:`get_unbiased_mean_and_variance_ema`.

    .. math::
        m \leftarrow \beta m + (1 - \beta) \bar g, \qquad v \leftarrow \beta v + (1 - \beta) \widehat{\mathrm{Var}}(g)

    Args:
      opt: the optimizer.
      ema_decay: :math:`\beta \in [0, 1)`.
      per_elt_axis: the batch axis or axes of the per-element gradients.
      accumulation_steps: the number of micro-batches per optimizer step.

    Returns:
      An :class:`Aggregator` taking per-element gradients.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> from gradax.experimental import aggregating
      >>> tx = aggregating.add_mean_variance_to_opt(gradax.sgd(1.0), ema_decay=0.5)
      >>> u, state = tx.update(jnp.array([[1.0], [3.0]]), tx.init(jnp.zeros(1)))
      >>> u, aggregating.get_unbiased_mean_and_variance_ema(state)
      (Array([-2.], dtype=float32), (Array([2.], dtype=float32), Array([2.], dtype=float32)))
    """
    return process(
        identity(),
        get_per_element_mean_and_sum_sq_diff_grads(per_elt_axis, accumulation_steps),
        chain(track_per_element_mean_and_variance_with_ema(ema_decay), opt),
        aggregator_has_aux=True,
    )
