"""ZeRO-1's apply step: each device adds the updates to its own slice of the params, then the slices are gathered.

With ZeRO-1 the params are replicated over a mesh axis and the optimizer state is split along it
(:func:`~gradax.sharding.state_shardings` with ``zero_axis``), so each device computes the updates of its slice only,
and the new params must be gathered back whole on every device. Left to itself, XLA emits one all-gather per
parameter. On an accelerator with an interconnect that is cheap; on XLA:CPU's virtual devices
(``--xla_force_host_platform_device_count``) every collective is a rendezvous of all the device threads in the
process (two barriers: all arrive, then all finish copying), and with more devices than cores each barrier waits
for every thread to be scheduled again. :func:`apply_updates_zero1` packs the small parameters into a few
buckets, one all-gather each, and gathers each large one on its own (no extra copy).
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from .._checks import argument_error, tree_mismatch_error
from .._update import apply_updates
from ._shardings import _axes, _mesh_of, _place

_API = "gradax.sharding.apply_updates_zero1"


def _split_spec(shape: tuple[int, ...], spec: PartitionSpec, mesh_sizes: dict[str, int], zero_axis: str):
    """The placement ``state_shardings`` gives a moment shaped like this parameter: where its update is computed."""
    return _place("", shape, (shape, spec), mesh_sizes, zero_axis, 0, False, [])


def _mover(mesh: Any) -> Any:
    """``reshard`` on a mesh with Explicit axes (``jax.make_mesh``'s default), else ``with_sharding_constraint``."""
    explicit = getattr(getattr(jax.sharding, "AxisType", None), "Explicit", None)
    if explicit is not None and explicit in tuple(getattr(mesh, "axis_types", None) or ()):
        return jax.sharding.reshard
    return jax.lax.with_sharding_constraint


def _buckets(leaves: list[Any], eligible: list[bool], bucket_bytes: int) -> list[list[int]]:
    """Greedy groups of eligible leaf indices (same dtype, in tree order) of at most ``bucket_bytes`` gathered bytes."""
    open_: dict[Any, tuple[list[int], int]] = {}
    out: list[list[int]] = []
    for i, (x, ok) in enumerate(zip(leaves, eligible)):
        if not ok:
            continue
        size = math.prod(x.shape) * np.dtype(x.dtype).itemsize
        if size >= bucket_bytes:
            continue
        members, held = open_.get(x.dtype, ([], 0))
        if members and held + size > bucket_bytes:
            out.append(members)
            members, held = [], 0
        open_[x.dtype] = (members + [i], held + size)
    out.extend(members for members, _ in open_.values() if members)
    return [b for b in out if len(b) > 1]


def apply_updates_zero1(
    params: Any, updates: Any, param_shardings: Any, *, zero_axis: str, bucket_bytes: int = 1 << 20
) -> Any:
    r"""``params + updates`` for ZeRO-1: added on each device's slice, then gathered in a few buckets.

    Use it in place of :func:`gradax.apply_updates` in a training step jitted with ZeRO-1 state
    (``state_shardings(..., zero_axis=...)``) and replicated params: the sum is computed where the state lives (each
    leaf split along ``zero_axis`` on the dimension ``state_shardings`` chose), and the new params are gathered back
    to ``param_shardings``. Parameters smaller than ``bucket_bytes`` that are split on their first dimension and
    replicated otherwise are concatenated into buckets (per dtype, in tree order) of at most ``bucket_bytes``, one
    all-gather per bucket; the others are gathered one by one, as XLA would. The numbers are those of
    ``apply_updates`` (the same element-wise sum; only where it is computed and how it is moved change).

    For a leaf :math:`p \in \mathbb{R}^{d_0 \times \dots}` split into :math:`N` row blocks along ``zero_axis``,
    device :math:`r` computes :math:`p_r + u_r` and receives the other :math:`N-1` blocks. A bucket holds the
    device's blocks of several leaves end to end, :math:`[p_r^{(1)}, p_r^{(2)}, \dots]`; after one all-gather each
    leaf is copied out of the :math:`N \times K` gathered buffer. Buckets trade an extra copy of their bytes for
    fewer collectives: on XLA:CPU virtual devices with fewer cores than devices a collective costs two rounds of
    thread scheduling, which a copy of a small leaf does not.

    Args:
      params: the params tree (replicated over ``zero_axis``).
      updates: the updates, shaped like ``params`` (from ``optimizer.update`` with state placed by
        ``state_shardings(..., zero_axis=zero_axis)``).
      param_shardings: the params' ``NamedSharding`` (a tree shaped like ``params``, or a prefix of it), all on one
        mesh; the result is placed on them.
      zero_axis: the mesh axis along which the state is split.
      bucket_bytes: the most bytes (of the whole parameters) gathered by one bucket's all-gather, an int >= 0; a
        parameter of at least this size is gathered on its own. 0 gathers every parameter on its own.

    Returns:
      The new params, shaped like ``params``, each leaf with its parameter's dtype and placed on ``param_shardings``.

    Raises:
      ValueError: ``bucket_bytes`` is not an int >= 0; ``zero_axis`` is not an axis of the mesh; ``updates`` is not
        shaped like ``params``; ``param_shardings`` does not match the params or is not ``NamedSharding`` on one mesh.

    Example:
      >>> import gradax, jax, jax.numpy as jnp
      >>> from jax.sharding import NamedSharding, PartitionSpec as P
      >>> mesh = jax.make_mesh((1,), ("data",))
      >>> params = {"b": jnp.ones(2), "w": jnp.ones((2, 2))}
      >>> updates = jax.tree.map(lambda x: -0.25 * x, params)
      >>> new = gradax.sharding.apply_updates_zero1(params, updates, NamedSharding(mesh, P()), zero_axis="data")
      >>> new["w"]
      Array([[0.75, 0.75],
             [0.75, 0.75]], dtype=float32)

    References:
      Rajbhandari et al., `ZeRO: Memory optimizations toward training trillion parameter models
      <https://arxiv.org/abs/1910.02054>`_, 2020 (optimizer-state partitioning, stage 1); Li et al., `PyTorch
      distributed: experiences on accelerating data parallel training <https://arxiv.org/abs/2006.15704>`_, 2020
      (gradient bucketing).
    """
    if isinstance(bucket_bytes, bool) or not isinstance(bucket_bytes, (int, np.integer)) or bucket_bytes < 0:
        raise argument_error(
            _API, "bucket_bytes", "an int >= 0", bucket_bytes, "Pass 0 to gather every parameter on its own"
        )
    shardings, mesh, mesh_sizes = _mesh_of(params, param_shardings, zero_axis, _API)
    if zero_axis is None:
        raise argument_error(
            _API, "zero_axis", "an axis name of the mesh", zero_axis, "Without ZeRO-1 use gradax.apply_updates"
        )
    treedef = jax.tree.structure(params)
    try:
        uleaves = treedef.flatten_up_to(updates)
    except (ValueError, TypeError):
        raise tree_mismatch_error(_API, "updates", params, updates) from None
    pleaves = treedef.flatten_up_to(params)
    constrain = _mover(mesh)
    new: list[Any] = []
    eligible: list[bool] = []
    for p, u, target in zip(pleaves, uleaves, shardings):
        shape = tuple(np.shape(p))
        split = _split_spec(shape, target.spec, mesh_sizes, zero_axis)
        where = NamedSharding(mesh, split)
        new.append(apply_updates(constrain(p, where), constrain(u, where)))
        first = [_axes(e) for e in split]
        eligible.append(
            bool(first) and first[0] == (zero_axis,) and not any(first[1:]) and not any(_axes(e) for e in target.spec)
        )
    n = mesh_sizes[zero_axis]
    out: list[Any] = list(new)
    for bucket in _buckets(new, eligible, int(bucket_bytes)):
        rows = NamedSharding(mesh, PartitionSpec(zero_axis))
        if constrain is jax.lax.with_sharding_constraint:
            parts = [new[i].reshape(n, -1) for i in bucket]
        else:  # explicit axes: the row split of each leaf is its own split, said to reshape
            parts = [jax.lax.reshape(new[i], (n, new[i].size // n), out_sharding=rows) for i in bucket]
        flat = jnp.concatenate(parts, axis=1)
        flat = constrain(constrain(flat, rows), NamedSharding(mesh, PartitionSpec()))
        offset = 0
        for i in bucket:
            width = math.prod(new[i].shape) // n
            out[i] = flat[:, offset : offset + width].reshape(new[i].shape)
            offset += width
    return jax.tree.unflatten(treedef, [constrain(x, s) for x, s in zip(out, shardings)])
