"""Scion (Pethick et al., 2025): momentum followed by a linear minimization oracle (LMO) in a norm chosen per layer.

Each leaf gets the LMO of the operator norm of its layer type, named by a label (a label tree, or a function of the
params such as :func:`gradax.transforms.path_labels`), on the shared matrix view of
:mod:`gradax.contrib._matrix_shapes` (``fan_in x fan_out``; stacked layers one matrix at a time):

* ``'spectral'`` (hidden matrices, RMS -> RMS norm): :math:`\\sqrt{d_{out}/d_{in}}\\, U V^\\top`, by Newton-Schulz;
* ``'colnorm'`` (embeddings, 1 -> RMS norm): each input row rescaled to RMS 1 (each token's embedding vector);
* ``'rownorm'`` (each output column rescaled to norm :math:`1/\\sqrt{d_{in}}`);
* ``'sign'`` (output heads, RMS -> inf norm): :math:`\\mathrm{sign}(d) / d_{in}`;
* ``'bias'`` (biases, gains, scalars: RMS norm): :math:`d / \\mathrm{RMS}(d)`;
* ``'none'``: the momentum itself.

Default labels: ``'spectral'`` for 2-D leaves and for leaves given :class:`MuonDimensionNumbers`, ``'bias'`` for
every other leaf, so scalars and vectors take the normalized step of the RMS norm (the paper's choice for biases
and gains) and never a matrix oracle.
"""

import math
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from .._base import GradientTransformation, Params, ScalarOrSchedule
from .._checks import argument_error, check_int, check_interval, check_non_negative, check_one_of, check_positive
from .._hyperparams import as_value, is_concrete, is_schedule
from .._numerics import compute_dtype, safe_int32_increment, state_dtype
from ..transforms._adding import add_decayed_weights
from ..transforms._combining import chain
from ..transforms._masking import resolve_labels
from ..transforms._scaling import scale_by_learning_rate
from ._matrix_shapes import MuonDimensionNumbers, default_dims, matrix_dims_tree, to_matrices
from ._muon import _DEFAULT_NS_COEFFS, _ns_coeffs_array, _ns_dtype, orthogonalize_leaves

_NORMS = ("spectral", "colnorm", "rownorm", "sign", "bias", "none")
_MATRIX_NORMS = ("spectral", "colnorm", "rownorm", "sign")


class ScionState(NamedTuple):
    """State of :func:`scale_by_scion`: the step ``count`` (int32) and the momentum ``mu`` (the params' shapes,
    float32 for bf16/f16 params)."""

    count: jax.Array
    mu: Any


def _lmo(norm: str, d: jax.Array, dims, eps, polar: jax.Array | None = None) -> jax.Array:
    """The (positive) LMO direction of ``d`` for a unit ball of ``norm``; the update is its negative. For the
    spectral norm ``polar`` is ``d``'s orthogonalized matrices (:func:`orthogonalize_leaves`, all leaves at once)."""
    if norm == "none":
        return d
    if norm == "bias":
        return d / (jnp.sqrt(jnp.mean(d * d)) + eps)
    m, restore = to_matrices(d, dims)
    fan_in, fan_out = m.shape[1], m.shape[2]
    if norm == "spectral":
        if polar is None:
            raise ValueError("scale_by_scion: the spectral LMO takes the orthogonalized momentum")
        out = to_matrices(polar, dims)[0] * (math.sqrt(fan_out / fan_in) if fan_in else 1.0)  # fan_in 0: empty leaf
    elif norm == "colnorm":
        out = m / (jnp.sqrt(jnp.sum(m * m, axis=2, keepdims=True)) / math.sqrt(fan_out) + eps)
    elif norm == "rownorm":
        out = m / (jnp.sqrt(jnp.sum(m * m, axis=1, keepdims=True)) * math.sqrt(fan_in) + eps)
    else:  # sign
        out = jnp.sign(m) / fan_in
    return restore(out)


def _labels(api, layer_norms, user_dims, params):
    dims = matrix_dims_tree(user_dims, params)
    if layer_norms is None:
        norms = jax.tree.map(
            lambda d, sub: jax.tree.map(lambda _: "bias" if d is None else "spectral", sub),
            dims,
            params,
            is_leaf=lambda x: x is None or isinstance(x, MuonDimensionNumbers),
        )
    else:
        norms = resolve_labels(api, layer_norms, params, "layer_norms")
        norms = jax.tree.map(lambda r, sub: jax.tree.map(lambda _: r, sub), norms, params)
    return norms, dims


