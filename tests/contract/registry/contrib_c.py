"""Registry entries for gradax.contrib, part C (privacy: dpsgd and differentially_private_aggregate; hutchinson;
galore)."""

from . import Entry

_SCHED = lambda c: 1e-2 / (1.0 + c)  # noqa: E731


def _per_example(lib):
    """Stacks two 'examples' (g and -0.5 g) on a new leading axis: dpsgd expects per-example gradients."""
    import jax
    import jax.numpy as jnp

    return lib.stateless(lambda u, p: jax.tree.map(lambda g: jnp.stack([g, -0.5 * g]), u))


_NO_COMPLEX_DP = "the per-example norm and the Gaussian noise are real-valued"

ENTRIES = [
    # per-example gradients are made from the battery's gradients by a stateless stacking stage (same on both sides)
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


def _obj_fn(params, grads, lib):
    """A smooth objective of every leaf (float32 inside), for the Hessian-vector products."""
    import jax
    import jax.numpy as jnp

    def obj(p):
        leaves = jax.tree.leaves(p)
        return sum(
            (jnp.sum(jnp.sin(x.astype(jnp.float32)) * x.astype(jnp.float32) ** 2) for x in leaves), jnp.float32(0)
        )

    return {"obj_fn": obj}


ENTRIES += [
    Entry(
        "contrib.hutchinson_estimator_diag_hessian",
        {"random_seed": __import__("jax").random.key(3)},
        needs_params=True,
        extra_args=_obj_fn,
    ),
]

COVERED["contrib.HutchinsonState"] = "tests/contrib/test_hutchinson.py"

_GALORE_ORACLE = {
    "oracle": "Optax 0.2.8 galore raises AttributeError on the None leaves of the battery trees; compared with Optax in "
    "tests/contrib/test_galore.py"
}
ENTRIES += [
    Entry("contrib.scale_by_galore", {"rank": 1, "update_proj_gap": 2}, skip=_GALORE_ORACLE),
    Entry(
        "contrib.galore",
        {"learning_rate": 1e-2, "rank": 1, "weight_decay": 1e-3},
        needs_params=True,
        skip=_GALORE_ORACLE,
    ),
    Entry(
        "contrib.galore",
        make=lambda ox: ox.contrib.galore(_SCHED, rank=2),
        needs_params=True,
        skip=_GALORE_ORACLE,
        inject=False,
    ),
]

COVERED["contrib.GaLoreState"] = "tests/contrib/test_galore.py"
COVERED["contrib.GaLoreDimensionNumbers"] = "tests/contrib/test_galore.py"
