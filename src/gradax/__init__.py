"""gradax: composable gradient transformations and optimizers for JAX, a drop-in for Optax.

``import gradax as optax`` runs code written for Optax 0.2.8. This module lists the public names only; each lives in
one private module (see the layout in the repository's docs).
"""

# --- core contract --------------------------------------------------------------------------------------------------
from ._base import EmptyState as EmptyState
from ._base import GradientTransformation as GradientTransformation
from ._base import GradientTransformationExtraArgs as GradientTransformationExtraArgs
from ._base import MaskOrFn as MaskOrFn
from ._base import OptState as OptState
from ._base import Params as Params
from ._base import ScalarOrSchedule as ScalarOrSchedule
from ._base import Schedule as Schedule
from ._base import TransformInitFn as TransformInitFn
from ._base import TransformUpdateExtraArgsFn as TransformUpdateExtraArgsFn
from ._base import TransformUpdateFn as TransformUpdateFn
from ._base import Updates as Updates
from ._base import identity as identity
from ._base import init_empty_state as init_empty_state
from ._base import set_to_zero as set_to_zero
from ._base import stateless as stateless
from ._base import stateless_with_tree_map as stateless_with_tree_map
from ._base import with_extra_args_support as with_extra_args_support
from ._numerics import global_norm as global_norm
from ._numerics import safe_increment as safe_increment
from ._numerics import safe_int32_increment as safe_int32_increment
from ._numerics import safe_norm as safe_norm
from ._numerics import safe_root_mean_squares as safe_root_mean_squares
from ._update import apply_updates as apply_updates
from ._update import incremental_update as incremental_update
from ._update import periodic_update as periodic_update
from .transforms._accumulation import TraceState as TraceState
from .transforms._accumulation import trace as trace
from .transforms._combining import chain as chain
from .transforms._combining import named_chain as named_chain
from .transforms._scaling import ScaleByScheduleState as ScaleByScheduleState
from .transforms._scaling import ScaleState as ScaleState
from .transforms._scaling import scale as scale
from .transforms._scaling import scale_by_learning_rate as scale_by_learning_rate
from .transforms._scaling import scale_by_schedule as scale_by_schedule
from .optimizers._sgd import sgd as sgd

# --- tree utilities and schedules (section owned by the tree/schedules work) ----------------------------------------
from .schedules._inject import InjectHyperparamsState as InjectHyperparamsState
from .schedules._inject import InjectStatefulHyperparamsState as InjectStatefulHyperparamsState
from .schedules._inject import WrappedSchedule as WrappedSchedule
from .schedules._inject import inject_hyperparams as inject_hyperparams
from .schedules._inject import inject_stateful_hyperparams as inject_stateful_hyperparams
from .schedules._join import join_schedules as join_schedules
from .schedules._schedule import constant_schedule as constant_schedule
from .schedules._schedule import cosine_decay_schedule as cosine_decay_schedule
from .schedules._schedule import cosine_onecycle_schedule as cosine_onecycle_schedule
from .schedules._schedule import exponential_decay as exponential_decay
from .schedules._schedule import linear_onecycle_schedule as linear_onecycle_schedule
from .schedules._schedule import linear_schedule as linear_schedule
from .schedules._schedule import piecewise_constant_schedule as piecewise_constant_schedule
from .schedules._schedule import piecewise_interpolate_schedule as piecewise_interpolate_schedule
from .schedules._schedule import polynomial_schedule as polynomial_schedule
from .schedules._schedule import sgdr_schedule as sgdr_schedule
from .schedules._schedule import warmup_constant_schedule as warmup_constant_schedule
from .schedules._schedule import warmup_cosine_decay_schedule as warmup_cosine_decay_schedule
from .schedules._schedule import warmup_exponential_decay_schedule as warmup_exponential_decay_schedule
from .tree._math import bias_correction as bias_correction
from .tree._math import update_infinity_moment as update_infinity_moment
from .tree._math import update_moment as update_moment
from .tree._math import update_moment_per_elem_norm as update_moment_per_elem_norm
from .tree._state import map_params as tree_map_params  # noqa: F401 - public under Optax's name

