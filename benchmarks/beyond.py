"""Step time of the optimizers that are not in Optax, against their torch references and gradax's AdamW.

On the suite's GPT-2-small-shaped tree (``benchmarks.suite.trees``), for each optimizer: its gradax step (XLA,
compiled once, donated, timed like the suite's steps), its torch reference's step on the same CPU with the same
shapes (torch on as many threads as there are cores, or ``OMP_NUM_THREADS``), and gradax's AdamW step timed in
the same minutes, the three alternating repeat after repeat. Reported: medians, the ratios gradax / torch and gradax / AdamW against the
issues' targets, gradax's compile time, and the optimizer state's bytes (Adam-mini's against AdamW's).

SOAP and Shampoo refresh their preconditioners every ``REFRESH`` steps: a timed repeat is a multiple of that many
steps, so their times are amortized over the refresh interval (both libraries alike).

Full run (the lead's quiet machine; ~15 optimizers x compile + repeats, tens of minutes)::

    python -m benchmarks.beyond --out benchmarks/results_beyond.json --md benchmarks/results_beyond.md

Smoke run (a tiny tree, one repeat): ``python -m benchmarks.beyond --quick``; one optimizer: ``--only soap``.

heavyball's steps go through ``torch.compile``, whose C++ build GCC 12 (Debian 12's) stops on with an internal
compiler error; ``CXX=clang++`` (with ``libomp-dev``) builds them.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np

import gradax

from .suite.report import fmt_t
from .suite.timing import copy_reference, prepare_jax, summarize, time_jax, time_torch
from .suite.trees import SIZES, gpt2_shapes, make_tree, n_params
from .suite.workloads import Workload, torch

REFRESH = 10  # SOAP's precondition_frequency, Shampoo's preconditioning_compute_steps (both libraries)
ADAMW = "gradax_adamw"
FUSED = "gradax_fused"  # the optimizer's gradax.fused step, where it has one
COPY = "copy_reference"  # a donated jitted x + 1 over the tree's bytes, timed beside the fused step


@dataclass
class Spec:
    """One optimizer: how each library builds it, and the issue's step-time target against AdamW."""

    name: str
    make: Callable[[Any, dict], Any]  # (gradax, tree config) -> GradientTransformation
    reference: str  # the torch reference, as a user would import it
    torch_opt: Callable[[list[tuple[str, Any]], dict], Any] | None  # (named params, tree config) -> torch optimizer
    adamw_target: float  # gradax step / gradax AdamW step, at most
    interval: int = 1  # a timed repeat is a multiple of this many steps
    fused: Callable[[Any, dict], Any] | None = None  # (gradax, tree config) -> its gradax.fused optimizer, if any
    fused_bytes: int = 0  # bytes per parameter the fused step must move at least (its % of copy bandwidth)


def _matrices(named: list[tuple[str, Any]]) -> tuple[list[Any], list[Any]]:
    return [p for _, p in named if p.ndim == 2], [p for _, p in named if p.ndim != 2]


def _muon_groups(named: list[tuple[str, Any]]) -> list[dict]:
    mats, rest = _matrices(named)
    return [{"params": mats, "use_muon": True}, {"params": rest, "use_muon": False}]


def _po() -> Any:
    import pytorch_optimizer

    return pytorch_optimizer


def _shampoo_ref(named: list[tuple[str, Any]], cfg: dict) -> Any:
    po = _po()
    from pytorch_optimizer.optimizer.utils.graft import LayerWiseGrafting

    return po.ScalableShampoo(
        [p for _, p in named],
        lr=1e-3,
        block_size=256,
        start_preconditioning_step=REFRESH,
        preconditioning_compute_steps=REFRESH,
        graft_type=LayerWiseGrafting.RMSPROP,
    )


def _apollo_ref(named: list[tuple[str, Any]], cfg: dict) -> Any:
    mats, rest = _matrices(named)
    group = {"params": mats, "rank": 256, "update_proj_gap": 200, "scale": 1.0, "projection_type": "random"}
    return _po().APOLLO([group, {"params": rest}], lr=1e-2, scale_type="channel")


def _kron_ref(named: list[tuple[str, Any]], cfg: dict) -> Any:
    import kron_torch

    return kron_torch.Kron([p for _, p in named], lr=3e-4)


