"""Adding terms to the updates: decoupled weight decay and annealed gradient noise."""

import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from .._base import EmptyState, GradientTransformation, MaskOrFn, ScalarOrSchedule
from .._checks import argument_error, check_interval, check_needs, check_non_negative
from .._hyperparams import as_value, is_schedule, value_at
from .._numerics import compute_dtype, safe_int32_increment
from ._masking import masked

AddDecayedWeightsState = EmptyState


class WeightDecaySchedule(NamedTuple):
    """State of :func:`add_decayed_weights` when ``weight_decay`` is a schedule."""

    count: jax.Array  # shape=(), dtype=int32: the number of updates so far


class AddNoiseState(NamedTuple):
    """State of :func:`add_noise`."""

    count: jax.Array  # shape=(), dtype=int32: the number of updates so far
    rng_key: jax.Array  # a typed PRNG key (``jax.random.key``): the key for the next step's noise


def skips_decay(weight_decay: Any) -> bool:
    """Whether :func:`add_decayed_weights` leaves the updates as they are: a weight decay of the number 0 (not an
    array or a schedule, whose value is only known when traced)."""
    return isinstance(weight_decay, (int, float)) and not isinstance(weight_decay, bool) and weight_decay == 0.0


def decoupled_weight_decay(
    weight_decay: ScalarOrSchedule | None, mask: MaskOrFn = None, cautious: bool = False
) -> tuple[GradientTransformation, ...]:
    """The steps a recipe puts before its learning rate for decoupled weight decay: ``()`` for ``None`` or the
    number 0 (the recipe's chain, state and numbers stay exactly Optax's), else one :func:`add_decayed_weights`."""
    if weight_decay is None or skips_decay(weight_decay):
        return ()
    return (add_decayed_weights(weight_decay, mask, cautious=cautious),)


def add_decayed_weights(
    weight_decay: ScalarOrSchedule = 0.0, mask: MaskOrFn = None, *, cautious: bool = False
) -> GradientTransformation:
    r"""Adds the parameters scaled by a weight-decay rate to the updates (decoupled weight decay).

    .. math::
      u \leftarrow u + \lambda(t)\, \theta
      \qquad\text{or, with } \texttt{cautious}, \qquad
      u \leftarrow u + \lambda(t)\, \mathbb 1[u \odot \theta \ge 0] \odot \theta.

    Cautious weight decay (``cautious=True``) decays only the coordinates where the incoming update (the descent
    direction before the learning rate, as in every recipe's chain) has the sign of the parameter, so the decay
    never pulls against the optimizer's step; it takes no new hyperparameter.

    Args:
      weight_decay: :math:`\lambda`, a number, an array or a schedule of the step count.
      mask: which leaves to decay: a pytree of booleans with the structure of the params (or a prefix of it), or a
        function of the params returning one. ``None`` decays every leaf.
      cautious: apply cautious weight decay (Chen et al., 2025); ``False`` keeps Optax's numbers.

    Returns:
      A :class:`GradientTransformation`; its state is :class:`AddDecayedWeightsState` (empty), or a state with a
      ``count`` when ``weight_decay`` is a schedule (wrapped in a ``MaskedState`` when ``mask`` is given).

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> tx = gradax.add_decayed_weights(0.1)
      >>> params = jnp.array([1.0, 2.0])
      >>> tx.update(jnp.zeros(2), tx.init(params), params)[0]
      Array([0.1, 0.2], dtype=float32)

    References:
      Loshchilov and Hutter, 2019, "Decoupled Weight Decay Regularization".
      Chen et al., 2025, "Cautious Weight Decay", https://arxiv.org/abs/2510.12402.
    """
    check_interval("add_decayed_weights", "weight_decay", weight_decay)
    scheduled = is_schedule(weight_decay)
    skip = skips_decay(weight_decay)

    def init(params):
        del params
        return WeightDecaySchedule(count=jnp.zeros([], jnp.int32)) if scheduled else AddDecayedWeightsState()

    def update(updates, state, params=None):
        check_needs("add_decayed_weights", "params", params)
        if scheduled:
            rate = value_at(weight_decay, state.count)
            new_state = WeightDecaySchedule(count=safe_int32_increment(state.count))
        else:
            new_state = state
            if skip:
                return updates, new_state
            rate = as_value(weight_decay)

        def leaf(u, p):
            if u is None:  # a None update (a frozen or absent leaf) stays None
                return None
            if cautious:
                dtype = compute_dtype(u.dtype)
                up = u.astype(dtype) * jnp.conj(p.astype(dtype))
                keep = (jnp.real(up) if jnp.iscomplexobj(up) else up) >= 0
                return (u + jnp.where(keep, rate * p, 0)).astype(u.dtype)
            return (u + rate * p).astype(u.dtype)

        return jax.tree.map(leaf, updates, params, is_leaf=lambda x: x is None), new_state

    tx = GradientTransformation(init, update)
    if mask is None:
        return tx
    return masked(tx, mask)


