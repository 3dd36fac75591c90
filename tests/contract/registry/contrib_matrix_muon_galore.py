"""Registry entries for the contrib matrix optimizers that Optax 0.2.8 also has: Muon (Newton-Schulz
orthogonalized momentum on matrices, AdamW on the rest) and GaLore (Adam in a low-rank projection of each matrix's
gradient). The newer matrix methods are in ``contrib_matrix_muon_kron_scion.py`` and
``contrib_matrix_soap_shampoo.py``."""

import jax
import jax.numpy as jnp

from . import Entry

_SCHED = lambda c: 1e-2 / (1.0 + c)
_NS_STATIC = "ns_steps is a static loop length: use static_args=('ns_steps',) (tests/contrib/test_muon.py)"
_GALORE_ORACLE = {
    "oracle": "Optax 0.2.8 galore raises AttributeError on the None leaves of the battery trees; compared with Optax in "
    "tests/contrib/test_galore.py"
}

ENTRIES = [
    # Muon: NS in float32 (no complex), rtol looser for the 5 matrix products
    Entry(
        "contrib.muon",
        {"learning_rate": 1e-2},
        needs_params=True,
        rtol=2e-5,
        atol=2e-6,
        skip={"inject": _NS_STATIC},
    ),
    Entry(
        "contrib.muon",
        make=lambda ox: ox.contrib.muon(_SCHED, weight_decay=1e-3),
        needs_params=True,
        rtol=2e-5,
        atol=2e-6,
    ),
    # bfloat16 Newton-Schulz products (not in Optax 0.2.8: checked against its definition in
    # tests/contrib/test_muon_ns_dtype.py)
    Entry(
        "contrib.muon",
        make=lambda ox: ox.contrib.muon(_SCHED, weight_decay=1e-3, ns_dtype=jnp.bfloat16),
        needs_params=True,
        oracle=False,
    ),
    Entry(
        "contrib.scale_by_muon",
        make=lambda ox: ox.partition(
            {"m": ox.contrib.scale_by_muon(), "o": ox.identity()},
            lambda p: jax.tree.map(lambda x: "m" if x.ndim == 2 else "o", p),
        ),
        rtol=2e-5,
        atol=2e-6,
        skip={
            "awkward_trees": "scale_by_muon takes matrices only (muon routes the rest to AdamW)",
            "oracle": "Optax 0.2.8 scale_by_muon fails inside partition (MaskedNode); compared through contrib.muon",
        },
    ),
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

COVERED = {
    "contrib.MuonDimensionNumbers": "tests/contrib/test_muon.py",
    "contrib.MuonState": "tests/contrib/test_muon.py",
    "contrib.GaLoreState": "tests/contrib/test_galore.py",
    "contrib.GaLoreDimensionNumbers": "tests/contrib/test_galore.py",
}
