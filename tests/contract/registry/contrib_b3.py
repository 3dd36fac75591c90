"""Registry entries for gradax.contrib, part B3 (normalize, split_real_and_imaginary, prodigy, sophia)."""

from . import Entry

ENTRIES = [
    Entry("contrib.normalize", inject=False),
    Entry(
        "contrib.split_real_and_imaginary",
        make=lambda ox: ox.contrib.split_real_and_imaginary(ox.adam(1e-2)),
        complex_ok=True,
    ),
    Entry("contrib.prodigy", {"learning_rate": 1.0, "estim_lr0": 1e-3}, needs_params=True),
    Entry(
        "contrib.prodigy",
        make=lambda ox: ox.contrib.prodigy(lambda c: 1.0 / (1.0 + c), weight_decay=1e-2, safeguard_warmup=True),
        needs_params=True,
        inject=False,
    ),
]


def _sophia_obj_fn(params, grads, lib):
    """Sophia's default Hutchinson estimator needs obj_fn: a quadratic of every leaf (float32 inside)."""
    import jax
    import jax.numpy as jnp

    return {
        "obj_fn": lambda p: 0.5 * sum((jnp.sum(x.astype(jnp.float32) ** 2) for x in jax.tree.leaves(p)), jnp.float32(0))
    }


# Sophia: the same key in both libraries gives the same Rademacher probes (tests/contrib/test_sophia.py)
ENTRIES += [
    Entry(
        "contrib.sophia",
        {"learning_rate": 1e-2, "update_interval": 2},
        needs_params=True,
        extra_args=_sophia_obj_fn,
    ),
]

COVERED = {
    "contrib.NormalizeState": "tests/contrib/test_normalize.py",
    "contrib.SplitRealAndImaginaryState": "tests/contrib/test_complex.py",
    "contrib.ProdigyState": "tests/contrib/test_prodigy.py",
    "contrib.SophiaState": "tests/contrib/test_sophia.py",
}