def key_maker(api: str, key: Any, arg: str = "key") -> Callable[[], jax.Array]:
    """Checks ``key`` (an int seed, a typed PRNG key or a raw uint32 key) and returns a function making the typed key.

    Nothing is created here: a key from an int seed is made when the returned function is called (inside ``init``),
    so building a transformation at import time never touches a JAX backend or leaves an array alive.
    """
    if isinstance(key, jax.Array) and jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        return lambda: key
    if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
        seed = int(key)
        return lambda: jax.random.key(seed)
    if isinstance(key, (jax.Array, np.ndarray)) and key.dtype == np.uint32 and key.shape == (2,):
        return lambda: jax.random.wrap_key_data(jnp.asarray(key))
    if isinstance(key, (jax.Array, np.ndarray)) and np.issubdtype(key.dtype, np.integer) and key.ndim == 0:
        return lambda: jax.random.key(key)
    raise argument_error(api, arg, "an int seed or a PRNG key", key, f"Pass {arg}=jax.random.key(0) or {arg}=0")


def add_noise(
    eta: ArrayLike, gamma: ArrayLike, key: jax.Array | int | None = None, *, seed: int | None = None
) -> GradientTransformation:
    r"""Adds Gaussian noise with an annealed variance to the updates.

    .. math::
      u_t \leftarrow u_t + \sqrt{\frac{\eta}{(t + 1)^{\gamma}}}\, \xi_t, \qquad \xi_t \sim \mathcal N(0, I).

    Each leaf gets its own key, split from the step's key; ``t`` counts steps from 0.

    Args:
      eta: the base variance :math:`\eta \ge 0`.
      gamma: the annealing exponent :math:`\gamma` (0.55 in the paper).
      key: a PRNG key or an int seed (0 when omitted, with a warning).
      seed: deprecated spelling of an int ``key``.

    Returns:
      A :class:`GradientTransformation` with state :class:`AddNoiseState`.

    Example:
      >>> import gradax, jax, jax.numpy as jnp
      >>> tx = gradax.add_noise(eta=0.0, gamma=0.55, key=jax.random.key(0))
      >>> tx.update(jnp.ones(2), tx.init(jnp.ones(2)))[0]
      Array([1., 1.], dtype=float32)

    References:
      Neelakantan et al., 2015, "Adding Gradient Noise Improves Learning for Very Deep Networks".
    """
    check_non_negative("add_noise", "eta", eta)
    check_interval("add_noise", "gamma", gamma)
    if seed is not None:
        warnings.warn("add_noise(seed=...) is deprecated; pass key=... instead.", DeprecationWarning, stacklevel=2)
        if key is not None:
            raise argument_error("add_noise", "seed", "None when key is given", seed, "Pass only key=...")
        key = seed
    if key is None:
        warnings.warn("add_noise: no key given; using key=0. Pass key=jax.random.key(...).", stacklevel=2)
        key = 0
    make_key = key_maker("add_noise", key)

    def init(params):
        del params
        return AddNoiseState(count=jnp.zeros([], jnp.int32), rng_key=make_key())

    def update(updates, state, params=None):
        del params
        count = safe_int32_increment(state.count)
        std = jnp.sqrt(as_value(eta) / as_value(count) ** as_value(gamma))
        next_key, sample_key = jax.random.split(state.rng_key)
        leaves, treedef = jax.tree.flatten(updates)
        keys = jax.random.split(sample_key, len(leaves))

        def leaf(u, k):
            noise = jax.random.normal(k, np.shape(u), u.dtype)
            dt = compute_dtype(u.dtype)
            return (u.astype(dt) + std.astype(dt) * noise.astype(dt)).astype(u.dtype)

        new_leaves = [leaf(u, keys[i]) for i, u in enumerate(leaves)]
        return treedef.unflatten(new_leaves), AddNoiseState(count=count, rng_key=next_key)

    return GradientTransformation(init, update)
