"""Registry entries for contrib's differential privacy: ``differentially_private_aggregate`` and ``dpsgd``, fed
per-example gradients made from the battery's gradients by a stateless stacking stage (the same on both sides)."""

from . import Entry

_SCHED = lambda c: 1e-2 / (1.0 + c)


def _per_example(lib):
    """Stacks two 'examples' (g and -0.5 g) on a new leading axis: dpsgd expects per-example gradients."""
    import jax
    import jax.numpy as jnp

    return lib.stateless(lambda u, p: jax.tree.map(lambda g: jnp.stack([g, -0.5 * g]), u))


ENTRIES = [
    Entry(
        "contrib.differentially_private_aggregate",
        make=lambda ox: ox.chain(_per_example(ox), ox.contrib.differentially_private_aggregate(1.0, 0.5, key=1)),
    ),
    Entry("contrib.dpsgd", make=lambda ox: ox.chain(_per_example(ox), ox.contrib.dpsgd(1e-2, 1.0, 0.5, 0))),
    Entry(
        "contrib.dpsgd",
        make=lambda ox: ox.chain(_per_example(ox), ox.contrib.dpsgd(_SCHED, 0.5, 1.0, 3, momentum=0.9, nesterov=True)),
    ),
]

COVERED = {
    "contrib.DifferentiallyPrivateAggregateState": "tests/contrib/test_privacy.py",
}
