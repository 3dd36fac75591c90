"""gradax.second_order: Hessian-vector products, Hessian and Fisher diagonals of a loss."""

from ._hessian import fisher_diag as fisher_diag
from ._hessian import hessian_diag as hessian_diag
from ._hessian import hvp as hvp
