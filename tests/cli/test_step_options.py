"""The CLI's training step: donated, on CPU compiled with region-based copy insertion (no state copies), and
passing the loss to the optimizers that need it."""

from __future__ import annotations

import jax
import jax.numpy as jnp

import gradax
from gradax.cli._run import make_step_fn, step_compiler_options, train
from gradax.cli._tasks import get_task


def test_cli_step_updates_params_and_state_in_place_without_copies():
    # the step `gradax train` runs: donated params and state, compiled with step_compiler_options() on CPU. Lion's
    # update reads the old momentum that the new one overwrites in place; XLA's default copy insertion copies the
    # momentum (and params) first, the region analysis orders the two kernels instead
    assert step_compiler_options() == {"xla_cpu_copy_insertion_use_region_analysis": True}  # the suite runs on CPU
    task = get_task("digits")
    params = task.init(jax.random.PRNGKey(0))
    opt = gradax.lion(1e-3, weight_decay=0.1)
    xb, yb = next(iter(task.batches(0, 1, 32)))
    hlo = make_step_fn(task, opt).lower(params, opt.init(params), xb, yb).compile().as_text()
    assert "input_output_alias" in hlo  # params and state donated
    assert " copy(" not in hlo, [line for line in hlo.splitlines() if " copy(" in line]


def test_train_passes_value_grad_and_value_fn_to_optimizers_that_need_them(tmp_path):
    # L-BFGS's zoom line search needs value, grad and value_fn; polyak_sgd needs value; the others ignore them
    task = get_task("digits")
    for name, opt in {"lbfgs": gradax.lbfgs(), "polyak_sgd": gradax.polyak_sgd(), "adam": gradax.adam(1e-2)}.items():
        hist = train(task, opt, steps=6, batch_size=64, progress=False)
        losses = [r["loss"] for r in hist.records]
        assert all(jnp.isfinite(jnp.asarray(losses))), name
        assert losses[-1] < losses[0], (name, losses)


def test_train_donates_an_injected_state_that_keeps_a_hyperparameter(tmp_path):
    # the CLI wraps optimizers in inject_hyperparams; Prodigy's state keeps estim_lr0, which once shared the
    # hyperparams' buffer and made the donated step fail ("Attempt to donate the same buffer twice")
    from gradax.cli import main

    out = tmp_path / "p"
    assert main(["train", "--steps", "3", "--out", str(out), "--quiet", "--optimizer", "contrib.prodigy()"]) == 0


def test_train_with_a_fused_optimizer_runs_its_one_pass_step(tmp_path):
    # "fused.adamw(...)" parses, inject_hyperparams (the CLI's wrapper) keeps the fused step, and the compiled CLI
    # step calls the kernel when it is built here
    from gradax.cli import main
    from gradax.cli._expr import parse_optimizer

    opt = parse_optimizer("fused.adamw(learning_rate=1e-2, weight_decay=0.1, max_grad_norm=1.0)").value
    assert isinstance(opt, gradax.fused.FusedGradientTransformation)
    task = get_task("digits")
    params = task.init(jax.random.PRNGKey(0))
    xb, yb = next(iter(task.batches(0, 1, 32)))
    hlo = make_step_fn(task, opt).lower(params, opt.init(params), xb, yb).compile().as_text()
    assert ("gradax_adamw_step" in hlo) == gradax.fused.kernel_status().available
    assert " copy(" not in hlo
    out = tmp_path / "f"
    assert main(["train", "--steps", "4", "--out", str(out), "--quiet", "--optimizer", "fused.adamw(1e-2)"]) == 0


def test_train_with_flatten_of_a_fused_optimizer_runs_the_flat_kernel():
    # "flatten(fused.adamw(...))" parses to a fused optimizer whose step keeps the moments flat, and the compiled CLI
    # step calls the flat kernel when it is built here
    from gradax.cli._expr import parse_optimizer

    opt = parse_optimizer("flatten(fused.adamw(1e-2, weight_decay=0.1))").value
    assert isinstance(opt, gradax.fused.FusedGradientTransformation)
    task = get_task("digits")
    params = task.init(jax.random.PRNGKey(0))
    xb, yb = next(iter(task.batches(0, 1, 32)))
    step = make_step_fn(task, opt)
    hlo = step.lower(params, opt.init(params), xb, yb).compile().as_text()
    assert ("gradax_adamw_flat_step" in hlo) == gradax.fused.kernel_status().available
    state = opt.init(params)
    new_params, new_state, loss, _, finite = step(jax.tree.map(jnp.copy, params), state, xb, yb)
    assert jnp.isfinite(loss) and finite
    assert jax.tree.structure(new_state) == jax.tree.structure(opt.init(params))
    assert any(bool(jnp.any(a != b)) for a, b in zip(jax.tree.leaves(new_params), jax.tree.leaves(params)))
