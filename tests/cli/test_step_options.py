"""The CLI's training step: donated, and on CPU compiled with region-based copy insertion (no state copies)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

import gradax
from gradax.cli._run import step_compiler_options


def _compiled_lion_step(options):
    opt = gradax.lion(1e-3, weight_decay=0.1)
    params = {"w": jnp.ones((64, 32)), "b": jnp.zeros((32,))}
    state = opt.init(params)

    def step(p, s, g):
        u, s = opt.update(g, s, p)
        return gradax.apply_updates(p, u), s

    return jax.jit(step, donate_argnums=(0, 1), compiler_options=options).lower(params, state, params).compile()


def test_cpu_step_options_order_reads_before_in_place_writes():
    options = step_compiler_options()
    assert options == {"xla_cpu_copy_insertion_use_region_analysis": True}  # the suite runs on CPU
    hlo = _compiled_lion_step(options).as_text()
    # Lion's update reads the old momentum, which the new one overwrites in place: no copy of it is made first
    assert " copy(" not in hlo, [line for line in hlo.splitlines() if " copy(" in line]


def test_train_passes_value_grad_and_value_fn_to_optimizers_that_need_them(tmp_path):
    # L-BFGS's zoom line search needs value, grad and value_fn; polyak_sgd needs value; the others ignore them
    from gradax.cli._run import train
    from gradax.cli._tasks import get_task

    task = get_task("digits")
    for name, opt in {"lbfgs": gradax.lbfgs(), "polyak_sgd": gradax.polyak_sgd(), "adam": gradax.adam(1e-2)}.items():
        hist = train(task, opt, steps=6, batch_size=64, progress=False)
        losses = [r["loss"] for r in hist.records]
        assert all(jnp.isfinite(jnp.asarray(losses))), name
        assert losses[-1] < losses[0], (name, losses)
