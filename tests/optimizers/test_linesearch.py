"""Backtracking and zoom line searches: Optax 0.2.8, the Armijo/Wolfe conditions, value_and_grad_from_state."""

import jax
import jax.numpy as jnp
import numpy as np
import optax  # the test oracle
import pytest

import gradax


def rosenbrock(x):
    return jnp.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)


X0 = jnp.array([-1.2, 1.0, -0.5, 0.3])


def _run(lib, make, steps=10, f=rosenbrock, x0=X0):
    opt = make(lib)

    @jax.jit
    def step(x, s):
        v, g = jax.value_and_grad(f)(x)
        u, s = opt.update(g, s, x, value=v, grad=g, value_fn=f)
        return lib.apply_updates(x, u), s

    x, s, path, states = x0, opt.init(x0), [], []
    for _ in range(steps):
        x, s = step(x, s)
        path.append(x)
        states.append(s)
    return np.array(path), states


MAKERS = {
    "backtracking": lambda ox: ox.chain(ox.sgd(1.0), ox.scale_by_backtracking_linesearch(15)),
    "backtracking_store": lambda ox: ox.chain(
        ox.sgd(1.0), ox.scale_by_backtracking_linesearch(15, store_grad=True, rtol=0.1, atol=1e-3)
    ),
    "zoom": lambda ox: ox.chain(ox.sgd(1.0), ox.scale_by_zoom_linesearch(10, max_learning_rate=2.0)),
    "zoom_strict": lambda ox: ox.lbfgs(
        linesearch=ox.scale_by_zoom_linesearch(10, approx_dec_rtol=None, curv_rtol=0.5, initial_guess_strategy="one")
    ),
}


@pytest.mark.parametrize("name", sorted(MAKERS))
def test_matches_optax(name):
    a, sa = _run(optax, MAKERS[name])
    b, sb = _run(gradax, MAKERS[name])
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    ls_a, ls_b = sa[-1][-1], sb[-1][-1]
    assert ls_a._fields == ls_b._fields and type(ls_a).__name__ == type(ls_b).__name__
    np.testing.assert_allclose(ls_a.learning_rate, ls_b.learning_rate, rtol=1e-3)
    assert int(ls_a.info.num_linesearch_steps) == int(ls_b.info.num_linesearch_steps)


def test_backtracking_gives_sufficient_decrease():
    f = rosenbrock
    opt = gradax.chain(gradax.sgd(1.0), gradax.scale_by_backtracking_linesearch(30, slope_rtol=0.1))
    x, s = X0, opt.init(X0)
    for _ in range(5):
        v, g = jax.value_and_grad(f)(x)
        u, s = opt.update(g, s, x, value=v, grad=g, value_fn=f)
        eta = s[-1].learning_rate
        assert float(f(x + u)) <= float(v - 0.1 * eta * jnp.sum(g * g)) + 1e-5
        x = x + u


def test_zoom_step_satisfies_strong_wolfe():
    f = rosenbrock
    c1, c2 = 1e-4, 0.9
    opt = gradax.chain(gradax.sgd(1.0), gradax.scale_by_zoom_linesearch(30, approx_dec_rtol=None))
    x, s = X0, opt.init(X0)
    update = jax.jit(lambda g, s, x, v: opt.update(g, s, x, value=v, grad=g, value_fn=f))
    for _ in range(5):
        v, g = jax.value_and_grad(f)(x)
        d = -g
        u, s = update(g, s, x, v)
        eta = float(s[-1].learning_rate)
        new_v, new_g = jax.value_and_grad(f)(x + u)
        assert float(new_v) <= float(v) + c1 * eta * float(g @ d) + 1e-5
        assert abs(float(new_g @ d)) <= c2 * abs(float(g @ d)) + 1e-5
        np.testing.assert_allclose(s[-1].value, new_v, rtol=1e-5)
        np.testing.assert_allclose(s[-1].grad, new_g, rtol=1e-4, atol=1e-4)
        x = x + u


def test_nan_objective_gives_zero_step():
    f = lambda x: jnp.where(jnp.sum(x) > 0.5, jnp.nan, jnp.sum(x**2))
    for ls in [gradax.scale_by_backtracking_linesearch(3), gradax.scale_by_zoom_linesearch(3)]:
        opt = gradax.chain(gradax.scale(-100.0), ls)
        x = jnp.array([-0.1, -0.1])
        v, g = jax.value_and_grad(f)(x)
        u, s = opt.update(g, opt.init(x), x, value=v, grad=g, value_fn=f)
        assert bool(jnp.all(jnp.isfinite(u)))


