"""DoG and DoWG: step sizes from the distance travelled from the starting point over the gradients seen."""

from typing import Any, Literal, NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from .._base import GradientTransformation, MaskOrFn, ScalarOrSchedule, identity
from .._checks import argument_error, check_needs, check_non_negative, check_one_of, check_positive
from .._hyperparams import as_value
from .._numerics import abs_sq, at_first_step, compute_dtype, leaf_dtype, state_dtype, zeros_for
from ..transforms._adding import add_decayed_weights
from ..transforms._combining import chain
from ..transforms._scaling import scale_by_learning_rate

_INIT_STEPS = ("distance", "learning_rate", "heuristic")


def _scalar_dtype(params) -> jnp.dtype:
    leaves = jax.tree.leaves(params)
    if not leaves:
        return as_value(0.0).dtype
    dtypes = [state_dtype(leaf_dtype(p)) for p in leaves]
    dtypes = [d for d in dtypes if jnp.issubdtype(d, jnp.inexact)] or [as_value(0.0).dtype]  # int leaves: no say
    return min(dtypes, key=lambda d: jnp.finfo(d).bits)


def _is_abstract(params) -> bool:
    return any(isinstance(p, jax.ShapeDtypeStruct) for p in jax.tree.leaves(params))


def _copy(params):
    def leaf(p):
        dtype = state_dtype(leaf_dtype(p))
        return zeros_for(p, dtype) if isinstance(p, jax.ShapeDtypeStruct) else jnp.array(p, dtype, copy=True)

    return jax.tree.map(leaf, params)


def _sq_norm(tree, dtype) -> jax.Array:
    return sum((jnp.sum(abs_sq(x.astype(compute_dtype(x.dtype)))) for x in jax.tree.leaves(tree)), jnp.zeros([], dtype))


def _sq_dist(params, start, dtype) -> jax.Array:
    diffs = jax.tree.map(lambda p, s: p.astype(s.dtype) - s, params, start)
    return _sq_norm(diffs, dtype).astype(dtype)


def _scale(updates, lr):
    return jax.tree.map(lambda g: (lr * g.astype(compute_dtype(g.dtype))).astype(g.dtype), updates)


class DoGState(NamedTuple):
    """State of :func:`scale_by_dog`."""

    is_init_step: jax.Array  # shape=(), dtype=bool: True before the first update
    init_params: Any  # like params (float32 for bf16/f16): the starting point (captured at the first update)
    max_dist: jax.Array  # shape=(): the largest distance from the starting point so far (starts at r_eps)
    sum_sq_norm_grads: jax.Array  # shape=(): the sum of the squared gradient norms


def scale_by_dog(
    init_step: tuple[Literal["distance", "learning_rate", "heuristic"], ArrayLike],
    eps: ArrayLike = 1e-8,
) -> GradientTransformation:
    r"""Distance over Gradients: scales the updates by :math:`\bar r_t / \sqrt{\sum_{i \le t} \|g_i\|^2 + \varepsilon}`.

    .. math::
      \bar r_t = \max\left(r_\epsilon, \max_{i \le t} \|x_i - x_0\|\right), \qquad u_t = \frac{\bar r_t}
      {\sqrt{\sum_{i \le t}\|g_i\|^2 + \varepsilon}}\, g_t.

    ``init_step`` picks :math:`r_\epsilon`: ``("distance", r)`` gives :math:`r`, ``("heuristic", c)`` gives
    :math:`c\,(1 + \|x_0\|)`, and ``("learning_rate", \eta_0)`` makes the first step :math:`\eta_0 g_0` (then
    :math:`r_\epsilon = 0`). :math:`x_0` is read at the first update, so ``init`` works on ``jax.ShapeDtypeStruct``
    leaves (Optax 0.2.8 reads the params at ``init`` and cannot).

    Args:
      init_step: the kind and value of the initial step, see above.
      eps: :math:`\varepsilon \ge 0`.

    Returns:
      A :class:`GradientTransformation` with state :class:`DoGState`; ``update`` needs ``params``.

    Example:
      >>> import jax.numpy as jnp
      >>> from gradax.contrib._dog import scale_by_dog
      >>> tx = scale_by_dog(("distance", 1.0), eps=0.0)
      >>> tx.update(jnp.array([3.0, 4.0]), tx.init(jnp.zeros(2)), jnp.zeros(2))[0]
      Array([0.6, 0.8], dtype=float32)

    References:
      Ivgi, Hinder and Carmon, 2023, "DoG is SGD's Best Friend: A Parameter-Free Dynamic Step Size Schedule" (ICML).
    """
    api = "scale_by_dog"
    if not isinstance(init_step, tuple) or len(init_step) != 2:
        raise argument_error(api, "init_step", "a pair (kind, value)", init_step, "Pass e.g. ('heuristic', 1e-6)")
    kind, value = init_step
    check_one_of(api, "init_step[0]", kind, _INIT_STEPS)
    check_non_negative(api, "init_step[1]", value)
    check_non_negative(api, "eps", eps)

    def r_eps(params, dtype):
        if kind == "distance":
            return as_value(value, dtype)
        if kind == "heuristic":
            return as_value(value, dtype) * (1 + jnp.sqrt(_sq_norm(params, dtype)))
        return jnp.zeros([], dtype)

    def init(params):
        dtype = _scalar_dtype(params)
        abstract = _is_abstract(params)
        return DoGState(
            is_init_step=jnp.asarray(True),
            init_params=_copy(params),
            max_dist=jnp.zeros([], dtype) if abstract else r_eps(params, dtype).astype(dtype),
            sum_sq_norm_grads=jnp.zeros([], dtype),
        )

    def update(updates, state, params=None):
        check_needs(api, "params", params)
        dtype = state.max_dist.dtype
        first = state.is_init_step
        # the starting point and the initial distance are taken at the first step only
        start = at_first_step(first, params, state.init_params)
        prev_max = jax.lax.cond(first, lambda: r_eps(params, dtype).astype(dtype), lambda: state.max_dist)
        max_dist = jnp.maximum(prev_max, jnp.sqrt(_sq_dist(params, start, dtype)))
        sum_sq = (state.sum_sq_norm_grads + _sq_norm(updates, dtype)).astype(dtype)
        lr = max_dist / jnp.sqrt(sum_sq + as_value(eps, dtype))
        if kind == "learning_rate":
            lr = jnp.where(first, as_value(value, dtype), lr)
        new_state = DoGState(
            is_init_step=jnp.asarray(False), init_params=start, max_dist=max_dist, sum_sq_norm_grads=sum_sq
        )
        return _scale(updates, lr), new_state

    return GradientTransformation(init, update)


