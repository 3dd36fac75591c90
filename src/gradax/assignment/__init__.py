"""gradax.assignment: the linear assignment problem."""

from ._hungarian import base_hungarian_algorithm as base_hungarian_algorithm
from ._hungarian import hungarian_algorithm as hungarian_algorithm
