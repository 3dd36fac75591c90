"""Write a first skeleton of docs/reference/*.md from the public namespace (run once, then edit the pages by hand).

The committed pages are the grouping; ``tests/test_docs_reference.py`` fails when a public name has no ``::: gradax.x``
entry in them. Run ``.venv/bin/python docs/_scripts/reference_skeleton.py --missing`` to print the entries a new
public name needs, or without arguments to (re)write the skeleton (it overwrites docs/reference/).
"""

from __future__ import annotations

import collections
import inspect
import pathlib
import sys

import gradax

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the public-name walk is shared with the tests that check the reference
from tests._public_names import PUBLIC_MODULES, public_names  # noqa: E402

REF = ROOT / "docs" / "reference"


def canonical():
    """(dotted path, name, object, home module) for each public object, top-level path preferred."""
    seen = {}
    for path in PUBLIC_MODULES:
        for name, obj in public_names(path):
            if path and getattr(gradax, name, None) is obj:
                continue  # documented at the top level
            if path == "tree_utils" and getattr(gradax.tree, name, None) is obj:
                continue  # the alias namespace: documented under gradax.tree
            dotted = f"gradax.{path}.{name}" if path else f"gradax.{name}"
            home = getattr(obj, "__module__", "") or ""
            seen[dotted] = (name, obj, home)
    return seen


def title(module):
    stem = module.rsplit(".", 1)[-1].lstrip("_").replace("_", " ")
    return stem[:1].upper() + stem[1:]


def page_of(dotted, name, obj, home):
    parts = dotted.split(".")
    if len(parts) > 2:
        sub = parts[1]
        if sub == "tree_utils":
            return "tree", title(home)
        if sub in ("schedules", "losses", "contrib", "tree", "fused", "sharding"):
            return sub, title(home)
        if sub == "transforms":
            return "wrappers", title(home)
        return "more", sub.replace("_", " ").capitalize()
    if home.startswith("gradax.optimizers."):
        if name.startswith("scale_by_") or inspect.isclass(obj):
            return "building_blocks", title(home)
        return "optimizers", title(home)
    if home.startswith("gradax.schedules."):
        return ("wrappers", "Hyperparameters") if "_inject" in home else ("schedules", title(home))
    if home.startswith("gradax.losses."):
        return "losses", title(home)
    if home.startswith("gradax.transforms."):
        if home.rsplit(".", 1)[-1] in ("_scaling", "_adding", "_clipping", "_constraining", "_accumulation"):
            return "building_blocks", title(home)
        return "wrappers", title(home)
    if home.startswith("gradax.microbatching"):
        return "more", "Microbatching"
    if home.startswith("gradax.tree"):
        return "tree", "Optimizer state"
    return "core", title(home) if home.startswith("gradax.") else "Types"


PAGES = {
    "optimizers": ("Optimizers", "The ready-to-use optimizers (`gradax.adamw`, `gradax.sgd`, ...)."),
    "building_blocks": ("Building blocks", "`scale_by_*` transformations, their states, clipping and the like."),
    "wrappers": ("Wrappers and combinators", "Transformations that take transformations: chain, masks, ..."),
    "schedules": ("Schedules", "Learning-rate and hyperparameter schedules."),
    "losses": ("Losses", "Loss functions (`gradax.losses`)."),
    "contrib": ("Contrib optimizers", "The experimental tier (`gradax.contrib`), beyond Optax's core."),
    "tree": ("Tree utilities", "`gradax.tree` (and its alias `gradax.tree_utils`)."),
    "core": ("Core types and functions", "The transformation contract, update application and numerics."),
    "fused": ("Fused CPU steps", "`gradax.fused`: single-pass C kernels (opt-in)."),
    "sharding": ("Sharding", "`gradax.sharding`: optimizer-state placement from parameter shardings."),
    "more": ("More modules", "Projections, perturbations, assignment, second order, microbatching, experimental."),
}


def main():
    groups = collections.defaultdict(lambda: collections.defaultdict(list))
    for dotted, (name, obj, home) in canonical().items():
        page, section = page_of(dotted, name, obj, home)
        groups[page][section].append(dotted)
    if "--missing" in sys.argv:
        text = "".join(p.read_text() for p in REF.glob("*.md"))
        for page, sections in groups.items():
            for section, names in sections.items():
                for d in names:
                    if f"::: {d}\n" not in text:
                        print(f"{page}.md / {section}: ::: {d}")
        return
    REF.mkdir(exist_ok=True)
    for page, (head, intro) in PAGES.items():
        lines = [f"# {head}", "", intro, ""]
        for section in sorted(groups[page]):
            lines += [f"## {section}", ""]
            for d in sorted(groups[page][section], key=lambda d: (d.rsplit(".", 1)[-1].endswith("State"), d)):
                lines += [f"::: {d}", ""]
        (REF / f"{page}.md").write_text("\n".join(lines))


if __name__ == "__main__":
    main()