def _cautious_ref(named: list[tuple[str, Any]], cfg: dict) -> Any:
    import heavyball

    return heavyball.AdamW([p for _, p in named], lr=1e-3, weight_decay=1e-4, caution=True, compile_step=False)


def _adam_mini_ref(named: list[tuple[str, Any]], cfg: dict) -> Any:
    import adam_mini

    # Adam-mini partitions by name: biases (".b" here) must say "bias" or a 1-D "mlp" bias is split into rows
    named = [(k[:-2] + ".bias" if k.endswith(".b") else k, p) for k, p in named]
    return adam_mini.Adam_mini(named, lr=1e-3, dim=cfg["width"], n_heads=cfg["heads"], verbose=False)


def _came_ref(named: list[tuple[str, Any]], cfg: dict) -> Any:
    import came_pytorch

    return came_pytorch.CAME([p for _, p in named], lr=2e-4)


def _plain(cls: str, **kw: Any) -> Callable[[list[tuple[str, Any]], dict], Any]:
    return lambda named, cfg: getattr(_po(), cls)([p for _, p in named], **kw)


def _muon_family(recipe: str, lr: float, reference: str, torch_opt: Any) -> list[Spec]:
    """``recipe`` (a ``gradax.contrib`` name) in float32 and with ``ns_dtype="bfloat16"`` (name ``<recipe>_bf16``)."""
    return [
        Spec(
            recipe + suffix,
            lambda o, cfg, ns=ns: getattr(o.contrib, recipe)(lr, ns_dtype=ns),
            "pytorch_optimizer." + reference,
            torch_opt,
            2.0,
        )
        for suffix, ns in (("", None), ("_bf16", "bfloat16"))
    ]


def specs() -> list[Spec]:
    return [
        Spec(
            "soap",
            lambda o, cfg: o.contrib.soap(3e-3, precondition_frequency=REFRESH),
            "pytorch_optimizer.SOAP",
            _plain("SOAP", lr=3e-3, precondition_frequency=REFRESH),
            3.0,
            REFRESH,
        ),
        Spec(
            "shampoo",
            lambda o, cfg: o.contrib.shampoo(
                1e-3,
                block_size=256,
                start_preconditioning_step=REFRESH,
                preconditioning_compute_steps=REFRESH,
                graft_type="rmsprop",
            ),
            "pytorch_optimizer.ScalableShampoo",
            _shampoo_ref,
            3.0,
            REFRESH,
        ),
        Spec("kron", lambda o, cfg: o.contrib.kron(3e-4, key=0), "kron_torch.Kron", _kron_ref, 2.0),
        # the Muon family twice: Newton-Schulz in float32 (gradax's default, Optax's), and with bfloat16 products
        # (`_bf16`), the precision the references run theirs in
        *_muon_family("muon", 0.02, "Muon", lambda n, cfg: _po().Muon(_muon_groups(n), lr=0.02)),
        *_muon_family("normuon", 0.02, "NorMuon", lambda n, cfg: _po().NorMuon(_muon_groups(n), lr=0.02)),
        *_muon_family("adamuon", 0.02, "AdaMuon", lambda n, cfg: _po().AdaMuon(_muon_groups(n), lr=0.02)),
        *_muon_family("scion", 1e-3, "SCION", _plain("SCION", lr=1e-3)),
        Spec(
            "cautious_adamw",
            lambda o, cfg: o.cautious(o.adamw(1e-3, weight_decay=1e-4)),
            "heavyball.AdamW(caution=True)",
            _cautious_ref,
            1.25,
            # the counting pass reads p, g, m, v (16); the AdamW pass reads p, g, m, v (16), writes p, m, v (12)
            fused=lambda o, cfg: o.fused.cautious_adamw(1e-3, weight_decay=1e-4),
            fused_bytes=44,
        ),
        Spec(
            "mars",
            lambda o, cfg: o.contrib.mars(3e-3),
            "pytorch_optimizer.MARS",
            _plain("MARS", lr=3e-3),
            1.25,
            # the norm pass reads g, last_grad (8); the kernel reads p, g, m, v, last_grad (20), writes p, m, v,
            # last_grad (16)
            fused=lambda o, cfg: o.fused.mars(3e-3),
            fused_bytes=44,
        ),
        Spec(
            "adam_mini",
            lambda o, cfg: o.contrib.adam_mini(1e-3, n_heads=cfg["heads"]),
            "adam_mini.Adam_mini",
            _adam_mini_ref,
            1.25,
        ),
        Spec(
            "laprop", lambda o, cfg: o.contrib.laprop(4e-4), "pytorch_optimizer.LaProp", _plain("LaProp", lr=4e-4), 1.25
        ),
        Spec("grams", lambda o, cfg: o.contrib.grams(1e-3), "pytorch_optimizer.Grams", _plain("Grams", lr=1e-3), 1.25),
        Spec("spam", lambda o, cfg: o.contrib.spam(1e-3), "pytorch_optimizer.SPAM", _plain("SPAM", lr=1e-3), 1.25),
        Spec("apollo", lambda o, cfg: o.contrib.apollo(1e-2, key=0), "pytorch_optimizer.APOLLO", _apollo_ref, 1.25),
        Spec("came", lambda o, cfg: o.contrib.came(2e-4), "came_pytorch.CAME", _came_ref, 1.25),
    ]