def dog(
    learning_rate: ScalarOrSchedule = 1.0,
    init_step: tuple[Literal["distance", "learning_rate", "heuristic"], ArrayLike] = ("heuristic", 1e-6),
    eps: ArrayLike = 1e-8,
    weight_decay: ScalarOrSchedule | None = None,
    mask: MaskOrFn = None,
    *,
    cautious_weight_decay: bool = False,
) -> GradientTransformation:
    r"""The DoG optimizer: optional weight decay, :func:`scale_by_dog`, then a step of :math:`-\eta_t` (default 1).

    .. math::
      x_{t+1} = x_t - \eta_t \frac{\bar r_t}{\sqrt{\sum_{i \le t}\|g_i\|^2 + \varepsilon}} g_t.

    Args:
      learning_rate: :math:`\eta`, a multiplier of DoG's step (a number, an array or a schedule).
      init_step: ``("distance" | "learning_rate" | "heuristic", value)``, see :func:`scale_by_dog`.
      eps: :math:`\varepsilon \ge 0`.
      weight_decay: decay added to the gradients (None for none).
      mask: which parameters to decay.
      cautious_weight_decay: decay only where the update and the parameter have the same sign (Chen et al., 2025).

    Returns:
      A :class:`GradientTransformation`; ``update`` needs ``params``.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> opt = gradax.contrib.dog(init_step=("learning_rate", 0.1))
      >>> opt.update(jnp.array([1.0]), opt.init(jnp.zeros(1)), jnp.zeros(1))[0]
      Array([-0.1], dtype=float32)

    References:
      Ivgi, Hinder and Carmon, 2023, "DoG is SGD's Best Friend: A Parameter-Free Dynamic Step Size Schedule" (ICML).
    """
    return chain(
        add_decayed_weights(weight_decay, mask, cautious=cautious_weight_decay)
        if weight_decay is not None
        else identity(),
        scale_by_dog(init_step, eps),
        scale_by_learning_rate(learning_rate),
    )


class DoWGState(NamedTuple):
    """State of :func:`scale_by_dowg`."""

    init_params: Any  # like params (float32 for bf16/f16): the starting point (captured at the first update)
    weighted_sq_norm_grads: jax.Array  # shape=(): sum of r_i^2 * ||g_i||^2
    estim_sq_dist: jax.Array  # shape=(): the largest squared distance from the start so far


