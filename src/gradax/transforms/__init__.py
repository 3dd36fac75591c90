"""gradax.transforms."""

# clipping, adding, constraining
from ._adding import AddNoiseState as AddNoiseState
from ._adding import add_decayed_weights as add_decayed_weights
from ._adding import add_noise as add_noise
from ._clipping import adaptive_grad_clip as adaptive_grad_clip
from ._clipping import clip as clip
from ._clipping import clip_by_block_rms as clip_by_block_rms
from ._clipping import clip_by_global_norm as clip_by_global_norm
from ._clipping import per_example_global_norm_clip as per_example_global_norm_clip
from ._clipping import per_example_layer_norm_clip as per_example_layer_norm_clip
from ._clipping import unitwise_clip as unitwise_clip
from ._clipping import unitwise_norm as unitwise_norm
from ._constraining import NonNegativeParamsState as NonNegativeParamsState
from ._constraining import ZeroNansState as ZeroNansState
from ._constraining import keep_params_nonnegative as keep_params_nonnegative
from ._constraining import zero_nans as zero_nans

# wrappers and composition
from ._masking import MaskedNode as MaskedNode
from ._masking import MaskedState as MaskedState
from ._masking import masked as masked
from ._cautious import cautious as cautious
from ._partition import PartitionState as PartitionState
from ._partition import describe_labels as describe_labels
from ._partition import freeze as freeze
from ._partition import partition as partition
from ._partition import path_labels as path_labels
from ._partition import path_mask as path_mask
from ._partition import selective_transform as selective_transform
from ._accumulation import TraceState as TraceState
from ._accumulation import trace as trace
from ._combining import chain as chain
from ._combining import named_chain as named_chain
from ._accumulation import EmaState as EmaState
from ._accumulation import ema as ema
from ._multisteps import MultiSteps as MultiSteps
from ._multisteps import MultiStepsState as MultiStepsState
from ._multisteps import ShouldSkipUpdateFunction as ShouldSkipUpdateFunction
from ._multisteps import skip_large_updates as skip_large_updates
from ._multisteps import skip_not_finite as skip_not_finite
from ._conditionality import ApplyIfFiniteState as ApplyIfFiniteState
from ._conditionality import ConditionFn as ConditionFn
from ._conditionality import ConditionallyMaskState as ConditionallyMaskState
from ._conditionality import ConditionallyTransformState as ConditionallyTransformState
from ._conditionality import apply_if_finite as apply_if_finite
from ._conditionality import conditionally_mask as conditionally_mask
from ._conditionality import conditionally_transform as conditionally_transform
from ._layouts import flatten as flatten
from ._monitoring import MonitorState as MonitorState
from ._monitoring import SnapshotState as SnapshotState
from ._monitoring import measure_with_ema as measure_with_ema
from ._monitoring import monitor as monitor
from ._monitoring import snapshot as snapshot