def _torch_step(spec: Spec, params_np: dict, grads_np: dict, cfg: dict) -> tuple[Callable[[], None] | None, str]:
    """The reference's step over torch copies of the tree (on ``cfg["torch_device"]``), or None and why not."""
    if torch is None or spec.torch_opt is None:
        return None, "torch not installed"
    dev = cfg.get("torch_device", "cpu")
    named = [(k, torch.nn.Parameter(torch.tensor(np.asarray(v, np.float32), device=dev))) for k, v in params_np.items()]
    for (_, p), g in zip(named, grads_np.values()):
        p.grad = torch.tensor(np.asarray(g, np.float32), device=dev)
    try:
        opt = spec.torch_opt(named, cfg)
    except Exception as err:  # a missing or incompatible reference is reported, not fatal
        return None, f"{type(err).__name__}: {str(err)[:200]}"
    grads = [(p, p.grad) for _, p in named]

    def step() -> None:
        # heavyball clears .grad after its step (set_to_none); give every step the same gradients back
        for p, g in grads:
            if p.grad is None:
                p.grad = g
        opt.step()

    return step, ""


def _state_bytes(run: Any) -> int:
    return int(sum(x.nbytes for x in jax.tree.leaves(run.state)))


def measure(spec: Spec, adamw: Any, params_np: dict, grads_np: dict, cfg: dict, repeats: int, steps: int) -> dict:
    """One optimizer: compile, warm up, then ``repeats`` rounds of (AdamW, gradax, torch), ``steps`` steps each."""
    wl = Workload(spec.name, {}, lambda o: spec.make(o, cfg))
    run = prepare_jax(wl, gradax, params_np, grads_np)
    tstep, why = _torch_step(spec, params_np, grads_np, cfg)
    sync = torch.cuda.synchronize if cfg.get("torch_device", "cpu") != "cpu" else None
    n = max(spec.interval, steps - steps % spec.interval)
    time_jax(run, spec.interval)  # warm-up: the first call (SOAP's eigh, Shampoo's start) is not a timed step
    if tstep is not None:
        try:
            time_torch(tstep, spec.interval, sync)
        except Exception as err:  # reported, as above
            tstep, why = None, f"{type(err).__name__}: {str(err)[:200]}"
            if "CppCompileError" in why:  # GCC 12 stops with an internal error on heavyball's compiled step
                why = "torch.compile's C++ build failed; rerun with CXX=clang++ (and libomp-dev)"
    extra: dict[str, Any] = {}  # the fused step and the copy reference timed beside it
    if spec.fused is not None:
        fused = spec.fused
        extra[FUSED] = prepare_jax(Workload(spec.name, {}, lambda o: fused(o, cfg)), gradax, params_np, grads_np)
        extra[COPY] = copy_reference(sum(np.asarray(v).size for v in params_np.values()) * 4)
        for r in extra.values():
            time_jax(r, spec.interval)
    times: dict[str, list[float]] = {ADAMW: [], "gradax": [], "torch": [], **{k: [] for k in extra}}
    for _ in range(repeats):
        times[ADAMW].append(time_jax(adamw, n))
        times["gradax"].append(time_jax(run, n))
        if tstep is not None:
            times["torch"].append(time_torch(tstep, n, sync))
        for k, r in extra.items():
            times[k].append(time_jax(r, n))
    out = {
        "reference": spec.reference,
        "steps_per_repeat": n,
        "refresh_interval": spec.interval,
        "compile_s": run.compile_s,
        "state_bytes": _state_bytes(run),
        "step_s": {k: summarize(v) for k, v in times.items() if v},
        "adamw_target": spec.adamw_target,
    }
    if why:
        out["torch_missing"] = why
    if extra:
        out["fused_bytes_per_param"] = spec.fused_bytes
        out["params"] = sum(np.asarray(v).size for v in params_np.values())
        out["copy_reference_bytes"] = int(extra[COPY].params.nbytes)
    del run, tstep, extra
    gc.collect()
    return out


