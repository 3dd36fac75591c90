"""Save params and a gradax optimizer state with orbax-checkpoint, restore them, and resume to identical numbers.

Runs N steps straight, and separately N/2 steps, a save, a restore into fresh objects (using the freshly initialised
state as the target structure, so NamedTuple states come back as NamedTuples) and N/2 more steps; both must agree
exactly.

    python examples/orbax_checkpoint.py --steps 20
"""

import argparse
import tempfile
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp

import gradax as optax


def make():
    params = {"w": jax.random.normal(jax.random.PRNGKey(0), (4, 3)), "b": jnp.zeros((3,))}
    x = jax.random.normal(jax.random.PRNGKey(1), (32, 4))
    y = jax.random.normal(jax.random.PRNGKey(2), (32, 3))
    schedule = optax.warmup_cosine_decay_schedule(0.0, 1e-2, 5, 100)
    opt = optax.chain(optax.clip_by_global_norm(1.0), optax.inject_hyperparams(optax.adamw)(learning_rate=schedule))

    @jax.jit
    def step(params, state):
        loss, grads = jax.value_and_grad(lambda p: jnp.mean((x @ p["w"] + p["b"] - y) ** 2))(params)
        updates, state = opt.update(grads, state, params)
        return optax.apply_updates(params, updates), state, loss

    return params, opt, step


def run(params, state, step, n):
    loss = None
    for _ in range(n):
        params, state, loss = step(params, state)
    return params, state, loss


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args(argv)
    half = max(1, args.steps // 2)

    params, opt, step = make()
    straight = run(params, opt.init(params), step, 2 * half)

    params, state, _ = run(params, opt.init(params), step, half)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "ckpt"
        with ocp.StandardCheckpointer() as ckptr:
            ckptr.save(path, {"params": params, "opt_state": state})
            ckptr.wait_until_finished()
        # fresh objects, as in a new process: the restore target gives the tree structure (NamedTuples) and dtypes
        fresh_params, opt, step = make()
        target = {"params": fresh_params, "opt_state": opt.init(fresh_params)}
        with ocp.StandardCheckpointer() as ckptr:
            restored = ckptr.restore(path, jax.tree.map(ocp.utils.to_shape_dtype_struct, target))
    print("learning rate after restore:", float(optax.tree.get(restored["opt_state"], "learning_rate")))
    resumed = run(restored["params"], restored["opt_state"], step, 2 * half - half)

    for a, b in zip(jax.tree.leaves(straight), jax.tree.leaves(resumed)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert jax.tree.structure(straight[1]) == jax.tree.structure(resumed[1])
    print(f"resumed run identical to the straight run after {2 * half} steps (loss {float(resumed[2]):.6f})")


if __name__ == "__main__":
    main()
