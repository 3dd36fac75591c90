"""Names that moved between the JAX versions gradax supports (0.5.3 and newer), imported from one place."""

from __future__ import annotations

from typing import Any

try:  # removed from jax.experimental in JAX 0.11
    from jax.experimental.shard_alike import shard_alike as _shard_alike
except ImportError:
    _shard_alike = None


def shard_alike(x: Any, y: Any) -> tuple[Any, Any]:
    """``(x, y)`` laid out on devices alike (``jax.experimental.shard_alike``), where this JAX has it; else
    ``(x, y)`` unchanged. It is a layout hint only: the values are the same either way."""
    if _shard_alike is None:
        return x, y
    return _shard_alike(x, y)
