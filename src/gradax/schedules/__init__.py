"""gradax.schedules: functions of the step count, joining them, and injecting hyperparameters into the state."""

from .._base import Schedule as Schedule
from .._base import StatefulSchedule as StatefulSchedule
from ._inject import InjectHyperparamsState as InjectHyperparamsState
from ._inject import InjectStatefulHyperparamsState as InjectStatefulHyperparamsState
from ._inject import WrappedSchedule as WrappedSchedule
from ._inject import inject_hyperparams as inject_hyperparams
from ._inject import inject_stateful_hyperparams as inject_stateful_hyperparams
from ._join import join_schedules as join_schedules
from ._schedule import constant_schedule as constant_schedule
from ._schedule import cosine_decay_schedule as cosine_decay_schedule
from ._schedule import cosine_onecycle_schedule as cosine_onecycle_schedule
from ._schedule import exponential_decay as exponential_decay
from ._schedule import linear_onecycle_schedule as linear_onecycle_schedule
from ._schedule import linear_schedule as linear_schedule
from ._schedule import piecewise_constant_schedule as piecewise_constant_schedule
from ._schedule import piecewise_interpolate_schedule as piecewise_interpolate_schedule
from ._schedule import polynomial_schedule as polynomial_schedule
from ._schedule import sgdr_schedule as sgdr_schedule
from ._schedule import warmup_constant_schedule as warmup_constant_schedule
from ._schedule import warmup_cosine_decay_schedule as warmup_cosine_decay_schedule
from ._schedule import warmup_exponential_decay_schedule as warmup_exponential_decay_schedule