def scale_by_scion(
    momentum: ArrayLike = 0.1,
    layer_norms: Any = None,
    scales: ArrayLike | Mapping[str, ArrayLike] = 1.0,
    ns_coeffs: Any = _DEFAULT_NS_COEFFS,
    ns_steps: int = 5,
    eps: ArrayLike = 1e-8,
    mu_dtype: Any | None = None,
    *,
    weight_dimension_numbers: MuonDimensionNumbers | Params | Callable[[Params], Any] | None = None,
    ns_dtype: Any | None = None,
) -> GradientTransformation:
    r"""Scion's direction: an averaged gradient passed through the LMO of each layer's norm, times its radius.

    .. math::
        d_t = (1 - \alpha) d_{t-1} + \alpha g_t, \qquad u_t = \rho_\ell \, \mathrm{lmo}_\ell(d_t),

    with :math:`\mathrm{lmo}_\ell` the (sign-flipped) linear minimization oracle of layer type :math:`\ell` (see
    the module docstring: ``'spectral'``, ``'colnorm'``, ``'rownorm'``, ``'sign'``, ``'bias'``, ``'none'``) and
    :math:`\rho_\ell` its radius.

    Args:
      momentum: :math:`\alpha` in :math:`(0, 1]`, the weight of the new gradient (1 is no momentum).
      layer_norms: a label tree (the params tree or a prefix of it) or a function of the params returning one
        (e.g. :func:`gradax.transforms.path_labels`), with the norm names above; None: ``'spectral'`` for matrices,
        ``'bias'`` for the rest.
      scales: the radius :math:`\rho`, one number for all, or a mapping from norm name to radius (1 where absent).
      ns_coeffs, ns_steps, ns_dtype: the Newton-Schulz iteration of ``'spectral'`` (as in :func:`scale_by_muon`).
      eps: added to the norms divided by.
      mu_dtype: dtype of the momentum (default: the params', float32 for bf16/f16).
      weight_dimension_numbers: :class:`MuonDimensionNumbers` (a tree of them, None for non-matrices, or a
        function of the params); default: 2-D leaves are matrices.

    Returns:
      A :class:`GradientTransformation` with state :class:`ScionState`.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> tx = gradax.contrib.scale_by_scion(momentum=1.0, layer_norms="sign")
      >>> tx.update(jnp.array([[2.0, -3.0]]), tx.init(jnp.zeros((1, 2))))[0]
      Array([[ 1., -1.]], dtype=float32)

    References:
      Pethick et al., `Training Deep Learning Models with Norm-Constrained LMOs <https://arxiv.org/abs/2502.07529>`_,
      2025.
    """
    api = "scale_by_scion"
    ns_dtype = _ns_dtype(api, ns_dtype)
    check_interval(api, "momentum", momentum, 0.0, 1.0, low_closed=False)
    check_int(api, "ns_steps", ns_steps, low=1)
    check_non_negative(api, "eps", eps)
    _ns_coeffs_array(api, ns_coeffs, ns_steps)
    if isinstance(scales, Mapping):
        for name, value in scales.items():
            check_one_of(api, "scales", name, _NORMS)
            check_positive(api, "scales", value)
    else:
        check_positive(api, "scales", scales)
    if isinstance(layer_norms, str):
        check_one_of(api, "layer_norms", layer_norms, _NORMS)

    def init(params):
        mu = jax.tree.map(lambda p: jnp.zeros(np.shape(p), state_dtype(p.dtype, mu_dtype)), params)
        return ScionState(jnp.zeros([], jnp.int32), mu)

    def update(updates, state, params=None):
        del params
        norms, dims = _labels(api, layer_norms, weight_dimension_numbers, updates)
        a = as_value(momentum)
        coeffs = _ns_coeffs_array(api, ns_coeffs, ns_steps)

        def average(g, m, norm, d):
            check_one_of(api, "layer_norms", norm, _NORMS)
            cd = compute_dtype(jnp.result_type(g, m))
            if norm in _MATRIX_NORMS and d is None:
                d = default_dims(g.ndim, api, f"Give it the 'bias' norm, not {norm!r}.")
            return (1 - a) * m.astype(cd) + a * g.astype(cd), d

        def leaf(g, m, norm, m_new, d, polar):
            cd = m_new.dtype
            rho = scales.get(norm, 1.0) if isinstance(scales, Mapping) else scales
            u = as_value(rho, cd) * _lmo(norm, m_new, d, as_value(eps, cd), polar)
            return u.astype(g.dtype), m_new.astype(m.dtype)

        flat_u, treedef = jax.tree.flatten(updates)
        flat_m, flat_n = treedef.flatten_up_to(state.mu), treedef.flatten_up_to(norms)
        moments = [average(*args) for args in zip(flat_u, flat_m, flat_n, treedef.flatten_up_to(dims))]
        spectral = [k for k, n in enumerate(flat_n) if n == "spectral"]
        spectral_moments = [moments[k] for k in spectral]
        polars = dict(
            zip(
                spectral,
                orthogonalize_leaves(
                    [m for m, _ in spectral_moments],
                    [d for _, d in spectral_moments],
                    coeffs,
                    ns_steps,
                    "frobenius",
                    1e-7,
                    ns_dtype,
                ),
            )
        )
        outs = [leaf(g, m, n, *moments[k], polars.get(k)) for k, (g, m, n) in enumerate(zip(flat_u, flat_m, flat_n))]
        new_u = treedef.unflatten([o[0] for o in outs])
        return new_u, ScionState(safe_int32_increment(state.count), treedef.unflatten([o[1] for o in outs]))

    return GradientTransformation(init, update)


