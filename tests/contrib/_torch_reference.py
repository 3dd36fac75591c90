"""Runs a gradax optimizer and a torch reference optimizer side by side on a fixed gradient sequence (float64).

Both start from the same params and see the same list of gradients (the gradients do not depend on the params, so
the two runs are comparable step by step). gradax runs under ``jax.enable_x64`` with float64 arrays.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import gradax


def problem(shapes: dict[str, tuple[int, ...]], steps: int = 20, seed: int = 0, spikes: dict[int, float] | None = None):
    """Float64 NumPy params and a list of ``steps`` gradient dicts (step ``i`` scaled by ``spikes[i]`` if given)."""
    rng = np.random.default_rng(seed)
    params = {k: rng.normal(size=s) for k, s in shapes.items()}
    grads = []
    for i in range(steps):
        g = {k: rng.normal(size=s) for k, s in shapes.items()}
        if spikes and i in spikes:
            g = {k: v * spikes[i] for k, v in g.items()}
        grads.append(g)
    return params, grads


def run_gradax(tx, params, grads):
    """The params after each step (a list of dicts of float64 NumPy arrays) and the final state."""
    with jax.enable_x64(True):
        p = {k: jnp.asarray(v, jnp.float64) for k, v in params.items()}
        state = tx.init(p)
        step = jax.jit(lambda g, s, p: tx.update(g, s, p))
        out = []
        for g in grads:
            u, state = step({k: jnp.asarray(v, jnp.float64) for k, v in g.items()}, state, p)
            p = gradax.apply_updates(p, u)
            out.append({k: np.asarray(v) for k, v in p.items()})
        return out, jax.tree.map(_to_numpy, state)


def _to_numpy(x):
    return x if jnp.issubdtype(jnp.asarray(x).dtype, jax.dtypes.prng_key) else np.asarray(x)


def run_torch(make_opt, params, grads, named: bool = False):
    """``make_opt(list_of_tensors)`` (or ``make_opt(list of (name, tensor))`` when ``named``) over the same gradients:
    the params after each step, and the optimizer (for its state)."""
    import torch

    tensors = {k: torch.nn.Parameter(torch.tensor(v, dtype=torch.float64)) for k, v in params.items()}
    opt = make_opt(list(tensors.items()) if named else list(tensors.values()))
    out = []
    for g in grads:
        for k, t in tensors.items():
            t.grad = torch.tensor(g[k], dtype=torch.float64)
        opt.step()
        out.append({k: t.detach().numpy().copy() for k, t in tensors.items()})
    return out, opt


def assert_runs_close(ours, theirs, rtol=1e-9, atol=1e-12):
    """Every step's params agree within the tolerances."""
    assert len(ours) == len(theirs)
    for i, (a, b) in enumerate(zip(ours, theirs)):
        for k in a:
            np.testing.assert_allclose(a[k], b[k], rtol=rtol, atol=atol, err_msg=f"step {i + 1}, leaf {k!r}")
