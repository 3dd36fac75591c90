"""Random trees: one key per leaf, samples shaped like a tree, and unwrapping typed keys."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import jax
from jax.typing import DTypeLike


def split_key_like(rng_key: jax.Array, target_tree: Any) -> Any:
    """A tree with the structure of ``target_tree`` holding one independent key per leaf (split from ``rng_key``).

    Example:
      >>> import gradax, jax, jax.numpy as jnp
      >>> keys = gradax.tree.split_key_like(jax.random.key(0), {"a": jnp.ones(2), "b": jnp.ones(3)})
      >>> sorted(keys)
      ['a', 'b']
    """
    treedef = jax.tree.structure(target_tree)
    keys = jax.random.split(rng_key, treedef.num_leaves)
    return jax.tree.unflatten(treedef, list(keys))


def _takes_sharding(sampler: Callable) -> bool:
    try:
        return "out_sharding" in inspect.signature(sampler).parameters
    except (TypeError, ValueError):
        return False


def random_like(
    rng_key: jax.Array,
    target_tree: Any,
    sampler: Callable = jax.random.normal,
    dtype: DTypeLike | None = None,
) -> Any:
    """Random arrays shaped like the leaves of ``target_tree``, one independent key per leaf.

    Args:
      rng_key: a PRNG key.
      target_tree: a pytree of arrays (or ``ShapeDtypeStruct``).
      sampler: ``sampler(key, shape, dtype)`` (optionally also taking ``out_sharding``), e.g. ``jax.random.normal``.
      dtype: the dtype of the samples; default each leaf's dtype.

    Example:
      >>> import gradax, jax, jax.numpy as jnp
      >>> gradax.tree.random_like(jax.random.key(0), {"a": jnp.ones((2, 3))})["a"].shape
      (2, 3)
    """
    keys = split_key_like(rng_key, target_tree)
    with_sharding = _takes_sharding(sampler)

    def draw(leaf, key):
        leaf_dtype = dtype or leaf.dtype
        if with_sharding:
            return sampler(key, leaf.shape, leaf_dtype, out_sharding=jax.typeof(leaf).sharding)
        return sampler(key, leaf.shape, leaf_dtype)

    return jax.tree.map(draw, target_tree, keys)


def unwrap_random_key_data(input_tree: Any) -> Any:
    """Replaces every typed PRNG key leaf (``jax.random.key``) by its raw uint32 data; other leaves are unchanged.

    Example:
      >>> import gradax, jax
      >>> gradax.tree.unwrap_random_key_data({"k": jax.random.key(0)})["k"].dtype
      dtype('uint32')
    """

    def unwrap(x):
        if isinstance(x, jax.Array) and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            return jax.random.key_data(x)
        return x

    return jax.tree.map(unwrap, input_tree)
