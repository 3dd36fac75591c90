"""Registry entries for L-BFGS and the line searches (optimizers/_lbfgs.py, transforms/_linesearch.py), and the
linear-algebra and second-order helpers (_linear_algebra.py, second_order/)."""

import jax
import jax.numpy as jnp

from . import Entry


def _value_fn(params):
    """The battery's generic objective: half the sum of squares over the whole tree, in float32 or more."""
    leaves = jax.tree.leaves(params)
    parts = [0.5 * jnp.sum(jnp.square(jnp.abs(x).astype(jnp.promote_types(x.dtype, jnp.float32)))) for x in leaves]
    return sum(parts[1:], parts[0]) if parts else jnp.zeros([])


def _extra_args(params, grads, lib):
    del lib
    return {"value": _value_fn(params), "grad": grads, "value_fn": _value_fn}


ENTRIES = [
    Entry("scale_by_lbfgs", {"memory_size": 4}, needs_params=True),
    Entry("scale_by_lbfgs", {"memory_size": 3, "scale_init_precond": False}, needs_params=True),
    Entry(
        "lbfgs",
        {"memory_size": 5},
        needs_params=True,
        extra_args=_extra_args,
        skip={
            "masked": "masked() masks updates, state and params but not the extra args the line search uses (grad, value_fn), as in Optax"
        },
    ),
    Entry(
        "lbfgs",
        make=lambda ox: ox.lbfgs(learning_rate=lambda c: 0.1 / (1.0 + c), linesearch=None),
        needs_params=True,
        extra_args=_extra_args,
        inject=False,
    ),
    Entry(
        "scale_by_zoom_linesearch",
        make=lambda ox: ox.chain(ox.scale(-1.0), ox.scale_by_zoom_linesearch(max_linesearch_steps=10)),
        needs_params=True,
        extra_args=_extra_args,
        inject=False,
        skip={
            "masked": "masked() masks updates, state and params but not the extra args the line search uses (grad, value_fn), as in Optax",
            "multisteps": "MultiSteps passes the last micro-batch's extra arg grad, not the mean the line search sees",
        },
    ),
    Entry(
        "scale_by_backtracking_linesearch",
        make=lambda ox: ox.chain(
            ox.scale(-1.0), ox.scale_by_backtracking_linesearch(max_backtracking_steps=10, store_grad=True)
        ),
        needs_params=True,
        extra_args=_extra_args,
        inject=False,
        skip={
            "masked": "masked() masks updates, state and params but not the extra args the line search uses (grad, value_fn), as in Optax"
        },
    ),
]

COVERED = {
    **{name: "tests/optimizers/test_lbfgs.py" for name in ["ScaleByLBFGSState"]},
    **{
        name: "tests/optimizers/test_linesearch.py"
        for name in [
            "ScaleByBacktrackingLinesearchState",
            "ScaleByZoomLinesearchState",
            "ZoomLinesearchInfo",
            "value_and_grad_from_state",
        ]
    },
    **{
        name: "tests/test_linear_algebra.py"
        for name in ["matrix_inverse_pth_root", "power_iteration", "multi_normal", "nnls"]
    },
    **{
        name: "tests/second_order/test_second_order.py"
        for name in ["second_order.hvp", "second_order.hessian_diag", "second_order.fisher_diag"]
    },
}
