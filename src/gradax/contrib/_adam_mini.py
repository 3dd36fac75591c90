"""Adam-mini: Adam with one second-moment value per block (row, attention head or tensor) instead of per entry."""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from .._base import GradientTransformation, GradientTransformationExtraArgs, MaskOrFn, ScalarOrSchedule
from .._checks import argument_error, check_decay, check_int, check_non_negative
from .._hyperparams import hyper_values
from .._maps import map_n
from .._numerics import compute_dtype, leaf_dtype, safe_int32_increment, state_dtype, zeros_for
from .._state import zeros_state_like
from ..transforms._adding import add_decayed_weights
from ..transforms._combining import chain
from ..transforms._masking import broadcast_prefix, resolve_labels
from ..transforms._partition import path_labels
from ..transforms._scaling import scale_by_learning_rate

_BLOCKS = ("element", "row", "head", "tensor")

# The authors' partition (adam-mini 1.1.1), by parameter name, first match wins: biases per element; queries and
# keys per attention head; embeddings, output layer, values, attention output projections and MLPs per row; the
# rest (layer norms...) one value per tensor.
_DEFAULT_RULES = (
    (r"(?i)bias", "element"),
    (r"(?i)k_proj|q_proj|wq|wk|query|key", "head"),
    (
        r"(?i)embed|embd|wte|lm_head|output|final_layer|v_proj|wv|value|o_proj|wo|attn[./]proj|feed_forward|linear|mlp",
        "row",
    ),
)
_default_partition = path_labels(_DEFAULT_RULES, default="tensor")


class ScaleByAdamMiniState(NamedTuple):
    """State of :func:`scale_by_adam_mini`."""

    count: jax.Array  # shape=(), dtype=int32: the number of updates so far
    mu: Any  # like params (mu_dtype; float32 for bf16/f16 params): the momentum
    nu: Any  # one value per block (float32 for bf16/f16 params): shape of the param ("element"), (rows, 1, ...)
    # ("row"), (n_heads, 1) ("head") or () ("tensor")


def _block_shape(api: str, label: Any, shape: tuple[int, ...], n_heads: int | None) -> tuple[int, ...]:
    if label == "element":
        return shape
    if label == "row":
        return shape[:1] + (1,) * max(len(shape) - 1, 0)
    if label == "tensor":
        return ()
    if label == "head":
        if n_heads is None:
            raise argument_error(
                api,
                "n_heads",
                "an int >= 1 when a parameter is labelled 'head'",
                None,
                "Pass n_heads=<number of heads>",
            )
        size = 1
        for d in shape:
            size *= d
        if size % n_heads:
            raise argument_error(
                api,
                "n_heads",
                f"a divisor of the size of every 'head' parameter (a parameter has shape {shape})",
                n_heads,
                "Label that parameter 'row' or 'tensor', or pass the right head count",
            )
        return (n_heads, 1)
    raise argument_error(
        api, "partition", f"a tree or function of labels in {_BLOCKS}", label, "Use one of those labels per parameter"
    )


def _mean_sq(label: Any, g2: jax.Array, n_heads: int | None) -> jax.Array:
    if label == "element":
        return g2
    if label == "row":
        return jnp.mean(g2, axis=tuple(range(1, g2.ndim)), keepdims=True) if g2.ndim > 1 else g2
    if label == "tensor":
        return jnp.mean(g2)
    return jnp.mean(g2.reshape(n_heads, -1), axis=1, keepdims=True)


