"""The libraries built on Optax, run unchanged with gradax in Optax's place (issue 24).

Each scenario runs in a fresh subprocess whose prelude maps ``optax`` and every ``optax.<sub>`` module name to
gradax's modules in ``sys.modules`` before the library is imported, so the ``import optax`` inside Optimistix,
NumPyro and Flax gets gradax (the real Optax is installed in the venv: each scenario asserts it was not used).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

PRELUDE = """
import importlib, pkgutil, sys
import gradax
sys.modules["optax"] = gradax
for _m in pkgutil.walk_packages(gradax.__path__, "gradax."):
    if not _m.name.endswith("__main__"):
        sys.modules["optax" + _m.name[len("gradax"):]] = importlib.import_module(_m.name)
import optax
assert optax is gradax
"""

EPILOGUE = """
import optax as _o
assert sys.modules["optax"] is gradax and _o is gradax
assert not any(getattr(m, "__file__", "") and "site-packages/optax" in m.__file__ for m in list(sys.modules.values()))
print("OK")
"""


def _run(body: str, devices: int | None = None) -> None:
    env = dict(os.environ)
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    if devices is not None:
        env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    code = PRELUDE + textwrap.dedent(body) + EPILOGUE
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("OK"), proc.stdout[-3000:] + proc.stderr[-5000:]


def test_optimistix_optax_minimiser():
    pytest.importorskip("optimistix")
    _run(
        """
        import jax, jax.numpy as jnp
        import optimistix as optx  # builds scale_by_zoom_linesearch(curv_rtol=jnp.inf) at import

        def f(y, args):
            return jnp.sum((y - jnp.arange(1.0, 4.0)) ** 2 * jnp.asarray([1.0, 2.0, 3.0]))

        y0 = jnp.zeros(3)
        target = jnp.arange(1.0, 4.0)
        for name, opt, steps in [
            ("adam", optax.adam(0.3), 400),
            ("lbfgs", optax.lbfgs(), 50),
            ("sgd+backtracking", optax.chain(optax.sgd(1.0), optax.scale_by_backtracking_linesearch(15)), 200),
            ("sgd+zoom", optax.chain(optax.sgd(1.0), optax.scale_by_zoom_linesearch(15)), 200),
        ]:
            solver = optx.OptaxMinimiser(opt, rtol=1e-6, atol=1e-6)
            sol = optx.minimise(f, solver, y0, max_steps=steps, throw=False)
            err = float(jnp.max(jnp.abs(sol.value - target)))
            assert err < 1e-2, (name, sol.value, sol.result)
        """
    )


def test_numpyro_svi_with_optax_to_numpyro():
    pytest.importorskip("numpyro")
    _run(
        """
        import jax, jax.numpy as jnp
        import numpyro, numpyro.distributions as dist
        from numpyro.infer import SVI, Trace_ELBO
        from numpyro.optim import optax_to_numpyro

        data = jnp.asarray([1.8, 2.2, 2.1, 1.9, 2.0])

        def model(data):
            mu = numpyro.sample("mu", dist.Normal(0.0, 10.0))
            numpyro.sample("obs", dist.Normal(mu, 1.0), obs=data)

        def guide(data):
            loc = numpyro.param("loc", 0.0)
            scale = numpyro.param("scale", 1.0, constraint=dist.constraints.positive)
            numpyro.sample("mu", dist.Normal(loc, scale))

        optimizer = optax_to_numpyro(optax.chain(optax.clip_by_global_norm(10.0), optax.adam(0.05)))
        svi = SVI(model, guide, optimizer, loss=Trace_ELBO())
        result = svi.run(jax.random.key(0), 400, data, progress_bar=False)
        loc = float(result.params["loc"])
        assert abs(loc - 2.0) < 0.2, loc
        """
    )


def test_flax_nnx_optimizer_state_sharding():
    pytest.importorskip("flax")
    _run(
        """
        import jax, jax.numpy as jnp
        from flax import nnx

        mesh = jax.make_mesh((2, 2), ("row", "col"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
        init = nnx.with_partitioning(nnx.initializers.lecun_normal(), ("row", "col"))

        def create():
            model = nnx.Linear(4, 4, kernel_init=init, rngs=nnx.Rngs(0))
            return model, nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)

        with jax.set_mesh(mesh):
            for how, make in (("eager", create), ("jit", nnx.jit(create))):
                model, opt = make()
                spec = model.kernel.get_value().sharding.spec
                assert spec == jax.sharding.PartitionSpec("row", "col"), spec
                moments = [x for x in jax.tree.leaves(nnx.state(opt.opt_state)) if x.ndim == 2]
                assert len(moments) == 2 and all(x.sharding.spec == spec for x in moments), (how, moments)

                @nnx.jit
                def step(model, opt, x):
                    grads = nnx.grad(lambda m: jnp.sum(m(x) ** 2))(model)
                    opt.update(model, grads)

                step(model, opt, jnp.ones((2, 4)))
                moments = [x for x in jax.tree.leaves(nnx.state(opt.opt_state)) if x.ndim == 2]
                assert all(x.sharding.spec == spec for x in moments), (how, "after a step")
        """,
        devices=4,
    )


def test_equinox_closure_converted_schedule():
    _run(
        """
        import equinox as eqx, jax, jax.numpy as jnp

        base = optax.warmup_cosine_decay_schedule(0.0, 0.1, 5, 50)
        schedule = eqx.filter_closure_convert(base, jnp.asarray(0))
        opt = optax.adamw(learning_rate=schedule, weight_decay=1e-4)
        params = {"w": jnp.ones(3), "b": 0.5}  # a Python float leaf too

        @eqx.filter_jit
        def step(params, state):
            grads = jax.grad(lambda p: jnp.sum(p["w"] ** 2) + p["b"] ** 2)(params)
            updates, state = opt.update(grads, state, params)
            return optax.apply_updates(params, updates), state

        state = opt.init(params)
        for _ in range(20):
            params, state = step(params, state)
        assert float(jnp.max(jnp.abs(params["w"]))) < 1.0
        injected = optax.inject_hyperparams(optax.adamw)(learning_rate=schedule)
        s = injected.init(params)
        _, s = injected.update(params, s, params)
        assert abs(float(s.hyperparams["learning_rate"]) - float(base(0))) < 1e-7
        """
    )
