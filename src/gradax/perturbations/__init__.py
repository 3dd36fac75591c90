"""gradax.perturbations: differentiable approximations of functions by random input perturbations."""

from ._perturbed import Gumbel as Gumbel
from ._perturbed import Normal as Normal
from ._perturbed import make_perturbed_fun as make_perturbed_fun
