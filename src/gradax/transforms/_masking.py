"""Masks and labels: the one mechanism that says which parameters a transformation touches.

A *mask* is a pytree of booleans that is the params tree or a prefix of it (a ``True`` leaf standing for the whole
subtree below it), or a function of the params that returns one. A *label tree* is the same with hashable labels in
place of booleans. A callable is a function of the params (an ``equinox.filter_closure_convert`` closure too), except
a callable pytree that has the params' structure or a prefix of it (an Equinox model mapped to booleans): that is the
tree itself, never called.

:func:`resolve_mask` and :func:`resolve_labels` turn any accepted form into a validated prefix tree, and raise an
error naming the key path where the tree departs from the params. :func:`masked`, :func:`gradax.partition`,
:func:`gradax.freeze`, :func:`gradax.selective_transform` and every ``mask=`` argument of the library go through them.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any, NamedTuple

import jax
import numpy as np

from .._base import (
    GradientTransformation,
    GradientTransformationExtraArgs,
    MaskOrFn,
    Params,
    check_transformation,
    with_extra_args_support,
)
from .._checks import tree_mismatch_error
from .._hyperparams import is_mask_tree
from ..tree._state import is_params_marker


class MaskedNode(NamedTuple):
    """The placeholder that stands for a masked-out subtree in the params, updates and state seen by an inner
    transformation. It is an empty pytree node: it has no leaves, so tree maps pass over it."""


class MaskedState(NamedTuple):
    """State of :func:`masked`."""

    inner_state: Any  # the inner transformation's state, built on the params with masked-out subtrees as MaskedNode


def _keystr(path) -> str:
    return jax.tree_util.keystr(tuple(path)) or "<root>"


def _call_if_function(tree_or_fn: Any, params: Params) -> Any:
    """``tree_or_fn`` when it is a tree for ``params`` (see :func:`gradax._hyperparams.is_mask_tree`), else
    ``tree_or_fn(params)``: every other callable, Equinox closures included, is a function of the params."""
    return tree_or_fn if is_mask_tree(tree_or_fn, params) else tree_or_fn(params)


def _check_fits(api: str, arg: str, tree: Any, params: Params, fix: str) -> None:
    """Raises a key-path error unless ``tree`` is ``params`` or a prefix of it."""
    try:
        jax.tree.map(lambda *_: None, tree, params)
    except (ValueError, TypeError, KeyError):
        raise tree_mismatch_error(api, arg, params, tree, prefix_ok=True, fix=fix) from None


def _as_bool(api: str, arg: str, path, leaf: Any) -> bool:
    if isinstance(leaf, (bool, np.bool_)):
        return bool(leaf)
    if isinstance(leaf, jax.core.Tracer):
        raise TypeError(
            f"{api}({arg}=...) must hold concrete booleans; at {_keystr(path)} found a traced value. "
            "Build the mask from the params' structure, shapes or dtypes (e.g. `lambda p: jax.tree.map(lambda x: "
            "x.ndim > 1, p)`), not from their values."
        )
    if isinstance(leaf, (jax.Array, np.ndarray)) and leaf.dtype == np.bool_ and leaf.shape == ():
        return bool(leaf)
    if hasattr(leaf, "shape") and hasattr(leaf, "dtype"):
        found = f"an array of shape {tuple(leaf.shape)} and dtype {leaf.dtype}"
    else:
        found = f"{leaf!r:.60} of type {type(leaf).__name__}"
    raise TypeError(
        f"{api}({arg}=...) must be a pytree of booleans (the params tree or a prefix of it) or a function of the "
        f"params returning one; at {_keystr(path)} found {found}. Use True/False leaves, e.g. "
        "`jax.tree.map(lambda x: x.ndim > 1, params)`."
    )


def resolve_mask(api: str, mask: MaskOrFn, params: Params, arg: str = "mask") -> Any:
    """The mask for ``params`` as a validated prefix tree of Python bools.

    Args:
      api: the public name that received the mask (used in error messages).
      mask: a pytree of booleans that is ``params`` or a prefix of it, or a function of ``params`` returning one.
        A callable is called, unless it is a pytree with the params' structure (an Equinox model of booleans).
      params: the parameters (arrays or ``jax.ShapeDtypeStruct`` leaves).
      arg: the argument's name in error messages.

    Returns:
      The mask tree (a prefix of ``params``) with every leaf a Python ``bool``.

    Raises:
      ValueError: the tree does not fit the params; the message names the key path and what was found there.
      TypeError: a leaf is not a boolean.
    """
    tree = _call_if_function(mask, params)
    leaves_with_path, treedef = jax.tree_util.tree_flatten_with_path(tree)
    bools = [_as_bool(api, arg, path, leaf) for path, leaf in leaves_with_path]
    tree = treedef.unflatten(bools)
    _check_fits(api, arg, tree, params, "Give one boolean per parameter array, or per subtree")
    return tree


def resolve_labels(api: str, labels: Any, params: Params, arg: str = "param_labels") -> Any:
    """The labels of ``params`` as a validated prefix tree of hashable labels.

    Args:
      api: the public name that received the labels (used in error messages).
      labels: a pytree of hashable labels that is ``params`` or a prefix of it, or a function of ``params``
        returning one. A callable is called, unless it is a pytree with the params' structure.
      params: the parameters.
      arg: the argument's name in error messages.

    Returns:
      The label tree (a prefix of ``params``).
    """
    tree = _call_if_function(labels, params)
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        if isinstance(leaf, (jax.Array, np.ndarray)) or not isinstance(leaf, Hashable):
            raise TypeError(
                f"{api}({arg}=...) must be a pytree of hashable labels (str, int, ...) that is the params tree or "
                f"a prefix of it; at {_keystr(path)} found {leaf!r:.60} of type {type(leaf).__name__}. "
                "Use one label per parameter array or subtree, e.g. 'adam' or 'frozen'."
            )
    _check_fits(api, arg, tree, params, "Give one label per parameter array, or per subtree")
    return tree


def broadcast_prefix(prefix: Any, params: Params) -> Any:
    """The full tree of ``params``' structure where each leaf takes the value of its prefix leaf in ``prefix``."""
    return jax.tree.map(lambda v, sub: jax.tree.map(lambda _: v, sub), prefix, params)


