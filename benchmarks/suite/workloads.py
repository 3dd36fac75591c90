"""The workloads: one optimizer built in each library (gradax, Optax, torch.optim), and the bytes its step moves."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import jax.numpy as jnp
import numpy as np

import gradax

from .columns import FUSED, FUSED_FLAT
from .trees import SIZES, decay_labels, decay_mask, gpt2_shapes, many_shapes

warnings.filterwarnings("ignore", message=".*donated buffers.*")
warnings.filterwarnings("ignore", message=".*Some donated.*")

try:  # torch is optional
    import torch

    torch.manual_seed(0)
except Exception:  # any import failure means "no torch column"
    torch = None


@dataclass
class Workload:
    name: str
    shapes: dict[str, tuple[int, ...]]
    make_opt: Callable[[Any], Any]  # (optax-like module) -> GradientTransformation
    dtype: Any = np.float32
    torch_step: Callable[[list, list], Callable[[], None]] | None = None  # (params, grads) -> step()
    steps_multiple: int = 1
    notes: list[str] = field(default_factory=list)
    # more gradax columns, timed like the others: name -> (gradax module) -> GradientTransformation
    extra: dict[str, Callable[[Any], Any]] = field(default_factory=dict)


def _torch_adamw(kind: str) -> Callable:
    """torch.optim equivalents; returns a builder (params, grads) -> step callable.

    AdamW and SGD use ``fused=True``, torch's fastest CPU implementation (measured on these machines: about 5x
    faster than ``foreach=True`` and the for-loop); Adafactor has no fused kernel and uses ``foreach=True``."""

    def build(params: list, grads: list) -> Callable[[], None]:
        for p, g in zip(params, grads):
            p.grad = g.clone()
        if kind == "adamw":
            opt = torch.optim.AdamW(params, lr=1e-3, weight_decay=1e-4, fused=True)
        elif kind == "sgd":
            opt = torch.optim.SGD(params, lr=1e-2, momentum=0.9, nesterov=True, fused=True)
        elif kind == "adafactor":
            opt = torch.optim.Adafactor(params, lr=1e-2, foreach=True)
        elif kind == "partition":
            dec = [p for p in params if p.ndim >= 2]
            nod = [p for p in params if p.ndim < 2]
            opt = torch.optim.AdamW(
                [{"params": dec, "weight_decay": 1e-4}, {"params": nod, "weight_decay": 0.0}], lr=1e-3, fused=True
            )
        elif kind == "clip":
            opt = torch.optim.AdamW(params, lr=1e-3, weight_decay=1e-4, fused=True)
            sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 100))

            def step() -> None:
                torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=True)
                opt.step()
                sched.step()

            return step
        elif kind == "accumulate":
            acc = [torch.zeros_like(p) for p in params]
            return lambda: torch._foreach_add_(acc, grads)
        elif kind == "multisteps":
            opt = torch.optim.AdamW(params, lr=1e-3, weight_decay=1e-4, fused=True)
            acc = [torch.zeros_like(p) for p in params]
            counter = [0]

            def step() -> None:  # accumulate into acc; every 4th call: average into .grad, step, zero acc
                torch._foreach_add_(acc, grads)
                counter[0] += 1
                if counter[0] % 4 == 0:
                    for p, a in zip(params, acc):
                        p.grad = a.div_(4)
                    opt.step()
                    acc[:] = [torch.zeros_like(p) for p in params]

            return step
        else:
            raise ValueError(kind)
        return opt.step

    return build


def clip_adamw(o: Any) -> Any:
    """``chain(clip_by_global_norm(1), adamw(warmup_cosine))`` of the optax-like module ``o``: the clip workloads."""
    sched = o.warmup_cosine_decay_schedule(0.0, 1e-3, 100, 10_000, end_value=1e-5)
    return o.chain(o.clip_by_global_norm(1.0), o.adamw(sched, weight_decay=1e-4))


def fused_clip_adamw(o: Any) -> Any:
    """The same optimizer as :func:`clip_adamw` as ``gradax.fused.adamw(..., max_grad_norm=1)``."""
    sched = o.warmup_cosine_decay_schedule(0.0, 1e-3, 100, 10_000, end_value=1e-5)
    return o.fused.adamw(sched, weight_decay=1e-4, max_grad_norm=1.0)


def build_workloads(size: str) -> list[Workload]:
    cfg = SIZES[size]
    gpt = gpt2_shapes(*cfg["gpt"])
    many = many_shapes(*cfg["many"])

    fused_adamw = {FUSED: lambda o: o.fused.adamw(1e-3, weight_decay=1e-4)}
    wl = [
        Workload(
            "adamw_gpt2",
            gpt,
            lambda o: o.adamw(1e-3, weight_decay=1e-4),
            torch_step=_torch_adamw("adamw"),
            extra=fused_adamw,
        ),
        Workload(
            "adamw_many_leaves",
            many,
            lambda o: o.adamw(1e-3, weight_decay=1e-4),
            torch_step=_torch_adamw("adamw"),
            extra={**fused_adamw, FUSED_FLAT: lambda o: o.flatten(o.fused.adamw(1e-3, weight_decay=1e-4))},
        ),
        Workload(
            "clip_adamw_schedule",
            gpt,
            clip_adamw,
            torch_step=_torch_adamw("clip"),
            extra={FUSED: fused_clip_adamw},
        ),
        Workload(
            "sgd_nesterov", gpt, lambda o: o.sgd(1e-2, momentum=0.9, nesterov=True), torch_step=_torch_adamw("sgd")
        ),
        Workload(
            "lion",
            gpt,
            lambda o: o.lion(1e-4, weight_decay=1e-4),
            extra={FUSED: lambda o: o.fused.lion(1e-4, weight_decay=1e-4)},
        ),
        Workload(
            "lion_many_leaves",
            many,
            lambda o: o.lion(1e-4, weight_decay=1e-4),
            extra={
                FUSED: lambda o: o.fused.lion(1e-4, weight_decay=1e-4),
                FUSED_FLAT: lambda o: o.flatten(o.fused.lion(1e-4, weight_decay=1e-4)),
            },
        ),
        Workload(
            "adafactor",
            gpt,
            lambda o: o.adafactor(1e-2),
            extra={FUSED: lambda o: o.fused.adafactor(1e-2)},
            torch_step=_torch_adamw("adafactor") if torch is not None and hasattr(torch.optim, "Adafactor") else None,
            notes=["torch.optim.Adafactor defaults differ (no update clipping/momentum): indicative only"],
        ),
        Workload(
            "partition_decay",
            gpt,
            lambda o: o.partition(
                {"decay": o.adamw(1e-3, weight_decay=1e-4), "no_decay": o.adamw(1e-3, weight_decay=0.0)},
                decay_labels,
            ),
            torch_step=_torch_adamw("partition"),
            # the same two groups as one AdamW whose decay is masked
            extra={FUSED: lambda o: o.fused.adamw(1e-3, weight_decay=1e-4, mask=decay_mask)},
        ),
        Workload(
            "multisteps_adamw",
            gpt,
            lambda o: o.MultiSteps(o.adamw(1e-3, weight_decay=1e-4), every_k_schedule=4),
            torch_step=_torch_adamw("multisteps"),
            steps_multiple=4,
        ),
        Workload(
            "multisteps_micro",
            gpt,
            lambda o: o.MultiSteps(o.adamw(1e-3, weight_decay=1e-4), every_k_schedule=1_000_000),
            torch_step=_torch_adamw("accumulate"),
            notes=["multisteps_micro: torch only accumulates (`_foreach_add_`, 12 B/param): no zero updates to apply"],
        ),
        Workload(
            "adamw_bf16",
            gpt,
            lambda o: o.adamw(1e-3, weight_decay=1e-4),
            dtype=jnp.bfloat16,
            torch_step=_torch_adamw("adamw"),
            extra=fused_adamw,
            notes=["torch keeps bf16 moments for bf16 params (gradax/optax keep float32): fewer bytes for torch"],
        ),
        Workload(
            "adamw_8bit",
            gpt,
            lambda o: o.adamw(1e-3, weight_decay=1e-4, **({"moments": "8bit"} if o is gradax else {})),
            extra={
                "gradax_fp32": lambda o: o.adamw(1e-3, weight_decay=1e-4),
                FUSED: lambda o: o.fused.adamw(1e-3, weight_decay=1e-4, moments="8bit"),
            },
            notes=["the gradax column is adamw(moments='8bit'), the optax column float32 AdamW"],
        ),
    ]
    return wl
