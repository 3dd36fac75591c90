"""Issue 24: what the libraries built on Optax need from a drop-in, each checked against Optax 0.2.8 where it has an
answer: importing gradax touches no JAX backend, Python numbers as leaves, callable pytrees (Equinox closures) as
schedules and as masks, state that keeps the params' sharding, and inject_hyperparams' keys and dtypes."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradax

ROOT = Path(__file__).resolve().parents[2]


def _run_script(code: str, devices: int | None = None) -> str:
    env = dict(os.environ)
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    if devices is not None:
        env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    else:
        env.pop("XLA_FLAGS", None)
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return proc.stdout


# --- 2. importing gradax touches no backend --------------------------------------------------------------------------


def test_importing_every_module_leaves_the_backend_alone():
    out = _run_script(
        """
        import importlib, pkgutil
        import jax
        from jax._src import xla_bridge
        import gradax
        names = [m.name for m in pkgutil.walk_packages(gradax.__path__, "gradax.") if not m.name.endswith("__main__")]
        for name in names:
            importlib.import_module(name)
            assert not xla_bridge.backends_are_initialized(), f"importing {name} initialized a JAX backend"
        jax.config.update("jax_num_cpu_devices", 8)  # must still be allowed after import gradax
        assert not jax.live_arrays(), f"arrays left alive by the imports: {jax.live_arrays()}"  # starts the backend
        assert jax.device_count() == 8
        print("modules", len(names))
        """
    )
    assert int(out.split()[-1]) > 50


def test_keys_from_int_seeds_are_made_in_init():
    # the same keys as before, only made later: the state holds jax.random.key(seed)
    for tx, field in [
        (gradax.add_noise(0.1, 0.55, key=3), "rng_key"),
        (gradax.contrib.differentially_private_aggregate(1.0, 0.1, key=3), "rng_key"),
        (gradax.contrib.hutchinson_estimator_diag_hessian(3), "key"),
    ]:
        key = getattr(tx.init(jnp.zeros(2)), field)
        np.testing.assert_array_equal(jax.random.key_data(key), jax.random.key_data(jax.random.key(3)))
    raw = jax.random.PRNGKey(5)
    state = gradax.add_noise(0.1, 0.55, key=raw).init(jnp.zeros(2))
    np.testing.assert_array_equal(jax.random.key_data(state.rng_key), raw)
    with pytest.raises(ValueError, match=r"hutchinson_estimator_diag_hessian\(random_seed=...\) must be an int seed"):
        gradax.contrib.hutchinson_estimator_diag_hessian("0")


# --- 3. Python numbers as leaves ------------------------------------------------------------------------------------

TREE = {"a": jnp.asarray([1.0, -2.0, 3.0]), "b": 1.5, "c": 2}


@pytest.mark.parametrize("name", ["adam", "sgd", "lion", "rmsprop", "adamw"])
def test_python_numbers_as_leaves_match_optax(name):
    kw = {"momentum": 0.9} if name == "sgd" else {}
    ours, theirs = getattr(gradax, name)(1e-1, **kw), getattr(optax, name)(1e-1, **kw)
    so, st = ours.init(TREE), theirs.init(TREE)
    po, pt = TREE, TREE
    for _ in range(2):
        uo, so = ours.update(TREE, so, po)
        ut, st = theirs.update(TREE, st, pt)
        po, pt = gradax.apply_updates(po, uo), optax.apply_updates(pt, ut)
        for k in TREE:
            assert jnp.result_type(uo[k]) == jnp.result_type(ut[k])  # float updates, also for the int leaf
            assert jnp.result_type(po[k]) == jnp.result_type(pt[k])  # the int param stays int
        # the float leaves agree; the int leaf's moments are float here and int32 in Optax (docs/differences.md)
        for k in ("a", "b"):
            np.testing.assert_allclose(np.asarray(uo[k]), np.asarray(ut[k]), rtol=1e-5)
            np.testing.assert_allclose(np.asarray(po[k]), np.asarray(pt[k]), rtol=1e-5)


def test_state_of_python_numbers():
    state = gradax.adam(1e-2).init(TREE)[0]
    assert state.mu["b"].dtype == jnp.float32 and state.mu["b"].shape == ()
    # an int leaf's moments are float (Optax keeps them int32, where they truncate to zero; docs/differences.md)
    assert state.mu["c"].dtype == jnp.float32


def test_update_functions_with_python_numbers_and_none_leaves():
    with_none = {"a": None, "b": jnp.ones(2)}
    for fn in (gradax.apply_updates, lambda p, u: gradax.incremental_update(p, u, 0.5)):
        out = fn(with_none, with_none)
        assert out["a"] is None and out["b"].shape == (2,)
        np.testing.assert_allclose(np.asarray(optax.apply_updates(with_none, with_none)["b"]) / 2, 1.0)
    out = gradax.incremental_update(TREE, TREE, 0.5)
    ref = optax.incremental_update(TREE, TREE, 0.5)
    for x, y in zip(jax.tree.leaves(out), jax.tree.leaves(ref)):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y))
    out = gradax.periodic_update(TREE, TREE, 0, 2)
    assert jax.tree.structure(out) == jax.tree.structure(TREE)
    tx = gradax.add_decayed_weights(0.1)
    u, _ = tx.update(with_none, tx.init(with_none), with_none)
    assert u["a"] is None
    np.testing.assert_allclose(u["b"], 1.1)
    u, _ = tx.update(TREE, tx.init(TREE), TREE)
    np.testing.assert_allclose(u["b"], 1.65)


# --- 4. callable pytrees: a callable hyperparameter is a schedule, a callable mask is a function ----------------------


def _schedule(count):
    return 0.1 * 0.5 ** jnp.minimum(count, 3)


def test_equinox_closure_as_learning_rate():
    closure = eqx.filter_closure_convert(_schedule, jnp.asarray(0))
    assert jax.tree.leaves(closure) or jax.tree.structure(closure).num_nodes > 1  # a pytree, not a plain function
    params = {"w": jnp.ones(2)}
    for lib in (gradax, optax):
        for opt in (lib.adam(learning_rate=closure), lib.inject_hyperparams(lib.adam)(learning_rate=closure)):
            state = opt.init(params)
            for _ in range(2):
                u, state = jax.jit(opt.update)(params, state)
            ref = lib.adam(learning_rate=_schedule)
            s = ref.init(params)
            for _ in range(2):
                r, s = ref.update(params, s)
            np.testing.assert_allclose(u["w"], r["w"], rtol=1e-5)  # Optax's own two builds differ by 7e-6


def test_equinox_closure_with_arrays_is_a_schedule():
    scale = jnp.asarray(0.25)
    closure = eqx.filter_closure_convert(lambda c: scale * (1.0 + c), jnp.asarray(0))
    assert jax.tree.leaves(closure)  # it holds the closed-over array
    assert gradax._hyperparams.is_schedule(closure)
    opt = gradax.sgd(closure)
    u, _ = opt.update(jnp.ones(1), opt.init(jnp.ones(1)))
    np.testing.assert_allclose(u, -0.25)


class _Model(eqx.Module):
    w: jax.Array
    b: jax.Array

    def __call__(self, x):
        return self.w * x + self.b


def test_equinox_closure_as_mask_is_called_and_a_model_of_booleans_is_a_tree():
    params = {"w": jnp.ones((2, 2)), "b": jnp.ones(2)}
    mask_fn = eqx.filter_closure_convert(lambda p: jax.tree.map(lambda x: x.ndim > 1, p), params)
    for tx in (
        gradax.masked(gradax.scale(0.0), mask_fn),
        gradax.add_decayed_weights(1.0, mask=mask_fn),
        gradax.partition({"a": gradax.scale(0.0), "b": gradax.identity()}, mask_fn_labels(params)),
    ):
        u, _ = tx.update(params, tx.init(params), params)
        assert float(u["b"][0]) == 1.0 and float(u["w"][0, 0]) != 1.0
    model = _Model(jnp.ones(2), jnp.ones(2))
    mask_tree = _Model(True, False)  # callable, with the model's structure: the mask itself
    tx = gradax.masked(gradax.scale(0.0), mask_tree)
    u, _ = tx.update(model, tx.init(model))
    np.testing.assert_array_equal(u.w, 0.0)
    np.testing.assert_array_equal(u.b, 1.0)


def mask_fn_labels(params):
    return eqx.filter_closure_convert(lambda p: jax.tree.map(lambda x: "a" if x.ndim > 1 else "b", p), params)


# --- 5. the state keeps the params' sharding ------------------------------------------------------------------------


def test_state_keeps_the_params_sharding():
    out = _run_script(
        """
        import jax, jax.numpy as jnp, numpy as np
        from jax.sharding import NamedSharding, PartitionSpec as P
        import gradax
        mesh = jax.make_mesh((2, 2), ("row", "col"))
        params = {"w": jax.device_put(jnp.ones((4, 4)), NamedSharding(mesh, P("row", "col"))),
                  "v": jax.device_put(jnp.ones((4,)), NamedSharding(mesh, P("row")))}
        opts = {"adam": gradax.adam(1e-3), "sgd": gradax.sgd(1e-3, momentum=0.9), "lion": gradax.lion(1e-3),
                "rmsprop": gradax.rmsprop(1e-3), "adafactor": gradax.adafactor(1e-3), "lamb": gradax.lamb(1e-3),
                "adagrad": gradax.adagrad(1e-3), "muon": gradax.contrib.muon(1e-3)}
        checked = 0
        with jax.set_mesh(mesh):
            for name, opt in opts.items():
                for how, state in (("eager", opt.init(params)), ("jit", jax.jit(opt.init)(params))):
                    for path, leaf in jax.tree_util.tree_leaves_with_path(state):
                        for key, p in params.items():
                            if leaf.shape == p.shape and leaf.ndim and f"'{key}'" in jax.tree_util.keystr(path):
                                assert leaf.sharding.spec == p.sharding.spec, (name, how, path, leaf.sharding)
                                checked += 1
        print("checked", checked)
        """,
        devices=4,
    )
    assert int(out.split()[-1]) >= 20


# --- 6. inject_hyperparams: keys are never hyperparameters, bf16 arrays are, Optax's dtype on request ----------------


def _noise_factory(noise_key: jax.Array, scale: float) -> gradax.GradientTransformation:
    """A typed key is recognised by its dtype whatever the parameter's name."""
    return _keyed_noise(noise_key, scale)


