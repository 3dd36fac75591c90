"""gradax.contrib."""

# part A
from ._acprop import acprop as acprop
from ._acprop import scale_by_acprop as scale_by_acprop
