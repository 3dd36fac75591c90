"""Registry entries for gradax.contrib's Muon family (NorMuon, AdaMuon, MuonClip), PSGD-Kron and Scion (issue 17).
No Optax oracle: Optax 0.2.8 has none of them; each is checked against its torch reference in
tests/contrib/test_muon_family.py, tests/contrib/test_kron.py and tests/contrib/test_scion.py."""

import jax

from . import Entry

_SCHED = lambda c: 1e-2 / (1.0 + c)
_WD_SCHED = lambda c: 1e-3 * c
_MATRICES_ONLY = "takes matrices only (the recipe routes the rest to AdamW)"


def _matrix_part(ox, tx):
    return ox.partition({"m": tx, "o": ox.identity()}, lambda p: jax.tree.map(lambda x: "m" if x.ndim == 2 else "o", p))


def _max_logits(params, grads, lib):
    del params, grads, lib
    return {"max_logits": {"": jax.numpy.array([200.0, 1.0])}}


ENTRIES = [
    Entry("contrib.normuon", {"learning_rate": 1e-2}, needs_params=True, oracle=False),
    Entry(
        "contrib.normuon",
        {"learning_rate": _SCHED, "weight_decay": _WD_SCHED, "update_scale": "preserve_norm"},
        needs_params=True,
        oracle=False,
    ),
    Entry("contrib.adamuon", {"learning_rate": 1e-2}, needs_params=True, oracle=False),
    Entry("contrib.adamuon", {"learning_rate": _SCHED, "weight_decay": _WD_SCHED}, needs_params=True, oracle=False),
    Entry(
        "contrib.scale_by_normuon",
        make=lambda ox: _matrix_part(ox, ox.contrib.scale_by_normuon()),
        oracle=False,
        skip={"awkward_trees": _MATRICES_ONLY},
    ),
    Entry(
        "contrib.scale_by_adamuon",
        make=lambda ox: _matrix_part(ox, ox.contrib.scale_by_adamuon(nesterov=True)),
        oracle=False,
        skip={"awkward_trees": _MATRICES_ONLY},
    ),
    Entry(
        "contrib.muon_clip",
        {"learning_rate": 1e-2},
        needs_params=True,
        oracle=False,
    ),
    Entry(
        "contrib.muon_clip",
        make=lambda ox: ox.contrib.muon_clip(
            _SCHED,
            weight_decay=_WD_SCHED,
            qk_clip_labels=lambda p: {k: "query" if k == "w" else "none" for k in p},
            qk_clip_threshold=50.0,
        ),
        needs_params=True,
        oracle=False,
        extra_args=_max_logits,
        skip={"awkward_trees": "the QK-clip labels name the simple tree's query weight 'w'"},
    ),
]

ENTRIES += [
    Entry("contrib.scion", {"learning_rate": 1e-2}, needs_params=True, oracle=False),
    Entry(
        "contrib.scion",
        {"learning_rate": _SCHED, "weight_decay": _WD_SCHED, "momentum": 0.5, "scales": 2.0},
        needs_params=True,
        oracle=False,
    ),
    Entry(
        "contrib.scion",
        {"learning_rate": 0.1, "constrained": True},
        needs_params=True,
        oracle=False,
        skip={"schedule_weight_decay": "constrained=True takes weight_decay=0 only (SCG decays by the learning rate)"},
    ),
    Entry("contrib.scale_by_scion", {"momentum": 0.2}, oracle=False),
]

ENTRIES += [
    Entry("contrib.kron", {"learning_rate": 1e-3}, needs_params=True, oracle=False),
    Entry(
        "contrib.kron",
        {
            "learning_rate": _SCHED,
            "weight_decay": _WD_SCHED,
            "preconditioner_update_probability": _SCHED,
            "memory_save_mode": "one_diag",
            "key": 3,
        },
        needs_params=True,
        oracle=False,
    ),
    Entry("contrib.scale_by_kron", {"preconditioner_update_probability": 1.0, "max_size_triangular": 3}, oracle=False),
]

COVERED = {
    "contrib.KronState": "tests/contrib/test_kron.py",
    "contrib.precond_update_prob_schedule": "tests/contrib/test_kron.py",
    "contrib.ScionState": "tests/contrib/test_scion.py",
    "contrib.NorMuonState": "tests/contrib/test_muon_family.py",
    "contrib.AdaMuonState": "tests/contrib/test_muon_family.py",
}
