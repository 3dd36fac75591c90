"""Registry entries for the modern first-order optimizers and wrappers (issue 18): cautious, cautious weight decay,
MARS, Adam-mini, LaProp, Grams, SPAM, APOLLO, CAME. Optax 0.2.8 has none of them (``oracle=False``); each is
compared with its torch reference in ``tests/contrib/test_<name>_reference.py``."""

from . import Entry

_SCHED = lambda c: 1e-2 / (1.0 + c)  # noqa: E731

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
]

COVERED = {}
