"""Run by tests/contrib/test_refresh_loops.py in a subprocess (a deadlock there fails the test after a timeout
instead of hanging the suite): SOAP's and Shampoo's preconditioner refreshes inside ``lax.map`` over two stacked
states of a ``lax.scan`` over steps, as the CLI's learning-rate sweeps run branching optimizers."""

import math
import sys

import jax
import jax.numpy as jnp

from gradax import apply_updates, contrib

# factors of one size in several leaves (refreshed as one batch), blocks of one size (Shampoo), a vector
SHAPES = {"a": (128, 512), "b": (128, 512), "c": (512, 128), "d": (64, 64), "e": (64, 64), "v": (64,)}
OPTIMIZERS = {
    "soap": lambda: contrib.soap(1e-3, precondition_frequency=2),
    # exponent 3: the inverse roots go through eigh (LAPACK), not the Newton iteration
    "shampoo": lambda: contrib.shampoo(
        1e-3, block_size=64, inverse_exponent=3, start_preconditioning_step=1, preconditioning_compute_steps=2
    ),
}


def run(name: str, runs: int = 2, steps: int = 3) -> None:
    opt = OPTIMIZERS[name]()
    params = {
        k: 0.02 * jnp.sin((i + 1.0) * jnp.arange(math.prod(s), dtype=jnp.float32)).reshape(s)
        for i, (k, s) in enumerate(SHAPES.items())
    }

    def train(carry):
        def step(c, t):
            p, s = c
            u, s = opt.update(jax.tree.map(lambda x: jnp.cos(7.0 * x + t), p), s, p)
            return (apply_updates(p, u), s), None

        return jax.lax.scan(step, carry, jnp.arange(steps, dtype=jnp.float32))[0]

    stacked = jax.tree.map(lambda x: jnp.stack([x] * runs), (params, opt.init(params)))
    p, _ = jax.jit(lambda c: jax.lax.map(train, c))(stacked)
    assert all(bool(jnp.all(jnp.isfinite(x))) for x in jax.tree.leaves(p)), name
    print(name, "ok", flush=True)


if __name__ == "__main__":
    for name in sys.argv[1:]:
        run(name)
