"""Registry entries for the contrib methods that use curvature or sharpness: Sophia (clipped Newton-like steps with a
Hutchinson estimate of the Hessian's diagonal), the Hutchinson estimator itself, and SAM (sharpness-aware
minimization). Sophia and the estimator take ``obj_fn`` as an extra argument of ``update``."""

import jax
import jax.numpy as jnp

from . import Entry


def _sophia_obj_fn(params, grads, lib):
    """Sophia's default Hutchinson estimator needs obj_fn: a quadratic of every leaf (float32 inside)."""
    return {
        "obj_fn": lambda p: 0.5 * sum((jnp.sum(x.astype(jnp.float32) ** 2) for x in jax.tree.leaves(p)), jnp.float32(0))
    }


def _obj_fn(params, grads, lib):
    """A smooth objective of every leaf (float32 inside), for the Hessian-vector products."""

    def obj(p):
        leaves = jax.tree.leaves(p)
        return sum(
            (jnp.sum(jnp.sin(x.astype(jnp.float32)) * x.astype(jnp.float32) ** 2) for x in leaves), jnp.float32(0)
        )

    return {"obj_fn": obj}


ENTRIES = [
    # Sophia: the same key in both libraries gives the same Rademacher probes (tests/contrib/test_sophia.py)
    Entry(
        "contrib.sophia",
        {"learning_rate": 1e-2, "update_interval": 2},
        needs_params=True,
        extra_args=_sophia_obj_fn,
    ),
    Entry(
        "contrib.hutchinson_estimator_diag_hessian",
        {"random_seed": jax.random.key(3)},
        needs_params=True,
        extra_args=_obj_fn,
    ),
    Entry(
        "contrib.sam",
        make=lambda ox: ox.contrib.sam(ox.adam(1e-2), ox.chain(ox.contrib.normalize(), ox.adam(0.05))),
        needs_params=True,
    ),
]

COVERED = {
    "contrib.SophiaState": "tests/contrib/test_sophia.py",
    "contrib.HutchinsonState": "tests/contrib/test_hutchinson.py",
    "contrib.SAMState": "tests/contrib/test_sam.py",
}