def test_value_and_grad_from_state():
    f = lambda x, scale=1.0: scale * jnp.sum(x**2)
    opt = gradax.lbfgs()
    x = jnp.array([1.0, 2.0])
    s = opt.init(x)
    vg = gradax.value_and_grad_from_state(f)
    v, g = vg(x, 2.0, state=s)  # first call: computed
    np.testing.assert_allclose(v, 10.0)
    np.testing.assert_allclose(g, [4.0, 8.0])
    u, s = opt.update(g, s, x, value=v, grad=g, value_fn=f, scale=2.0)
    x = x + u
    v2, g2 = vg(x, 2.0, state=s)  # reused from the line search's state
    np.testing.assert_allclose(v2, s[-1].value)
    with pytest.raises(ValueError, match="must hold exactly one `value` and one `grad`"):
        vg(x, state=gradax.sgd(0.1).init(x))
    with pytest.raises(ValueError, match="must hold exactly one `value` and one `grad`"):
        bt = gradax.scale_by_backtracking_linesearch(5)  # store_grad=False keeps grad None
        vg(x, state=bt.init(x))
    with pytest.raises(TypeError, match=r"value_and_grad_from_state\(value_fn=...\) must be callable"):
        gradax.value_and_grad_from_state(3)


def test_extra_kwargs_not_used_by_value_fn_are_ignored():
    """Optax raises TypeError here; gradax ignores them (ExtraArgs semantics, docs/differences.md)."""
    f = lambda x: jnp.sum(x**2)
    x = jnp.ones(2)
    for ls in [gradax.scale_by_zoom_linesearch(5), gradax.scale_by_backtracking_linesearch(5)]:
        v, g = jax.value_and_grad(f)(x)
        u, _ = ls.update(-g, ls.init(x), x, value=v, grad=g, value_fn=f, unused=1)
        assert u.shape == (2,)
    ox = optax.scale_by_zoom_linesearch(5)
    with pytest.raises(TypeError):
        ox.update(-g, ox.init(x), x, value=v, grad=g, value_fn=f, unused=1)


def test_errors():
    z = "scale_by_zoom_linesearch"
    b = "scale_by_backtracking_linesearch"
    with pytest.raises(ValueError, match=rf"{z}\(max_linesearch_steps=...\) must be >= 1; got 0"):
        gradax.scale_by_zoom_linesearch(0)
    with pytest.raises(TypeError, match=rf"{z}\(max_linesearch_steps=...\) must be an int"):
        gradax.scale_by_zoom_linesearch(2.5)
    with pytest.raises(ValueError, match=rf"{z}\(initial_guess_strategy=...\) must be one of 'keep', 'one'"):
        gradax.scale_by_zoom_linesearch(5, initial_guess_strategy="two")
    with pytest.raises(ValueError, match=rf"{z}\(curv_rtol=...\) must be >= 0"):
        gradax.scale_by_zoom_linesearch(5, curv_rtol=-0.5)
    with pytest.raises(ValueError, match=rf"{z}\(max_learning_rate=...\) must be > 0"):
        gradax.scale_by_zoom_linesearch(5, max_learning_rate=0.0)
    with pytest.raises(ValueError, match=rf"{b}\(decrease_factor=...\) must be in \(0, 1\)"):
        gradax.scale_by_backtracking_linesearch(5, decrease_factor=1.0)
    with pytest.raises(ValueError, match=rf"{b}\(increase_factor=...\) must be > 0"):
        gradax.scale_by_backtracking_linesearch(5, increase_factor=0.0)
    with pytest.raises(ValueError, match=rf"{z}\(increase_factor=...\) must be > 0"):
        gradax.scale_by_zoom_linesearch(5, increase_factor=-1.0)
    with pytest.raises(ValueError, match=rf"{b}\(max_learning_rate=...\) must be > 0"):
        gradax.scale_by_backtracking_linesearch(5, max_learning_rate=-1.0)
    x = jnp.ones(2)
    for name, ls in [(z, gradax.scale_by_zoom_linesearch(5)), (b, gradax.scale_by_backtracking_linesearch(5))]:
        s = ls.init(x)
        f = lambda w: jnp.sum(w**2)
        with pytest.raises(ValueError, match=rf"{name}: update\(...\) needs `value`"):
            ls.update(x, s, x, grad=x, value_fn=f)
        with pytest.raises(ValueError, match=rf"{name}: update\(...\) needs `grad`"):
            ls.update(x, s, x, value=1.0, value_fn=f)
        with pytest.raises(ValueError, match=rf"{name}: update\(...\) needs `value_fn`"):
            ls.update(x, s, x, value=1.0, grad=x)
        with pytest.raises(ValueError, match=rf"{name}: update\(...\) needs `params`"):
            ls.update(x, s, value=1.0, grad=x, value_fn=f)
