"""Shipped datasets and the plain-JAX models the CLI trains on them.

A task bundles data, a model (init and apply functions), a batch sampler that depends only on the seed (so several
optimizers see the same data order) and an evaluation on held-out data. Metrics: cross-entropy loss and accuracy
(for the language model: next-character accuracy).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np


class TaskError(ValueError):
    """A task name or setting that cannot work."""


@dataclass
class Task:
    name: str
    description: str
    init: Callable[[jax.Array], Any]
    loss_and_acc: Callable[[Any, jax.Array, jax.Array], tuple[jax.Array, jax.Array]]
    batches: Callable[[int, int, int], Any]  # (seed, steps, batch_size) -> iterator of (x, y)
    test_data: tuple[np.ndarray, np.ndarray]
    default_batch_size: int
    default_steps: int
    default_optimizer: str


def _data_path(name: str):
    return resources.files("gradax").joinpath("data", name)


def _cross_entropy(logits, labels):
    logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    nll = -jnp.take_along_axis(logp, labels[..., None], axis=-1)[..., 0]
    acc = (jnp.argmax(logits, axis=-1) == labels).astype(jnp.float32)
    return nll.mean(), acc.mean()


def _dense_init(key, n_in, n_out, scale=None):
    scale = (1.0 / math.sqrt(n_in)) if scale is None else scale
    return {"w": jax.random.normal(key, (n_in, n_out), jnp.float32) * scale, "b": jnp.zeros((n_out,), jnp.float32)}


def _sampler(n: int, batch_size: int, steps: int, seed: int):
    """Index batches: reshuffle each epoch with a NumPy generator seeded by ``seed`` only."""
    rng = np.random.default_rng(seed)
    perm, pos = rng.permutation(n), 0
    for _ in range(steps):
        if pos + batch_size > n:
            perm, pos = rng.permutation(n), 0
        yield perm[pos : pos + batch_size]
        pos += batch_size


# --------------------------------------------------------------------------------------------------------------
# digits: MLP classifier
# --------------------------------------------------------------------------------------------------------------


def load_digits() -> tuple[np.ndarray, np.ndarray]:
    """The 1797 8x8 digits as (images uint8 [N,8,8], labels int [N])."""
    with _data_path("digits.npz").open("rb") as f:
        d = np.load(f)
        return d["images"], d["labels"].astype(np.int32)


def digits_task(hidden: int = 128, test_size: int = 360) -> Task:
    images, labels = load_digits()
    x = images.reshape(len(images), -1).astype(np.float32) / 16.0
    order = np.random.default_rng(0).permutation(len(x))  # fixed split, independent of --seed
    test_idx, train_idx = order[:test_size], order[test_size:]
    x_train, y_train, x_test, y_test = x[train_idx], labels[train_idx], x[test_idx], labels[test_idx]

    def init(key):
        k1, k2 = jax.random.split(key)
        return {"hidden": _dense_init(k1, 64, hidden), "out": _dense_init(k2, hidden, 10)}

    def apply(params, xb):
        h = jax.nn.relu(xb @ params["hidden"]["w"] + params["hidden"]["b"])
        return h @ params["out"]["w"] + params["out"]["b"]

    def loss_and_acc(params, xb, yb):
        return _cross_entropy(apply(params, xb), yb)

    def batches(seed, steps, batch_size):
        if batch_size > len(x_train):
            raise TaskError(f"--batch-size must be at most {len(x_train)} for digits; got {batch_size}")
        for idx in _sampler(len(x_train), batch_size, steps, seed):
            yield x_train[idx], y_train[idx]

    return Task(
        name="digits",
        description=f"MLP 64-{hidden}-10 on 8x8 digits ({len(x_train)} train / {len(x_test)} test)",
        init=init,
        loss_and_acc=loss_and_acc,
        batches=batches,
        test_data=(x_test, y_test),
        default_batch_size=64,
        default_steps=500,
        default_optimizer="adam(learning_rate=1e-3)",
    )


# --------------------------------------------------------------------------------------------------------------
# shakespeare: character-level transformer language model
# --------------------------------------------------------------------------------------------------------------


def load_text() -> str:
    return _data_path("shakespeare.txt").read_text(encoding="utf-8")


def shakespeare_task(
    context: int = 64, d_model: int = 64, n_layers: int = 2, n_heads: int = 4, test_sequences: int = 64
) -> Task:
    text = load_text()
    chars = sorted(set(text))
    lookup = np.zeros(256, np.int32)
    lookup[[ord(c) for c in chars]] = np.arange(len(chars), dtype=np.int32)
    tokens = lookup[np.frombuffer(text.encode("ascii", "replace"), np.uint8)]
    vocab = len(chars)
    split = int(0.9 * len(tokens))
    train_tok, test_tok = tokens[:split], tokens[split:]
    # held-out: fixed, non-overlapping windows from the last 10% of the text
    starts = np.linspace(0, len(test_tok) - context - 2, test_sequences).astype(np.int64)
    x_test = np.stack([test_tok[s : s + context] for s in starts])
    y_test = np.stack([test_tok[s + 1 : s + context + 1] for s in starts])
    d_head = d_model // n_heads

    def init(key):
        keys = jax.random.split(key, 2 + 4 * n_layers)
        params = {
            "embed": jax.random.normal(keys[0], (vocab, d_model), jnp.float32) * 0.02,
            "pos": jax.random.normal(keys[1], (context, d_model), jnp.float32) * 0.02,
            "layers": [],
            "ln_f": {"scale": jnp.ones((d_model,)), "bias": jnp.zeros((d_model,))},
        }
        for i in range(n_layers):
            k = keys[2 + 4 * i : 6 + 4 * i]
            params["layers"].append(
                {
                    "ln1": {"scale": jnp.ones((d_model,)), "bias": jnp.zeros((d_model,))},
                    "qkv": _dense_init(k[0], d_model, 3 * d_model),
                    "proj": _dense_init(k[1], d_model, d_model, scale=0.02 / math.sqrt(2 * n_layers)),
                    "ln2": {"scale": jnp.ones((d_model,)), "bias": jnp.zeros((d_model,))},
                    "fc": _dense_init(k[2], d_model, 4 * d_model),
                    "out": _dense_init(k[3], 4 * d_model, d_model, scale=0.02 / math.sqrt(2 * n_layers)),
                }
            )
        return params

    def layer_norm(p, x):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) * jax.lax.rsqrt(var + 1e-5) * p["scale"] + p["bias"]

    mask = jnp.tril(jnp.ones((context, context), bool))

    def apply(params, tok):
        b, t = tok.shape
        h = params["embed"][tok] + params["pos"][:t]
        for lp in params["layers"]:
            a = layer_norm(lp["ln1"], h)
            qkv = a @ lp["qkv"]["w"] + lp["qkv"]["b"]
            q, k, v = jnp.split(qkv.reshape(b, t, 3, n_heads, d_head), 3, axis=2)
            q, k, v = q[:, :, 0], k[:, :, 0], v[:, :, 0]
            att = jnp.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(d_head)
            att = jax.nn.softmax(jnp.where(mask[:t, :t], att, -1e30), axis=-1)
            a = jnp.einsum("bhqk,bkhd->bqhd", att, v).reshape(b, t, d_model)
            h = h + a @ lp["proj"]["w"] + lp["proj"]["b"]
            m = layer_norm(lp["ln2"], h)
            m = jax.nn.gelu(m @ lp["fc"]["w"] + lp["fc"]["b"])
            h = h + m @ lp["out"]["w"] + lp["out"]["b"]
        h = layer_norm(params["ln_f"], h)
        return h @ params["embed"].T  # tied output embedding

    def loss_and_acc(params, xb, yb):
        return _cross_entropy(apply(params, xb), yb)

    def batches(seed, steps, batch_size):
        rng = np.random.default_rng(seed)
        offsets = np.arange(context + 1)
        for _ in range(steps):
            s = rng.integers(0, len(train_tok) - context - 1, size=batch_size)
            win = train_tok[s[:, None] + offsets]
            yield win[:, :-1], win[:, 1:]

    return Task(
        name="shakespeare",
        description=(
            f"char transformer ({n_layers} layers, d={d_model}, {n_heads} heads, context {context}, vocab {vocab}) "
            f"on Hamlet + Coriolanus ({len(train_tok) // 1000}k train chars)"
        ),
        init=init,
        loss_and_acc=loss_and_acc,
        batches=batches,
        test_data=(x_test, y_test),
        default_batch_size=32,
        default_steps=300,
        default_optimizer=(
            "chain(clip_by_global_norm(1.0), adamw(learning_rate=warmup_cosine_decay_schedule(0.0, 3e-3, 30, 300), "
            "weight_decay=0.01))"
        ),
    )


TASKS: dict[str, Callable[[], Task]] = {"digits": digits_task, "shakespeare": shakespeare_task}
ALIASES = {"mlp": "digits", "lm": "shakespeare", "transformer": "shakespeare", "text": "shakespeare"}


def get_task(name: str) -> Task:
    key = ALIASES.get(name, name)
    if key not in TASKS:
        raise TaskError(f"unknown task {name!r}; choose one of: {', '.join(TASKS)} (aliases: {', '.join(ALIASES)})")
    return TASKS[key]()
