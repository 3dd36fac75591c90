"""MARS: variance-reduced AdamW and Lion, with a gradient correction scaled by ``gamma`` and clipped to unit norm."""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from .._base import GradientTransformation, GradientTransformationExtraArgs, MaskOrFn, ScalarOrSchedule
from .._checks import check_decay, check_non_negative, check_one_of, check_positive
from .._hyperparams import hyper_values
from .._maps import map_n
from .._numerics import compute_dtype, safe_int32_increment
from .._state import zeros_state_like
from ..transforms._adding import add_decayed_weights
from ..transforms._combining import chain
from ..transforms._scaling import scale_by_learning_rate

_VARIANTS = ("adamw", "lion")


class ScaleByMarsState(NamedTuple):
    """State of :func:`scale_by_mars`."""

    count: jax.Array  # shape=(), dtype=int32: the number of updates so far
    mu: Any  # like params (mu_dtype; float32 for bf16/f16 params): the momentum of the corrected gradient
    nu: Any  # like params (float32 for bf16/f16 params): its second moment; () for variant="lion"
    last_grad: Any  # like params (float32 for bf16/f16 params): the previous step's gradient (zeros at init)


def scale_by_mars(
    b1: ArrayLike = 0.95,
    b2: ArrayLike = 0.99,
    gamma: ArrayLike = 0.025,
    eps: ArrayLike = 1e-8,
    *,
    variant: str = "adamw",
    max_norm: ArrayLike = 1.0,
    mu_dtype: Any | None = None,
) -> GradientTransformation:
    r"""Rescales updates with MARS: an AdamW (or Lion) step on a variance-reduced gradient.

    Each step corrects the gradient with the change since the previous step's gradient (a cheap stand-in for the
    STORM variance reduction, evaluated at one point per step), clips the correction to unit norm per leaf, and
    feeds it to Adam's moments (or to Lion's sign):

    .. math::
      c_t = g_t + \gamma \frac{\beta_1}{1-\beta_1} (g_t - g_{t-1}), \qquad
      c_t \leftarrow \frac{c_t}{\max(1, \lVert c_t \rVert_2 / C)}, \\
      m_t = \beta_1 m_{t-1} + (1-\beta_1) c_t, \qquad v_t = \beta_2 v_{t-1} + (1-\beta_2) c_t^2, \\
      u_t = \frac{m_t / (1-\beta_1^t)}{\sqrt{v_t / (1-\beta_2^t)} + \varepsilon} \ \ (\text{adamw}), \qquad
      u_t = \mathrm{sign}(m_t) \ \ (\text{lion}),

    with :math:`g_0 = 0` and :math:`C` = ``max_norm``. Use it where AdamW (or Lion) trains a large model on noisy
    minibatches: the paper reports faster GPT-2 pre-training. ``gamma=0`` gives AdamW (Lion with one beta) on
    norm-clipped gradients.

    Args:
      b1: :math:`\beta_1 \in [0, 1)`, decay of the momentum.
      b2: :math:`\beta_2 \in [0, 1)`, decay of the second moment (unused by ``variant="lion"``).
      gamma: :math:`\gamma \ge 0`, the scale of the variance-reduction term.
      eps: :math:`\varepsilon \ge 0`, added to the denominator.
      variant: ``"adamw"`` or ``"lion"``.
      max_norm: :math:`C > 0`, the bound on the norm of each leaf's corrected gradient (the paper uses 1).
      mu_dtype: dtype of the momentum.

    Returns:
      A :class:`GradientTransformation` with state :class:`ScaleByMarsState`.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> tx = gradax.contrib.scale_by_mars()
      >>> tx.update(jnp.array([0.3, -0.4]), tx.init(jnp.zeros(2)))[0]
      Array([ 1., -1.], dtype=float32)

    References:
      Yuan et al., 2024, "MARS: Unleashing the Power of Variance Reduction for Training Large Models",
      https://arxiv.org/abs/2411.10438.
    """
    api = "scale_by_mars"
    check_decay(api, "b1", b1)
    check_decay(api, "b2", b2)
    check_non_negative(api, "gamma", gamma)
    check_non_negative(api, "eps", eps)
    check_positive(api, "max_norm", max_norm)
    check_one_of(api, "variant", variant, _VARIANTS)
    lion = variant == "lion"

    def init(params):
        return ScaleByMarsState(
            count=jnp.zeros([], jnp.int32),
            mu=zeros_state_like(params, mu_dtype),
            nu=() if lion else zeros_state_like(params),
            last_grad=zeros_state_like(params),
        )

    def update(updates, state, params=None):
        del params
        beta1, beta2, gam, e, bound = hyper_values(b1, b2, gamma, eps, max_norm)
        count = safe_int32_increment(state.count)
        debias1 = 1 - beta1**count
        debias2 = 1 - beta2**count
        scale = gam * beta1 / (1 - beta1)

        def corrected(g, last):
            gc = g.astype(compute_dtype(g.dtype))
            c = gc + scale * (gc - last)
            norm = jnp.sqrt(jnp.sum(c * c))
            return gc, c / jnp.maximum(1.0, norm / bound)

        def adamw_leaf(g, m, v, last):
            gc, c = corrected(g, last)
            m_new = beta1 * m + (1 - beta1) * c
            v_new = beta2 * v + (1 - beta2) * c * c
            u = (m_new / debias1) / (jnp.sqrt(v_new / debias2) + e)
            return u.astype(g.dtype), m_new.astype(m.dtype), v_new.astype(v.dtype), gc.astype(last.dtype)

        def lion_leaf(g, m, last):
            gc, c = corrected(g, last)
            m_new = beta1 * m + (1 - beta1) * c
            return jnp.sign(m_new).astype(g.dtype), m_new.astype(m.dtype), gc.astype(last.dtype)

        if lion:
            out, mu, last = map_n(3, lion_leaf, updates, state.mu, state.last_grad)
            nu = state.nu
        else:
            out, mu, nu, last = map_n(4, adamw_leaf, updates, state.mu, state.nu, state.last_grad)
        return out, ScaleByMarsState(count=count, mu=mu, nu=nu, last_grad=last)

    return GradientTransformation(init, update)


