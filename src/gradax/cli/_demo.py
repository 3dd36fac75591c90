"""``gradax demo``: a short ``compare`` on the digits and a short ``train`` of the Shakespeare transformer."""

from __future__ import annotations

from pathlib import Path

from ._common import EXIT_OK
from ._common import say as _say

DEMO_OPTIMIZERS = [
    "sgd(learning_rate=0.1, momentum=0.9)",
    "adam(learning_rate=1e-3)",
    "adamw(learning_rate=warmup_cosine_decay_schedule(0.0, 3e-3, 50, 600), weight_decay=1e-4)",
]
#: The language model warms its learning rate up over the first 1/LM_WARMUP_PARTS of its steps.
LM_WARMUP_PARTS = 10


def _lm_optimizer(steps: int) -> str:
    warmup = max(1, steps // LM_WARMUP_PARTS)
    return (
        f"chain(clip_by_global_norm(1.0), adamw(learning_rate=warmup_cosine_decay_schedule(0.0, 3e-3, {warmup}, "
        f"{steps}), weight_decay=0.01))"
    )


def cmd_demo(args) -> int:
    from ._main import main  # the demo runs two ordinary commands

    root = Path(args.out)
    quiet = ["--quiet"] if args.quiet else []
    _say("== gradax demo 1/2: compare three optimizers on the 8x8 digits (MLP) ==")
    compare = ["compare", "--task", "digits", *DEMO_OPTIMIZERS, "--steps", str(args.digits_steps)]
    rc = main([*compare, "--out", str(root / "compare-digits"), "--overwrite", *quiet])
    if rc:
        return rc
    _say("\n== gradax demo 2/2: character-level transformer on Shakespeare ==")
    train = [
        "train",
        "--task",
        "shakespeare",
        "--steps",
        str(args.lm_steps),
        "--optimizer",
        _lm_optimizer(args.lm_steps),
    ]
    rc = main([*train, "--out", str(root / "train-shakespeare"), "--overwrite", *quiet])
    if rc:
        return rc
    _say("\npictures:")
    for p in ("compare-digits/compare.png", "train-shakespeare/curves.png", "train-shakespeare/lr.png"):
        _say(f"  {root / p}")
    return EXIT_OK
