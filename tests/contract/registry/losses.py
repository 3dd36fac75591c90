"""Registry of the losses, projections, perturbations, assignment and experimental names (issue: the rest of the
surface). None of them is a gradient transformation except in ``experimental.aggregating``."""

_LOSSES = "tests/losses/test_oracle.py"

_LOSS_NAMES = [
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

_TOP_LEVEL_LOSSES = [
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

ENTRIES = []

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
    "perturbations.make_perturbed_fun": "tests/perturbations/test_perturbations.py",
    "perturbations.Gumbel": "tests/perturbations/test_perturbations.py",
    "perturbations.Normal": "tests/perturbations/test_perturbations.py",
    "assignment.hungarian_algorithm": "tests/assignment/test_hungarian.py",
    "assignment.base_hungarian_algorithm": "tests/assignment/test_hungarian.py",
    **{f"projections.{name}": "tests/projections/test_projections.py" for name in _PROJECTIONS},
    **{f"losses.{name}": _LOSSES for name in _LOSS_NAMES},
    **{name: _LOSSES for name in _TOP_LEVEL_LOSSES},
}
