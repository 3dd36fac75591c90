"""gradax.experimental: the experimental tier (as ``optax.experimental``: the ``aggregating`` module)."""

from . import aggregating as aggregating