def ratios(row: dict) -> dict[str, float | None]:
    med = {k: v["median"] for k, v in row["step_s"].items()}
    return {
        "vs_adamw": med["gradax"] / med[ADAMW],
        "vs_torch": med["gradax"] / med["torch"] if "torch" in med else None,
    }


def table(result: dict) -> str:
    adamw_bytes = result["adamw_state_bytes"]
    lines = [
        "| optimizer | gradax step | AdamW step (same run) | gradax / AdamW (target) | torch reference | torch step "
        "| gradax / torch (target 1.0) | gradax compile | state bytes / AdamW's |",
        "|---|---:|---:|---:|---|---:|---:|---:|---:|",
    ]
    for name, row in result["optimizers"].items():
        r, med = ratios(row), {k: v["median"] for k, v in row["step_s"].items()}
        ok_a = "ok" if r["vs_adamw"] <= row["adamw_target"] else "over"
        torch_t = fmt_t(med["torch"]) if "torch" in med else f"n/a ({row.get('torch_missing', '')[:60]})"
        vs_t = f"{r['vs_torch']:.2f}x {'ok' if r['vs_torch'] <= 1.0 else 'over'}" if r["vs_torch"] else "n/a"
        per = f" (amortized over {row['refresh_interval']})" if row["refresh_interval"] > 1 else ""
        lines.append(
            f"| {name} | {fmt_t(med['gradax'])}{per} | {fmt_t(med[ADAMW])} | {r['vs_adamw']:.2f}x "
            f"(<= {row['adamw_target']}x, {ok_a}) | {row['reference']} | {torch_t} | {vs_t} "
            f"| {row['compile_s']:.1f} s | {row['state_bytes'] / adamw_bytes:.2f} |"
        )
    return "\n".join(lines)


