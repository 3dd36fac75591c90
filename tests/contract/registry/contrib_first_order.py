"""Registry entries for the modern first-order optimizers and wrappers (issue 18): cautious, cautious weight decay,
MARS, Adam-mini, LaProp, Grams, SPAM, APOLLO, CAME. Optax 0.2.8 has none of them (``oracle=False``); each is
compared with its torch reference in ``tests/contrib/test_<name>_reference.py``."""

import math

import jax

from . import Entry

_SCHED = lambda c: 1e-2 / (1.0 + c)


def _mini_label(x):
    shape = getattr(x, "shape", ())
    size = math.prod(shape)
    return "head" if size % 2 == 0 and size > 0 else ("row" if shape else "tensor")


_MINI_LABELS = lambda p: jax.tree.map(_mini_label, p)
_BIG = lambda p: jax.tree.map(lambda x: len(getattr(x, "shape", ())) > 1, p)

ENTRIES = [
    Entry("cautious", make=lambda ox: ox.cautious(ox.adamw(1e-2)), needs_params=True, oracle=False, inject=False),
    Entry(
        "cautious",
        make=lambda ox: ox.cautious(ox.scale_by_adam(), aligned_with_gradient=True),
        oracle=False,
        inject=False,
    ),
    Entry("add_decayed_weights", {"weight_decay": 0.1, "cautious": True}, needs_params=True, oracle=False),
    Entry(
        "add_decayed_weights",
        make=lambda ox: ox.add_decayed_weights(_SCHED, cautious=True),
        needs_params=True,
        oracle=False,
        inject=False,
    ),
    Entry("contrib.scale_by_mars", {"gamma": 0.025}, oracle=False),
    Entry("contrib.scale_by_mars", {"variant": "lion"}, oracle=False),
    Entry("contrib.mars", {"learning_rate": 1e-2, "weight_decay": 1e-3}, needs_params=True, oracle=False),
    Entry("contrib.mars", {"learning_rate": 1e-2, "variant": "lion", "mask": _BIG}, needs_params=True, oracle=False),
    Entry(
        "contrib.mars",
        make=lambda ox: ox.contrib.mars(_SCHED, weight_decay=_SCHED, cautious_weight_decay=True),
        needs_params=True,
        oracle=False,
        inject=False,
    ),
    Entry("contrib.scale_by_laprop", {"b1": 0.9, "b2": 0.99}, oracle=False),
    Entry(
        "contrib.laprop", {"learning_rate": 1e-2, "weight_decay": 1e-3, "mask": _BIG}, needs_params=True, oracle=False
    ),
    Entry(
        "contrib.laprop",
        make=lambda ox: ox.contrib.laprop(_SCHED, weight_decay=_SCHED, cautious_weight_decay=True),
        needs_params=True,
        oracle=False,
        inject=False,
    ),
    Entry("contrib.scale_by_grams", {"b1": 0.9, "b2": 0.99}, oracle=False),
    Entry(
        "contrib.grams", {"learning_rate": 1e-2, "weight_decay": 1e-3, "mask": _BIG}, needs_params=True, oracle=False
    ),
    Entry(
        "contrib.grams",
        make=lambda ox: ox.contrib.grams(_SCHED, weight_decay=_SCHED),
        needs_params=True,
        oracle=False,
        inject=False,
    ),
    Entry("contrib.scale_by_came", {"b3": 0.999}, oracle=False),
    Entry("contrib.came", {"learning_rate": 1e-2, "weight_decay": 1e-3, "mask": _BIG}, needs_params=True, oracle=False),
    Entry(
        "contrib.came",
        make=lambda ox: ox.contrib.came(_SCHED, weight_decay=_SCHED, cautious_weight_decay=True),
        needs_params=True,
        oracle=False,
        inject=False,
    ),
    # small reset interval / warmup / delay so that the battery's few steps cross a reset and the clipping
    Entry("contrib.scale_by_spam", {"reset_interval": 3, "warmup_steps": 1, "clip_delay": 1}, oracle=False),
    Entry(
        "contrib.spam",
        {"learning_rate": 1e-2, "weight_decay": 1e-3, "mask": _BIG, "reset_interval": 2, "threshold": 2.0},
        needs_params=True,
        oracle=False,
    ),
    Entry(
        "contrib.spam",
        make=lambda ox: ox.contrib.spam(_SCHED, weight_decay=_SCHED, cautious_weight_decay=True),
        needs_params=True,
        oracle=False,
        inject=False,
    ),
    Entry("contrib.scale_by_adam_mini", {"b1": 0.9, "b2": 0.99}, oracle=False),
    Entry(
        "contrib.scale_by_adam_mini",
        {"n_heads": 2, "partition": _MINI_LABELS},
        oracle=False,
        skip={"inject": "partition is a function (not a hyperparameter)"},
    ),
    Entry(
        "contrib.adam_mini",
        {"learning_rate": 1e-2, "weight_decay": 1e-3, "mask": _BIG},
        needs_params=True,
        oracle=False,
    ),
    Entry(
        "contrib.adam_mini",
        make=lambda ox: ox.contrib.adam_mini(_SCHED, weight_decay=_SCHED, n_heads=2, partition=_MINI_LABELS),
        needs_params=True,
        oracle=False,
        inject=False,
    ),
    Entry("contrib.scale_by_apollo", {"rank": 1, "update_proj_gap": 2}, oracle=False),
    Entry("contrib.scale_by_apollo", {"rank": 1, "scale_type": "tensor", "key": 7}, oracle=False),
    Entry(
        "contrib.apollo",
        {"learning_rate": 1e-2, "weight_decay": 1e-3, "mask": _BIG, "rank": 1},
        needs_params=True,
        oracle=False,
    ),
    Entry("contrib.apollo_mini", {"learning_rate": 1e-3, "update_proj_gap": 3}, needs_params=True, oracle=False),
    Entry(
        "contrib.apollo",
        make=lambda ox: ox.contrib.apollo(_SCHED, weight_decay=_SCHED, rank=1, cautious_weight_decay=True),
        needs_params=True,
        oracle=False,
        inject=False,
    ),
]

