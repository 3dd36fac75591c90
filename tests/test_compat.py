import jax.numpy as jnp

from gradax import _compat


def test_shard_alike_falls_back_to_the_identity_where_jax_lacks_it(monkeypatch):
    # JAX 0.11 removed jax.experimental.shard_alike; gradax must still import and give the same values there
    x, y = jnp.arange(3.0), jnp.ones(3)
    monkeypatch.setattr(_compat, "_shard_alike", None)
    a, b = _compat.shard_alike(x, y)
    assert a is x and b is y
