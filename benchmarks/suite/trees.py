"""The parameter trees the workloads run on, and the sizes (``--size tiny|small|full``) that shape them."""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

SIZES = {
    # GPT-2 shape: (vocab, n_ctx, width, layers); many-leaves: (leaves, params per leaf); compile: leaf counts;
    # rosenbrock: dimensions
    "tiny": dict(gpt=(256, 32, 16, 1), many=(20, 100), compile=(10, 50), rosen=(10,), steps=4),
    "small": dict(gpt=(8192, 512, 256, 12), many=(1000, 1000), compile=(1000,), rosen=(10, 1000), steps=10),
    # an XLA compile of the chain at 10,000 leaves went past 23 GiB of RAM here (swapping): at 10,000 only the
    # gradax.fused columns run
    "full": dict(
        gpt=(50257, 1024, 768, 12), many=(3000, 3333), compile=(1000, 2000, 10000), rosen=(10, 1000), steps=10
    ),
}


def gpt2_shapes(vocab: int, n_ctx: int, d: int, layers: int) -> dict[str, tuple[int, ...]]:
    """Leaf shapes of GPT-2 (HF naming): 148 leaves and ~124M params at (50257, 1024, 768, 12)."""
    shapes = {"wte": (vocab, d), "wpe": (n_ctx, d), "ln_f.g": (d,), "ln_f.b": (d,)}
    for i in range(layers):
        p = f"h{i:02d}."
        shapes.update(
            {
                p + "ln_1.g": (d,),
                p + "ln_1.b": (d,),
                p + "attn.c_attn.w": (d, 3 * d),
                p + "attn.c_attn.b": (3 * d,),
                p + "attn.c_proj.w": (d, d),
                p + "attn.c_proj.b": (d,),
                p + "ln_2.g": (d,),
                p + "ln_2.b": (d,),
                p + "mlp.c_fc.w": (d, 4 * d),
                p + "mlp.c_fc.b": (4 * d,),
                p + "mlp.c_proj.w": (4 * d, d),
                p + "mlp.c_proj.b": (d,),
            }
        )
    return shapes


def many_shapes(n_leaves: int, per_leaf: int) -> dict[str, tuple[int, ...]]:
    return {f"p{i:05d}": (per_leaf,) for i in range(n_leaves)}


def make_tree(shapes: dict[str, tuple[int, ...]], dtype: Any, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {k: (0.02 * rng.standard_normal(s, dtype=np.float32)).astype(dtype) for k, s in shapes.items()}


def n_params(shapes: dict[str, tuple[int, ...]]) -> int:
    return sum(math.prod(s) for s in shapes.values())


def decay_mask(params: Any) -> Any:
    """Weight decay on matrices only (biases, LayerNorm gains excluded): the usual GPT-2 recipe."""
    return jax.tree.map(lambda p: jnp.ndim(p) >= 2, params)


def decay_labels(params: Any) -> Any:
    return jax.tree.map(lambda p: "decay" if jnp.ndim(p) >= 2 else "no_decay", params)


# --------------------------------------------------------------------------------------------------------------
# workloads
