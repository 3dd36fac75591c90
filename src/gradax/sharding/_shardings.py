"""Where an optimizer's state lives on a device mesh: its shardings derived from the params' (FSDP and ZeRO-1).

The state of ``optimizer.init(params)`` is found from abstract shapes (:func:`jax.eval_shape`: nothing is allocated),
and each of its leaves is placed by these rules:

* **Owner.** A state subtree laid out like the params tree (``mu``, ``nu``, ``acc_grads``, a masked state with
  ``MaskedNode`` holes, a partition's inner states) gives each of its leaves the parameter at the same position as
  owner; when such subtrees nest, the innermost decides. A leaf outside every such subtree has no owner (counters,
  hyperparameters, ``flatten``'s flat vectors).
* **FSDP.** A leaf with its owner's shape takes its owner's :class:`~jax.sharding.PartitionSpec`. A leaf with other
  dimensions takes, dimension by dimension, the mesh axes of an owner dimension of the same size (in order first:
  Adafactor's row and column statistics; then in any order: a Shampoo-style ``(n, n)`` preconditioner of dimension
  ``n``); each mesh axis is used once. A leaf with no dimension in common but at least as many elements (the 8-bit
  ``BlockQuantized`` codes, ``(num_blocks, block_size)``) takes all its owner's mesh axes on its first dimension;
  a smaller one (their block scales, a placeholder) is replicated.
* **ZeRO-1.** With ``zero_axis``, every leaf that has an owner and at least as many elements as the axis has
  devices, and every leaf without one that holds at least as many elements as all the params together (a flat
  vector), is also split along ``zero_axis`` on its first dimension that divides, unless it already uses that axis.
* **Fallback.** A dimension that the mesh axes asked of it do not divide keeps those axes off (down to replicated);
  :func:`fallbacks` lists every leaf that ends up less split than asked, with its path, shape and the reason.
  Scalars, counters and hyperparameters are replicated.

Every sharding is a :class:`~jax.sharding.NamedSharding` on the params' mesh. The tree is meant for
``jax.jit(..., out_shardings=...)`` of ``init`` and of the training step; :func:`bytes_per_device` and
:func:`collective_bytes` measure what that costs in memory and in communication.
"""

from __future__ import annotations

import math
import re
from typing import Any, NamedTuple

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from .._checks import argument_error, tree_mismatch_error

_API = "gradax.sharding.state_shardings"


class Fallback(NamedTuple):
    """A state leaf placed less split than asked: its key path, its shape and why."""

    path: str
    shape: tuple[int, ...]
    reason: str


def _axes(entry: Any) -> tuple[str, ...]:
    if entry is None:
        return ()
    return tuple(entry) if isinstance(entry, tuple) else (entry,)


def _entry(axes: tuple[str, ...]) -> Any:
    if not axes:
        return None
    return axes[0] if len(axes) == 1 else axes


def _param_shardings(params: Any, param_shardings: Any, api: str = _API) -> list[NamedSharding]:
    """One NamedSharding per params leaf (``param_shardings`` may be a prefix, or None to read the params')."""
    leaves = jax.tree.leaves(params)
    if param_shardings is None:
        found = [s for s in (getattr(p, "sharding", None) for p in leaves) if isinstance(s, NamedSharding)]
        if len(found) != len(leaves):
            raise argument_error(
                api,
                "param_shardings",
                "given when the params do not all carry a NamedSharding",
                None,
                "Pass a NamedSharding, or a tree of them shaped like the params",
            )
        return found
    try:
        out = jax.tree.leaves(jax.tree.broadcast(param_shardings, params))
    except (ValueError, TypeError):
        raise tree_mismatch_error(api, "param_shardings", params, param_shardings, prefix_ok=True) from None
    bad = [s for s in out if not isinstance(s, NamedSharding)]
    if bad:
        raise argument_error(
            api,
            "param_shardings",
            "a NamedSharding or a tree of them",
            bad[0],
            "Build them with jax.sharding.NamedSharding(mesh, PartitionSpec(...))",
        )
    return out


