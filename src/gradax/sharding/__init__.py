"""Optimizer state sharded like the params across devices and processes (FSDP, ZeRO-1): ``gradax.sharding``.

See :func:`state_shardings` for the placement rules and the README's "Sharded optimizer state" guide for the recipes
(plain ``jax.jit``, Flax NNX, several processes).
"""

from ._shardings import Fallback as Fallback
from ._shardings import bytes_per_device as bytes_per_device
from ._shardings import collective_bytes as collective_bytes
from ._shardings import fallbacks as fallbacks
from ._shardings import state_shardings as state_shardings
from ._zero import apply_updates_zero1 as apply_updates_zero1
