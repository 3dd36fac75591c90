"""MoMo: SGD-momentum and Adam with a Polyak-type step size built from a model of the loss."""

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from .._base import GradientTransformationExtraArgs, ScalarOrSchedule
from .._checks import check_decay, check_needs, check_non_negative
from .._dtype_policy import optax_scalar_dtype
from .._hyperparams import as_value, hyperparam_dtype, value_at
from .._maps import map_n
from .._numerics import compute_dtype, safe_int32_increment
from .._state import zeros_state_like
from ._dadapt_common import tensor_vdot


class MomoState(NamedTuple):
    """State of :func:`momo`: momentum, averaged loss, averaged <g, x>, loss lower bound and step count."""

    exp_avg: object
    barf: jax.Array
    gamma: jax.Array
    lb: jax.Array
    count: jax.Array


class MomoAdamState(NamedTuple):
    """State of :func:`momo_adam`: both Adam moments, averaged loss, averaged <g, x>, lower bound and count."""

    exp_avg: object
    exp_avg_sq: object
    barf: jax.Array
    gamma: jax.Array
    lb: jax.Array
    count: jax.Array


def _tree_sum(tree) -> jax.Array:
    leaves = jax.tree.leaves(tree)
    return sum((jnp.sum(x) for x in leaves), jnp.zeros([], hyperparam_dtype()))


def _init(state_cls, n_moments, lower_bound):
    """``init`` of momo (one moment tree) and momo_adam (two): zero moments and averages, lb = lower_bound."""

    def init(params):
        moments = [zeros_state_like(params) for _ in range(n_moments)]
        dtype = optax_scalar_dtype(params, "lowest", hyperparam_dtype())  # float32 unless the policy is Optax's
        lb = jnp.asarray(as_value(lower_bound), dtype)
        zero = lambda: jnp.zeros([], dtype)
        return state_cls(*moments, zero(), zero(), lb, jnp.zeros([], jnp.int32))

    return init


def _scalar(x) -> jax.Array:
    return jnp.asarray(as_value(x))


def _step_size(lr, wd, rho, fbar, gamma, d_dot_x, d_norm_sq, lb, adapt, lower_bound):
    """Step size of the truncated momentum model, its shrink factor and the next lower bound.

    ``fbar``, ``gamma``, ``d_dot_x`` and ``d_norm_sq`` are the averages without bias correction and ``rho`` is the
    bias correction (1 for momo), in Optax 0.2.8's order of operations. With ``adapt``, a stored bound at which the
    Polyak numerator ``(1 + lr wd)(fbar - rho lb - gamma) + <d, x>`` would be negative is first reset to half the level
    where that numerator vanishes.
    """
    shrink = 1.0 + lr * wd
    if adapt:
        cap = shrink * (fbar - gamma) + d_dot_x
        lb = jnp.where(cap < shrink * rho * lb, jnp.maximum(cap / (2.0 * rho * shrink), lower_bound), lb)
    numerator = jnp.maximum(shrink * (fbar - rho * lb - gamma) + d_dot_x, 0.0)
    safe_norm = jnp.where(d_norm_sq > 0, d_norm_sq, 1.0)
    tau = jnp.minimum(lr / rho, jnp.where(d_norm_sq > 0, numerator / safe_norm, 0.0))
    if adapt:
        lb = jnp.maximum(((fbar + d_dot_x - gamma) - 0.5 * tau * d_norm_sq) / rho, lower_bound)
    return tau, shrink, lb


def _hyperparams(api, learning_rate, weight_decay, lower_bound, state, params, value):
    """Checks the extra arguments of ``update`` and resolves lr, weight decay and the initial lower bound."""
    check_needs(api, "params", params)
    check_needs(api, "value", value)
    return value_at(learning_rate, state.count), value_at(weight_decay, state.count), _scalar(lower_bound)