def _owners(state: Any, params: Any) -> dict[tuple, int]:
    """The index of the params leaf that owns each state leaf (by key path), where there is one."""
    treedef = jax.tree.structure(params)
    owners: dict[tuple, int] = {}
    if treedef.num_leaves == 0:
        return owners
    if jax.tree_util.treedef_is_leaf(treedef):
        for path, _ in jax.tree_util.tree_flatten_with_path(state)[0]:
            owners[tuple(path)] = 0
        return owners

    def children(path, node):
        pairs, inner = jax.tree_util.tree_flatten_with_path(node, is_leaf=lambda x: x is not node)
        if inner.num_nodes == 1 and inner.num_leaves == 1:
            return []
        return [((*path, *p), child) for p, child in pairs]

    def visit(path, node, owner):
        if node is None:
            return
        try:
            parts = treedef.flatten_up_to(node)
        except (ValueError, TypeError):
            parts = None
        if parts is not None:
            paths = [tuple(p) for p, _ in jax.tree_util.tree_flatten_with_path(params)[0]]
            for index, (ppath, part) in enumerate(zip(paths, parts)):
                visit((*path, *ppath), part, index)
            return
        kids = children(path, node)
        if not kids:
            if owner is not None:
                owners[path] = owner
            return
        for kid_path, kid in kids:
            visit(kid_path, kid, owner)

    visit((), state, None)
    return owners


def _align(shape: tuple[int, ...], owner: tuple[int, ...]) -> list[int | None]:
    """For each dimension of ``shape``, the owner dimension of the same size it follows (in order first)."""
    # in order: the leftmost subsequence of the owner's dimensions with these sizes
    picked: list[int | None] = []
    start = 0
    for size in shape:
        j = next((j for j in range(start, len(owner)) if owner[j] == size), None)
        if j is None:
            break
        picked.append(j)
        start = j + 1
    if len(picked) == len(shape):
        return picked
    used: set[int] = set()
    out: list[int | None] = []
    for size in shape:
        j = next((j for j in range(len(owner)) if owner[j] == size and j not in used), None)
        if j is not None:
            used.add(j)
        out.append(j)
    return out


def _place(
    path: str,
    shape: tuple[int, ...],
    owner: tuple[tuple[int, ...], PartitionSpec] | None,
    mesh_sizes: dict[str, int],
    zero_axis: str | None,
    flat_size: int,
    sharded: bool,
    fallbacks: list[Fallback],
) -> PartitionSpec:
    if not shape:
        return PartitionSpec()
    asked: list[tuple[str, ...]] = [()] * len(shape)
    if owner is not None:
        oshape, ospec = owner
        ospec_axes = [_axes(e) for e in ospec] + [()] * (len(oshape) - len(ospec))
        if shape == oshape:
            asked = list(ospec_axes)
        else:
            for i, j in enumerate(_align(shape, oshape)):
                if j is not None:
                    asked[i] = ospec_axes[j]
            if all(j is None for j in _align(shape, oshape)) and math.prod(shape) >= math.prod(oshape):
                asked[0] = tuple(a for axes in ospec_axes for a in axes)
    elif zero_axis is None and sharded and math.prod(shape) >= flat_size > 0:
        fallbacks.append(Fallback(path, shape, "holds several parameters (a flat vector): no one sharding to follow"))
    seen: set[str] = set()
    placed: list[tuple[str, ...]] = []
    for size, axes in zip(shape, asked):
        keep = []
        for axis in axes:
            if axis in seen:
                continue
            if size % (math.prod(mesh_sizes[a] for a in keep) * mesh_sizes[axis]):
                fallbacks.append(Fallback(path, shape, f"dimension of size {size} is not divisible for axis {axis!r}"))
                continue
            keep.append(axis)
            seen.add(axis)
        placed.append(tuple(keep))
    zsize = 0 if zero_axis is None else mesh_sizes[zero_axis]
    size = math.prod(shape)
    wants_zero = (owner is not None and size >= zsize) or (flat_size > 0 and size >= flat_size)
    if zero_axis is not None and wants_zero and zero_axis not in seen:
        order = [i for i in range(len(shape)) if not placed[i]] + [i for i in range(len(shape)) if placed[i]]
        for i in order:
            if shape[i] % (math.prod(mesh_sizes[a] for a in placed[i]) * zsize) == 0:
                placed[i] = (*placed[i], zero_axis)
                break
        else:
            fallbacks.append(
                Fallback(path, shape, f"no dimension is divisible by the {zsize} devices of axis {zero_axis!r}")
            )
    while placed and not placed[-1]:
        placed.pop()
    return PartitionSpec(*(_entry(a) for a in placed))


def _mesh_of(
    params: Any, param_shardings: Any, zero_axis: str | None, api: str = _API
) -> tuple[list[NamedSharding], Any, dict[str, int]]:
    """The params' shardings (one per leaf), their one mesh and its axis sizes, with ``zero_axis`` checked."""
    shardings = _param_shardings(params, param_shardings, api)
    if not shardings:
        raise argument_error(
            api, "params", "a tree with at least one array", params, "The mesh is read from the params' shardings"
        )
    mesh = shardings[0].mesh
    for s in shardings[1:]:
        if s.mesh != mesh:
            raise argument_error(
                api, "param_shardings", "on one mesh", s.mesh, "Build every NamedSharding with the same Mesh"
            )
    mesh_sizes = dict(mesh.shape)
    if zero_axis is not None and zero_axis not in mesh_sizes:
        raise argument_error(
            api,
            "zero_axis",
            f"an axis name of the mesh {tuple(mesh_sizes)}",
            zero_axis,
            "Pass one of the mesh's axis names, or None for no ZeRO-1 split",
        )
    return shardings, mesh, mesh_sizes


