"""Registry entries for gradax.fused (not in Optax): ``init``/``update`` are Optax's ``adamw`` (after
``clip_by_global_norm`` with ``max_grad_norm``), so the oracle side builds those. ``step`` has its own contract
tests in tests/test_fused.py (jit, vmap, grad, scan, cond, dtypes, pytree shapes, sharding)."""

import jax

import gradax

from . import Entry


def _fused(**kwargs):
    def make(ox):
        if ox is gradax:
            return gradax.fused.adamw(**kwargs)
        kw = dict(kwargs)
        clip = kw.pop("max_grad_norm", None)
        opt = ox.adamw(**kw)
        return opt if clip is None else ox.chain(ox.clip_by_global_norm(clip), opt)

    return make


ENTRIES = [
    Entry("fused.adamw", make=_fused(learning_rate=1e-2, weight_decay=0.1), needs_params=True, inject=False),
    Entry(
        "fused.adamw",
        make=_fused(learning_rate=lambda c: 1e-2 / (1.0 + c), weight_decay=0.1, nesterov=True, max_grad_norm=0.5),
        needs_params=True,
        inject=False,
    ),
]

COVERED = {
    "fused.FusedGradientTransformation": "tests/test_fused.py",
    "fused.kernel_status": "tests/test_fused.py",
}


def _fused_lion(**kwargs):
    """gradax.fused.lion; its oracle is optax.lion (same init and update)."""
    return lambda ox: gradax.fused.lion(**kwargs) if ox is gradax else ox.lion(**kwargs)


ENTRIES += [
    Entry("fused.lion", make=_fused_lion(learning_rate=1e-3, weight_decay=0.1), needs_params=True, inject=False),
    Entry(
        "fused.lion",
        make=_fused_lion(learning_rate=lambda c: 1e-3 / (1.0 + c), b1=0.8, b2=0.95, weight_decay=0.0),
        needs_params=True,
        inject=False,
    ),
]


def _fused_adafactor(**kwargs):
    """gradax.fused.adafactor; its oracle is optax.adafactor (same init and update)."""
    return lambda ox: gradax.fused.adafactor(**kwargs) if ox is gradax else ox.adafactor(**kwargs)


ENTRIES += [
    Entry("fused.adafactor", make=_fused_adafactor(learning_rate=1e-2), needs_params=True, inject=False),
    Entry(
        "fused.adafactor",
        make=_fused_adafactor(min_dim_size_to_factor=2, clipping_threshold=None, multiply_by_parameter_scale=False),
        needs_params=True,
        inject=False,
    ),
]


def _matrices(params):
    return jax.tree.map(lambda x: len(getattr(x, "shape", ())) > 1, params)


ENTRIES += [
    # no Optax oracle: init and update are gradax.contrib.mars's (differentially tested in tests/contrib/)
    Entry("fused.mars", {"learning_rate": 1e-2, "weight_decay": 0.1}, needs_params=True, oracle=False),
    Entry(
        "fused.mars",
        {"learning_rate": lambda c: 1e-2 / (1.0 + c), "gamma": 0.05, "max_norm": 0.5, "mask": _matrices},
        needs_params=True,
        oracle=False,
        inject=False,
    ),
]

ENTRIES += [
    # no Optax oracle: init and update are gradax.cautious(gradax.adamw(...))'s (tests/transforms/test_cautious.py)
    Entry("fused.cautious_adamw", {"learning_rate": 1e-2, "weight_decay": 0.1}, needs_params=True, oracle=False),
    Entry(
        "fused.cautious_adamw",
        {"learning_rate": lambda c: 1e-2 / (1.0 + c), "nesterov": True, "eps_root": 1e-8, "mask": _matrices},
        needs_params=True,
        oracle=False,
        inject=False,
    ),
]
