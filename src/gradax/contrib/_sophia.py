"""Sophia: a clipped, diagonal-Hessian-preconditioned momentum method (Liu et al., 2023)."""

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from .._base import GradientTransformation, GradientTransformationExtraArgs, ScalarOrSchedule, with_extra_args_support
from .._checks import check_decay, check_needs, check_non_negative
from .._hyperparams import as_value
from .._maps import map_n
from .._numerics import compute_dtype, safe_int32_increment
from .._state import zeros_state_like
from ..transforms._adding import add_decayed_weights
from ..transforms._combining import chain
from ..transforms._scaling import scale_by_learning_rate
from ._hutchinson import hutchinson_estimator_diag_hessian

_DEFAULT_HESSIAN_FN = hutchinson_estimator_diag_hessian()


class SophiaState(NamedTuple):
    """State of :func:`sophia`'s preconditioning step.

    ``count``: steps taken; ``mu``: EMA of the gradients :math:`m_k`; ``nu``: EMA of the Hessian-diagonal estimates
    :math:`h_k`; ``hessian_fn_state``: the state of ``hessian_diagonal_fn``.
    """

    count: jax.Array
    mu: Any
    nu: Any
    hessian_fn_state: Any


def _scale_by_sophia(
    api: str,
    b1: ArrayLike,
    b2: ArrayLike,
    eps: ArrayLike,
    gamma: ArrayLike,
    clip_threshold: ArrayLike | None,
    update_interval: ArrayLike,
    hessian_diagonal_fn: GradientTransformation,
    mu_dtype: Any | None,
    verbose: bool,
    print_win_rate_every_n_steps: ArrayLike,
) -> GradientTransformationExtraArgs:
    """The preconditioning part of :func:`sophia` (before weight decay and the learning rate)."""
    is_default_estimator = hessian_diagonal_fn is _DEFAULT_HESSIAN_FN
    hess = with_extra_args_support(hessian_diagonal_fn)

    def init(params):
        return SophiaState(
            count=jnp.zeros([], jnp.int32),
            mu=zeros_state_like(params, mu_dtype),
            nu=zeros_state_like(params),
            hessian_fn_state=hess.init(params),
        )

    def update(updates, state, params=None, **extra_args):
        check_needs(api, "params", params)
        if is_default_estimator:
            what = "(the objective of Hutchinson's estimator, obj_fn(params) -> scalar)"
            check_needs(api, "obj_fn", extra_args.get("obj_fn"), what)
        count = state.count
        new_count = safe_int32_increment(count)
        beta1, beta2 = as_value(b1), as_value(b2)
        e, g_ = as_value(eps), as_value(gamma)
        bias = 1 - beta1 ** new_count.astype(beta1.dtype)

        def leaf(g, m, h):
            cd = compute_dtype(g.dtype)
            m_new = beta1 * m.astype(cd) + (1 - beta1) * g.astype(cd)
            u = (m_new / bias) / jnp.maximum(g_ * h.astype(cd), e)
            if clip_threshold is not None:
                c = as_value(clip_threshold)
                kept = jnp.sum(jnp.abs(u) < c)
                u = jnp.clip(u, -c, c)
            else:
                kept = jnp.zeros([], jnp.int32)
            return u.astype(g.dtype), m_new.astype(m.dtype), kept

        out, mu, kept = map_n(3, leaf, updates, state.mu, state.nu)

        if verbose and clip_threshold is not None:
            total = sum(np.size(x) for x in jax.tree.leaves(out))
            win_rate = sum(jax.tree.leaves(kept), jnp.zeros([], jnp.int32)) / max(total, 1)
            every = jnp.maximum(jnp.asarray(print_win_rate_every_n_steps, jnp.int32), 1)
            do_print = jnp.logical_and(jnp.asarray(print_win_rate_every_n_steps) > 0, new_count % every == 0)
            jax.lax.cond(
                do_print, lambda: jax.debug.print("Sophia win rate (unclipped fraction): {}", win_rate), lambda: None
            )

        def refresh(hess_state, nu):
            diag, hess_state = hess.update(updates, hess_state, params, **extra_args)
            nu = jax.tree.map(
                lambda d, n: (beta2 * n.astype(compute_dtype(n.dtype)) + (1 - beta2) * d).astype(n.dtype), diag, nu
            )
            return hess_state, nu

        hess_state, nu = jax.lax.cond(
            count % jnp.asarray(update_interval, jnp.int32) == 0,
            refresh,
            lambda s, n: (s, n),
            state.hessian_fn_state,
            state.nu,
        )
        return out, SophiaState(count=new_count, mu=mu, nu=nu, hessian_fn_state=hess_state)

    return GradientTransformationExtraArgs(init, update)


