"""L-BFGS: float64 NumPy two-loop reference, Optax 0.2.8 on Rosenbrock and quadratics, convergence, scipy."""

import jax
import jax.numpy as jnp
import numpy as np
import optax  # the test oracle
import pytest
import scipy.optimize

import gradax
from gradax.optimizers._lbfgs import two_loop_recursion


def rosenbrock(x):
    return jnp.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)


A = jax.random.normal(jax.random.key(0), (6, 6))
H = A @ A.T + 0.5 * jnp.eye(6)
C = jnp.arange(6.0)


def quadratic(x):
    return 0.5 * x @ H @ x - C @ x


X0 = jnp.array([-1.2, 1.0, -0.5, 0.3])


def _solve(lib, f, x0, steps, **kw):
    opt = lib.lbfgs(**kw)
    value_and_grad = lib.value_and_grad_from_state(f)

    @jax.jit
    def step(x, s):
        v, g = value_and_grad(x, state=s)
        u, s = opt.update(g, s, x, value=v, grad=g, value_fn=f)
        return lib.apply_updates(x, u), s

    x, s, path = x0, opt.init(x0), []
    for _ in range(steps):
        x, s = step(x, s)
        path.append(x)
    return np.array(path), s


def _numpy_two_loop(g, pairs, gamma):
    """Nocedal & Wright Algorithm 7.4 in float64, pairs oldest first."""
    q = np.array(g, np.float64)
    alphas = []
    for s, y in reversed(pairs):
        rho = 1.0 / (y @ s)
        a = rho * (s @ q)
        q = q - a * y
        alphas.append(a)
    r = gamma * q
    for (s, y), a in zip(pairs, reversed(alphas)):
        rho = 1.0 / (y @ s)
        b = rho * (y @ r)
        r = r + (a - b) * s
    return r


def test_two_loop_matches_float64_reference_and_bfgs_matrix():
    rng = np.random.default_rng(0)
    n, m = 5, 3
    pairs = []
    for _ in range(m):
        s = rng.normal(size=n)
        y = s + 0.1 * rng.normal(size=n)  # <s, y> > 0
        pairs.append((s, y))
    g = rng.normal(size=n)
    gamma = 0.7
    ref = _numpy_two_loop(g, pairs, gamma)
    # dense BFGS update of H0 = gamma I, the matrix the recursion applies
    Hk = gamma * np.eye(n)
    for s, y in pairs:
        rho = 1.0 / (y @ s)
        V = np.eye(n) - rho * np.outer(y, s)
        Hk = V.T @ Hk @ V + rho * np.outer(s, s)
    np.testing.assert_allclose(ref, Hk @ g, rtol=1e-10)
    # gradax's recursion on a cyclic memory whose oldest slot is 1 (slots 1, 2, 0 hold pairs 0, 1, 2)
    slots = [2, 0, 1]
    s_mem = np.zeros((m, n))
    y_mem = np.zeros((m, n))
    w = np.zeros(m)
    for k, (s, y) in enumerate(pairs):
        s_mem[slots[k]], y_mem[slots[k]], w[slots[k]] = s, y, 1.0 / (y @ s)
    s_mem, y_mem, w = (jnp.asarray(a, jnp.float32) for a in (s_mem, y_mem, w))
    out = two_loop_recursion(jnp.asarray(g, jnp.float32), s_mem, y_mem, w, jnp.float32(gamma), 2)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)


def test_first_step_is_capped_normalized_gradient():
    tx = gradax.scale_by_lbfgs()
    w = jnp.array([3.0, 4.0])
    u, _ = tx.update(jnp.array([3.0, 4.0]), tx.init(w), w)
    np.testing.assert_allclose(u, [0.6, 0.8], rtol=1e-6)
    u, _ = tx.update(jnp.array([0.3, 0.4]), tx.init(w), w)  # norm < 1: no scaling
    np.testing.assert_allclose(u, [0.3, 0.4], rtol=1e-6)


def test_matches_optax_on_rosenbrock():
    a, _ = _solve(optax, rosenbrock, X0, 14)
    b, _ = _solve(gradax, rosenbrock, X0, 14)
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_matches_optax_on_quadratic():
    a, sa = _solve(optax, quadratic, jnp.zeros(6), 12)
    b, sb = _solve(gradax, quadratic, jnp.zeros(6), 12)
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert type(sb[0]).__name__ == "ScaleByLBFGSState" and sb[0]._fields == sa[0]._fields
    assert sb[2]._fields == sa[2]._fields and sb[2].info._fields == sa[2].info._fields


