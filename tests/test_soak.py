"""A soak (issue 23): AdamW, Lion, Muon (``contrib.muon``) and ``MultiSteps(adamw)`` stepped one after another in one
process, each step a call of one jitted function from Python, with no retracing (each step function is traced and
compiled once) and no growth of resident memory beyond a stated bound.

The short version (a few hundred steps each) runs in ``make test``; the long one, 20,000 steps each, runs with
``GRADAX_SOAK=1 .venv/bin/python -m pytest -p no:xdist -m soak tests/test_soak.py``.
"""

from __future__ import annotations

import gc
import os
import resource

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradax
from tests._compiles import backend_compiles

OPTIMIZERS = {
    "adamw": lambda: gradax.adamw(1e-3, weight_decay=1e-2),
    "lion": lambda: gradax.lion(1e-4, weight_decay=1e-2),
    "muon": lambda: gradax.contrib.muon(1e-3),
    "multisteps_adamw": lambda: gradax.MultiSteps(gradax.adamw(1e-3), every_k_schedule=4).gradient_transformation(),
}

# Resident memory may grow by at most this much between the end of the warm-up and the end of the run: allocator
# and cache noise, far below what a leak of one step's arrays per step would add (20,000 steps of these params
# hold about 230 MB).
RSS_BOUND_MB = 48
WARMUP = 100


def _rss_mb() -> float:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:  # not Linux: the peak, which also grows with a leak
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _params():
    rng = np.random.default_rng(0)
    return {
        "w1": jnp.asarray(rng.normal(size=(32, 16)) / 4, jnp.float32),
        "b1": jnp.zeros(16, jnp.float32),
        "w2": jnp.asarray(rng.normal(size=(16, 8)) / 4, jnp.float32),
        "scale": jnp.ones([], jnp.float32),
    }


def _loss(params, x, y):
    h = jnp.tanh(x @ params["w1"] + params["b1"])
    return jnp.mean((params["scale"] * (h @ params["w2"]) - y) ** 2)


def _soak(name: str, steps: int) -> dict:
    opt = OPTIMIZERS[name]()
    traces = [0]

    @jax.jit
    def step(params, state, i):
        traces[0] += 1
        key = jax.random.fold_in(jax.random.key(0), i % 64)  # 64 batches, seen in turn
        x = jax.random.normal(key, (8, 32))
        y = jnp.sin(x[:, :8])
        loss, grads = jax.value_and_grad(_loss)(params, x, y)
        updates, state = opt.update(grads, state, params)
        return gradax.apply_updates(params, updates), state, loss

    params = _params()
    state = opt.init(params)
    losses = []
    with backend_compiles() as compiled:
        for i in range(steps):
            params, state, loss = step(params, state, jnp.asarray(i, jnp.int32))
            if i == WARMUP - 1:
                jax.block_until_ready(params)
                gc.collect()
                rss_start = _rss_mb()
            if i % 50 == 0:
                losses.append(float(loss))
        jax.block_until_ready(params)
    gc.collect()
    return {
        "traces": traces[0],
        "compiled": compiled.count("jit(step)"),
        "rss_growth_mb": _rss_mb() - rss_start,
        "losses": losses,
        "finite": all(bool(jnp.all(jnp.isfinite(x))) for x in jax.tree.leaves((params, state)) if x.dtype != jnp.int32),
    }


def _check(result: dict) -> None:
    assert result["traces"] == 1 and result["compiled"] == 1, result
    assert result["finite"], result
    assert result["losses"][-1] < result["losses"][0], result["losses"]
    assert result["rss_growth_mb"] < RSS_BOUND_MB, result


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_soak_short(name):
    _check(_soak(name, 300))


@pytest.mark.soak
@pytest.mark.skipif(os.environ.get("GRADAX_SOAK") != "1", reason="the long soak runs with GRADAX_SOAK=1")
def test_soak_long():
    """20,000 steps of each optimizer in this one process, one after the other."""
    for name in OPTIMIZERS:
        result = _soak(name, 20_000)
        _check(result)
        print(f"{name}: {result['rss_growth_mb']:.1f} MB of resident memory growth, loss {result['losses'][-1]:.4f}")
