"""The markdown tables of a run: step times and % of copy bandwidth, the fused steps, compile times, L-BFGS."""

from __future__ import annotations

from typing import Any

from .columns import COPY, DESCRIPTIONS, FUSED, FUSED_COLUMNS, FUSED_FLAT, IMPLS


def reference_bandwidth(result: dict[str, Any], workload: dict[str, Any]) -> float:
    """Bytes per second of the copy reference timed beside ``workload``'s steps, else of its run's start."""
    ref = workload.get("step_s", {}).get(COPY)
    if ref and workload.get("copy_reference_bytes"):
        return 2 * workload["copy_reference_bytes"] / ref["median"]
    return workload.get("run", result)["copy_bandwidth"]["jax_add_GBps"] * 1e9


def fmt_t(s: float) -> str:
    if s >= 1:
        return f"{s:.2f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.2f} ms"
    return f"{s * 1e6:.0f} us"


def spread(d: dict[str, float]) -> str:
    return f"{fmt_t(d['median'])} ({fmt_t(d['min'])}..{fmt_t(d['max'])})"


def ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}x" if a and b else "-"


def header(result: dict[str, Any]) -> list[str]:
    """What the % of copy bandwidth is relative to; for a file of several runs, which run each workload comes from."""
    if "copy_bandwidth" in result:  # one run
        bw = result["copy_bandwidth"]
        return [
            f"Copy bandwidth at the start (jitted `x + 1`, read+write): {bw['jax_add_GBps']:.2f} GB/s; "
            f"NumPy copyto: {bw['numpy_copy_GBps']:.2f} GB/s. The % of copy bandwidth of a step "
            "workload is relative to the same `x + 1` timed in each of its repeats, beside its steps (notes below).",
        ]
    runs: dict[tuple[str, str, str], list[str]] = {}
    for name, r in result["workloads"].items():
        runs.setdefault((r["run"]["date"], r["run"]["env"]["cpu"], r["run"]["command"]), []).append(name)
    lines = [
        "Each workload's newest run. The % of copy bandwidth is relative to the same `x + 1` timed in each repeat "
        "beside the steps, or, for runs before that reference existed, to the `x + 1` timed at the start of the run.",
        "",
    ]
    for (date, cpu, command), names in sorted(runs.items(), reverse=True):
        lines.append(f"- {', '.join(names)}: {date[:16].replace('T', ' ')} UTC, {cpu}, `{command}`")
    return lines


def markdown(result: dict[str, Any]) -> str:
    lines = [
        *header(result),
        "",
        "| workload | params / leaves | B/param | gradax step (median, min..max) | optax step | torch step "
        "| gradax/optax | gradax/torch | % copy BW gradax / optax / torch | compile gradax / optax (ratio) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in result["workloads"].items():
        if r["kind"] != "step":
            continue
        st = r["step_s"]
        med = {k: v["median"] for k, v in st.items()}
        nbytes = r["bytes_per_param"] * r["params"]
        bw = reference_bandwidth(result, r)
        pct = " / ".join(f"{100 * nbytes / med[k] / bw:.0f}%" if k in med else "-" for k in IMPLS)
        c = r["compile_s"]
        lines.append(
            f"| {name} ({DESCRIPTIONS[name]}) | {r['params'] / 1e6:.2f}M / {r['leaves']} | {r['bytes_per_param']} "
            f"| {spread(st['gradax'])} | {spread(st['optax'])} | {spread(st['torch']) if 'torch' in st else '-'} "
            f"| {ratio(med['gradax'], med['optax'])} | {ratio(med['gradax'], med.get('torch'))} | {pct} "
            f"| {fmt_t(c['gradax'])} / {fmt_t(c['optax'])} ({ratio(c['gradax'], c['optax'])}) |"
        )
    fused_rows = [
        (n, k, r)
        for n, r in result["workloads"].items()
        for k in FUSED_COLUMNS
        if r["kind"] == "step" and k in r["step_s"]
    ]
    if fused_rows:
        lines += [
            "",
            "| workload | fused step (median, min..max) | fused/optax | fused/torch | fused/gradax "
            "| % copy BW fused | compile fused / optax |",
            "|---|---|---|---|---|---|---|",
        ]
        for name, k, r in fused_rows:
            med = {c: v["median"] for c, v in r["step_s"].items()}
            nbytes = r["bytes_per_param"] * r["params"]
            bw = reference_bandwidth(result, r)
            c = r["compile_s"]
            label = name if k == FUSED else f"{name} (gradax.flatten)"
            lines.append(
                f"| {label} | {spread(r['step_s'][k])} | {ratio(med[k], med['optax'])} "
                f"| {ratio(med[k], med.get('torch'))} | {ratio(med[k], med['gradax'])} "
                f"| {100 * nbytes / med[k] / bw:.0f}% | {fmt_t(c[k])} / {fmt_t(c['optax'])} "
                f"({ratio(c[k], c['optax'])}) |"
            )
    comp = result["workloads"].get("compile_clip_adamw")
    if comp:
        lines += [
            "",
            "| compile time, clip+AdamW chain | gradax (median, min..max) | optax | gradax/optax "
            "| gradax.flatten(chain) | flatten/optax | gradax.fused.adamw(max_grad_norm=1) | fused/optax "
            "| gradax.flatten(fused) | flatten(fused)/optax |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for n, d in comp["compile_s"].items():
            opt = d.get("optax")

            def cells(x: Any, opt: Any = opt) -> tuple[str, str]:
                """(spread, ratio to Optax) of one column, '-' where it was not run"""
                return (spread(x) if x else "-", ratio(x["median"], opt["median"]) if x and opt else "-")

            g, fl, fu, ff = (cells(d.get(k)) for k in ("gradax", "gradax_flatten", FUSED, FUSED_FLAT))
            row = [f"{n} leaves", g[0], cells(opt)[0], g[1], *fl, *fu, *ff]
            lines.append("| " + " | ".join(row) + " |")
    lb = result["workloads"].get("lbfgs_rosenbrock")
    if lb:
        lines += [
            "",
            f"| L-BFGS Rosenbrock (grad norm < {lb['tol']:g}) | gradax time (iters, f) | optax | scipy L-BFGS-B "
            "| gradax/optax | gradax/scipy | compile gradax / optax |",
            "|---|---|---|---|---|---|---|",
        ]
        for n, d in lb["results"].items():
            cell = {k: f"{spread(v['time_s'])} ({v['iterations']} it, f={v['final_f']:.1e})" for k, v in d.items()}
            m = {k: v["time_s"]["median"] for k, v in d.items()}
            lines.append(
                f"| {n} dims | {cell['gradax']} | {cell['optax']} | {cell['scipy']} | {ratio(m['gradax'], m['optax'])} "
                f"| {ratio(m['gradax'], m['scipy'])} | {fmt_t(d['gradax']['compile_s'])} / "
                f"{fmt_t(d['optax']['compile_s'])} |"
            )
    notes = [f"- {n}: {x}" for n, r in result["workloads"].items() for x in r.get("notes", [])]
    if notes:
        lines += ["", *notes]
    return "\n".join(lines) + "\n"