# --- optimizers and building blocks (section owned by the optimizers work) ------------------------------------------
from .optimizers._lion import ScaleByLionState as ScaleByLionState
from .optimizers._lion import lion as lion
from .optimizers._lion import scale_by_lion as scale_by_lion
from .optimizers._adan import ScaleByAdanState as ScaleByAdanState
from .optimizers._adan import adan as adan
from .optimizers._adan import scale_by_adan as scale_by_adan
from .optimizers._novograd import ScaleByNovogradState as ScaleByNovogradState
from .optimizers._novograd import novograd as novograd
from .optimizers._novograd import scale_by_novograd as scale_by_novograd
from .optimizers._optimistic import optimistic_adam as optimistic_adam
from .optimizers._optimistic import optimistic_adam_v2 as optimistic_adam_v2
from .optimizers._optimistic import optimistic_gradient_descent as optimistic_gradient_descent
from .optimizers._optimistic import scale_by_optimistic_gradient as scale_by_optimistic_gradient
from .optimizers._lamb import lamb as lamb
from .optimizers._adam_variants import ScaleByAmsgradState as ScaleByAmsgradState
from .optimizers._adam_variants import ScaleByBeliefState as ScaleByBeliefState
from .optimizers._adam_variants import adabelief as adabelief
from .optimizers._adam_variants import adamax as adamax
from .optimizers._adam_variants import adamaxw as adamaxw
from .optimizers._adam_variants import amsgrad as amsgrad
from .optimizers._adam_variants import radam as radam
from .optimizers._adam_variants import scale_by_adamax as scale_by_adamax
from .optimizers._adam_variants import scale_by_amsgrad as scale_by_amsgrad
from .optimizers._adam_variants import scale_by_belief as scale_by_belief
from .optimizers._adam_variants import scale_by_radam as scale_by_radam
from .optimizers._adam_variants import scale_by_yogi as scale_by_yogi
from .optimizers._adam_variants import yogi as yogi
from .optimizers._moments import bias_correction as bias_correction
from .optimizers._moments import update_infinity_moment as update_infinity_moment
from .optimizers._moments import update_moment as update_moment
from .optimizers._moments import update_moment_per_elem_norm as update_moment_per_elem_norm
from .optimizers._adam import ScaleByAdamState as ScaleByAdamState
from .optimizers._adam import adam as adam
from .optimizers._adam import adamw as adamw
from .optimizers._adam import nadam as nadam
from .optimizers._adam import nadamw as nadamw
from .optimizers._adam import scale_by_adam as scale_by_adam
from .optimizers._trust import ScaleByTrustRatioState as ScaleByTrustRatioState
from .optimizers._trust import scale_by_trust_ratio as scale_by_trust_ratio
from .optimizers._rms import ScaleByRmsState as ScaleByRmsState
from .optimizers._rms import ScaleByRStdDevState as ScaleByRStdDevState
from .optimizers._rms import scale_by_rms as scale_by_rms
from .optimizers._rms import scale_by_stddev as scale_by_stddev
from .optimizers._rms import rmsprop as rmsprop
from .transforms._adding import AddDecayedWeightsState as AddDecayedWeightsState
from .transforms._adding import AddNoiseState as AddNoiseState
from .transforms._adding import add_decayed_weights as add_decayed_weights
from .transforms._adding import add_noise as add_noise
from .transforms._constraining import NonNegativeParamsState as NonNegativeParamsState
from .transforms._constraining import ZeroNansState as ZeroNansState
from .transforms._constraining import keep_params_nonnegative as keep_params_nonnegative
from .transforms._constraining import zero_nans as zero_nans
from .transforms._clipping import AdaptiveGradClipState as AdaptiveGradClipState
from .transforms._clipping import ClipByGlobalNormState as ClipByGlobalNormState
from .transforms._clipping import ClipState as ClipState
from .transforms._clipping import adaptive_grad_clip as adaptive_grad_clip
from .transforms._clipping import clip as clip
from .transforms._clipping import clip_by_block_rms as clip_by_block_rms
from .transforms._clipping import clip_by_global_norm as clip_by_global_norm
from .transforms._clipping import per_example_global_norm_clip as per_example_global_norm_clip
from .transforms._clipping import per_example_layer_norm_clip as per_example_layer_norm_clip
from .optimizers._trust import fromage as fromage
from .optimizers._trust import lars as lars
from .transforms._linesearch import ScaleByBacktrackingLinesearchState as ScaleByBacktrackingLinesearchState
from .transforms._linesearch import ScaleByZoomLinesearchState as ScaleByZoomLinesearchState
from .transforms._linesearch import ZoomLinesearchInfo as ZoomLinesearchInfo
from .transforms._linesearch import scale_by_backtracking_linesearch as scale_by_backtracking_linesearch
from .transforms._linesearch import scale_by_zoom_linesearch as scale_by_zoom_linesearch
from .transforms._linesearch import value_and_grad_from_state as value_and_grad_from_state
from .optimizers._lbfgs import ScaleByLBFGSState as ScaleByLBFGSState
from .optimizers._lbfgs import lbfgs as lbfgs
from .optimizers._lbfgs import scale_by_lbfgs as scale_by_lbfgs
from ._linear_algebra import matrix_inverse_pth_root as matrix_inverse_pth_root
from ._linear_algebra import multi_normal as multi_normal
from ._linear_algebra import nnls as nnls
from ._linear_algebra import power_iteration as power_iteration
from .optimizers._adagrad import ScaleByRssState as ScaleByRssState
from .optimizers._adagrad import scale_by_rss as scale_by_rss
from .optimizers._adagrad import adagrad as adagrad
from .optimizers._adadelta import ScaleByAdaDeltaState as ScaleByAdaDeltaState
from .optimizers._adadelta import scale_by_adadelta as scale_by_adadelta
from .optimizers._adadelta import adadelta as adadelta

# --- wrappers and composition (section owned by the wrappers work) --------------------------------------------------
from .transforms._masking import MaskedNode as MaskedNode
from .transforms._masking import MaskedState as MaskedState
from .transforms._masking import masked as masked
from .transforms._partition import MultiTransformState as MultiTransformState
from .transforms._partition import PartitionState as PartitionState
from .transforms._partition import describe_labels as describe_labels
from .transforms._partition import freeze as freeze
from .transforms._partition import multi_transform as multi_transform
from .transforms._partition import partition as partition
from .transforms._partition import path_labels as path_labels
from .transforms._partition import path_mask as path_mask
from .transforms._partition import selective_transform as selective_transform
from .transforms._accumulation import EmaState as EmaState
from .transforms._accumulation import ema as ema
from .transforms._multisteps import ApplyEvery as ApplyEvery
from .transforms._multisteps import MultiSteps as MultiSteps
from .transforms._multisteps import MultiStepsState as MultiStepsState
from .transforms._multisteps import ShouldSkipUpdateFunction as ShouldSkipUpdateFunction
from .transforms._multisteps import apply_every as apply_every
from .transforms._multisteps import skip_large_updates as skip_large_updates
from .transforms._multisteps import skip_not_finite as skip_not_finite

# --- losses and the rest of the surface (section owned by the losses work) ------------------------------------------

# --- submodules -----------------------------------------------------------------------------------------------------
from . import schedules as schedules
from . import tree as tree
from . import tree_utils as tree_utils
from . import second_order as second_order