# item 5: decoupled weight decay on the Optax recipes that lacked it (their defaults keep Optax's oracle entries)
_WD = {"weight_decay": 1e-3, "weight_decay_mask": _BIG}
ENTRIES += [
    Entry(name, {"learning_rate": 0.1, **kw, **_WD}, needs_params=True, oracle=False)
    for name, kw in [
        ("sgd", {"momentum": 0.9}),
        ("rmsprop", {"momentum": 0.5}),
        ("adagrad", {}),
        ("amsgrad", {}),
        ("radam", {}),
        ("adabelief", {}),
        ("yogi", {}),
        ("sign_sgd", {}),
        ("signum", {}),
        ("sm3", {}),
        ("noisy_sgd", {"key": 0}),
        ("optimistic_gradient_descent", {}),
    ]
]
ENTRIES.append(
    Entry(
        "sgd",
        make=lambda ox: ox.sgd(_SCHED, weight_decay=_SCHED, cautious_weight_decay=True),
        needs_params=True,
        oracle=False,
        inject=False,
    )
)

COVERED = {
    "contrib.ScaleByApolloState": "tests/contrib/test_apollo_reference.py",
    "contrib.ScaleByAdamMiniState": "tests/contrib/test_adam_mini_reference.py",
    "contrib.ScaleBySpamState": "tests/contrib/test_spam_reference.py",
    "contrib.ScaleByCameState": "tests/contrib/test_came_reference.py",
    "contrib.ScaleByLaPropState": "tests/contrib/test_laprop_reference.py",
    "contrib.ScaleByGramsState": "tests/contrib/test_grams_reference.py",
    "contrib.ScaleByMarsState": "tests/contrib/test_mars_reference.py",
}