def _plan(optimizer: Any, params: Any, param_shardings: Any, zero_axis: str | None):
    shardings, mesh, mesh_sizes = _mesh_of(params, param_shardings, zero_axis)
    abstract = jax.eval_shape(optimizer.init, params)
    owners = _owners(abstract, params)
    pleaves = jax.tree.leaves(params)
    flat_size = sum(math.prod(np.shape(p)) for p in pleaves)
    fallbacks: list[Fallback] = []
    sharded = any(_axes(e) for s in shardings for e in s.spec)

    def leaf(path, x):
        index = owners.get(tuple(path))
        owner = None if index is None else (tuple(np.shape(pleaves[index])), shardings[index].spec)
        spec = _place(
            jax.tree_util.keystr(path), tuple(x.shape), owner, mesh_sizes, zero_axis, flat_size, sharded, fallbacks
        )
        return NamedSharding(mesh, spec)

    return jax.tree_util.tree_map_with_path(leaf, abstract), fallbacks


def state_shardings(optimizer: Any, params: Any, param_shardings: Any = None, *, zero_axis: str | None = None) -> Any:
    r"""The :class:`~jax.sharding.NamedSharding` of every leaf of ``optimizer.init(params)``, from the params'.

    Use it to place the optimizer state when the params are sharded over a mesh: give the result to
    ``jax.jit(optimizer.init, out_shardings=...)`` and to the ``out_shardings`` of the training step, and the state
    is created and kept split across the devices instead of whole on each. With ``zero_axis`` (ZeRO-1) the state is
    also split along a mesh axis over which the params are replicated (data parallelism): each of the :math:`N`
    devices of that axis holds :math:`1/N` of every param-shaped moment.

    The rules (owner by position in a params-shaped subtree, FSDP by matching dimensions, ZeRO-1 on the first
    dimension that divides, replicated fallback) are in the module docstring; the state is found with
    :func:`jax.eval_shape`, so nothing is allocated.

    Args:
      optimizer: a ``GradientTransformation`` (any gradax or Optax-style one).
      params: the params tree, of arrays or :class:`jax.ShapeDtypeStruct`.
      param_shardings: a ``NamedSharding`` per params leaf (a tree shaped like ``params``, or a prefix of it such as
        one ``NamedSharding`` for all), all on one mesh; None reads the params' own ``.sharding``.
      zero_axis: a mesh axis name along which to split the state further (ZeRO-1), or None.

    Returns:
      A tree shaped like the state whose leaves are ``NamedSharding`` on the params' mesh.

    Raises:
      ValueError: ``zero_axis`` is not an axis of the mesh; ``param_shardings`` does not match the params, is not
        made of ``NamedSharding`` on one mesh, or is None while the params carry none.

    Example:
      >>> import gradax, jax, jax.numpy as jnp
      >>> from jax.sharding import NamedSharding, PartitionSpec as P
      >>> mesh = jax.make_mesh((1,), ("data",))
      >>> params = {"w": jnp.zeros((4, 2))}
      >>> s = gradax.sharding.state_shardings(gradax.adam(0.1), params, NamedSharding(mesh, P()), zero_axis="data")
      >>> s[0].mu["w"].spec, s[0].count.spec
      (P('data',), P())

    References:
      Rajbhandari et al., `ZeRO: Memory optimizations toward training trillion parameter models
      <https://arxiv.org/abs/1910.02054>`_, 2020; Xu et al., `GSPMD: General and scalable parallelization for ML
      computation graphs <https://arxiv.org/abs/2105.04663>`_, 2021.
    """
    return _plan(optimizer, params, param_shardings, zero_axis)[0]


def fallbacks(
    optimizer: Any, params: Any, param_shardings: Any = None, *, zero_axis: str | None = None
) -> list[Fallback]:
    """The state leaves that :func:`state_shardings` places less split than asked, each with its reason.

    Use it to check a placement: a large moment listed here is held whole (replicated) on the devices of an axis.
    A leaf appears once per axis it could not take. Same arguments as :func:`state_shardings`.

    Returns:
      A list of :class:`Fallback` ``(path, shape, reason)``, in the order of the state's leaves.

    Example:
      >>> import gradax, jax, jax.numpy as jnp
      >>> from jax.sharding import NamedSharding, PartitionSpec as P
      >>> mesh = jax.make_mesh((1,), ("data",))
      >>> gradax.sharding.fallbacks(gradax.adam(0.1), {"w": jnp.zeros(3)}, NamedSharding(mesh, P()))
      []
    """
    return _plan(optimizer, params, param_shardings, zero_axis)[1]


