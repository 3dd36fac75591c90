"""Combining transformations: ``chain`` and ``named_chain``."""

from __future__ import annotations

from collections import OrderedDict

from .._base import GradientTransformation, GradientTransformationExtraArgs, is_transformation, with_extra_args_support


def _as_transforms(api: str, args) -> list[GradientTransformationExtraArgs]:
    out = []
    for i, tx in enumerate(args):
        if not is_transformation(tx):
            raise TypeError(
                f"{api}(...) takes GradientTransformations; argument {i} is {type(tx).__name__} ({tx!r:.80}). "
                "Pass transformations such as gradax.scale(...) or gradax.adam(...), not their results or states."
            )
        out.append(with_extra_args_support(tx))
    return out


def chain(*args: GradientTransformation) -> GradientTransformationExtraArgs:
    r"""Applies transformations one after the other: ``chain(f, g)`` updates with ``g(f(updates))``.

    The state is the tuple of the states of ``args``, in order. Extra keyword arguments given to ``update`` reach
    every transformation (each ignores those it does not use).

    Args:
      *args: the transformations, applied from first to last.

    Returns:
      A :class:`GradientTransformationExtraArgs`.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> tx = gradax.chain(gradax.scale(2.0), gradax.scale(-0.5))
      >>> tx.update(jnp.ones(2), tx.init(jnp.ones(2)))[0]
      Array([-1., -1.], dtype=float32)
    """
    transforms = _as_transforms("chain", args)

    def init(params):
        return tuple(tx.init(params) for tx in transforms)

    def update(updates, state, params=None, **extra_args):
        if len(state) != len(transforms):
            raise ValueError(
                f"chain: update(state=...) must hold one state per transformation ({len(transforms)}); got "
                f"{len(state)}. Pass the state returned by this chain's init."
            )
        new_state = []
        for tx, s in zip(transforms, state):
            updates, s = tx.update(updates, s, params, **extra_args)
            new_state.append(s)
        return updates, tuple(new_state)

    return GradientTransformationExtraArgs(init, update)


def named_chain(*args: tuple[str, GradientTransformation]) -> GradientTransformationExtraArgs:
    """Like :func:`chain`, with each transformation named: the state maps each name to its transformation's state.

    Args:
      *args: ``(name, transformation)`` pairs, applied in order. Names must be distinct strings.

    Returns:
      A :class:`GradientTransformationExtraArgs` whose state is an ``OrderedDict`` from name to state.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> tx = gradax.named_chain(("clip", gradax.clip_by_global_norm(1.0)), ("sgd", gradax.sgd(0.1)))
      >>> list(tx.init(jnp.ones(2)))
      ['clip', 'sgd']
    """
    names = []
    for i, pair in enumerate(args):
        if not (isinstance(pair, tuple) and len(pair) == 2 and isinstance(pair[0], str)):
            raise TypeError(
                f"named_chain(...) takes (name, transformation) pairs; argument {i} is {pair!r:.80}. "
                "Pass pairs such as ('sgd', gradax.sgd(0.1))."
            )
        names.append(pair[0])
    if len(set(names)) != len(names):
        raise ValueError(f"named_chain(...) names must be distinct; got {names}.")
    transforms = _as_transforms("named_chain", [tx for _, tx in args])

    def init(params):
        return OrderedDict((name, tx.init(params)) for name, tx in zip(names, transforms))

    def update(updates, state, params=None, **extra_args):
        new_state = OrderedDict()
        for name, tx in zip(names, transforms):
            updates, new_state[name] = tx.update(updates, state[name], params, **extra_args)
        return updates, new_state

    return GradientTransformationExtraArgs(init, update)
