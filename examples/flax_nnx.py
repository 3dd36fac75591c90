"""Train a small Flax NNX model with a gradax optimizer through ``nnx.Optimizer``.

gradax is a drop-in for Optax, so ``nnx.Optimizer(model, tx, wrt=nnx.Param)`` accepts a gradax transformation.

    python examples/flax_nnx.py --steps 200
"""

import argparse

import jax
import jax.numpy as jnp
from flax import nnx

import gradax as optax


class MLP(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.hidden = nnx.Linear(1, 32, rngs=rngs)
        self.out = nnx.Linear(32, 1, rngs=rngs)

    def __call__(self, x):
        return self.out(jax.nn.tanh(self.hidden(x)))


def main(argv=None) -> float:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args(argv)

    x = jnp.linspace(-3.0, 3.0, 128)[:, None]
    y = jnp.sin(x)
    model = MLP(nnx.Rngs(0))
    tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(optax.cosine_decay_schedule(1e-2, args.steps)))
    optimizer = nnx.Optimizer(model, tx, wrt=nnx.Param)

    @nnx.jit
    def train_step(model, optimizer):
        def loss_fn(model):
            return jnp.mean((model(x) - y) ** 2)

        loss, grads = nnx.value_and_grad(loss_fn)(model)
        optimizer.update(model, grads)
        return loss

    first = loss = float(train_step(model, optimizer))
    for step in range(2, args.steps + 1):
        loss = float(train_step(model, optimizer))
        if step % max(1, args.steps // 5) == 0:
            print(f"step {step:4d}  loss {loss:.5f}")
    print(f"loss {first:.5f} -> {loss:.5f}")
    assert loss < first, "training did not reduce the loss"
    return loss


if __name__ == "__main__":
    main()