def mars(
    learning_rate: ScalarOrSchedule = 3e-3,
    b1: ArrayLike = 0.95,
    b2: ArrayLike = 0.99,
    gamma: ArrayLike = 0.025,
    eps: ArrayLike = 1e-8,
    weight_decay: ScalarOrSchedule = 0.0,
    mask: MaskOrFn = None,
    *,
    variant: str = "adamw",
    max_norm: ArrayLike = 1.0,
    mu_dtype: Any | None = None,
    cautious_weight_decay: bool = False,
) -> GradientTransformationExtraArgs:
    r"""The MARS optimizer (MARS-AdamW or MARS-Lion) with decoupled weight decay.

    .. math::
      \theta_t = \theta_{t-1} - \eta_t \left(u_t + \lambda_t \theta_{t-1}\right),

    with :math:`u_t` from :func:`scale_by_mars`.

    Args:
      learning_rate: :math:`\eta`, a number, an array or a schedule of the step count.
      b1: :math:`\beta_1 \in [0, 1)`.
      b2: :math:`\beta_2 \in [0, 1)`.
      gamma: :math:`\gamma \ge 0`, the scale of the variance-reduction term.
      eps: :math:`\varepsilon \ge 0`.
      weight_decay: :math:`\lambda \ge 0`, a number, an array or a schedule.
      mask: which leaves to decay (a tree of booleans or a function of the params); ``None`` decays all.
      variant: ``"adamw"`` or ``"lion"``.
      max_norm: the bound on the norm of each leaf's corrected gradient.
      mu_dtype: dtype of the momentum.
      cautious_weight_decay: decay only where the update and the parameter have the same sign.

    Returns:
      A :class:`GradientTransformationExtraArgs`.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> opt = gradax.contrib.mars(learning_rate=0.1, variant="lion")
      >>> opt.update(jnp.array([0.3, -0.4]), opt.init(jnp.zeros(2)), jnp.zeros(2))[0]
      Array([-0.1,  0.1], dtype=float32)

    References:
      Yuan et al., 2024, "MARS: Unleashing the Power of Variance Reduction for Training Large Models",
      https://arxiv.org/abs/2411.10438.
    """
    return chain(
        scale_by_mars(b1, b2, gamma, eps, variant=variant, max_norm=max_norm, mu_dtype=mu_dtype),
        add_decayed_weights(weight_decay, mask, cautious=cautious_weight_decay),
        scale_by_learning_rate(learning_rate),
    )
