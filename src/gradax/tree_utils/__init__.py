"""gradax.tree_utils: Optax's ``tree_*`` names for the functions of :mod:`gradax.tree` (the same objects)."""

# ruff: noqa: F401 - every import here is a public re-export under Optax's tree_* name

from ..tree._casting import cast as tree_cast
from ..tree._casting import cast_like as tree_cast_like
from ..tree._casting import dtype as tree_dtype
from ..tree._math import add as tree_add
from ..tree._math import add_scale as tree_add_scale
from ..tree._math import allclose as tree_allclose
from ..tree._math import batch_shape as tree_batch_shape
from ..tree._math import bias_correction as tree_bias_correction
from ..tree._math import clip as tree_clip
from ..tree._math import conj as tree_conj
from ..tree._math import div as tree_div
from ..tree._math import full_like as tree_full_like
from ..tree._math import max as tree_max
from ..tree._math import min as tree_min
from ..tree._math import mul as tree_mul
from ..tree._math import norm as tree_norm
from ..tree._math import ones_like as tree_ones_like
from ..tree._math import real as tree_real
from ..tree._math import scale as tree_scale
from ..tree._math import size as tree_size
from ..tree._math import sub as tree_sub
from ..tree._math import sum as tree_sum
from ..tree._math import update_infinity_moment as tree_update_infinity_moment
from ..tree._math import update_moment as tree_update_moment
from ..tree._math import update_moment_per_elem_norm as tree_update_moment_per_elem_norm
from ..tree._math import vdot as tree_vdot
from ..tree._math import where as tree_where
from ..tree._math import zeros_like as tree_zeros_like
from ..tree._random import random_like as tree_random_like
from ..tree._random import split_key_like as tree_split_key_like
from ..tree._random import unwrap_random_key_data as tree_unwrap_random_key_data
from ..tree._state import NamedTupleKey as NamedTupleKey
from ..tree._state import get as tree_get
from ..tree._state import get_all_with_path as tree_get_all_with_path
from ..tree._state import map_params as tree_map_params
from ..tree._state import set as tree_set
