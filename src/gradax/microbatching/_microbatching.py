"""Microbatching: evaluate a function on slices of a batch, one after the other, and combine the results.

A batch of size :math:`B` is cut into :math:`n = B / m` microbatches of :math:`m` rows each. Microbatch :math:`j`
holds rows :math:`j, j + n, j + 2n, \\dots` (a column-major split, so a sharded batch axis keeps its sharding on the
new microbatch-size axis). The function runs on each microbatch inside a ``lax.fori_loop`` and an
:class:`Accumulator` folds the per-microbatch outputs into one result.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .._checks import argument_error

Function = Callable[..., Any]
TreeFn = Callable[[Any], Any]
UpdateFn = Callable[[Any, Any, int], Any]
VmapFn = Callable[[Function, Any, int], Function]


class Aux(NamedTuple):
    """Per-example auxiliary outputs of :func:`micro_grad`.

    Attributes:
      values: the per-example values of the function.
      metrics: ``metrics_fn`` of each per-example gradient.
      aux: the per-example auxiliary output of the function (None when ``has_aux=False``).
    """

    values: Any
    metrics: Any
    aux: Any


@dataclasses.dataclass(frozen=True)
class Accumulator:
    """How the outputs :math:`x_0, \\dots, x_{n-1}` of the microbatches are combined.

    The result is ``finalize(c_n)`` with ``c_0 = init(shape_of(x_0))`` and ``c_{i+1} = update(c_i, x_i, i)``.

    Attributes:
      init: ``init(value)`` builds the initial carry from a value with the shape/dtype of one microbatch output
        (a ``jax.ShapeDtypeStruct`` tree).
      update: ``update(carry, value, index)`` folds the output of microbatch ``index`` into the carry.
      finalize: ``finalize(carry)`` turns the last carry into the result.
      aggregate: ``aggregate(values)`` reduces values stacked along axis 0 in one go (used by :func:`micro_vmap`
        inside a microbatch).
    """

    init: TreeFn
    update: UpdateFn
    finalize: TreeFn
    aggregate: TreeFn


class AccumulationType(enum.Enum):
    """Built-in ways of combining microbatch outputs.

    * ``MEAN``: :math:`\\frac{1}{n}\\sum_i x_i` over all :math:`n` microbatches (floating-point outputs only).
    * ``SUM``: :math:`\\sum_i x_i`.
    * ``RUNNING_MEAN``: the mean over the microbatches actually run (``num_real_microbatches``), updated as
      :math:`c_{i+1} = c_i \\frac{i}{i+1} + x_i \\frac{1}{i+1}` (floating-point outputs only).
    * ``CONCAT``: the outputs joined along axis 0, in the original row order of the batch.
    """

    MEAN = enum.auto()
    SUM = enum.auto()
    RUNNING_MEAN = enum.auto()
    CONCAT = enum.auto()


# --- built-in accumulators (written for one array, lifted to trees) -------------------------------------------------


def _per_leaf(acc: Accumulator) -> Accumulator:
    """An accumulator for one array applied to every leaf of a tree."""
    return Accumulator(
        init=lambda value: jax.tree.map(acc.init, value),
        update=lambda carry, value, i: jax.tree.map(lambda c, v: acc.update(c, v, i), carry, value),
        finalize=lambda carry: jax.tree.map(acc.finalize, carry),
        aggregate=lambda values: jax.tree.map(acc.aggregate, values),
    )


def _zeros(value: Any) -> jax.Array:
    return jnp.zeros(value.shape, value.dtype)


def _floating_zeros(value: Any) -> jax.Array:
    if not jnp.issubdtype(value.dtype, jnp.floating):
        raise ValueError(
            "MEAN and RUNNING_MEAN Accumulators require floating-point values. "
            f"Got an output of dtype {value.dtype}; use AccumulationType.SUM or CONCAT for it."
        )
    return _zeros(value)


def _add(carry: jax.Array, value: jax.Array, index: Any) -> jax.Array:
    del index
    return carry + value


def _check_count(api: str, num_microbatches: int) -> None:
    if num_microbatches <= 0:
        raise argument_error(
            api,
            "num_microbatches",
            "positive",
            num_microbatches,
            "The batch axis must hold at least one microbatch",
        )


def _sum_accumulator() -> Accumulator:
    return _per_leaf(Accumulator(_zeros, _add, lambda c: c, lambda v: jnp.sum(v, axis=0)))


def _mean_accumulator(num_microbatches: int) -> Accumulator:
    _check_count("AccumulationType.MEAN", num_microbatches)
    return _per_leaf(Accumulator(_floating_zeros, _add, lambda c: c / num_microbatches, lambda v: jnp.mean(v, axis=0)))


def _running_mean_update(carry: jax.Array, value: jax.Array, index: Any) -> jax.Array:
    keep = index / (index + 1)
    return carry * keep + value * (1 - keep)


def _running_mean_accumulator() -> Accumulator:
    return _per_leaf(Accumulator(_floating_zeros, _running_mean_update, lambda c: c, lambda v: jnp.mean(v, axis=0)))


def _explicit_sharding(x: jax.Array) -> Any:
    """The sharding of ``x`` when every mesh axis is explicit, else None."""
    try:
        sharding = jax.typeof(x).sharding
        return sharding if sharding.mesh.are_all_axes_explicit else None
    except AttributeError:
        return None


def _concat_accumulator(num_microbatches: int) -> Accumulator:
    _check_count("AccumulationType.CONCAT", num_microbatches)

    def init(value):
        return jnp.zeros((num_microbatches, *value.shape), value.dtype)

    def update(carry, value, index):
        return carry.at[index].set(value)

    def finalize(carry):
        # carry[j, k] is row j + k * n of the batch: undo the column-major split.
        shape = (-1, *carry.shape[2:])
        sharding = _explicit_sharding(carry)
        if sharding is None:
            return carry.reshape(shape, order="F")
        spec = jax.sharding.PartitionSpec(*sharding.spec[1:])
        return carry.reshape(shape, order="F", out_sharding=jax.sharding.NamedSharding(sharding.mesh, spec))

    return _per_leaf(Accumulator(init, update, finalize, lambda v: v))


def _combine(accumulators: Any) -> Accumulator:
    """One accumulator from a tree of accumulators (a prefix of the output tree)."""
    return Accumulator(
        init=lambda values: jax.tree.map(lambda a, v: a.init(v), accumulators, values),
        update=lambda carry, values, i: jax.tree.map(lambda a, c, v: a.update(c, v, i), accumulators, carry, values),
        finalize=lambda carry: jax.tree.map(lambda a, c: a.finalize(c), accumulators, carry),
        aggregate=lambda values: jax.tree.map(lambda a, v: a.aggregate(v), accumulators, values),
    )


def _check_accumulator(api: str, accumulator: Any) -> None:
    for leaf in jax.tree.leaves(accumulator):
        if not isinstance(leaf, (Accumulator, AccumulationType)):
            raise argument_error(
                api,
                "accumulator",
                "an Accumulator, an AccumulationType, or a pytree of them",
                leaf,
                "Use e.g. gradax.microbatching.AccumulationType.SUM, MEAN, RUNNING_MEAN or CONCAT",
            )


def _resolve(accumulator: Any, num_microbatches: int) -> Accumulator:
    """Turns a tree of Accumulators/AccumulationTypes into one Accumulator for ``num_microbatches``."""

    def one(acc):
        if isinstance(acc, Accumulator):
            return acc
        if acc is AccumulationType.SUM:
            return _sum_accumulator()
        if acc is AccumulationType.MEAN:
            return _mean_accumulator(num_microbatches)
        if acc is AccumulationType.RUNNING_MEAN:
            return _running_mean_accumulator()
        if acc is AccumulationType.CONCAT:
            return _concat_accumulator(num_microbatches)
        _check_accumulator("microbatch", acc)
        raise AssertionError("unreachable")  # pragma: no cover

    return _combine(jax.tree.map(one, accumulator))


# --- reshaping --------------------------------------------------------------------------------------------------------


def reshape_batch_axis(tree: Any, microbatch_size: int, axis: int = 0) -> Any:
    """Splits the batch axis of every leaf into ``(num_microbatches, microbatch_size)`` at the same position.

    The split is column-major: for a batch axis of size :math:`B = n m` (``m = microbatch_size``),

    .. math::

        y[j, k] = x[j + k n], \\qquad 0 \\le j < n, \\ 0 \\le k < m,

    so microbatch :math:`j` holds rows :math:`j, j + n, \\dots`. A sharding of the batch axis carries over to the
    new ``microbatch_size`` axis (with explicit sharding the number of shards must divide ``microbatch_size``).

    Args:
      tree: a pytree of arrays, each with a batch axis at ``axis``.
      microbatch_size: rows per microbatch (> 0, dividing the batch size).
      axis: position of the batch axis.

    Returns:
      The pytree with each batch axis replaced by two axes ``(num_microbatches, microbatch_size)``.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> gradax.microbatching.reshape_batch_axis(jnp.arange(6), 2)
      Array([[0, 3],
             [1, 4],
             [2, 5]], dtype=int32)
    """

    def split(x):
        shape = (*x.shape[:axis], -1, microbatch_size, *x.shape[axis + 1 :])
        sharding = _explicit_sharding(x)
        if sharding is None:
            return jnp.reshape(x, shape, order="F")
        spec = sharding.spec
        if len(spec) < axis:
            new_spec = spec
        else:
            new_spec = jax.sharding.PartitionSpec(*spec[:axis], None, spec[axis], *spec[axis + 1 :])
        num_shards = x.shape[axis] // sharding.shard_shape(x.shape)[axis]
        if microbatch_size % num_shards != 0:
            raise argument_error(
                "reshape_batch_axis",
                "microbatch_size",
                f"a multiple of the number of shards of the batch axis ({num_shards})",
                microbatch_size,
                "Pick a microbatch_size divisible by the batch sharding",
            )
        return x.reshape(shape, order="F", out_sharding=jax.sharding.NamedSharding(sharding.mesh, new_spec))

    return jax.tree.map(split, tree)


def _as_tuple(x: Any) -> tuple:
    return (x,) if isinstance(x, (int, str)) else tuple(x)


def _split_batch_args(api, microbatch_size, argnums, argnames, in_axes, args, kwargs):
    """Reshapes the batch arguments; returns them and the common batch size."""
    args, kwargs = list(args), dict(kwargs)
    batch = [args[i] for i in argnums] + [kwargs[k] for k in argnames]
    sizes = jax.tree.leaves([jax.tree.map(lambda x, ax=ax: x.shape[ax], b) for ax, b in zip(in_axes, batch)])
    if not sizes:
        raise argument_error(
            api, "argnums", "indices of arguments with at least one array", tuple(argnums), "Name the batch arguments"
        )
    if len(set(sizes)) > 1:
        raise argument_error(
            api,
            "argnums",
            "arguments whose batch axes all have the same size",
            sizes,
            "Give every batch argument the same number of rows",
        )
    batch_size = sizes[0]
    if batch_size % microbatch_size != 0:
        raise argument_error(
            api,
            "microbatch_size",
            f"a divisor of the batch size {batch_size}",
            microbatch_size,
            f"The batch size must be divisible by microbatch_size; pick a microbatch_size that divides {batch_size}",
        )
    for i, ax in zip(argnums, in_axes):
        args[i] = reshape_batch_axis(args[i], microbatch_size, ax)
    for k, ax in zip(argnames, in_axes[len(argnums) :]):
        kwargs[k] = reshape_batch_axis(kwargs[k], microbatch_size, ax)
    return tuple(args), kwargs, batch_size


# --- public transformations -------------------------------------------------------------------------------------------


def microbatch(
    fun: Function,
    argnums: int | Sequence[int],
    microbatch_size: int | None,
    accumulator: Accumulator | AccumulationType | Any = AccumulationType.SUM,
    *,
    argnames: str | Sequence[str] = (),
    in_axes: int | Sequence[int] = 0,
    num_real_microbatches: int | jax.Array | None = None,
) -> Function:
    """Evaluates ``fun`` on microbatches of its batch arguments, sequentially, and combines the outputs.

    With batch arguments split into microbatches :math:`b_0, \\dots, b_{n-1}` (see :func:`reshape_batch_axis`), the
    returned function computes, for the default ``SUM`` accumulator,

    .. math::

        \\mathrm{fun}_{\\mu}(b) = \\sum_{j=0}^{n-1} \\mathrm{fun}(b_j),

    with the loop run by ``jax.lax.fori_loop`` so that only one microbatch is live at a time (lower peak memory).
    ``MEAN`` divides by :math:`n`, ``CONCAT`` rebuilds the full-batch output in the original row order, and a
    pytree of accumulators (a prefix of the output tree) combines each part of the output its own way.

    Args:
      fun: the function to evaluate.
      argnums: index or indices of the positional arguments that carry a batch axis.
      microbatch_size: rows per microbatch (> 0, dividing the batch size); None returns ``fun`` itself.
      accumulator: an :class:`Accumulator`, an :class:`AccumulationType`, or a pytree of them forming a prefix of
        ``fun``'s output.
      argnames: name or names of keyword arguments that carry a batch axis.
      in_axes: batch axis of each argument in ``argnums + argnames`` (one int applies to all).
      num_real_microbatches: when given (may be traced), only the first this-many microbatches run.

    Returns:
      A function with the same arguments as ``fun``.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> f = lambda x: (2 * x, jnp.sum(x))
      >>> kinds = (gradax.microbatching.AccumulationType.CONCAT, gradax.microbatching.AccumulationType.SUM)
      >>> gradax.microbatch(f, argnums=0, microbatch_size=2, accumulator=kinds)(jnp.arange(4.0))
      (Array([0., 2., 4., 6.], dtype=float32), Array(6., dtype=float32))
    """
    if microbatch_size is None:
        return fun
    if isinstance(microbatch_size, bool) or not isinstance(microbatch_size, int) or microbatch_size <= 0:
        raise argument_error(
            "microbatch", "microbatch_size", "a positive int or None", microbatch_size, "Pass e.g. microbatch_size=8"
        )
    _check_accumulator("microbatch", accumulator)
    argnums = _as_tuple(argnums)
    argnames = _as_tuple(argnames)
    if isinstance(in_axes, int):
        in_axes = (in_axes,) * (len(argnums) + len(argnames))
    in_axes = tuple(in_axes)
    if len(in_axes) != len(argnums) + len(argnames):
        raise argument_error(
            "microbatch",
            "in_axes",
            f"an int or one axis per batch argument ({len(argnums) + len(argnames)})",
            in_axes,
            "Give one axis for each entry of argnums + argnames",
        )

    def microbatched(*args, **kwargs):
        args, kwargs, batch_size = _split_batch_args(
            "microbatch", microbatch_size, argnums, argnames, in_axes, args, kwargs
        )
        num_microbatches = batch_size // microbatch_size
        acc = _resolve(accumulator, num_microbatches)

        def run(index):
            a, k = list(args), dict(kwargs)
            for i, ax in zip(argnums, in_axes):
                a[i] = jax.tree.map(lambda x, ax=ax: jnp.take(x, index, axis=ax), a[i])
            for name, ax in zip(argnames, in_axes[len(argnums) :]):
                k[name] = jax.tree.map(lambda x, ax=ax: jnp.take(x, index, axis=ax), k[name])
            return fun(*a, **k)

        carry = acc.init(jax.eval_shape(run, 0))
        stop = num_microbatches if num_real_microbatches is None else num_real_microbatches
        carry = jax.lax.fori_loop(0, stop, lambda i, c: acc.update(c, run(i), i), carry)
        return acc.finalize(carry)

    return microbatched


def micro_vmap(
    fun: Function,
    in_axes: int | Sequence[int] = 0,
    out_axes: Any = 0,
    *,
    microbatch_size: int | None = None,
    vmap_fn: VmapFn = jax.vmap,
    accumulator: Accumulator | AccumulationType | Any = AccumulationType.CONCAT,
    num_real_microbatches: int | jax.Array | None = None,
) -> Function:
    """``jax.vmap`` run over microbatches: each microbatch is vmapped, and microbatches run sequentially.

    With the default ``CONCAT`` accumulator the result equals ``jax.vmap(fun, in_axes)(*args)``; reducing
    accumulators (``SUM``, ``MEAN``) return :math:`\\sum_b \\mathrm{fun}(x_b)` or its mean over the batch without
    ever holding all per-example outputs. Keyword arguments are mapped along their axis 0, as in ``jax.vmap``.

    Args:
      fun: the per-example function.
      in_axes: an int or one entry per positional argument (an int axis, or None for unmapped arguments).
      out_axes: must be 0.
      microbatch_size: rows per microbatch (> 0, dividing the batch size); None vmaps the whole batch at once.
      vmap_fn: a function with ``jax.vmap``'s signature ``vmap_fn(fun, in_axes, out_axes)``.
      accumulator: how per-example outputs are combined (a pytree prefix of the output may mix kinds).
      num_real_microbatches: when given (may be traced), only the first this-many microbatches run.

    Returns:
      The batched function.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> gradax.microbatching.micro_vmap(lambda x: x * x, microbatch_size=2)(jnp.arange(4))
      Array([0, 1, 4, 9], dtype=int32)
    """
    if not (isinstance(out_axes, int) and not isinstance(out_axes, bool) and out_axes == 0):
        raise argument_error("micro_vmap", "out_axes", "0", out_axes, "Move the batch axis of the output afterwards")
    _check_accumulator("micro_vmap", accumulator)
    in_axes = (in_axes,) if isinstance(in_axes, int) else tuple(in_axes)

    def vmapped_and_reduced(*args, kwargs):
        out = vmap_fn(fun, in_axes, out_axes)(*args, **kwargs)
        per_microbatch = jax.tree.leaves(out)[0].shape[0]
        return _resolve(accumulator, per_microbatch).aggregate(out)

    mapped = tuple(i for i, ax in enumerate(in_axes) if ax is not None)
    batched = microbatch(
        vmapped_and_reduced,
        argnums=mapped,
        microbatch_size=microbatch_size,
        accumulator=accumulator,
        argnames="kwargs",
        in_axes=tuple(ax for ax in in_axes if ax is not None) + (0,),
        num_real_microbatches=num_real_microbatches,
    )

    def wrapped(*args, **kwargs):
        return batched(*args, kwargs=kwargs)

    return wrapped


def micro_grad(
    fun: Function,
    has_aux: bool = False,
    argnums: int | Sequence[int] = 0,
    *,
    batch_argnums: int | Sequence[int] = 1,
    keep_batch_dim: bool = True,
    microbatch_size: int | None = None,
    accumulator: Accumulator | AccumulationType | Any = AccumulationType.SUM,
    transform_fn: Callable[[Any], Any] = lambda x: x,
    metrics_fn: Callable[[Any], Any] = lambda x: None,
    num_real_microbatches: int | jax.Array | None = None,
) -> Callable[..., tuple[Any, Aux]]:
    """Per-example gradients, transformed and accumulated over the batch, with microbatching.

    For examples :math:`b = 1, \\dots, B` of the batch arguments, with :math:`g_b = \\nabla_\\theta
    \\mathrm{fun}(\\theta, x_b)` the gradient with respect to the ``argnums`` arguments, the returned function gives

    .. math::

        \\Big(\\bigoplus_{b=1}^{B} T(g_b),\\ \\mathrm{Aux}\\big(v_b,\\ M(g_b),\\ a_b\\big)_{b=1}^{B}\\Big)

    where :math:`T` is ``transform_fn`` (e.g. per-example clipping), :math:`\\bigoplus` the ``accumulator``
    (``SUM`` by default, ``MEAN`` for the mean), :math:`M` is ``metrics_fn`` and the auxiliary outputs
    (values :math:`v_b`, metrics, the function's own aux :math:`a_b`) are stacked per example. The gradient comes
    first, unlike ``jax.value_and_grad``.

    Args:
      fun: the function to differentiate, ``fun(params, batch, ...)`` by default.
      has_aux: whether ``fun`` returns ``(value, aux)``.
      argnums: the argument(s) to differentiate with respect to.
      batch_argnums: the argument(s) with a batch axis (axis 0).
      keep_batch_dim: when True ``fun`` sees each example with a batch axis of size 1; when False, without it.
      microbatch_size: examples per microbatch (> 0, dividing the batch size); None processes the batch at once.
      accumulator: how the transformed per-example gradients are combined.
      transform_fn: applied to each per-example gradient before accumulation.
      metrics_fn: applied to each per-example gradient; its outputs are returned per example in ``Aux.metrics``.
      num_real_microbatches: when given (may be traced), only the first this-many microbatches run.

    Returns:
      A function with ``fun``'s arguments returning ``(accumulated, Aux(values, metrics, aux))``.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> loss = lambda w, x: jnp.mean((x @ w) ** 2)
      >>> g, aux = gradax.microbatching.micro_grad(loss, microbatch_size=2)(jnp.ones(1), jnp.arange(4.0)[:, None])
      >>> g, aux.values
      (Array([28.], dtype=float32), Array([0., 1., 4., 9.], dtype=float32))
    """
    _check_accumulator("micro_grad", accumulator)
    batch_argnums = _as_tuple(batch_argnums)
    with_aux = fun if has_aux else (lambda *a, **k: (fun(*a, **k), None))
    value_and_grad = jax.value_and_grad(with_aux, argnums, has_aux=True)

    def per_example(*args, **kwargs):
        (value, fun_aux), grad = value_and_grad(*args, **kwargs)
        return transform_fn(grad), Aux(values=value, metrics=metrics_fn(grad), aux=fun_aux)

    in_axes = [None] * (max(batch_argnums) + 1)
    for i in batch_argnums:
        in_axes[i] = 0
    batched = micro_vmap(
        per_example,
        in_axes=in_axes,
        accumulator=(accumulator, AccumulationType.CONCAT),
        microbatch_size=microbatch_size,
        num_real_microbatches=num_real_microbatches,
    )
    if not keep_batch_dim:
        return batched

    def with_unit_batch(*args, **kwargs):
        args = list(args)
        for i in batch_argnums:
            args[i] = jax.tree.map(lambda x: jnp.expand_dims(x, 1), args[i])
        return batched(*args, **kwargs)

    return with_unit_batch