def _model_step(hp, adapt, decay_pair, rho, state, value, sums, updates, direction, params):
    """Shared tail of momo and momo_adam: averages the loss model, picks the step size and takes the proximal step.

    ``decay_pair`` is (b, 1 - b) of the loss model's averages; ``sums`` holds the per-leaf trees of <g, x>, <d, x> and <d, direction>; ``direction`` is the per-leaf step
    direction (d_t, or the preconditioned momentum d_t / D_t); ``rho`` the bias correction of d_t (1 for momo).
    Returns the updates and the new (barf, gamma, lb).
    """
    lr, wd, lb0 = hp
    gx, dx, dd = sums
    b, one_b = decay_pair
    f = hyperparam_dtype()  # the scalars are computed in it whatever their stored dtype
    barf = b * state.barf.astype(f) + one_b * jnp.asarray(value, f)
    gamma = b * state.gamma.astype(f) + one_b * _tree_sum(gx)
    tau, shrink, lb = _step_size(lr, wd, rho, barf, gamma, _tree_sum(dx), _tree_sum(dd), state.lb.astype(f), adapt, lb0)
    decay = lr * wd

    def step(g, p, x):
        # x_new - x = (x - tau p) / shrink - x, written without the cancellation of x - x
        return (-(decay * x.astype(compute_dtype(x.dtype)) + tau * p) / shrink).astype(g.dtype)

    out = jax.tree.map(step, updates, direction, params)
    return out, barf.astype(state.barf.dtype), gamma.astype(state.gamma.dtype), jnp.asarray(lb, state.lb.dtype)


def momo(
    learning_rate: ScalarOrSchedule = 1.0,
    beta: ArrayLike = 0.9,
    lower_bound: ArrayLike = 0.0,
    weight_decay: ScalarOrSchedule = 0.0,
    adapt_lower_bound: bool = False,
) -> GradientTransformationExtraArgs:
    r"""MoMo: SGD with momentum whose step size is capped by a Polyak step on a momentum model of the loss.

    With loss value :math:`f_t` at parameters :math:`x_t` and gradient :math:`g_t` (the first step uses
    :math:`\beta = 0`):

    .. math::
      d_t = \beta d_{t-1} + (1-\beta) g_t, \quad \bar f_t = \beta \bar f_{t-1} + (1-\beta) f_t, \quad
      \gamma_t = \beta \gamma_{t-1} + (1-\beta)\langle g_t, x_t\rangle, \\
      \tau_t = \min\Big(\eta_t, \frac{\big[(1+\eta_t\lambda)(\bar f_t - \gamma_t - f_*) + \langle d_t, x_t\rangle\big]_+}
      {\lVert d_t\rVert^2}\Big), \quad
      x_{t+1} = \frac{x_t - \tau_t d_t}{1+\eta_t\lambda} .

    :math:`f_*` is ``lower_bound``; with ``adapt_lower_bound`` it is re-estimated every step as
    :math:`\max(f_*^0, h_t - \tfrac12 \tau_t \lVert d_t\rVert^2)` with :math:`h_t = \bar f_t + \langle d_t, x_t\rangle
    - \gamma_t`; before the step, a stored bound above :math:`c_t = \bar f_t - \gamma_t + \langle d_t, x_t\rangle
    /(1+\eta_t\lambda)` (where the numerator of :math:`\tau_t` vanishes) is reset to :math:`\max(f_*^0, c_t/2)`.
    The weight decay step is the paper's proximal one (Optax 0.2.8 applies :math:`x_t/(1+\eta_t\lambda) - \tau_t
    d_t`; see ``docs/differences.md``). ``update`` needs ``params`` and the loss ``value`` (keyword).

    Args:
      learning_rate: :math:`\eta > 0`, the largest step size; a number, an array or a schedule of the step count.
      beta: :math:`\beta \in [0, 1)`, averaging coefficient of the momentum model.
      lower_bound: :math:`f_*`, a lower bound of the loss (0 for most losses).
      weight_decay: :math:`\lambda \ge 0`, decoupled weight decay; a number or a schedule of the step count.
      adapt_lower_bound: estimate the lower bound online (MoMo*).

    Returns:
      A :class:`GradientTransformationExtraArgs` with state ``MomoState``.

    Example:
      >>> import gradax, jax, jax.numpy as jnp
      >>> f = lambda x: jnp.sum(x**2)
      >>> opt = gradax.contrib.momo()
      >>> x = jnp.array([1.0, 2.0, 3.0])
      >>> state = opt.init(x)
      >>> value, grad = jax.value_and_grad(f)(x)
      >>> updates, state = opt.update(grad, state, x, value=value)
      >>> f(gradax.apply_updates(x, updates))
      Array(3.5, dtype=float32)

    References:
      Schaipp, Ohana, Eickenberg, Defazio, Gower, 2023, "MoMo: Momentum Models for Adaptive Learning Rates"
      (arXiv:2305.07583).
    """
    api = "momo"
    check_decay(api, "beta", beta)
    check_non_negative(api, "weight_decay", weight_decay)

    init = _init(MomoState, 1, lower_bound)

    def update(updates, state, params=None, *, value=None, **extra):
        del extra
        hp = _hyperparams(api, learning_rate, weight_decay, lower_bound, state, params, value)
        b = jnp.where(state.count == 0, 0.0, _scalar(beta))

        def moments(g, d, x):
            gc, xc = g.astype(compute_dtype(g.dtype)), x.astype(compute_dtype(x.dtype))
            d_new = b * d + (1 - b) * gc
            return d_new.astype(d.dtype), tensor_vdot(gc, xc), tensor_vdot(d_new, xc), jnp.sum(d_new * d_new)

        exp_avg, *sums = map_n(4, moments, updates, state.exp_avg, params)
        out, barf, gamma, lb = _model_step(
            hp, adapt_lower_bound, (b, 1 - b), 1.0, state, value, sums, updates, exp_avg, params
        )
        return out, MomoState(exp_avg, barf, gamma, lb, safe_int32_increment(state.count))

    return GradientTransformationExtraArgs(init, update)


