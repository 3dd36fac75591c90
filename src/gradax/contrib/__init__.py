"""gradax.contrib."""

# part A
from ._acprop import acprop as acprop
from ._acprop import scale_by_acprop as scale_by_acprop
from ._adopt import adopt as adopt
from ._adopt import scale_by_adopt as scale_by_adopt
from ._madgrad import MadgradState as MadgradState
from ._madgrad import madgrad as madgrad
from ._madgrad import scale_by_madgrad as scale_by_madgrad
