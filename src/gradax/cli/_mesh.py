"""``gradax train --mesh data=8 --zero``: data-parallel training on a device mesh, with ZeRO-1 optimizer state.

The params are replicated over the mesh, each batch is split along its ``data`` axis, and the optimizer state is
placed by :func:`gradax.sharding.state_shardings`: like the params (replicated), or with ``--zero`` also split
along ``data`` (ZeRO-1), so that each of the N devices holds 1/N of every moment. Where there is no accelerator, the
CPU is shown to JAX as as many devices as the mesh needs (``jax_num_cpu_devices``), which must happen before JAX
starts its backends: :func:`request_devices` runs before anything else of a run touches JAX.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from typing import Any

from ._common import CliError

#: The mesh axis that batches are split along and that ``--zero`` splits the optimizer state along.
DATA_AXIS = "data"

_AXIS = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=([0-9]+)$")
_FORCED_COUNT = "xla_force_host_platform_device_count"


def parse_mesh(text: str) -> dict[str, int]:
    """``"data=8"`` or ``"data=4,model=2"`` -> ``{"data": 8}``: mesh axis names and sizes, in order.

    Raises :class:`CliError` unless every part is ``NAME=SIZE`` with a positive size, the names are distinct, and
    one of them is :data:`DATA_AXIS` (the batch is split along it).
    """
    axes: dict[str, int] = {}
    for part in text.split(","):
        m = _AXIS.match(part.strip())
        if m is None or int(m.group(2)) < 1:
            raise CliError(
                f"--mesh must be NAME=SIZE[,NAME=SIZE...] with positive sizes; got {text!r}. For example: --mesh data=8"
            )
        if m.group(1) in axes:
            raise CliError(f"--mesh must name each axis once; got {text!r}")
        axes[m.group(1)] = int(m.group(2))
    if DATA_AXIS not in axes:
        raise CliError(
            f"--mesh must have a {DATA_AXIS!r} axis (batches are split along it); got {text!r}. For example: "
            f"--mesh {DATA_AXIS}=8"
        )
    return axes


def mesh_text(axes: dict[str, int]) -> str:
    """The canonical ``--mesh`` text of ``axes`` (as stored in ``run.json``)."""
    return ",".join(f"{name}={size}" for name, size in axes.items())


def request_devices(count: int) -> None:
    """Show the CPU to JAX as at least ``count`` devices, if JAX has not started and nobody chose otherwise.

    Leaves an explicit choice alone (``XLA_FLAGS=--xla_force_host_platform_device_count=N`` or an earlier
    ``jax_num_cpu_devices``); once JAX's backends are running, the devices are what they are and
    :func:`make_mesh` says whether they are enough.
    """
    import jax

    # pyrefly: ignore[missing-attribute] - jax.config's flags are attributes made at run time
    if _FORCED_COUNT in os.environ.get("XLA_FLAGS", "") or jax.config.jax_num_cpu_devices >= count:
        return
    try:
        jax.config.update("jax_num_cpu_devices", count)
    except RuntimeError:  # backends already initialised (e.g. gradax used in-process before this command)
        pass


def make_mesh(axes: dict[str, int]) -> Any:
    """A :class:`jax.sharding.Mesh` of the first ``prod(sizes)`` devices of the default backend."""
    import jax
    import numpy as np

    devices = jax.devices()
    need = math.prod(axes.values())
    if need > len(devices):
        platform = devices[0].platform
        if platform == "cpu":
            how = (
                f"run it in a fresh process so that gradax can show the CPU as {need} devices "
                f"(XLA_FLAGS=--{_FORCED_COUNT}={need} does it by hand)"
            )
        else:
            how = f"train on {need} virtual CPU devices instead with JAX_PLATFORMS=cpu"
        raise CliError(
            f"--mesh must ask for at most the {len(devices)} {platform} device(s) JAX has; got "
            f"{mesh_text(axes)} ({need} devices). Ask for fewer, or {how}"
        )
    grid = np.array(devices[:need], dtype=object).reshape(tuple(axes.values()))
    return jax.sharding.Mesh(grid, tuple(axes))


@dataclass(frozen=True)
class Placement:
    """Where a data-parallel run keeps its arrays on ``mesh``: params replicated, batches split along
    :data:`DATA_AXIS`, optimizer state like the params or, with ``zero``, also split along :data:`DATA_AXIS`."""

    mesh: Any
    zero: bool

    @property
    def data_size(self) -> int:
        return self.mesh.shape[DATA_AXIS]

    def replicated(self) -> Any:
        from jax.sharding import NamedSharding, PartitionSpec

        return NamedSharding(self.mesh, PartitionSpec())

    def batch(self) -> Any:
        """The sharding of a batch: its first dimension split along :data:`DATA_AXIS`."""
        from jax.sharding import NamedSharding, PartitionSpec

        return NamedSharding(self.mesh, PartitionSpec(DATA_AXIS))

    def params(self, params: Any) -> Any:
        """A ``NamedSharding`` per params leaf (all replicated)."""
        import jax

        return jax.tree.map(lambda _: self.replicated(), params)

    def state(self, optimizer: Any, params: Any) -> Any:
        """The ``NamedSharding`` tree of ``optimizer.init(params)`` (:func:`gradax.sharding.state_shardings`)."""
        import gradax

        zero_axis = DATA_AXIS if self.zero else None
        return gradax.sharding.state_shardings(optimizer, params, self.params(params), zero_axis=zero_axis)

    def fallbacks(self, optimizer: Any, params: Any) -> list:
        """The state leaves placed less split than asked (:func:`gradax.sharding.fallbacks`)."""
        import gradax

        zero_axis = DATA_AXIS if self.zero else None
        return gradax.sharding.fallbacks(optimizer, params, self.params(params), zero_axis=zero_axis)

    def describe(self) -> str:
        sizes = ", ".join(f"{name}={size}" for name, size in self.mesh.shape.items())
        state = f"ZeRO-1, split along {DATA_AXIS!r}" if self.zero else "replicated like the params"
        return f"mesh {sizes} ({self.mesh.devices.size} {self.mesh.devices.flat[0].platform} devices); state {state}"


def placement_for(mesh: str | None, zero: bool, batch_size: int) -> Placement | None:
    """The placement of a run with ``--mesh mesh`` (``None``: one device) and ``--zero``; checks the batch size."""
    if mesh is None:
        return None
    axes = parse_mesh(mesh)
    if batch_size % axes[DATA_AXIS]:
        raise CliError(
            f"--batch-size must be divisible by the {axes[DATA_AXIS]} devices of the {DATA_AXIS!r} axis of --mesh; "
            f"got {batch_size}. Use a multiple of {axes[DATA_AXIS]}"
        )
    return Placement(make_mesh(axes), zero)


def state_bytes(state: Any) -> tuple[int, int]:
    """``(bytes one device holds, bytes of the whole state)``: the second is what a replicated state costs each."""
    import jax
    import numpy as np

    import gradax

    whole = sum(math.prod(np.shape(x)) * np.dtype(x.dtype).itemsize for x in jax.tree.leaves(state))
    return gradax.sharding.bytes_per_device(state), whole


def human_bytes(n: int) -> str:
    """``1536`` -> ``"1.5 KiB"``."""
    if n < 1024:
        return f"{n} B"
    value, units = n / 1024, ["KiB", "MiB", "GiB", "TiB"]
    while value >= 1024 and len(units) > 1:
        value, units = value / 1024, units[1:]
    return f"{value:.1f} {units[0]}"