def scion(
    learning_rate: ScalarOrSchedule,
    momentum: ArrayLike = 0.1,
    layer_norms: Any = None,
    scales: ArrayLike | Mapping[str, ArrayLike] = 1.0,
    weight_decay: ScalarOrSchedule = 0.0,
    mask: Any = None,
    *,
    constrained: bool = False,
    ns_coeffs: Any = _DEFAULT_NS_COEFFS,
    ns_steps: int = 5,
    eps: ArrayLike = 1e-8,
    mu_dtype: Any | None = None,
    weight_dimension_numbers: Any = None,
    ns_dtype: Any | None = None,
) -> GradientTransformation:
    r"""Scion: unconstrained (uSCG) or constrained (SCG) stochastic conditional gradient with per-layer norms.

    .. math::
        \theta_{t+1} = \theta_t - \eta_t \left(\rho_\ell\, \mathrm{lmo}_\ell(d_t) + \lambda \theta_t\right)

    with :math:`d_t` and the LMOs of :func:`scale_by_scion`. ``constrained=True`` is SCG,
    :math:`\theta_{t+1} = (1 - \eta_t)\theta_t - \eta_t \rho_\ell \mathrm{lmo}_\ell(d_t)` (:math:`\lambda = 1`), which
    keeps every layer inside its norm ball of radius :math:`\rho_\ell`.

    Args:
      learning_rate: :math:`\eta`, a number or a schedule (in :math:`[0, 1]` for ``constrained``).
      momentum, layer_norms, scales, ns_coeffs, ns_steps, eps, mu_dtype, weight_dimension_numbers, ns_dtype: see
        :func:`scale_by_scion`.
      weight_decay: :math:`\lambda >= 0` (a number or a schedule) for uSCG; must be 0 with ``constrained``.
      mask: where weight decay applies (a tree of bools or a function of the params).
      constrained: SCG instead of uSCG.

    Returns:
      A :class:`GradientTransformation`.

    Example:
      >>> import gradax, jax.numpy as jnp
      >>> params = {"w": jnp.ones((2, 2)), "b": jnp.ones(2)}
      >>> opt = gradax.contrib.scion(0.1, layer_norms={"w": "spectral", "b": "bias"})
      >>> u, _ = opt.update(params, opt.init(params), params)
      >>> u["b"]
      Array([-0.1, -0.1], dtype=float32)

    References:
      Pethick et al., `Training Deep Learning Models with Norm-Constrained LMOs <https://arxiv.org/abs/2502.07529>`_,
      2025.
    """
    api = "scion"
    _ns_dtype(api, ns_dtype)
    check_non_negative(api, "learning_rate", learning_rate)
    check_non_negative(api, "weight_decay", weight_decay)
    if constrained and (is_schedule(weight_decay) or (is_concrete(weight_decay) and np.any(np.asarray(weight_decay)))):
        raise argument_error(
            api, "weight_decay", "0 with constrained=True", weight_decay, "SCG already decays by the learning rate"
        )
    return chain(
        scale_by_scion(
            momentum,
            layer_norms,
            scales,
            ns_coeffs,
            ns_steps,
            eps,
            mu_dtype,
            weight_dimension_numbers=weight_dimension_numbers,
            ns_dtype=ns_dtype,
        ),
        add_decayed_weights(1.0 if constrained else weight_decay, mask),
        scale_by_learning_rate(learning_rate),
    )
