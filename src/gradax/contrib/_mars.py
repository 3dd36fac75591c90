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


class MarsScalars(NamedTuple):
    """The scalars of one MARS step (float32, float64 under x64), shared by :func:`scale_by_mars` and
    ``gradax.fused.mars`` so that both compute them with the same operations."""

    beta1: jax.Array
    beta2: jax.Array
    eps: jax.Array
    bound: jax.Array  # max_norm
    scale: jax.Array  # gamma * beta1 / (1 - beta1), the weight of the gradient change
    inv1: jax.Array  # 1 / (1 - beta1**t)
    inv2: jax.Array  # 1 / (1 - beta2**t)

    @staticmethod
    def at(b1: Any, b2: Any, gamma: Any, eps: Any, max_norm: Any, count: jax.Array) -> "MarsScalars":
        """The scalars at step ``count`` (already incremented)."""
        beta1, beta2, gam, e, bound = hyper_values(b1, b2, gamma, eps, max_norm)
        inv1, inv2 = 1 / (1 - beta1**count), 1 / (1 - beta2**count)
        return MarsScalars(beta1, beta2, e, bound, gam * beta1 / (1 - beta1), inv1, inv2)


def mars_clip(g: jax.Array, last: jax.Array, scale: jax.Array, bound: jax.Array) -> jax.Array:
    """The factor that clips one leaf's corrected gradient to norm ``bound``: :math:`1 / \\max(1, \\lVert c
    \\rVert / C)` (NaN for a NaN norm, 0 for an infinite one).

    The corrected gradient is written here as :math:`g + (-s)(g_{t-1} - g)`, the same number as the element-wise
    passes' :math:`g + s (g - g_{t-1})` but not the same expression, so that XLA does not share one temporary array
    between them: the reduction reads ``g`` and ``last`` once, and each element-wise pass recomputes its own.
    ``gradax.fused.mars``'s kernel sums the same float32 squares, in float64 (docs/differences.md).
    """
    gc = g.astype(compute_dtype(g.dtype))
    d = gc + (-scale) * (last - gc)
    return 1 / jnp.maximum(1.0, jnp.sqrt(jnp.sum(d * d)) / bound)


def corrected(g: jax.Array, last: jax.Array, scale: jax.Array, bound: jax.Array) -> tuple[jax.Array, ...]:
    """``(gc, clip, c)``: one leaf's gradient in its compute dtype, its clipping factor and the clipped corrected
    gradient :math:`c_t`."""
    gc = g.astype(compute_dtype(g.dtype))
    clip = mars_clip(g, last, scale, bound)
    return gc, clip, (gc + scale * (gc - last)) * clip


def kept(gc: jax.Array, clip: jax.Array, *new_state: jax.Array) -> jax.Array:
    """The gradient to keep as ``last_grad``: ``gc``, written so that XLA updates the donated buffer in place.

    ``~(clip > 1)`` always holds (``clip`` is in [0, 1] or NaN), so the select always takes ``gc``; but it reads the
    new moments (the element-wise passes that read the old ``last_grad``), which orders this write after every read
    of the old value. A plain ``gc`` leaves them unordered, and XLA then copies the old ``last_grad`` aside and the
    gradient into its buffer: two single-threaded copies per leaf, more than the rest of the step.
    """
    keep = ~(clip > 1)
    for x in new_state:
        keep = keep | (x == new_state[0])
    return jnp.where(keep, gc, 0)


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
        count = safe_int32_increment(state.count)
        k = MarsScalars.at(b1, b2, gamma, eps, max_norm, count)

        def adamw_leaf(g, m, v, last):
            gc, clip, c = corrected(g, last, k.scale, k.bound)
            m_new = k.beta1 * m + (1 - k.beta1) * c
            v_new = k.beta2 * v + (1 - k.beta2) * c * c
            u = (m_new * k.inv1) / (jnp.sqrt(v_new * k.inv2) + k.eps)
            keep = kept(gc, clip, m_new, v_new).astype(last.dtype)
            return u.astype(g.dtype), m_new.astype(m.dtype), v_new.astype(v.dtype), keep

        def lion_leaf(g, m, last):
            gc, clip, c = corrected(g, last, k.scale, k.bound)
            m_new = k.beta1 * m + (1 - k.beta1) * c
            return jnp.sign(m_new).astype(g.dtype), m_new.astype(m.dtype), kept(gc, clip, m_new).astype(last.dtype)

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
