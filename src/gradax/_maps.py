"""Lifting per-leaf math to pytrees, once.

Every transformation writes its math for one array and lifts it here, so a step makes one pass over the tree and
returns several trees (updates and state fields) from that single pass.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax


def map_n(n: int, f: Callable[..., tuple], tree: Any, *rest: Any) -> tuple[Any, ...]:
    """Maps ``f(leaf, *other_leaves) -> (out_1, ..., out_n)`` over ``tree`` and returns ``n`` trees.

    ``rest`` are trees with the structure of ``tree`` (or with it as a prefix). ``None`` leaves, empty containers
    and custom nodes keep their place in every output.
    """
    leaves, treedef = jax.tree.flatten(tree)
    others = [treedef.flatten_up_to(r) for r in rest]
    outs = [f(*xs) for xs in zip(leaves, *others)]
    if not outs:
        return tuple(treedef.unflatten([]) for _ in range(n))
    return tuple(treedef.unflatten([o[i] for o in outs]) for i in range(n))