def mask_tree(tree: Any, mask: Any) -> Any:
    """``tree`` with every subtree whose (resolved) mask leaf is False replaced by :class:`MaskedNode`."""
    return jax.tree.map(lambda m, sub: sub if m else MaskedNode(), mask, tree)


def merge_masked(mask: Any, inside: Any, outside: Any) -> Any:
    """``inside`` where the mask is True and ``outside`` where it is False (both with the params' structure)."""
    return jax.tree.map(lambda m, a, b: a if m else b, mask, inside, outside)


def masked(
    inner: GradientTransformation,
    mask: MaskOrFn,
    *,
    mask_compatible_extra_args: bool = False,
) -> GradientTransformationExtraArgs:
    r"""Applies ``inner`` only to the parameters selected by ``mask``; the other updates pass through unchanged.

    .. math::
      u_i \leftarrow \begin{cases} \mathrm{inner}(u)_i & m_i = \text{True} \\ u_i & m_i = \text{False}\end{cases}

    ``inner`` sees the params and updates with every masked-out subtree replaced by :class:`MaskedNode` (an empty
    node), so its state holds nothing for them.

    Args:
      inner: the transformation to apply where the mask is True.
      mask: a pytree of booleans that is the params tree or a prefix of it (a leaf stands for its whole subtree),
        or a function of the params returning one (an Equinox closure too). A callable pytree with the params'
        structure (an Equinox model mapped to booleans) is the mask tree itself.
      mask_compatible_extra_args: also mask the extra keyword arguments of ``update`` that have the params' tree
        structure (per-parameter quantities); others are passed unchanged.

    Returns:
      A :class:`GradientTransformationExtraArgs` with state :class:`MaskedState`.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> params = {"w": jnp.ones(2), "b": jnp.ones(1)}
      >>> tx = gradax.masked(gradax.scale(-0.1), {"w": True, "b": False})
      >>> updates, _ = tx.update(params, tx.init(params))
      >>> updates["w"], updates["b"]
      (Array([-0.1, -0.1], dtype=float32), Array([1.], dtype=float32))
    """
    return build_masked("masked", inner, mask, mask_compatible_extra_args=mask_compatible_extra_args)


def build_masked(
    api: str, inner: GradientTransformation, mask: MaskOrFn, *, mask_compatible_extra_args: bool = False
) -> GradientTransformationExtraArgs:
    """:func:`masked`, with errors that name ``api`` (for wrappers built on it: ``freeze``, ``add_decayed_weights``)."""
    check_transformation(api, "inner", inner)
    if mask is None or (callable(mask) and isinstance(mask, type)):
        raise TypeError(
            f"{api}(mask=...) must be a pytree of booleans or a function of the params; got {mask!r:.60}. "
            "Pass e.g. `lambda p: jax.tree.map(lambda x: x.ndim > 1, p)`."
        )
    inner = with_extra_args_support(inner)

    def init(params):
        if is_params_marker(params):  # gradax.tree.map_params: the marker stands for the (unmasked) params
            return MaskedState(inner_state=inner.init(params))
        mask_t = resolve_mask(api, mask, params)
        return MaskedState(inner_state=inner.init(mask_tree(params, mask_t)))

    def update(updates, state, params=None, **extra_args):
        mask_t = resolve_mask(api, mask, updates if params is None else params)
        if params is not None:
            _check_fits(api, "updates", mask_t, updates, "Pass updates with the structure of the params")
        masked_params = None if params is None else mask_tree(params, mask_t)
        if mask_compatible_extra_args:
            structure = jax.tree.structure(updates)
            extra_args = {
                k: mask_tree(v, mask_t) if jax.tree.structure(v) == structure else v for k, v in extra_args.items()
            }
        inner_updates, inner_state = inner.update(
            mask_tree(updates, mask_t), state.inner_state, masked_params, **extra_args
        )
        return merge_masked(mask_t, inner_updates, updates), MaskedState(inner_state=inner_state)

    return GradientTransformationExtraArgs(init, update)


def labels_to_masks(labels: Any, names) -> dict[Hashable, Any]:
    """One mask per label name: ``{name: tree of (label == name)}`` over a resolved label tree."""
    return {name: jax.tree.map(lambda lab, n=name: lab == n, labels) for name in names}