def scale_by_adam_mini(
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-8,
    *,
    n_heads: int | None = None,
    partition: Any = None,
    mu_dtype: Any | None = None,
) -> GradientTransformation:
    r"""Rescales updates with Adam-mini: Adam whose second moment is one number per block of parameters.

    Each parameter is cut into blocks by its label, and each block :math:`B` keeps the mean of the squared
    gradient over the block instead of one value per entry:

    .. math::
      m_t = \beta_1 m_{t-1} + (1-\beta_1) g_t, \qquad
      v_{t,B} = \beta_2 v_{t-1,B} + (1-\beta_2) \tfrac{1}{|B|} \textstyle\sum_{i \in B} g_{t,i}^2, \qquad
      u_{t,i} = \frac{m_{t,i} / (1-\beta_1^t)}{\sqrt{v_{t,B(i)} / (1-\beta_2^t)} + \varepsilon}.

    Labels (the ``partition``, a label tree or a function of the params, as for :func:`gradax.partition`):
    ``"element"`` (Adam: a block per entry), ``"row"`` (a block per index of the first axis: embedding and output
    rows, output neurons of a ``(out, in)`` matrix), ``"head"`` (the parameter split into ``n_heads`` equal
    consecutive chunks of its row-major flattening: attention heads stacked along the first axis) and ``"tensor"``
    (one block). The default partition follows the authors' rules on the parameters' key paths (first match, case
    insensitive): ``bias`` -> element; ``q_proj|k_proj|wq|wk|query|key`` -> head; ``embed|embd|wte|lm_head|output|
    final_layer|v_proj|wv|value|o_proj|wo|attn.proj|feed_forward|linear|mlp`` -> row; anything else -> tensor. Use it
    to train transformers with about half of AdamW's optimizer memory at AdamW's quality.

    Args:
      b1: :math:`\beta_1 \in [0, 1)`, decay of the momentum.
      b2: :math:`\beta_2 \in [0, 1)`, decay of the block second moments.
      eps: :math:`\varepsilon \ge 0`, added to the denominator.
      n_heads: the number of attention heads of ``"head"`` parameters (an int >= 1; needed only with such labels).
      partition: a label tree or a function of the params giving each parameter's block rule; ``None`` uses the
        default rules above.
      mu_dtype: dtype of the momentum.

    Returns:
      A :class:`GradientTransformation` with state :class:`ScaleByAdamMiniState`.

    Raises:
      ValueError: at ``init``, for an unknown label, or a ``"head"`` parameter without a suitable ``n_heads``.

    Example:
      >>> import gradax, jax, jax.numpy as jnp
      >>> params = {"mlp": jnp.zeros((2, 3)), "ln": jnp.zeros(3)}
      >>> tx = gradax.contrib.scale_by_adam_mini()
      >>> jax.tree.map(jnp.shape, tx.init(params).nu)
      {'ln': (), 'mlp': (2, 1)}

    References:
      Zhang et al., 2024, "Adam-mini: Use Fewer Learning Rates To Gain More", https://arxiv.org/abs/2406.16793.
    """
    api = "scale_by_adam_mini"
    check_decay(api, "b1", b1)
    check_decay(api, "b2", b2)
    check_non_negative(api, "eps", eps)
    if n_heads is not None:
        check_int(api, "n_heads", n_heads, low=1)
    rules = _default_partition if partition is None else partition

    def labels_of(tree):
        return broadcast_prefix(resolve_labels(api, rules, tree, arg="partition"), tree)

    def init(params):
        def nu_leaf(p, label):
            shape = tuple(np.shape(p))
            block = _block_shape(api, label, shape, n_heads)
            dtype = state_dtype(leaf_dtype(p))
            return zeros_for(p, dtype) if block == shape else jnp.zeros(block, dtype)

        labels = labels_of(params)
        return ScaleByAdamMiniState(
            count=jnp.zeros([], jnp.int32),
            mu=zeros_state_like(params, mu_dtype),
            nu=jax.tree.map(nu_leaf, params, labels),
        )

    def update(updates, state, params=None):
        del params
        beta1, beta2, e = hyper_values(b1, b2, eps)
        count = safe_int32_increment(state.count)
        debias1 = 1 - beta1**count
        debias2 = 1 - beta2**count

        def leaf(g, label, m, v):
            gc = g.astype(compute_dtype(g.dtype))
            m_new = beta1 * m + (1 - beta1) * gc
            v_new = beta2 * v + (1 - beta2) * _mean_sq(label, gc * gc, n_heads)
            denom = jnp.sqrt(v_new / debias2) + e
            if label == "head":
                u = ((m_new / debias1).reshape(n_heads, -1) / denom).reshape(g.shape)
            else:
                u = (m_new / debias1) / denom
            return u.astype(g.dtype), m_new.astype(m.dtype), v_new.astype(v.dtype)

        out, mu, nu = map_n(3, leaf, updates, labels_of(updates), state.mu, state.nu)
        return out, ScaleByAdamMiniState(count=count, mu=mu, nu=nu)

    return GradientTransformation(init, update)


def adam_mini(
    learning_rate: ScalarOrSchedule = 1e-3,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-8,
    weight_decay: ScalarOrSchedule = 0.0,
    mask: MaskOrFn = None,
    *,
    n_heads: int | None = None,
    partition: Any = None,
    mu_dtype: Any | None = None,
    cautious_weight_decay: bool = False,
) -> GradientTransformationExtraArgs:
    r"""The Adam-mini optimizer with decoupled weight decay.

    .. math::
      \theta_t = \theta_{t-1} - \eta_t \left(u_t + \lambda_t \theta_{t-1}\right),

    with :math:`u_t` from :func:`scale_by_adam_mini`. (The authors' package skips the decay of parameters whose
    name contains ``norm``, ``ln`` or ``bias``; pass such a ``mask`` for the same.)

    Args:
      learning_rate: :math:`\eta`, a number, an array or a schedule of the step count.
      b1: :math:`\beta_1 \in [0, 1)`.
      b2: :math:`\beta_2 \in [0, 1)`.
      eps: :math:`\varepsilon \ge 0`.
      weight_decay: :math:`\lambda \ge 0`, a number, an array or a schedule.
      mask: which leaves to decay (a tree of booleans or a function of the params); ``None`` decays all.
      n_heads: the number of attention heads of ``"head"`` parameters.
      partition: the block rule of each parameter (see :func:`scale_by_adam_mini`).
      mu_dtype: dtype of the momentum.
      cautious_weight_decay: decay only where the update and the parameter have the same sign.

    Returns:
      A :class:`GradientTransformationExtraArgs`.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> opt = gradax.contrib.adam_mini(learning_rate=0.1, eps=0.0, partition="tensor")
      >>> opt.update(jnp.array([3.0, -4.0]), opt.init(jnp.zeros(2)), jnp.zeros(2))[0]
      Array([-0.08485283,  0.11313709], dtype=float32)

    References:
      Zhang et al., 2024, "Adam-mini: Use Fewer Learning Rates To Gain More", https://arxiv.org/abs/2406.16793.
    """
    return chain(
        scale_by_adam_mini(b1, b2, eps, n_heads=n_heads, partition=partition, mu_dtype=mu_dtype),
        add_decayed_weights(weight_decay, mask, cautious=cautious_weight_decay),
        scale_by_learning_rate(learning_rate),
    )
