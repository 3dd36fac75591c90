"""gradax.contrib.adam_mini against the authors' adam_mini.Adam_mini (float64, 20 steps), and its state memory."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradax

from ._torch_reference import assert_runs_close, problem, run_gradax, run_torch

torch = pytest.importorskip("torch")
adam_mini = pytest.importorskip("adam_mini")

D, HEADS, VOCAB = 8, 2, 11
# a one-layer GPT-like model with the names the authors' partition knows (torch layout: (out, in))
SHAPES = {
    "wte.weight": (VOCAB, D),
    "h.0.ln_1.weight": (D,),
    "h.0.attn.q_proj.weight": (D, D),
    "h.0.attn.k_proj.weight": (D, D),
    "h.0.attn.v_proj.weight": (D, D),
    "h.0.attn.o_proj.weight": (D, D),
    "h.0.mlp.fc.weight": (4 * D, D),
    "h.0.mlp.fc.bias": (4 * D,),
    "ln_f.weight": (D,),
    "lm_head.weight": (VOCAB, D),
}


def _decayed(params):
    # the authors' rule: no weight decay for names containing norm, ln or bias
    return {k: not any(s in k for s in ("norm", "ln", "bias")) for k in params}


def test_adam_mini_matches_the_authors_package():
    params, grads = problem(SHAPES, steps=20)
    tx = gradax.contrib.adam_mini(1e-2, b1=0.9, b2=0.999, eps=1e-8, weight_decay=0.1, mask=_decayed, n_heads=HEADS)
    ours, state = run_gradax(tx, params, grads)
    theirs, opt = run_torch(
        lambda named: adam_mini.Adam_mini(
            named, lr=1e-2, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1, dim=D, n_heads=HEADS, verbose=False
        ),
        params,
        grads,
        named=True,
    )
    assert_runs_close(ours, theirs, rtol=1e-11, atol=1e-12)
    nu = state[0].nu
    for group in opt.param_groups:
        name, p = group["name"], group["params"][0]
        ref = opt.state[p]
        np.testing.assert_allclose(state[0].mu[name].reshape(-1), ref["m"].numpy().reshape(-1), rtol=1e-11)
        key = "v" if "bias" in name else "vmean"
        np.testing.assert_allclose(nu[name], ref[key].numpy().reshape(nu[name].shape), rtol=1e-11)
    assert nu["h.0.attn.q_proj.weight"].shape == (HEADS, 1)
    assert nu["wte.weight"].shape == (VOCAB, 1) and nu["h.0.ln_1.weight"].shape == ()
    assert nu["h.0.mlp.fc.bias"].shape == (4 * D,)


def _gpt2_like(d=64, layers=2, vocab=256, ctx=32):
    """A GPT-2-shaped tree (flax-like names) with ShapeDtypeStruct leaves."""
    s = lambda *shape: jax.ShapeDtypeStruct(shape, jnp.float32)
    tree = {"wte": {"embedding": s(vocab, d)}, "wpe": {"embedding": s(ctx, d)}, "ln_f": {"scale": s(d), "bias": s(d)}}
    for i in range(layers):
        tree[f"h_{i}"] = {
            "ln_1": {"scale": s(d), "bias": s(d)},
            "attn": {
                "query": {"kernel": s(d, d), "bias": s(d)},
                "key": {"kernel": s(d, d), "bias": s(d)},
                "value": {"kernel": s(d, d), "bias": s(d)},
                "o_proj": {"kernel": s(d, d), "bias": s(d)},
            },
            "ln_2": {"scale": s(d), "bias": s(d)},
            "mlp": {"c_fc": {"kernel": s(d, 4 * d), "bias": s(4 * d)}, "c_proj": {"kernel": s(4 * d, d), "bias": s(d)}},
        }
    return tree


def _bytes(state):
    return sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(state))


def test_adam_mini_state_is_at_most_055_of_adamw():
    params = _gpt2_like()
    mini = jax.eval_shape(gradax.contrib.adam_mini(1e-3, n_heads=4).init, params)
    adamw = jax.eval_shape(gradax.adamw(1e-3).init, params)
    ratio = _bytes(mini) / _bytes(adamw)
    assert ratio <= 0.55, ratio


def test_adam_mini_custom_partition_and_errors():
    params = {"a": jnp.ones((4, 3)), "b": jnp.ones(3)}
    tx = gradax.contrib.scale_by_adam_mini(partition={"a": "head", "b": "tensor"}, n_heads=2)
    state = tx.init(params)
    assert state.nu["a"].shape == (2, 1) and state.nu["b"].shape == ()
    u, _ = tx.update(params, state)
    assert u["a"].shape == (4, 3)
    with pytest.raises(ValueError, match=r"scale_by_adam_mini\(n_heads=\.\.\.\) must be an int >= 1 when a parameter"):
        gradax.contrib.scale_by_adam_mini(partition="head").init(params)
    with pytest.raises(ValueError, match=r"scale_by_adam_mini\(n_heads=\.\.\.\) must be a divisor of the size"):
        gradax.contrib.scale_by_adam_mini(partition="head", n_heads=5).init(params)
    with pytest.raises(
        ValueError, match=r"scale_by_adam_mini\(partition=\.\.\.\) must be a tree or function of labels"
    ):
        gradax.contrib.scale_by_adam_mini(partition="column").init(params)
    with pytest.raises(ValueError, match=r"scale_by_adam_mini\(n_heads=\.\.\.\) must be"):
        gradax.contrib.scale_by_adam_mini(n_heads=0)