def momo_adam(
    learning_rate: ScalarOrSchedule = 0.01,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-8,
    lower_bound: ArrayLike = 0.0,
    weight_decay: ScalarOrSchedule = 0.0,
    adapt_lower_bound: bool = False,
) -> GradientTransformationExtraArgs:
    r"""MoMo-Adam: Adam whose step size is capped by a Polyak step on a momentum model of the loss.

    With loss value :math:`f_t` at parameters :math:`x_t`, gradient :math:`g_t` and step :math:`t \ge 1`, the
    averages are bias-corrected by :math:`\rho_t = 1 - \beta_1^t` (:math:`\hat d_t = d_t/\rho_t`, and likewise
    :math:`\hat f_t`, :math:`\hat\gamma_t`):

    .. math::
      d_t = \beta_1 d_{t-1} + (1-\beta_1) g_t, \quad v_t = \beta_2 v_{t-1} + (1-\beta_2) g_t^2, \quad
      D_t = \epsilon + \sqrt{v_t / (1-\beta_2^t)}, \\
      \bar f_t = \beta_1 \bar f_{t-1} + (1-\beta_1) f_t, \quad
      \gamma_t = \beta_1 \gamma_{t-1} + (1-\beta_1)\langle g_t, x_t\rangle, \\
      \tau_t = \min\Big(\eta_t, \frac{\big[(1+\eta_t\lambda)(\hat f_t - \hat\gamma_t - f_*)
      + \langle \hat d_t, x_t\rangle\big]_+}{\langle \hat d_t, \hat d_t / D_t\rangle}\Big), \quad
      x_{t+1} = \frac{x_t - \tau_t \hat d_t / D_t}{1+\eta_t\lambda} .

    :math:`f_*` is ``lower_bound``; with ``adapt_lower_bound`` it is re-estimated every step as
    :math:`\max(f_*^0, h_t - \tfrac12 \tau_t \langle \hat d_t, \hat d_t / D_t\rangle)` with
    :math:`h_t = \hat f_t + \langle \hat d_t, x_t\rangle - \hat\gamma_t`; before the step, a stored bound above
    :math:`c_t = \hat f_t - \hat\gamma_t + \langle \hat d_t, x_t\rangle/(1+\eta_t\lambda)` is reset to
    :math:`\max(f_*^0, c_t/2)`. The weight decay step is the paper's proximal one (Optax 0.2.8 applies
    :math:`x_t/(1+\eta_t\lambda) - \tau_t \hat d_t/D_t`; see ``docs/differences.md``). ``update`` needs ``params``
    and the loss ``value`` (keyword).

    Args:
      learning_rate: :math:`\eta > 0`, the largest step size; a number, an array or a schedule of the step count.
      b1: :math:`\beta_1 \in [0, 1)`, averaging coefficient of the gradient and of the loss model.
      b2: :math:`\beta_2 \in [0, 1)`, averaging coefficient of the squared gradient.
      eps: :math:`\epsilon`, added to the preconditioner :math:`D_t`.
      lower_bound: :math:`f_*`, a lower bound of the loss (0 for most losses).
      weight_decay: :math:`\lambda \ge 0`, decoupled weight decay; a number or a schedule of the step count.
      adapt_lower_bound: estimate the lower bound online (MoMo-Adam*).

    Returns:
      A :class:`GradientTransformationExtraArgs` with state ``MomoAdamState``.

    Example:
      >>> import gradax, jax, jax.numpy as jnp
      >>> f = lambda x: jnp.sum(x**2)
      >>> opt = gradax.contrib.momo_adam(learning_rate=0.1)
      >>> x = jnp.array([1.0, 2.0, 3.0])
      >>> state = opt.init(x)
      >>> value, grad = jax.value_and_grad(f)(x)
      >>> updates, state = opt.update(grad, state, x, value=value)
      >>> f(gradax.apply_updates(x, updates))
      Array(12.830001, dtype=float32)

    References:
      Schaipp, Ohana, Eickenberg, Defazio, Gower, 2023, "MoMo: Momentum Models for Adaptive Learning Rates"
      (arXiv:2305.07583).
    """
    api = "momo_adam"
    check_decay(api, "b1", b1)
    check_decay(api, "b2", b2)
    check_non_negative(api, "weight_decay", weight_decay)

    init = _init(MomoAdamState, 2, lower_bound)

    def update(updates, state, params=None, *, value=None, **extra):
        del extra
        hp = _hyperparams(api, learning_rate, weight_decay, lower_bound, state, params, value)
        # 1 - b from the float32 b (as bias corrections and inject_hyperparams see it; docs/differences.md, Adam family)
        beta1, beta2, e = _scalar(b1), _scalar(b2), _scalar(eps)
        count = safe_int32_increment(state.count)
        rho = 1.0 - beta1**count
        bc2 = 1.0 - beta2**count

        def moments(g, d, v, x):
            gc, xc = g.astype(compute_dtype(g.dtype)), x.astype(compute_dtype(x.dtype))
            d_new = beta1 * d + (1 - beta1) * gc
            v_new = beta2 * v + (1 - beta2) * gc * gc
            d_over_D = d_new / (e + jnp.sqrt(v_new / bc2))
            dx, dd = tensor_vdot(d_new, xc), tensor_vdot(d_new, d_over_D)
            return d_new.astype(d.dtype), v_new.astype(v.dtype), d_over_D, tensor_vdot(gc, xc), dx, dd

        exp_avg, exp_avg_sq, direction, *sums = map_n(6, moments, updates, state.exp_avg, state.exp_avg_sq, params)
        out, barf, gamma, lb = _model_step(
            hp, adapt_lower_bound, (beta1, 1 - beta1), rho, state, value, sums, updates, direction, params
        )
        return out, MomoAdamState(exp_avg, exp_avg_sq, barf, gamma, lb, count)

    return GradientTransformationExtraArgs(init, update)
