"""Registry of the losses, projections, perturbations, assignment and experimental names (issue: the rest of the
surface). None of them is a gradient transformation except in ``experimental.aggregating``."""

import jax

from . import Entry

_LOSSES = "tests/losses/test_oracle.py"

# The public names of gradax.losses, all covered by tests/losses/test_oracle.py (which checks this list against its
# case table), and those of them that are also top-level names of gradax (Optax's aliases).
LOSS_NAMES = [
    "binary_dice_loss",
    "convex_kl_divergence",
    "cosine_distance",
    "cosine_similarity",
    "ctc_loss",
    "ctc_loss_with_forward_probs",
    "dice_loss",
    "generalized_kl_divergence",
    "hinge_loss",
    "huber_loss",
    "kl_divergence",
    "kl_divergence_with_log_targets",
    "l2_loss",
    "log_cosh",
    "make_fenchel_young_loss",
    "multiclass_generalized_dice_loss",
    "multiclass_hinge_loss",
    "multiclass_perceptron_loss",
    "multiclass_sparsemax_loss",
    "ntxent",
    "perceptron_loss",
    "poly_loss_cross_entropy",
    "ranking_softmax_loss",
    "safe_softmax_cross_entropy",
    "sigmoid_binary_cross_entropy",
    "sigmoid_focal_loss",
    "smooth_labels",
    "softmax_cross_entropy",
    "softmax_cross_entropy_with_integer_labels",
    "sparsemax_loss",
    "squared_error",
    "triplet_margin_loss",
]

TOP_LEVEL_LOSSES = [
    "convex_kl_divergence",
    "cosine_distance",
    "cosine_similarity",
    "ctc_loss",
    "ctc_loss_with_forward_probs",
    "hinge_loss",
    "huber_loss",
    "kl_divergence",
    "l2_loss",
    "log_cosh",
    "ntxent",
    "safe_softmax_cross_entropy",
    "sigmoid_binary_cross_entropy",
    "sigmoid_focal_loss",
    "smooth_labels",
    "softmax_cross_entropy",
    "softmax_cross_entropy_with_integer_labels",
    "squared_error",
    "generalized_kl_divergence",
]

_AGG = "experimental.aggregating"
_AGG_TESTS = "tests/experimental/test_aggregating.py"


def _ema_extra_args(params, grads, lib):
    del params, lib
    return {"sum_sq_diff_grads": jax.tree.map(lambda g: g * g, grads), "sample_size": 4}


# The gradient transformations of experimental.aggregating (same shapes in and out). The aggregators (per-element
# updates in, one update out) do not fit the battery's shape contract: they are in COVERED.
ENTRIES = [
    Entry(f"{_AGG}.accumulate_avg_updates", {"accumulation_steps": 3}, inject=False),
    Entry(f"{_AGG}.average_incrementally_updates", {"per_elt_axis": None, "accumulation_steps": 2}, inject=False),
    Entry(
        f"{_AGG}.track_per_element_mean_and_variance_with_ema",
        {"ema_decay": 0.9},
        extra_args=_ema_extra_args,
        inject=False,
        skip={"masked": "masked() does not mask the extra arg sum_sq_diff_grads (as in Optax), so it mismatches"},
    ),
]

_PROJECTIONS = [
    "projection_box",
    "projection_halfspace",
    "projection_hypercube",
    "projection_hyperplane",
    "projection_l1_ball",
    "projection_l1_sphere",
    "projection_l2_ball",
    "projection_l2_sphere",
    "projection_linf_ball",
    "projection_non_negative",
    "projection_simplex",
    "projection_vector",
]

COVERED = {
    **{
        f"{_AGG}.{name}": _AGG_TESTS
        for name in [
            "AccumulateAvgUpdatesState",
            "AggregatedUpdates",
            "Aggregator",
            "AggregatorUpdateFn",
            "MaybeAxis",
            "PerElementMeanAndSumSqDiffGradsState",
            "PerElementMeanAndVarianceEMAState",
            "PerElementUpdates",
            "add_mean_variance_to_opt",
            "average_per_element_updates",
            "get_batch_size_from_per_elt_updates",
            "get_per_element_mean_and_sum_sq_diff_grads",
            "get_unbiased_mean_and_variance_ema",
            "process",
        ]
    },
    "experimental.aggregating": _AGG_TESTS,
    "perturbations.make_perturbed_fun": "tests/perturbations/test_perturbations.py",
    "perturbations.Gumbel": "tests/perturbations/test_perturbations.py",
    "perturbations.Normal": "tests/perturbations/test_perturbations.py",
    "assignment.hungarian_algorithm": "tests/assignment/test_hungarian.py",
    "assignment.base_hungarian_algorithm": "tests/assignment/test_hungarian.py",
    **{f"projections.{name}": "tests/projections/test_projections.py" for name in _PROJECTIONS},
    **{f"losses.{name}": _LOSSES for name in LOSS_NAMES},
    **{name: _LOSSES for name in TOP_LEVEL_LOSSES},
}
