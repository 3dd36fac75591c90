"""Equinox: optimize only the array leaves (``eqx.filter``) and decay only the weight matrices (a mask from the model).

The mask is a pytree with the model's structure, built from the model itself: True for ``weight`` arrays of the
linear layers, False for biases. ``gradax.adamw(..., mask=mask)`` applies weight decay only where the mask is True.

    python examples/equinox_masks.py --steps 200
"""

import argparse

import equinox as eqx
import jax
import jax.numpy as jnp

import gradax as optax


def weight_decay_mask(model):
    """True for the weight matrices of the linear layers, False for every other leaf."""
    params = eqx.filter(model, eqx.is_array)
    mask = jax.tree.map(lambda _: False, params)
    weights = lambda m: [layer.weight for layer in m.layers]
    return eqx.tree_at(weights, mask, replace=[True] * len(model.layers))


def main(argv=None) -> float:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args(argv)

    model = eqx.nn.MLP(in_size=2, out_size=1, width_size=32, depth=2, activation=jax.nn.tanh, key=jax.random.PRNGKey(0))
    x = jax.random.normal(jax.random.PRNGKey(1), (256, 2))
    y = jnp.sin(x[:, :1]) * jnp.cos(x[:, 1:])

    mask = weight_decay_mask(model)
    optim = optax.adamw(learning_rate=3e-3, weight_decay=0.1, mask=mask)
    opt_state = optim.init(eqx.filter(model, eqx.is_array))

    @eqx.filter_jit
    def step(model, opt_state):
        loss, grads = eqx.filter_value_and_grad(lambda m: jnp.mean((jax.vmap(m)(x) - y) ** 2))(model)
        updates, opt_state = optim.update(grads, opt_state, eqx.filter(model, eqx.is_array))
        return eqx.apply_updates(model, updates), opt_state, loss

    # the mask really decides: with zero gradients, only the masked (decayed) leaves move
    zero = jax.tree.map(jnp.zeros_like, eqx.filter(model, eqx.is_array))
    moved, _ = optim.update(zero, opt_state, eqx.filter(model, eqx.is_array))
    assert all(bool(jnp.any(u != 0)) for u in jax.tree.leaves(eqx.filter(moved, mask)))
    biases = [layer.bias for layer in moved.layers]
    assert all(bool(jnp.all(b == 0)) for b in biases), "biases must not be decayed"

    first = None
    for i in range(1, args.steps + 1):
        model, opt_state, loss = step(model, opt_state)
        first = float(loss) if first is None else first
        if i % max(1, args.steps // 5) == 0:
            print(f"step {i:4d}  loss {float(loss):.5f}")
    print(f"loss {first:.5f} -> {float(loss):.5f}")
    assert float(loss) < first
    return float(loss)


if __name__ == "__main__":
    main()
