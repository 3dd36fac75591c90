"""Parameter groups: ``partition`` (``multi_transform``), ``freeze``, ``selective_transform``, and groups by name.

Every group is defined by a mask or a label tree resolved through :mod:`gradax.transforms._masking`, so the same
forms (a prefix tree, a function of the params, an Equinox module, an ``nnx.State``) and the same key-path errors
apply everywhere. :func:`path_labels` and :func:`path_mask` build label and mask functions from regular expressions on
key paths (``"encoder/layers/0/kernel"``), and :func:`describe_labels` lists which group each parameter falls in.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, NamedTuple

import jax

from .._base import (
    GradientTransformation,
    GradientTransformationExtraArgs,
    MaskOrFn,
    Params,
    is_transformation,
    set_to_zero,
    with_extra_args_support,
)
from ..tree._state import is_params_marker
from ._masking import (
    MaskedState,
    build_masked,
    labels_to_masks,
    mask_tree,
    merge_masked,
    resolve_labels,
    resolve_mask,
)


class PartitionState(NamedTuple):
    """State of :func:`partition`: the state of each group's transformation, keyed by label."""

    inner_states: Mapping[Hashable, Any]  # {label: MaskedState(inner_state)} in the order of `transforms`


MultiTransformState = PartitionState


def _check_transforms(api: str, transforms: Any) -> dict[Hashable, GradientTransformationExtraArgs]:
    if not isinstance(transforms, Mapping):
        raise TypeError(
            f"{api}(transforms=...) must be a mapping from label to GradientTransformation; got "
            f"{type(transforms).__name__}. Pass e.g. {{'adam': gradax.adam(1e-3), 'frozen': gradax.set_to_zero()}}."
        )
    out = {}
    for label, tx in transforms.items():
        if not is_transformation(tx):
            raise TypeError(
                f"{api}(transforms=...) must map each label to a GradientTransformation; transforms[{label!r}] is "
                f"{type(tx).__name__}. Pass transformations such as gradax.sgd(0.1)."
            )
        out[label] = with_extra_args_support(tx)
    return out


def _group_masks(api: str, transforms: dict, param_labels: Any, params: Params) -> dict[Hashable, Any]:
    labels = resolve_labels(api, param_labels, params)
    used = list(dict.fromkeys(jax.tree.leaves(labels)))
    missing = [label for label in used if label not in transforms]
    if missing:
        raise ValueError(
            f"{api}(param_labels=...) uses labels with no transformation: {missing}; transforms has "
            f"{list(transforms)}. Add a transformation for each label, or relabel those parameters."
        )
    return labels_to_masks(labels, transforms)


def partition(
    transforms: Mapping[Hashable, GradientTransformation],
    param_labels: Any,
    *,
    mask_compatible_extra_args: bool = False,
) -> GradientTransformationExtraArgs:
    r"""Applies a different transformation to each group of parameters.

    Each parameter carries a label; the parameters labelled ``k`` are updated by ``transforms[k]`` alone (as with
    :func:`gradax.masked`), and its state holds only their entries.

    Args:
      transforms: a mapping from label to transformation. Labels without parameters are allowed.
      param_labels: a pytree of labels that is the params tree or a prefix of it, or a function of the params
        returning one (see :func:`gradax.transforms.path_labels` to label by key-path patterns).
      mask_compatible_extra_args: mask the extra arguments of ``update`` that have the params' structure.

    Returns:
      A :class:`GradientTransformationExtraArgs` with state :class:`PartitionState`.

    Raises:
      ValueError: a label has no transformation, or the labels do not fit the params (the key path is named).

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> params = {"w": jnp.ones(2), "b": jnp.ones(1)}
      >>> tx = gradax.partition({"sgd": gradax.sgd(0.1), "frozen": gradax.set_to_zero()}, {"w": "sgd", "b": "frozen"})
      >>> updates, _ = tx.update(params, tx.init(params))
      >>> updates["w"], updates["b"]
      (Array([-0.1, -0.1], dtype=float32), Array([0.], dtype=float32))
    """
    return _partition("partition", transforms, param_labels, mask_compatible_extra_args)


def multi_transform(
    transforms: Mapping[Hashable, GradientTransformation],
    param_labels: Any,
    *,
    mask_compatible_extra_args: bool = False,
) -> GradientTransformationExtraArgs:
    """Another name for :func:`partition` (same arguments, same state :class:`MultiTransformState`).

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> tx = gradax.multi_transform({"a": gradax.sgd(1.0)}, "a")
      >>> tx.update(jnp.ones(1), tx.init(jnp.ones(1)))[0]
      Array([-1.], dtype=float32)
    """
    return _partition("multi_transform", transforms, param_labels, mask_compatible_extra_args)