def sophia(
    learning_rate: ScalarOrSchedule,
    b1: ArrayLike = 0.965,
    b2: ArrayLike = 0.99,
    eps: ArrayLike = 1e-8,
    weight_decay: ScalarOrSchedule = 1e-4,
    weight_decay_mask: Any | Callable[[Any], Any] | None = None,
    gamma: ArrayLike = 0.01,
    clip_threshold: ArrayLike | None = 1.0,
    update_interval: ArrayLike = 10,
    hessian_diagonal_fn: GradientTransformation = _DEFAULT_HESSIAN_FN,
    mu_dtype: Any | None = None,
    verbose: bool = False,
    print_win_rate_every_n_steps: ArrayLike = 0,
    *,
    cautious_weight_decay: bool = False,
) -> GradientTransformationExtraArgs:
    r"""Sophia (Second-order Clipped Stochastic Optimization), the Hutchinson variant (Sophia-H) by default.

    With gradient :math:`g_k`, step count :math:`t = k + 1`, a Hessian-diagonal estimate :math:`\hat h` from
    ``hessian_diagonal_fn`` (taken when :math:`k` is a multiple of ``update_interval``, else :math:`h` is kept),
    clipping threshold :math:`\rho` = ``clip_threshold``, weight decay :math:`w` and learning rate :math:`\eta_k`:

    .. math::
      m_k = \beta_1 m_{k-1} + (1-\beta_1) g_k, \qquad
      u_k = \mathrm{clip}\!\left(\frac{m_k / (1-\beta_1^{t})}{\max(\gamma\, h_{k-1}, \varepsilon)},
      \; -\rho, \; \rho\right), \\
      h_k = \beta_2 h_{k-1} + (1-\beta_2)\hat h_k \ \text{(every update\_interval steps)}, \qquad
      \theta_{k+1} = \theta_k - \eta_k\,(u_k + w\,\theta_k).

    The step uses the curvature estimate from before this step's refresh; clipping bounds the move per coordinate
    where the curvature is small, negative or badly estimated. The default estimator is Hutchinson's (a Rademacher
    probe, :func:`hutchinson_estimator_diag_hessian`), which needs ``update(..., params, obj_fn=f)`` with
    ``f(params) -> scalar`` (e.g. ``lambda p: loss(p, batch)``); every keyword given to ``update`` is passed on to
    ``hessian_diagonal_fn``. The effective Hessian decay is about :math:`1 - (1-\beta_2)/\text{update\_interval}`.

    Args:
      learning_rate: :math:`\eta_k`, a number, an array or a schedule of the step count.
      b1: :math:`\beta_1 \in [0, 1)`, decay of the gradient EMA.
      b2: :math:`\beta_2 \in [0, 1)`, decay of the Hessian-diagonal EMA (per refresh).
      eps: :math:`\varepsilon \ge 0`, floor of the denominator.
      weight_decay: :math:`w`, decoupled weight decay (scaled by the learning rate).
      weight_decay_mask: a tree of bools (or a function of params returning one) selecting the decayed leaves.
      gamma: :math:`\gamma`, scale of the Hessian diagonal in the denominator.
      clip_threshold: :math:`\rho`, the per-coordinate bound of :math:`u_k`; ``None`` disables clipping.
      update_interval: refresh the Hessian estimate every this many steps (at steps 0, k, 2k, ...).
      hessian_diagonal_fn: a transformation whose ``update(grads, state, params, **extras)`` returns a diagonal
        Hessian estimate (with several devices it should average the estimate across them).
      mu_dtype: dtype of :math:`m`; the params' dtype (at least float32) when None.
      verbose: print the fraction of unclipped coordinates ("win rate", 0.1 to 0.5 is healthy per the paper).
      print_win_rate_every_n_steps: print period when ``verbose``; 0 never prints.
      cautious_weight_decay: decay only where the update and the parameter have the same sign (Chen et al., 2025).

    Returns:
      A :class:`GradientTransformationExtraArgs` (a chain whose first state is :class:`SophiaState`).

    Example:
      >>> import gradax, jax, jax.numpy as jnp
      >>> f = lambda x: jnp.sum(jnp.array([1.0, 4.0]) * x**2)
      >>> opt = gradax.contrib.sophia(0.1, weight_decay=0.0)
      >>> x = jnp.array([1.0, 1.0])
      >>> state = opt.init(x)
      >>> for _ in range(3):
      ...     updates, state = opt.update(jax.grad(f)(x), state, x, obj_fn=f)
      ...     x = gradax.apply_updates(x, updates)
      >>> x
      Array([0.6999999, 0.6999999], dtype=float32)

    References:
      Liu, Li, Hall, Liang and Ma, 2023, "Sophia: A Scalable Stochastic Second-order Optimizer for Language Model
      Pre-training" (https://arxiv.org/abs/2305.14342).
    """
    api = "sophia"
    check_decay(api, "b1", b1)
    check_decay(api, "b2", b2)
    check_non_negative(api, "eps", eps)
    check_non_negative(api, "gamma", gamma)
    if clip_threshold is not None:
        check_non_negative(api, "clip_threshold", clip_threshold)
    return chain(
        _scale_by_sophia(
            api,
            b1,
            b2,
            eps,
            gamma,
            clip_threshold,
            update_interval,
            hessian_diagonal_fn,
            mu_dtype,
            verbose,
            print_win_rate_every_n_steps,
        ),
        add_decayed_weights(weight_decay, weight_decay_mask, cautious=cautious_weight_decay),
        scale_by_learning_rate(learning_rate),
    )
