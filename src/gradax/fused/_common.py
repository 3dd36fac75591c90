"""What every fused optimizer shares: the optimizer class with ``step``, when a kernel applies, and the wrapper that
gives a kernel step the vmap and autodiff of its reference (``update`` followed by ``apply_updates``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from .. import _kernels
from .._base import GradientTransformationExtraArgs
from .._update import apply_updates


class FusedGradientTransformation(GradientTransformationExtraArgs):
    """A :class:`gradax.GradientTransformationExtraArgs` with a fused ``step``.

    Attributes:
      init: ``init(params) -> state``.
      update: ``update(updates, state, params=None, **extra_args) -> (updates, state)``.
      step: ``step(params, state, grads) -> (new_params, new_state)``: ``update`` and ``apply_updates`` in one
        pass where a fused kernel applies, the two calls otherwise. Its arguments come in the order of its results,
        so that ``jax.jit(opt.step, donate_argnums=(0, 1))`` pairs each donated buffer with the result it becomes
        (JAX pairs donated arguments and results of one shape in order; pairing the params' buffers with the
        moments would make XLA copy every leaf).
    """

    def __new__(cls, init: Callable, update: Callable, step: Callable | None = None):
        self = super().__new__(cls, init, update)
        if step is not None:
            self.__dict__["_fused_step"] = step
        return self

    def __getnewargs__(self):
        return (self.init, self.update, self.__dict__.get("_fused_step"))

    @property
    def step(self) -> Callable:
        """``step(params, state, grads) -> (new_params, new_state)``. A copy made with ``_replace`` (whose
        ``update`` may differ) steps with its own ``update`` and ``apply_updates``."""
        fused = self.__dict__.get("_fused_step")
        return fused if fused is not None else reference_step(self.update)


def reference_step(update: Callable) -> Callable:
    """``step(params, state, grads)``: ``update`` followed by ``apply_updates`` (what a fused step computes)."""

    def step(params, state, grads):
        updates, state = update(grads, state, params)
        return apply_updates(params, updates), state

    return step


def kernel_status() -> _kernels.KernelStatus:
    """Whether the fused CPU kernels are built and registered in this process (``.available``), and why not
    (``.reason``); builds them on first call.

    Example:
      >>> import gradax
      >>> status = gradax.fused.kernel_status()
      >>> isinstance(status.available, bool)
      True
    """
    return _kernels.load()


def one_device_view() -> bool:
    """Whether the step sees whole arrays of one device: a single-device process, or inside ``shard_map`` over every
    mesh axis (local shards). Under a GSPMD-partitioned ``jit`` the kernel (an opaque custom call) would make XLA
    gather every operand onto each device, so the step is left to XLA there."""
    if jax.device_count() == 1:
        return True
    mesh = jax.sharding.get_abstract_mesh()
    return not mesh.empty and set(mesh.axis_names) == set(mesh.manual_axes)


def kernel_applies() -> bool:
    """Whether a CPU kernel can take this step: CPU backend, no x64, whole arrays, kernels built."""
    return (
        jax.default_backend() == "cpu"
        and not jax.config.jax_enable_x64
        and one_device_view()
        and _kernels.load().available
    )


def with_reference(kernel: Callable, reference: Callable) -> Callable:
    """``kernel(params, state, grads)``, batched by ``vmap`` and differentiated as ``reference`` (the kernel is one
    unbatched pass with no derivative of its own; the reference computes the same numbers in jnp)."""

    @jax.custom_batching.custom_vmap
    def batchable(params: Any, state: Any, grads: Any):
        return kernel(params, state, grads)

    @batchable.def_vmap
    def _rule(axis_size, in_batched, params, state, grads):
        def full(x, batched):
            return x if batched else jnp.broadcast_to(x, (axis_size, *jnp.shape(x)))

        args = jax.tree.map(full, (params, state, grads), tuple(in_batched))
        out = jax.vmap(reference)(*args)
        return out, jax.tree.map(lambda _: True, out)

    @jax.custom_jvp
    def step(params: Any, state: Any, grads: Any):
        return batchable(params, state, grads)

    @step.defjvp
    def _jvp(primals, tangents):
        return jax.jvp(reference, primals, tangents)

    return step