def _partition(api, transforms, param_labels, mask_compatible_extra_args) -> GradientTransformationExtraArgs:
    transforms = _check_transforms(api, transforms)
    if param_labels is None:
        raise TypeError(
            f"{api}(param_labels=...) must be a pytree of labels or a function of the params; got None. "
            "Pass e.g. {'w': 'adam', 'b': 'sgd'}."
        )

    def init(params):
        if is_params_marker(params):  # gradax.tree.map_params: the marker stands for each group's params
            return PartitionState(
                inner_states={label: MaskedState(inner_state=tx.init(params)) for label, tx in transforms.items()}
            )
        masks = _group_masks(api, transforms, param_labels, params)
        return PartitionState(
            inner_states={
                label: MaskedState(inner_state=tx.init(mask_tree(params, masks[label])))
                for label, tx in transforms.items()
            }
        )

    def update(updates, state, params=None, **extra_args):
        masks = _group_masks(api, transforms, param_labels, updates if params is None else params)
        structure = jax.tree.structure(updates)
        new_updates = updates
        new_states = {}
        for label, tx in transforms.items():
            mask = masks[label]
            args = extra_args
            if mask_compatible_extra_args:
                args = {k: mask_tree(v, mask) if jax.tree.structure(v) == structure else v for k, v in args.items()}
            group_updates, inner = tx.update(
                mask_tree(updates, mask),
                state.inner_states[label].inner_state,
                None if params is None else mask_tree(params, mask),
                **args,
            )
            new_updates = merge_masked(mask, group_updates, new_updates)
            new_states[label] = MaskedState(inner_state=inner)
        return new_updates, PartitionState(inner_states=new_states)

    return GradientTransformationExtraArgs(init, update)


def freeze(mask: MaskOrFn) -> GradientTransformationExtraArgs:
    r"""Sets the updates of the parameters selected by ``mask`` to zero; the others pass through.

    .. math:: u_i \leftarrow 0 \ \text{where } m_i, \qquad u_i \ \text{elsewhere}.

    Chain it after an optimizer (``chain(adam(1e-3), freeze(mask))``); to also skip the optimizer's work and state
    on the frozen parameters use :func:`selective_transform`.

    Args:
      mask: True for the parameters to freeze: a pytree of booleans that is the params tree or a prefix of it, a
        function of the params, or :func:`gradax.transforms.path_mask`.

    Returns:
      A :class:`GradientTransformationExtraArgs` with state :class:`gradax.MaskedState`.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> tx = gradax.freeze({"w": True, "b": False})
      >>> params = {"w": jnp.ones(2), "b": jnp.ones(1)}
      >>> tx.update(params, tx.init(params))[0]["w"]
      Array([0., 0.], dtype=float32)
    """
    return build_masked("freeze", set_to_zero(), mask)


def selective_transform(optimizer: GradientTransformation, *, freeze_mask: MaskOrFn) -> GradientTransformationExtraArgs:
    r"""Applies ``optimizer`` to the parameters where ``freeze_mask`` is False and freezes the others (zero update).

    The optimizer's state holds only the trainable parameters. Equivalent to
    ``partition({"train": optimizer, "freeze": set_to_zero()}, labels)``.

    Args:
      optimizer: the transformation for the trainable parameters.
      freeze_mask: True for the frozen parameters (a mask tree, a prefix of it, or a function of the params).

    Returns:
      A :class:`GradientTransformationExtraArgs` with state :class:`PartitionState`.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> params = {"w": jnp.ones(2), "b": jnp.ones(1)}
      >>> tx = gradax.selective_transform(gradax.sgd(0.1), freeze_mask={"w": False, "b": True})
      >>> tx.update(params, tx.init(params))[0]["b"]
      Array([0.], dtype=float32)
    """
    api = "selective_transform"
    if freeze_mask is None:
        raise TypeError(f"{api}(freeze_mask=...) must be a pytree of booleans or a function of the params; got None.")

    def labels(params):
        mask = resolve_mask(api, freeze_mask, params, arg="freeze_mask")
        return jax.tree.map(lambda m: "freeze" if m else "train", mask)

    return _partition(api, {"train": optimizer, "freeze": set_to_zero()}, labels, False)


# --- groups by name (beyond Optax) ----------------------------------------------------------------------------------


def key_name(key: Any) -> str:
    """The name of one key-path entry: a dict key, an attribute name or a sequence index, as a string."""
    for attr in ("key", "name", "idx"):
        if hasattr(key, attr):
            return str(getattr(key, attr))
    return str(key)


def path_string(path: Sequence[Any]) -> str:
    """A key path as ``"a/b/0/kernel"``: the names of its entries joined by ``/``."""
    return "/".join(key_name(k) for k in path)