@pytest.mark.parametrize(
    "kw",
    [
        dict(memory_size=3, scale_init_precond=False),
        dict(learning_rate=0.5),
    ],
)
def test_matches_optax_variants(kw):
    a, _ = _solve(optax, quadratic, jnp.zeros(6), 8, **kw)
    b, _ = _solve(gradax, quadratic, jnp.zeros(6), 8, **kw)
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_without_linesearch_with_schedule_matches_optax():
    def run(lib):
        opt = lib.lbfgs(learning_rate=lambda c: 0.1 / (1.0 + c), linesearch=None)
        x, s = jnp.zeros(6), opt.init(jnp.zeros(6))
        for _ in range(6):
            g = jax.grad(quadratic)(x)
            u, s = opt.update(g, s, x)
            x = lib.apply_updates(x, u)
        return x

    np.testing.assert_allclose(run(optax), run(gradax), rtol=1e-5, atol=1e-6)


def test_converges_on_rosenbrock_like_scipy():
    """Nocedal & Wright (2006), ch. 7: L-BFGS with a Wolfe line search solves Rosenbrock from (-1.2, 1, ...)."""
    path, state = _solve(gradax, rosenbrock, X0, 60)
    ours = path[-1]
    np.testing.assert_allclose(ours, np.ones(4), atol=1e-3)
    f64 = lambda x: float(np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2))
    ref = scipy.optimize.minimize(f64, np.asarray(X0, np.float64), method="L-BFGS-B", options={"maxcor": 10})
    assert ref.success
    # iterations to reach f < 1e-6: same order of magnitude as scipy's L-BFGS-B iteration count
    values = [f64(np.asarray(x, np.float64)) for x in path]
    ours_iters = next(i for i, v in enumerate(values) if v < 1e-6) + 1
    assert ours_iters <= 2 * ref.nit + 10, (ours_iters, ref.nit)
    assert values[-1] < max(1e-8, 10 * ref.fun) or values[-1] < 1e-7


def test_in_while_loop():
    opt = gradax.lbfgs()
    value_and_grad = gradax.value_and_grad_from_state(rosenbrock)

    def body(carry):
        x, s = carry
        v, g = value_and_grad(x, state=s)
        u, s = opt.update(g, s, x, value=v, grad=g, value_fn=rosenbrock)
        return gradax.apply_updates(x, u), s

    def cond(carry):
        x, s = carry
        count, grad = s[0].count, s[2].grad
        return (count == 0) | ((count < 100) & (jnp.linalg.norm(grad) > 1e-4))

    x, s = jax.jit(lambda x0: jax.lax.while_loop(cond, body, (x0, opt.init(x0))))(X0)
    np.testing.assert_allclose(x, np.ones(4), atol=1e-3)


def test_pytree_params_and_extra_fn_kwargs():
    def loss(p, data):
        return jnp.sum((p["a"] - data) ** 2) + jnp.sum((p["b"] + 1.0) ** 2)

    params = {"a": jnp.zeros(3), "b": jnp.zeros(2)}
    data = jnp.array([1.0, 2.0, 3.0])
    opt = gradax.lbfgs()
    state = opt.init(params)
    value_and_grad = gradax.value_and_grad_from_state(loss)

    @jax.jit
    def step(params, state):
        v, g = value_and_grad(params, data, state=state)
        u, state = opt.update(g, state, params, value=v, grad=g, value_fn=loss, data=data)
        return gradax.apply_updates(params, u), state

    for _ in range(5):
        params, state = step(params, state)
    np.testing.assert_allclose(params["a"], data, atol=1e-5)
    np.testing.assert_allclose(params["b"], -1.0, atol=1e-5)


def test_errors():
    opt = gradax.lbfgs()
    x = jnp.zeros(2)
    s = opt.init(x)
    g = jnp.ones(2)
    f = lambda w: jnp.sum(w**2)
    with pytest.raises(ValueError, match="needs `value`"):
        opt.update(g, s, x, grad=g, value_fn=f)
    with pytest.raises(ValueError, match="needs `grad`"):
        opt.update(g, s, x, value=1.0, value_fn=f)
    with pytest.raises(ValueError, match="needs `value_fn`"):
        opt.update(g, s, x, value=1.0, grad=g)
    with pytest.raises(ValueError, match="scale_by_lbfgs: update.*needs `params`"):
        opt.update(g, s, value=1.0, grad=g, value_fn=f)
    with pytest.raises(ValueError, match=r"scale_by_lbfgs\(memory_size=...\) must be >= 1; got 0"):
        gradax.scale_by_lbfgs(memory_size=0)
    with pytest.raises(ValueError, match=r"lbfgs\(memory_size=...\) must be >= 1"):
        gradax.lbfgs(memory_size=0)
    with pytest.raises(TypeError, match=r"lbfgs\(linesearch=...\) must be a GradientTransformation"):
        gradax.lbfgs(linesearch=3)


def test_abstract_init_and_dtypes():
    shapes = {"a": jax.ShapeDtypeStruct((3,), jnp.float32), "b": jax.ShapeDtypeStruct((2, 2), jnp.bfloat16)}
    state = gradax.lbfgs().init(shapes)
    assert state[0].diff_params_memory["b"].shape == (10, 2, 2)
    assert state[0].weights_memory.dtype == jnp.float32
