"""The current results: one file holds each workload's newest run, and RESULTS.md and the README show it.

``benchmarks/results.json`` is the one source of the figures in ``benchmarks/RESULTS.md`` (its tables), in
``README.md`` (its highlights) and in the documentation site (whose benchmarks page is RESULTS.md). A run updates it
with ``--merge``; this module then rewrites the generated parts of the two pages::

    python -m benchmarks.run --size full --repeats 5 --only adamw_gpt2 --merge benchmarks/results.json
    python -m benchmarks.suite.current          # --check: exit 1 when a page disagrees with results.json

``tests/test_benchmarks.py`` runs the check, so a page cannot quote a figure the file does not hold.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
from typing import Any

from .columns import FUSED, FUSED_FLAT
from .report import markdown, ratio

ROOT = pathlib.Path(__file__).resolve().parents[2]
RESULTS_JSON = ROOT / "benchmarks" / "results.json"
RESULTS_MD = ROOT / "benchmarks" / "RESULTS.md"
README = ROOT / "README.md"
BEGIN = "<!-- generated from benchmarks/results.json by `python -m benchmarks.suite.current`; do not edit -->"
END = "<!-- end of the generated part -->"


def merge(current: dict[str, Any], result: dict[str, Any], command: str) -> dict[str, Any]:
    """``current`` with the workloads of one run (``benchmarks.run``'s result) replaced by that run's figures."""
    if current and current.get("size") != result["size"]:
        raise SystemExit(
            f"--merge: the file holds --size {current.get('size')} results and this run is --size {result['size']}; "
            "merge runs of one size into one file."
        )
    run = {
        "date": result["env"]["date"],
        "command": command,
        "repeats": result["repeats"],
        "env": result["env"],
        "copy_bandwidth": result["copy_bandwidth"],
    }
    workloads = dict(current.get("workloads", {}))
    workloads.update({name: {**w, "run": run} for name, w in result["workloads"].items()})
    return {"size": result["size"], "workloads": workloads}


def _median(current: dict[str, Any], workload: str, column: str) -> float:
    return current["workloads"][workload]["step_s"][column]["median"]


def highlights(current: dict[str, Any]) -> str:
    """The README's three figures: the AdamW step, 8-bit moments, and a tree of many small leaves."""
    w = current["workloads"]
    gpt, many, eight = w["adamw_gpt2"], w["adamw_many_leaves"], w["adamw_8bit"]
    adamw_vs_optax = ratio(_median(current, "adamw_gpt2", FUSED), _median(current, "adamw_gpt2", "optax"))
    adamw_vs_torch = ratio(_median(current, "adamw_gpt2", FUSED), _median(current, "adamw_gpt2", "torch"))
    state_8bit = eight["state_bytes"][FUSED] / eight["state_bytes"]["gradax_fp32"]
    step_8bit = ratio(_median(current, "adamw_8bit", FUSED), _median(current, "adamw_8bit", "gradax_fp32"))
    flat_vs_optax = ratio(
        _median(current, "adamw_many_leaves", FUSED_FLAT), _median(current, "adamw_many_leaves", "optax")
    )
    compile_1000 = w["compile_clip_adamw"]["compile_s"]["1000"]
    compile_vs_optax = ratio(compile_1000[FUSED_FLAT]["median"], compile_1000["optax"]["median"])
    return "\n".join(
        [
            "Medians on a 2-core CPU, from the current [benchmark results](benchmarks/RESULTS.md):",
            "",
            f"- **AdamW** (`gradax.fused.adamw`, GPT-2-small-shaped tree, {gpt['params'] / 1e6:.0f}M parameters): "
            f"{adamw_vs_optax} Optax's step time, {adamw_vs_torch} torch's `fused=True` AdamW.",
            f'- **8-bit moments** (`moments="8bit"`, same tree): {state_8bit:.3f}x the state memory of float32 AdamW; '
            f"the fused 8-bit step takes {step_8bit} the time of a float32 `gradax.adamw` step.",
            f"- **{many['leaves']:,} small leaves** ({many['params'] / 1e6:.0f}M parameters, "
            f"`gradax.flatten(gradax.fused.adamw)`): {flat_vs_optax} Optax's step time; the clip + AdamW chain "
            f"compiles in {compile_vs_optax} Optax's time at 1,000 leaves.",
        ]
    )


def replace_generated(text: str, generated: str, page: str) -> str:
    """``text`` with the part between :data:`BEGIN` and :data:`END` replaced by ``generated``."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise SystemExit(f"{page} has no generated part: put the two marker lines\n{BEGIN}\n{END}\nwhere it goes.")
    return text[: start + len(BEGIN)] + "\n" + generated.rstrip("\n") + "\n" + text[end:]


def pages(current: dict[str, Any]) -> dict[pathlib.Path, str]:
    """RESULTS.md and README.md as they must read for ``current``."""
    return {
        RESULTS_MD: replace_generated(RESULTS_MD.read_text(), markdown(current), "benchmarks/RESULTS.md"),
        README: replace_generated(README.read_text(), highlights(current), "README.md"),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 when a page is out of date")
    args = ap.parse_args(argv)
    current = json.loads(RESULTS_JSON.read_text())
    stale = []
    for path, text in pages(current).items():
        if path.read_text() != text:
            stale.append(path.relative_to(ROOT))
            if not args.check:
                path.write_text(text)
    if args.check and stale:
        print(
            f"out of date with benchmarks/results.json: {', '.join(map(str, stale))}; run python -m benchmarks.suite.current"
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
