"""Publish a ``gradax leaderboard`` run: its table into the README and the docs, its plots into the docs' images.

    make leaderboard                                       # writes runs/leaderboard-nanogpt-<time>/
    python -m benchmarks.leaderboard runs/leaderboard-nanogpt-<time>
    python -m benchmarks.leaderboard --check               # exit 1 when the README disagrees with the published run

The run's ``leaderboard.md``, ``sweep.md`` and ``results.json`` are copied to ``benchmarks/leaderboard/`` (the one
source of the published figures), its plots to ``docs/img/leaderboard/``, and the README's generated part is
rewritten from ``benchmarks/leaderboard/leaderboard.md``. The docs page (``docs/guides/leaderboard.md``) includes that
file, so it cannot drift either; ``tests/test_benchmarks.py`` runs the check.
"""

from __future__ import annotations

import argparse
import pathlib
import shutil
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
PUBLISHED = ROOT / "benchmarks" / "leaderboard"
IMAGES = ROOT / "docs" / "img" / "leaderboard"
README = ROOT / "README.md"
FILES = ("leaderboard.md", "sweep.md", "results.json")
PLOTS = ("curves.png", "steps_to_target.png", "sweep.png")
BEGIN = (
    "<!-- generated from benchmarks/leaderboard/leaderboard.md by `python -m benchmarks.leaderboard`; do not edit -->"
)
END = "<!-- end of the generated leaderboard -->"


def readme_text() -> str:
    """The README as it must read for the published leaderboard."""
    text = README.read_text()
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise SystemExit(f"README.md has no generated leaderboard: put the two marker lines\n{BEGIN}\n{END}\nin it.")
    table = (PUBLISHED / "leaderboard.md").read_text().rstrip("\n")
    return text[: start + len(BEGIN)] + "\n" + table + "\n" + text[end:]


def publish(run: pathlib.Path) -> None:
    missing = [f for f in FILES + PLOTS if not (run / f).is_file()]
    if missing:
        raise SystemExit(f"{run} is not a finished leaderboard run folder: it lacks {', '.join(missing)}")
    PUBLISHED.mkdir(parents=True, exist_ok=True)
    IMAGES.mkdir(parents=True, exist_ok=True)
    for f in FILES:
        shutil.copyfile(run / f, PUBLISHED / f)
    for f in PLOTS:
        shutil.copyfile(run / f, IMAGES / f)
    README.write_text(readme_text())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", nargs="?", help="a finished `gradax leaderboard` run folder")
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 when the README is out of date")
    args = ap.parse_args(argv)
    if args.check:
        if README.read_text() != readme_text():
            print(
                "README.md's leaderboard differs from benchmarks/leaderboard/leaderboard.md; run python -m benchmarks.leaderboard RUN"
            )
            return 1
        return 0
    if not args.run:
        ap.error("give a run folder, or --check")
    publish(pathlib.Path(args.run))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
