"""gradax.contrib.came against the authors' came_pytorch.CAME (float64, 20 steps)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradax

from ._torch_reference import assert_runs_close, problem, run_gradax, run_torch

torch = pytest.importorskip("torch")
came_pytorch = pytest.importorskip("came_pytorch")

# "u", "x": leading axes of length 1 (dropped before the reductions, for XLA:CPU's speed)
SHAPES = {"w": (4, 3), "t": (2, 3, 5), "b": (3,), "u": (1, 4, 3), "x": (2, 1, 3, 4)}


@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
def test_came_matches_came_pytorch(weight_decay):
    params, grads = problem(SHAPES, steps=20, spikes={7: 5.0})
    ours, state = run_gradax(gradax.contrib.came(1e-2, weight_decay=weight_decay), params, grads)
    theirs, opt = run_torch(lambda ps: came_pytorch.CAME(ps, lr=1e-2, weight_decay=weight_decay), params, grads)
    assert_runs_close(ours, theirs, rtol=1e-11, atol=1e-12)
    state = state[0]
    for k, p in zip(SHAPES, opt.param_groups[0]["params"]):
        ref = opt.state[p]
        np.testing.assert_allclose(state.mu[k], ref["exp_avg"].numpy(), rtol=1e-10)
        if k == "b":
            np.testing.assert_allclose(state.nu[k], ref["exp_avg_sq"].numpy(), rtol=1e-12)
        else:
            np.testing.assert_allclose(state.nu_row[k], ref["exp_avg_sq_row"].numpy(), rtol=1e-12)
            np.testing.assert_allclose(state.nu_col[k], ref["exp_avg_sq_col"].numpy(), rtol=1e-12)
            np.testing.assert_allclose(state.res_row[k], ref["exp_avg_res_row"].numpy(), rtol=1e-10)
            np.testing.assert_allclose(state.res_col[k], ref["exp_avg_res_col"].numpy(), rtol=1e-10)


def test_came_state_is_factored():
    params = {"w": jax.ShapeDtypeStruct((8, 6), jnp.bfloat16), "b": jax.ShapeDtypeStruct((6,), jnp.float32)}
    state = gradax.contrib.scale_by_came().init(params)
    assert state.nu_row["w"].shape == (8,) and state.nu_col["w"].shape == (6,) and state.nu["w"].shape == (1,)
    assert state.nu["b"].shape == (6,) and state.res_row["b"].shape == (1,)
    assert state.nu_row["w"].dtype == jnp.float32 and state.mu["w"].dtype == jnp.float32


def test_came_errors():
    with pytest.raises(ValueError, match=r"scale_by_came\(b3=\.\.\.\) must be"):
        gradax.contrib.came(b3=1.0)
    with pytest.raises(ValueError, match=r"scale_by_came\(clip_threshold=\.\.\.\) must be > 0"):
        gradax.contrib.scale_by_came(clip_threshold=0.0)
    with pytest.raises(ValueError, match=r"scale_by_came\(eps1=\.\.\.\) must be >= 0"):
        gradax.contrib.scale_by_came(eps1=-1.0)
