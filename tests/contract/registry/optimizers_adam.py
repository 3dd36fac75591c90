"""Registry entries for the Adam family (optimizers/_adam*.py, _lion, _adan, _novograd, _optimistic, _lamb)."""

import gradax

from . import Entry

# RAdam: Optax computes rho_inf from the double value of b2 but b2**t in float32, which moves rho_t by ~0.026 and
# the rectification by up to ~1e-3 in the first steps; gradax is consistent (docs/differences.md, "RAdam's rho").
_RADAM_RTOL = 5e-3

# Block-wise 8-bit moments (not in Optax: no oracle): every floating leaf of the battery's small trees is quantized.
_Q8 = gradax.Blockwise8bit(block_size=64, min_size=0)

ENTRIES = [
    Entry("scale_by_adam", {"b1": 0.8, "b2": 0.99}),
    Entry("scale_by_adam", make=lambda ox: ox.scale_by_adam(eps_root=1e-8, nesterov=True)),
    Entry("adam", {"learning_rate": 1e-2}),
    Entry("adam", make=lambda ox: ox.adam(lambda c: 1e-2 / (1.0 + c), nesterov=True), inject=False),
    Entry("adamw", {"learning_rate": 1e-2, "weight_decay": 0.1}, needs_params=True),
    Entry("adamw", make=lambda ox: ox.adamw(1e-2, weight_decay=lambda c: 0.1 * 0.9**c), needs_params=True),
    Entry("nadam", {"learning_rate": 1e-2}),
    Entry("nadamw", {"learning_rate": 1e-2, "weight_decay": 0.1}, needs_params=True),
    Entry("scale_by_amsgrad", {"b1": 0.8}),
    Entry("amsgrad", {"learning_rate": 1e-2}),
    Entry("scale_by_adamax", {"b2": 0.99}),
    Entry("adamax", {"learning_rate": 1e-2}),
    Entry("adamaxw", {"learning_rate": 1e-2, "weight_decay": 0.1}, needs_params=True),
    Entry("scale_by_radam", {"threshold": 5.0}, rtol=2 * _RADAM_RTOL),  # threshold 5 rectifies earlier: ~7.6e-3
    Entry("radam", {"learning_rate": 1e-2}, rtol=_RADAM_RTOL),
    Entry("scale_by_belief", {"b1": 0.8}),
    Entry("adabelief", {"learning_rate": 1e-2}),
    Entry("scale_by_yogi", {"initial_accumulator_value": 1e-3}),
    Entry("yogi", {"learning_rate": 1e-2}),
    Entry("scale_by_adan", {"eps_root": 1e-8}),
    Entry("adan", {"learning_rate": 1e-2, "weight_decay": 0.1}, needs_params=True),
    Entry("scale_by_lion", {"b1": 0.9, "b2": 0.99}),
    Entry("scale_by_lion", make=lambda ox: ox.scale_by_lion(mode="smooth", smooth_beta=2.0)),
    Entry("lion", {"learning_rate": 1e-3, "weight_decay": 0.1}, needs_params=True),
    Entry("scale_by_novograd", {"weight_decay": 0.01}, needs_params=True),
    Entry("novograd", {"learning_rate": 1e-2, "weight_decay": 0.01}, needs_params=True),
    Entry("scale_by_optimistic_gradient", {"alpha": 0.5, "beta": 2.0}),
    Entry("optimistic_gradient_descent", {"learning_rate": 1e-2}),
    Entry("optimistic_adam", make=lambda ox: ox.optimistic_adam(1e-2)),
    Entry("optimistic_adam_v2", {"learning_rate": 1e-2, "alpha": 2.0, "beta": 0.5}),
    Entry("lamb", {"learning_rate": 1e-2, "weight_decay": 0.1}, needs_params=True),
    # block-wise 8-bit moments (last, so that the ids of the entries above do not move)
    Entry("scale_by_adam", {"nesterov": True, "moments": _Q8}, oracle=False),
    Entry("adam", {"learning_rate": 1e-2, "moments": _Q8}, oracle=False),
    Entry("adamw", {"learning_rate": 1e-2, "weight_decay": 0.1, "moments": _Q8}, needs_params=True, oracle=False),
    Entry("scale_by_lion", {"moments": _Q8}, oracle=False),
    Entry("lion", {"learning_rate": 1e-3, "weight_decay": 0.1, "moments": _Q8}, needs_params=True, oracle=False),
]

COVERED = {
    "ScaleByAdamState": "tests/optimizers/test_adam.py",
    "ScaleByAmsgradState": "tests/optimizers/test_adam_variants.py",
    "ScaleByBeliefState": "tests/optimizers/test_adam_variants.py",
    "ScaleByLionState": "tests/optimizers/test_lion.py",
    "BlockQuantized": "tests/optimizers/test_quantized.py",
    "Blockwise8bit": "tests/optimizers/test_quantized.py",
    "ScaleByAdanState": "tests/optimizers/test_others.py",
    "ScaleByNovogradState": "tests/optimizers/test_others.py",
    "update_moment": "tests/optimizers/test_moments.py",
    "update_moment_per_elem_norm": "tests/optimizers/test_moments.py",
    "update_infinity_moment": "tests/optimizers/test_moments.py",
    "bias_correction": "tests/optimizers/test_moments.py",
}