def _raw_noise_factory(noise_key: PRNGKey, scale: float) -> gradax.GradientTransformation:  # noqa: F821
    """A raw uint32 key is recognised by the parameter's name (``*_key``; Optax's ``PRNGKey`` is ``jax.Array``)."""
    return _keyed_noise(noise_key, scale)


def _keyed_noise(noise_key, scale):
    def init(params):
        del params
        return (noise_key,)

    def update(updates, state, params=None):
        del params
        k, sub = jax.random.split(state[0])
        return jax.tree.map(lambda u: scale * jax.random.normal(sub, u.shape), updates), (k,)

    return gradax.GradientTransformation(init, update)


@pytest.mark.parametrize("key", [jax.random.key(17), jax.random.PRNGKey(17)], ids=["typed", "raw"])
def test_prng_key_is_not_a_hyperparameter(key):
    factory = _noise_factory if jnp.issubdtype(key.dtype, jax.dtypes.prng_key) else _raw_noise_factory
    opt = gradax.inject_hyperparams(factory)(noise_key=key, scale=1e-3)
    state = jax.jit(opt.init)(jnp.ones(2))
    assert sorted(state.hyperparams) == ["scale"]
    jax.jit(opt.update)(jnp.ones(2), state)
    opt = gradax.inject_hyperparams(gradax.contrib.hutchinson_estimator_diag_hessian)(random_seed=key)
    assert opt.init(jnp.ones(2)).hyperparams == {}