def scale_by_dowg(init_estim_sq_dist: ArrayLike | None = None, eps: ArrayLike = 1e-4) -> GradientTransformation:
    r"""Distance over Weighted Gradients: scales by :math:`\bar r_t^2 / (\sqrt{v_t} + \varepsilon)`.

    .. math::
      \bar r_t^2 = \max(\bar r_{t-1}^2, \|x_t - x_0\|^2), \quad v_t = v_{t-1} + \bar r_t^2 \|g_t\|^2, \quad
      u_t = \frac{\bar r_t^2}{\sqrt{v_t} + \varepsilon} g_t,

    with :math:`\bar r_0^2` = ``init_estim_sq_dist`` (default ``eps``). :math:`x_0` is read at the first update (while
    :math:`v = 0`), so ``init`` works on ``jax.ShapeDtypeStruct`` leaves.

    Args:
      init_estim_sq_dist: :math:`\bar r_0^2 > 0`, the initial squared distance estimate; None uses ``eps``.
      eps: :math:`\varepsilon > 0`.

    Returns:
      A :class:`GradientTransformation` with state :class:`DoWGState`; ``update`` needs ``params``.

    Example:
      >>> import jax.numpy as jnp
      >>> from gradax.contrib._dog import scale_by_dowg
      >>> tx = scale_by_dowg(init_estim_sq_dist=1.0, eps=1e-4)
      >>> tx.update(jnp.array([3.0, 4.0]), tx.init(jnp.zeros(2)), jnp.zeros(2))[0].round(4)
      Array([0.6, 0.8], dtype=float32)

    References:
      Khaled, Mishchenko and Jin, 2023, "DoWG Unleashed: An Efficient Universal Parameter-Free Gradient Descent
      Method" (NeurIPS).
    """
    api = "scale_by_dowg"
    if init_estim_sq_dist is not None:
        check_positive(api, "init_estim_sq_dist", init_estim_sq_dist)
    check_positive(api, "eps", eps)

    def init(params):
        dtype = _scalar_dtype(params)
        r0 = eps if init_estim_sq_dist is None else init_estim_sq_dist
        return DoWGState(
            init_params=_copy(params),
            weighted_sq_norm_grads=jnp.zeros([], dtype),
            estim_sq_dist=as_value(r0, dtype),
        )

    def update(updates, state, params=None):
        check_needs(api, "params", params)
        dtype = state.estim_sq_dist.dtype
        first = state.weighted_sq_norm_grads == 0
        start = at_first_step(first, params, state.init_params)
        estim = jnp.maximum(state.estim_sq_dist, _sq_dist(params, start, dtype))
        weighted = (estim * _sq_norm(updates, dtype) + state.weighted_sq_norm_grads).astype(dtype)
        lr = estim / (jnp.sqrt(weighted) + as_value(eps, dtype))
        new_state = DoWGState(init_params=start, weighted_sq_norm_grads=weighted, estim_sq_dist=estim)
        return _scale(updates, lr), new_state

    return GradientTransformation(init, update)


def dowg(
    learning_rate: ScalarOrSchedule = 1.0,
    init_estim_sq_dist: ArrayLike | None = None,
    eps: ArrayLike = 1e-4,
    weight_decay: ScalarOrSchedule | None = None,
    mask: MaskOrFn = None,
    *,
    cautious_weight_decay: bool = False,
) -> GradientTransformation:
    r"""The DoWG optimizer: optional weight decay, :func:`scale_by_dowg`, then a step of :math:`-\eta_t` (default 1).

    .. math::
      x_{t+1} = x_t - \eta_t \frac{\bar r_t^2}{\sqrt{\sum_{i \le t} \bar r_i^2 \|g_i\|^2} + \varepsilon} g_t.

    Args:
      learning_rate: :math:`\eta`, a multiplier of DoWG's step (a number, an array or a schedule).
      init_estim_sq_dist: :math:`\bar r_0^2 > 0`; None uses ``eps``.
      eps: :math:`\varepsilon > 0`.
      weight_decay: decay added to the gradients (None for none).
      mask: which parameters to decay.
      cautious_weight_decay: decay only where the update and the parameter have the same sign (Chen et al., 2025).

    Returns:
      A :class:`GradientTransformation`; ``update`` needs ``params``.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> opt = gradax.contrib.dowg(init_estim_sq_dist=1.0)
      >>> opt.update(jnp.array([1.0]), opt.init(jnp.zeros(1)), jnp.zeros(1))[0].round(3)
      Array([-1.], dtype=float32)

    References:
      Khaled, Mishchenko and Jin, 2023, "DoWG Unleashed: An Efficient Universal Parameter-Free Gradient Descent
      Method" (NeurIPS).
    """
    return chain(
        add_decayed_weights(weight_decay, mask, cautious=cautious_weight_decay)
        if weight_decay is not None
        else identity(),
        scale_by_dowg(init_estim_sq_dist, eps),
        scale_by_learning_rate(learning_rate),
    )
