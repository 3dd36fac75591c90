"""Line searches on states edited by the user (Python-float fields set with tree.set), value_and_grad_from_state's
error types, and the unused-extra-argument policy: cases found by Optax 0.2.8's own test suite."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax  # the oracle (tests only)
import pytest

import gradax


def _one_step(lib, opt, fn, w, u, stepsize_guess):
    state = lib.tree.set(opt.init(w), learning_rate=stepsize_guess)  # a Python float in the state
    value, grad = jax.value_and_grad(fn)(w)
    updates, state = opt.update(u, state, w, value=value, grad=grad, value_fn=fn)
    return lib.apply_updates(w, updates), state


@pytest.mark.parametrize("strategy", ["keep", "one"])
def test_zoom_accepts_python_float_learning_rate_like_optax(strategy):
    """w = -1, u = 1.95: the first trial has f'(w + u) > 0 (the bracket's high end below its low end)."""
    fn = lambda x: x**2
    w = jnp.asarray(-1.0)
    u = -1.95 * w
    out = {}
    for lib in (gradax, optax):
        opt = lib.scale_by_zoom_linesearch(max_linesearch_steps=20, initial_guess_strategy=strategy)
        new_w, state = _one_step(lib, opt, fn, w, u, 1.0)
        assert float(lib.tree.get(state, "decrease_error")) <= 0.0
        assert float(lib.tree.get(state, "curvature_error")) <= 0.0
        out[lib.__name__] = (new_w, lib.tree.get(state, "learning_rate"))
    np.testing.assert_allclose(out["gradax"][0], out["optax"][0], rtol=1e-6)
    np.testing.assert_allclose(out["gradax"][1], out["optax"][1], rtol=1e-6)


def test_backtracking_accepts_python_float_learning_rate():
    fn = lambda x: jnp.sum(x**2)
    w = jnp.array([1.0, -2.0])
    for lib in (gradax, optax):
        opt = lib.scale_by_backtracking_linesearch(max_backtracking_steps=10)
        new_w, state = _one_step(lib, opt, fn, w, -jax.grad(fn)(w), 2.0)
        assert float(fn(new_w)) < float(fn(w))
        assert lib.tree.get(state, "learning_rate").dtype == jnp.float32


def test_value_and_grad_from_state_error_types_like_optax():
    fn = lambda x: jnp.sum(x**2)
    x = jnp.array([1.0, 2.0])
    vg = gradax.value_and_grad_from_state(fn)
    with pytest.raises(ValueError, match="must hold exactly one `value` and one `grad`"):
        vg(x, state=gradax.scale_by_adam().init(x))
    two = gradax.chain(
        gradax.scale_by_backtracking_linesearch(max_backtracking_steps=15),
        gradax.scale_by_backtracking_linesearch(max_backtracking_steps=15),
    )
    with pytest.raises(KeyError, match=r"got 2 value and 2 grad fields \(several line searches\)"):
        vg(x, state=two.init(x))
    opt = gradax.chain(gradax.sgd(1.0), gradax.scale_by_backtracking_linesearch(15, store_grad=True))
    state = opt.init(x)
    value, grad = jax.jit(vg)(x, state=state)
    np.testing.assert_allclose(value, 5.0)
    np.testing.assert_allclose(grad, [2.0, 4.0])


@pytest.mark.parametrize(
    "name, steps",
    [
        ("scale_by_zoom_linesearch", "max_linesearch_steps"),
        ("scale_by_backtracking_linesearch", "max_backtracking_steps"),
    ],
)
def test_unused_extra_args_are_ignored_where_optax_raises(name, steps):
    """docs/differences.md, "Line searches": gradax passes value_fn only the keyword
    arguments it accepts and ignores the others (the ExtraArgs contract every transformation keeps, so a chain can
    hand each member its own arguments); Optax raises TypeError."""

    def value_fn(params, batch):
        return jnp.sum(params * batch)

    params, updates = jnp.array([1.0, 2.0]), jnp.array([-0.1, -0.1])
    batch = jnp.ones(2)
    kwargs = dict(value=value_fn(params, batch), grad=batch, value_fn=value_fn, batch=batch, unused_arg=42)
    opt = getattr(gradax, name)(**{steps: 5})
    out, _ = opt.update(updates, opt.init(params), params, **kwargs)
    assert out.shape == (2,)
    o_opt = getattr(optax, name)(**{steps: 5})
    with pytest.raises(TypeError, match="Unexpected keyword arguments"):
        o_opt.update(updates, o_opt.init(params), params, **kwargs)