def test_bf16_array_hyperparameters_keep_their_dtype():
    params = [jnp.ones((1, 2)), jnp.ones(2)]
    opt = gradax.inject_hyperparams(gradax.scale_by_adam)(
        b1=jnp.asarray(0.9, jnp.float32), b2=jnp.asarray(0.95, jnp.bfloat16)
    )
    state = jax.jit(opt.init)(params)
    assert state.hyperparams["b1"].dtype == jnp.float32 and state.hyperparams["b2"].dtype == jnp.bfloat16


@pytest.mark.parametrize("name", ["adam", "sgd"])
def test_hyperparam_dtype_of_the_params_reproduces_optax(name):
    """gradax's default keeps hyperparameters in float32 for bf16 params; hyperparam_dtype=bfloat16 (with mu_dtype
    for Adam's moments) reproduces Optax's default exactly."""
    params = {"w": jnp.asarray(np.linspace(-1, 1, 6).reshape(2, 3), jnp.bfloat16)}
    kw = {"learning_rate": 1e-2, "b1": 0.9, "b2": 0.95} if name == "adam" else {"learning_rate": 0.1, "momentum": 0.9}
    theirs = optax.inject_hyperparams(getattr(optax, name))(**kw)
    ours = gradax.inject_hyperparams(getattr(gradax, name), hyperparam_dtype=jnp.bfloat16)(**kw)
    default = gradax.inject_hyperparams(getattr(gradax, name))(**kw)
    st, so = theirs.init(params), ours.init(params)
    assert {k: v.dtype for k, v in st.hyperparams.items()} == {k: v.dtype for k, v in so.hyperparams.items()}
    assert all(v.dtype == jnp.float32 for v in default.init(params).hyperparams.values())
    pt, po = params, params
    for k in range(4):
        g = jax.tree.map(lambda x, k=k: (x * (k + 1) * 0.3).astype(x.dtype), params)
        ut, st = theirs.update(g, st, pt)
        uo, so = ours.update(g, so, po)
        pt, po = optax.apply_updates(pt, ut), gradax.apply_updates(po, uo)
    np.testing.assert_array_equal(np.asarray(po["w"], np.float32), np.asarray(pt["w"], np.float32))
