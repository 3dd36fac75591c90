"""Shipped datasets and the plain-JAX models the CLI trains on them.

A task bundles data, a model (init and apply functions), a batch sampler that depends only on the seed (so several
optimizers see the same data order; its position is saved in checkpoints and restored exactly on resume) and an
evaluation on held-out data. Metrics: cross-entropy loss and accuracy
(for the language model: next-character accuracy).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
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
    sampler: Callable[[int, int], Sampler]  # (seed, batch_size) -> endless, resumable batch stream
    test_data: tuple[np.ndarray, np.ndarray]
    default_batch_size: int
    default_steps: int
    default_optimizer: str

    def batches(self, seed: int, steps: int, batch_size: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """The first ``steps`` batches of :attr:`sampler` ``(seed, batch_size)``."""
        stream = self.sampler(seed, batch_size)
        for _ in range(steps):
            yield next(stream)


class Sampler(Iterator[tuple[np.ndarray, np.ndarray]]):
    """An endless stream of ``(x, y)`` batches drawn with a NumPy generator seeded by the seed only.

    ``position()`` is a JSON-serialisable snapshot (the generator's state and where the stream stands in it);
    ``restore(position)`` continues the stream exactly where the snapshot was taken, so a resumed run sees the same
    batches in the same order as an uninterrupted one.
    """

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)

    def position(self) -> dict:
        return {"rng": self.rng.bit_generator.state}

    def restore(self, position: dict) -> None:
        self.rng.bit_generator.state = position["rng"]


class _EpochSampler(Sampler):
    """Index batches without replacement, reshuffled every epoch."""

    def __init__(self, x: np.ndarray, y: np.ndarray, batch_size: int, seed: int):
        super().__init__(seed)
        self.x, self.y, self.batch_size = x, y, batch_size
        self._shuffle()

    def _shuffle(self) -> None:
        self.rng_before_shuffle = self.rng.bit_generator.state  # the permutation is redrawn from here on restore
        self.perm, self.pos = self.rng.permutation(len(self.x)), 0

    def __next__(self):
        if self.pos + self.batch_size > len(self.x):
            self._shuffle()
        idx = self.perm[self.pos : self.pos + self.batch_size]
        self.pos += self.batch_size
        return self.x[idx], self.y[idx]

    def position(self) -> dict:
        return {"rng": self.rng_before_shuffle, "pos": self.pos}

    def restore(self, position: dict) -> None:
        self.rng.bit_generator.state = position["rng"]
        self._shuffle()
        self.pos = position["pos"]


class _WindowSampler(Sampler):
    """Random windows of ``context + 1`` tokens (input and next-token target)."""

    def __init__(self, tokens: np.ndarray, context: int, batch_size: int, seed: int):
        super().__init__(seed)
        self.tokens, self.context, self.batch_size = tokens, context, batch_size
        self.offsets = np.arange(context + 1)

    def __next__(self):
        s = self.rng.integers(0, len(self.tokens) - self.context - 1, size=self.batch_size)
        win = self.tokens[s[:, None] + self.offsets]
        return win[:, :-1], win[:, 1:]


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

    def sampler(seed, batch_size):
        if batch_size > len(x_train):
            raise TaskError(f"--batch-size must be at most {len(x_train)} for digits; got {batch_size}")
        return _EpochSampler(x_train, y_train, batch_size, seed)

    return Task(
        name="digits",
        description=f"MLP 64-{hidden}-10 on 8x8 digits ({len(x_train)} train / {len(x_test)} test)",
        init=init,
        loss_and_acc=loss_and_acc,
        sampler=sampler,
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


#: Share of the shipped text used for training; the rest is held out.
TRAIN_FRACTION = 0.9
#: Distinct byte values: the size of the table that maps a character (an ASCII byte) to its id.
BYTE_VALUES = 256


def char_tokens() -> tuple[np.ndarray, np.ndarray, int]:
    """The shipped text as character ids: (train tokens, held-out tokens, vocabulary size)."""
    text = load_text()
    chars = sorted(set(text))
    lookup = np.zeros(BYTE_VALUES, np.int32)
    lookup[[ord(c) for c in chars]] = np.arange(len(chars), dtype=np.int32)
    ids = lookup[np.frombuffer(text.encode("ascii", "replace"), np.uint8)]
    split = int(TRAIN_FRACTION * len(ids))
    return ids[:split], ids[split:], len(chars)


def shakespeare_task(
    context: int = 64, d_model: int = 64, n_layers: int = 2, n_heads: int = 4, test_sequences: int = 64
) -> Task:
    train_tok, test_tok, vocab = char_tokens()
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

    def sampler(seed, batch_size):
        return _WindowSampler(train_tok, context, batch_size, seed)

    return Task(
        name="shakespeare",
        description=(
            f"char transformer ({n_layers} layers, d={d_model}, {n_heads} heads, context {context}, vocab {vocab}) "
            f"on Hamlet + Coriolanus ({len(train_tok) // 1000}k train chars)"
        ),
        init=init,
        loss_and_acc=loss_and_acc,
        sampler=sampler,
        test_data=(x_test, y_test),
        default_batch_size=32,
        default_steps=300,
        default_optimizer=(
            "chain(clip_by_global_norm(1.0), adamw(learning_rate=warmup_cosine_decay_schedule(0.0, 3e-3, 30, 300), "
            "weight_decay=0.01))"
        ),
    )


def _nanogpt(tiny: bool) -> Task:
    from . import _nanogpt  # the module imports this one

    return _nanogpt.nanogpt_tiny_task() if tiny else _nanogpt.nanogpt_task()


TASKS: dict[str, Callable[[], Task]] = {
    "digits": digits_task,
    "shakespeare": shakespeare_task,
    "nanogpt": lambda: _nanogpt(False),
    "nanogpt-tiny": lambda: _nanogpt(True),
}
ALIASES = {"mlp": "digits", "lm": "shakespeare", "transformer": "shakespeare", "text": "shakespeare"}


def get_task(name: str) -> Task:
    key = ALIASES.get(name, name)
    if key not in TASKS:
        raise TaskError(f"unknown task {name!r}; choose one of: {', '.join(TASKS)} (aliases: {', '.join(ALIASES)})")
    return TASKS[key]()