def _compile(api: str, arg: str, pattern: Any) -> re.Pattern:
    if isinstance(pattern, re.Pattern):
        return pattern
    if not isinstance(pattern, str):
        raise TypeError(f"{api}({arg}=...) must be a regular expression (str); got {pattern!r:.60}.")
    try:
        return re.compile(pattern)
    except re.error as e:
        raise ValueError(f"{api}({arg}=...) must be a valid regular expression; got {pattern!r}: {e}.") from None


def path_labels(rules: Mapping[str, Hashable] | Sequence[tuple[str, Hashable]], default: Hashable | None = None):
    r"""Labels parameters by regular expressions on their key paths: a ``param_labels`` function for
    :func:`partition`.

    Each parameter's key path is written ``"a/b/0/kernel"`` (dict keys, attribute names and sequence indices joined
    by ``/``); the first rule whose pattern matches it (``re.search``) gives its label, else ``default``.

    Args:
      rules: ``{pattern: label}`` or a sequence of ``(pattern, label)`` pairs, tried in order.
      default: the label of parameters no rule matches; None makes an unmatched parameter an error.

    Returns:
      A function ``params -> label tree``.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> params = {"encoder": {"w": jnp.ones(2)}, "head": {"w": jnp.ones(2), "bias": jnp.ones(1)}}
      >>> labels = gradax.transforms.path_labels({r"^encoder/": "slow", r"bias$": "no_decay"}, default="fast")
      >>> labels(params)
      {'encoder': {'w': 'slow'}, 'head': {'bias': 'no_decay', 'w': 'fast'}}
    """
    api = "path_labels"
    pairs = list(rules.items()) if isinstance(rules, Mapping) else list(rules)
    compiled = []
    for i, pair in enumerate(pairs):
        if not (isinstance(pair, tuple) and len(pair) == 2):
            raise TypeError(
                f"{api}(rules=...) must be a mapping or a sequence of (pattern, label) pairs; item {i} is {pair!r:.60}."
            )
        compiled.append((_compile(api, "rules", pair[0]), pair[1]))

    def labels(params):
        def label_of(path, _):
            where = path_string(path)
            for pattern, label in compiled:
                if pattern.search(where):
                    return label
            if default is None:
                raise ValueError(
                    f"{api}(rules=...) must match every parameter; no rule matches {where!r}. Add a rule for it or "
                    "pass default=<label>."
                )
            return default

        return jax.tree_util.tree_map_with_path(label_of, params)

    return labels


def path_mask(*patterns: str, invert: bool = False):
    r"""A mask function: True for the parameters whose key path matches one of ``patterns`` (``re.search``).

    Key paths are written ``"a/b/0/kernel"``. With ``invert=True`` the mask is True where no pattern matches: for
    example ``adamw(1e-3, mask=path_mask(r"bias|norm|embed", invert=True))`` decays everything except biases,
    normalization layers and embeddings, and ``selective_transform(opt, freeze_mask=path_mask(r"^encoder/"))``
    freezes the encoder.

    Args:
      *patterns: regular expressions.
      invert: select the parameters that match none of the patterns instead.

    Returns:
      A function ``params -> tree of bools``.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> params = {"dense": {"kernel": jnp.ones((2, 2)), "bias": jnp.ones(2)}}
      >>> gradax.transforms.path_mask(r"bias$")(params)
      {'dense': {'bias': True, 'kernel': False}}
    """
    if not patterns:
        raise ValueError("path_mask(patterns=...) must have at least one pattern; got none. Pass e.g. r'bias$'.")
    compiled = [_compile("path_mask", "patterns", p) for p in patterns]

    def mask(params):
        def leaf(path, _):
            hit = any(p.search(path_string(path)) for p in compiled)
            return hit != invert

        return jax.tree_util.tree_map_with_path(leaf, params)

    return mask


def describe_labels(labels: Any, params: Params) -> list[tuple[str, Any]]:
    """Lists each parameter's key path and its label (or mask value), for checking a grouping.

    Args:
      labels: a label tree, a mask tree, or a function of the params returning one (prefixes allowed).
      params: the parameters.

    Returns:
      A list of ``(path, label)`` pairs, one per parameter array, in tree order; paths are written ``"a/b/kernel"``.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> params = {"w": jnp.ones(2), "b": jnp.ones(1)}
      >>> gradax.transforms.describe_labels(gradax.transforms.path_mask("^b$"), params)
      [('b', True), ('w', False)]
    """
    tree = resolve_labels("describe_labels", labels, params, arg="labels")
    full = jax.tree.map(lambda v, sub: jax.tree.map(lambda _: v, sub), tree, params)
    return [(path_string(path), value) for path, value in jax.tree_util.tree_flatten_with_path(full)[0]]