def fused_table(result: dict) -> str:
    """The fused steps: time, against the XLA step and AdamW's, and the bandwidth their byte count achieves as a
    share of the copy reference timed in the same repeats; "" when no optimizer has one."""
    lines = [
        "| optimizer | fused step | XLA step | fused / AdamW XLA step | B/param | GB/s | % of copy bandwidth "
        "(target >= 80%) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, row in result["optimizers"].items():
        if FUSED not in row["step_s"]:
            continue
        med = {k: v["median"] for k, v in row["step_s"].items()}
        gbps = row["fused_bytes_per_param"] * row["params"] / med[FUSED] / 1e9
        copy_gbps = 2 * row["copy_reference_bytes"] / med[COPY] / 1e9
        pct = 100 * gbps / copy_gbps
        lines.append(
            f"| {name} | {fmt_t(med[FUSED])} | {fmt_t(med['gradax'])} | {med[FUSED] / med[ADAMW]:.2f}x "
            f"| {row['fused_bytes_per_param']} | {gbps:.1f} | {pct:.0f}% ({'ok' if pct >= 80 else 'under'}; copy "
            f"{copy_gbps:.1f} GB/s) |"
        )
    return "\n".join(lines) if len(lines) > 2 else ""


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="the tiny tree, one repeat of one refresh interval")
    ap.add_argument("--size", choices=sorted(SIZES), default="full", help="tree size (default: GPT-2 small)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--steps", type=int, default=REFRESH, help="steps per repeat (rounded to refresh intervals)")
    ap.add_argument("--only", default="", help="comma-separated optimizer names (default: all)")
    ap.add_argument("--out", default="", help="write the results as JSON here")
    ap.add_argument("--md", default="", help="write the markdown table here")
    ap.add_argument(
        "--torch-device",
        default="cpu",
        help="where the torch references run (e.g. cuda, beside JAX's default backend); with cuda, float32 matmuls "
        "use TF32 as JAX's default precision does on GPUs",
    )
    args = ap.parse_args(argv)
    size = "tiny" if args.quick else args.size
    repeats, steps = (1, REFRESH) if args.quick else (args.repeats, args.steps)
    vocab, n_ctx, width, layers = SIZES[size]["gpt"]
    cfg = {"width": width, "heads": width // 64 if width >= 64 else 2, "torch_device": args.torch_device}
    if torch is not None and args.torch_device != "cpu":
        torch.set_float32_matmul_precision("high")
    # torch on every core (as XLA), unless OMP_NUM_THREADS says otherwise (the test suite's one thread per worker)
    threads = int(os.environ.get("OMP_NUM_THREADS") or 0) or os.cpu_count() or 1
    if torch is not None:
        torch.set_num_threads(threads)
    shapes = gpt2_shapes(vocab, n_ctx, width, layers)
    params_np, grads_np = make_tree(shapes, np.float32, 0), make_tree(shapes, np.float32, 1)
    chosen = [s for s in specs() if not args.only or s.name in args.only.split(",")]
    unknown = set(filter(None, args.only.split(","))) - {s.name for s in specs()}
    if unknown:
        raise SystemExit(f"--only: unknown optimizer(s) {sorted(unknown)}; choose from {[s.name for s in specs()]}")
    adamw = prepare_jax(
        Workload("adamw", shapes, lambda o: o.adamw(1e-3, weight_decay=1e-4)), gradax, params_np, grads_np
    )
    time_jax(adamw, 2)
    result: dict[str, Any] = {
        "size": size,
        "shape": {"vocab": vocab, "n_ctx": n_ctx, "width": width, "layers": layers, "heads": cfg["heads"]},
        "params": n_params(shapes),
        "repeats": repeats,
        "threads": {"cpu_count": os.cpu_count(), "torch": torch.get_num_threads() if torch is not None else None},
        "torch_device": args.torch_device,
        "machine": {"platform": platform.platform(), "jax": jax.__version__, "backend": jax.default_backend()},
        "adamw_compile_s": adamw.compile_s,
        "adamw_state_bytes": _state_bytes(adamw),
        "command": " ".join([sys.executable.rsplit("/", 1)[-1], "-m", "benchmarks.beyond", *(argv or sys.argv[1:])]),
        "optimizers": {},
    }
    t0 = time.perf_counter()
    for spec in chosen:
        result["optimizers"][spec.name] = measure(spec, adamw, params_np, grads_np, cfg, repeats, steps)
        print(f"{spec.name}: done ({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)
    result["adam_mini_state_vs_adamw"] = (
        result["optimizers"]["adam_mini"]["state_bytes"] / result["adamw_state_bytes"]
        if "adam_mini" in result["optimizers"]
        else None
    )
    md = table(result)
    if fused := fused_table(result):
        md += "\n\nFused steps (`gradax.fused`), with the copy reference (a donated `x + 1`) timed in the same repeats:\n\n"
        md += fused
    if result["adam_mini_state_vs_adamw"] is not None:
        md += f"\n\nAdam-mini's state: {result['adam_mini_state_vs_adamw']:.3f}x AdamW's bytes (target <= 0.55x)."
    md += (
        f"\n\n{result['params']:,} params ({size} tree), {repeats} repeats alternating AdamW / gradax / torch per "
        f"optimizer, medians; torch on {args.torch_device} ({result['threads']['torch']} threads), JAX on "
        f"{jax.default_backend()}. Command: `{result['command']}`."
    )
    print(md)
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(result, fh, indent=1)
    if args.md:
        with open(args.md, "w") as fh:
            fh.write(md + "\n")
    return result


if __name__ == "__main__":
    main()