def _itemsize(dtype: Any) -> int:
    """Bytes per element; a typed PRNG key (APOLLO's and Kron's states may hold one) counts its key data."""
    if jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
        data = jax.eval_shape(jax.random.key_data, jax.ShapeDtypeStruct((), dtype))
        return math.prod(data.shape) * np.dtype(data.dtype).itemsize
    return np.dtype(dtype).itemsize


def bytes_per_device(tree: Any, shardings: Any = None) -> int:
    """The most bytes that any one device holds of ``tree``.

    For arrays, measured from their addressable shards; for abstract leaves (``jax.ShapeDtypeStruct``), computed
    from ``shardings`` (a tree of ``NamedSharding`` shaped like ``tree``, e.g. from :func:`state_shardings`) or from
    the leaves' own ``.sharding`` (an :class:`~jax.sharding.AbstractMesh` will do); an abstract leaf with neither
    counts whole. Use it to see what ZeRO-1 saves.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> gradax.sharding.bytes_per_device({"w": jnp.zeros((4, 2)), "n": jnp.zeros([], jnp.int32)})
      36
    """
    leaves = jax.tree.leaves(tree)
    if shardings is None:
        given = [getattr(x, "sharding", None) for x in leaves]
    else:
        given = jax.tree.leaves(shardings, is_leaf=lambda s: isinstance(s, jax.sharding.Sharding))
        if len(given) != len(leaves):
            raise tree_mismatch_error("gradax.sharding.bytes_per_device", "shardings", tree, shardings)
    held: dict[Any, int] = {}
    whole = 0
    for x, sharding in zip(leaves, given):
        itemsize = _itemsize(x.dtype)
        if isinstance(x, jax.Array) and shardings is None:
            for shard in x.addressable_shards:
                held[shard.device] = held.get(shard.device, 0) + shard.data.size * itemsize
        elif sharding is not None:  # a NamedSharding gives every device one shard of the same shape
            whole += math.prod(sharding.shard_shape(tuple(x.shape))) * itemsize
        else:
            whole += math.prod(np.shape(x)) * itemsize
    return whole + max(held.values(), default=0)


_COLLECTIVE = re.compile(
    r"=\s*(?P<shape>\(?[a-z0-9]+\[[^=]*?)\s+(?P<op>all-gather|all-reduce|reduce-scatter|all-to-all|"
    r"collective-permute|collective-broadcast)(?:-start)?\("
)
_ARRAY = re.compile(r"([a-z]+[0-9]*)\[([0-9,]*)\]")


def _hlo_itemsize(dtype: str) -> int:
    """Bytes of one element of an HLO element type (``f32``, ``bf16``, ``s8``, ``u32``, ``pred``, ``c64``...)."""
    if dtype == "pred":
        return 1
    bits = re.search(r"[0-9]+$", dtype)
    return 0 if bits is None else max(1, int(bits.group()) // 8)


def collective_bytes(fn: jax.stages.Wrapped, *args: Any, **kwargs: Any) -> dict[str, int]:
    """The bytes each device receives from collectives in one call of ``fn``, by collective kind.

    ``fn`` is a jitted function (``jax.jit(...)``) and ``args`` its arguments (arrays or ``ShapeDtypeStruct`` with
    shardings); the compiled HLO is read and the result size of every all-gather, all-reduce, reduce-scatter,
    all-to-all and collective-permute is added up (per device: the HLO is the program of one device). Collectives
    inside loops count once. Use it to see what a sharded step communicates.

    Returns:
      ``{kind: bytes}`` with only the kinds present, plus ``"total"``.

    Example:
      >>> import gradax, jax, jax.numpy as jnp
      >>> gradax.sharding.collective_bytes(jax.jit(lambda x: x * 2), jnp.zeros(4))
      {'total': 0}
    """
    text = fn.lower(*args, **kwargs).compile().as_text() or ""
    out: dict[str, int] = {}
    for match in _COLLECTIVE.finditer(text):
        size = 0
        for dtype, dims in _ARRAY.findall(match.group("shape")):
            itemsize = _hlo_itemsize(dtype)
            size += math.prod(int(d) for d in dims.split(",") if d) * itemsize
        out[match.group("op")] = out.get(match.group("op"), 0) + size
    out["total"] = sum(out.values())
    return out
