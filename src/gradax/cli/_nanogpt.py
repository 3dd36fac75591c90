"""The ``nanogpt`` task: nanoGPT's character-level Shakespeare configuration for a CPU, on the shipped text.

nanoGPT (Karpathy, github.com/karpathy/nanoGPT) documents a CPU run of its character-level Shakespeare model: 4
layers, 4 heads, 128-d embedding, context 64, batch 12, no dropout, no biases, 2,000 iterations of AdamW (lr 1e-3,
betas (0.9, 0.99), weight decay 0.1 on the matrices and embeddings only, gradient clipping at 1.0, 100 warmup steps
then cosine decay to 1e-4), and reports a validation loss of about 1.88 on its own 1 MB Tiny Shakespeare text. This
task is that model and that optimizer on the text gradax ships (Hamlet and Coriolanus, about 320 kB: the first 90%
for training, the last 10% for validation), so its numbers are comparable in kind, not equal, to nanoGPT's.

The model is written over a plain dict of arrays (``[in, out]`` weight matrices, the output layer tied to the token
embedding, exact GELU, LayerNorm without bias, eps 1e-5) so that ``benchmarks/nanogpt_torch.py`` can run the very same
parameters, batches and schedule with ``torch.optim.AdamW``.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from ._tasks import Task, _cross_entropy, _WindowSampler, char_tokens


@dataclass(frozen=True)
class GPTConfig:
    """Model, data and optimizer settings of the task (nanoGPT's names)."""

    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 128
    block_size: int = 64
    batch_size: int = 12
    max_iters: int = 2000
    learning_rate: float = 1e-3
    min_lr: float = 1e-4
    warmup_iters: int = 100
    beta1: float = 0.9
    beta2: float = 0.99
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    val_windows: int = 200


#: nanoGPT's CPU configuration of the character-level Shakespeare model.
NANOGPT = GPTConfig()
#: A few-second version for tests: 1 layer, 2 heads, 32-d embedding, context 16.
NANOGPT_TINY = GPTConfig(
    n_layer=1, n_head=2, n_embd=32, block_size=16, batch_size=4, max_iters=40, warmup_iters=4, val_windows=16
)


def tokens() -> tuple[np.ndarray, np.ndarray, int]:
    """The shipped text as character ids: (train tokens, validation tokens, vocabulary size)."""
    return char_tokens()


def val_windows(val_tok: np.ndarray, cfg: GPTConfig) -> tuple[np.ndarray, np.ndarray]:
    """Fixed, evenly spaced validation windows (inputs and next-character targets)."""
    starts = np.linspace(0, len(val_tok) - cfg.block_size - 2, cfg.val_windows).astype(np.int64)
    x = np.stack([val_tok[s : s + cfg.block_size] for s in starts])
    y = np.stack([val_tok[s + 1 : s + cfg.block_size + 1] for s in starts])
    return x, y


def init_params(key: jax.Array, cfg: GPTConfig, vocab: int) -> dict:
    """nanoGPT's initialisation: N(0, 0.02) everywhere, residual projections N(0, 0.02 / sqrt(2 n_layer))."""
    d, std, proj_std = cfg.n_embd, 0.02, 0.02 / math.sqrt(2 * cfg.n_layer)
    keys = iter(jax.random.split(key, 2 + 4 * cfg.n_layer))

    def normal(shape, s):
        return jax.random.normal(next(keys), shape, jnp.float32) * s

    params = {"wte": normal((vocab, d), std), "wpe": normal((cfg.block_size, d), std), "h": []}
    for _ in range(cfg.n_layer):
        params["h"].append(
            {
                "ln_1": {"scale": jnp.ones((d,))},
                "attn": {"c_attn": normal((d, 3 * d), std), "c_proj": normal((d, d), proj_std)},
                "ln_2": {"scale": jnp.ones((d,))},
                "mlp": {"c_fc": normal((d, 4 * d), std), "c_proj": normal((4 * d, d), proj_std)},
            }
        )
    params["ln_f"] = {"scale": jnp.ones((d,))}
    return params


def _layer_norm(p, x):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) * jax.lax.rsqrt(var + 1e-5) * p["scale"]


def apply(params: dict, tok: jax.Array, cfg: GPTConfig) -> jax.Array:
    """Logits ``[batch, time, vocab]`` of the causal transformer."""
    b, t = tok.shape
    d, nh = cfg.n_embd, cfg.n_head
    hd = d // nh
    mask = jnp.tril(jnp.ones((t, t), bool))
    h = params["wte"][tok] + params["wpe"][:t]
    for lp in params["h"]:
        qkv = _layer_norm(lp["ln_1"], h) @ lp["attn"]["c_attn"]
        q, k, v = (a.reshape(b, t, nh, hd) for a in jnp.split(qkv, 3, axis=-1))
        att = jnp.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(hd)
        att = jax.nn.softmax(jnp.where(mask, att, -jnp.inf), axis=-1)
        y = jnp.einsum("bhqk,bkhd->bqhd", att, v).reshape(b, t, d)
        h = h + y @ lp["attn"]["c_proj"]
        m = jax.nn.gelu(_layer_norm(lp["ln_2"], h) @ lp["mlp"]["c_fc"], approximate=False)
        h = h + m @ lp["mlp"]["c_proj"]
    return _layer_norm(params["ln_f"], h) @ params["wte"].T


def learning_rate(it: int, cfg: GPTConfig) -> float:
    """The schedule both sides use: ``warmup_cosine_decay_schedule(0, lr, warmup, max_iters, min_lr)`` at ``it``."""
    if it < cfg.warmup_iters:
        return cfg.learning_rate * it / cfg.warmup_iters
    frac = min(1.0, (it - cfg.warmup_iters) / max(1, cfg.max_iters - cfg.warmup_iters))
    return cfg.min_lr + 0.5 * (cfg.learning_rate - cfg.min_lr) * (1.0 + math.cos(math.pi * frac))


#: A shortened run warms up over at most 1/WARMUP_PARTS of its steps (nanoGPT's 100 of 2,000).
WARMUP_PARTS = 20


def for_steps(cfg: GPTConfig, steps: int) -> GPTConfig:
    """``cfg`` shortened to ``steps`` iterations: the cosine ends there, warmup at most a twentieth of the run."""
    if steps == cfg.max_iters:
        return cfg
    return dataclasses.replace(cfg, max_iters=steps, warmup_iters=min(cfg.warmup_iters, max(1, steps // WARMUP_PARTS)))


def adamw_expression(cfg: GPTConfig, steps: int | None = None) -> str:
    """nanoGPT's optimizer as a CLI expression (weight decay on matrices and embeddings, not on LayerNorm scales)."""
    cfg = for_steps(cfg, cfg.max_iters if steps is None else steps)
    return (
        f"chain(clip_by_global_norm({cfg.grad_clip}), adamw(learning_rate=warmup_cosine_decay_schedule(0.0, "
        f"{cfg.learning_rate}, {cfg.warmup_iters}, {cfg.max_iters}, {cfg.min_lr}), b1={cfg.beta1}, b2={cfg.beta2}, "
        f"weight_decay={cfg.weight_decay}, mask=path_mask('ln_', invert=True)))"
    )


def nanogpt_task(cfg: GPTConfig = NANOGPT, name: str = "nanogpt") -> Task:
    train_tok, val_tok, vocab = tokens()
    x_val, y_val = val_windows(val_tok, cfg)

    def loss_and_acc(params, xb, yb):
        return _cross_entropy(apply(params, xb, cfg), yb)

    return Task(
        name=name,
        description=(
            f"nanoGPT char model ({cfg.n_layer} layers, {cfg.n_head} heads, d={cfg.n_embd}, context "
            f"{cfg.block_size}, vocab {vocab}, no bias/dropout) on Hamlet + Coriolanus ({len(train_tok) // 1000}k "
            f"train chars, {cfg.val_windows} validation windows)"
        ),
        init=lambda key: init_params(key, cfg, vocab),
        loss_and_acc=loss_and_acc,
        sampler=lambda seed, batch_size: _WindowSampler(train_tok, cfg.block_size, batch_size, seed),
        test_data=(x_val, y_val),
        default_batch_size=cfg.batch_size,
        default_steps=cfg.max_iters,
        default_optimizer=adamw_expression(cfg),
    )


def nanogpt_tiny_task() -> Task:
    return nanogpt_task(NANOGPT_TINY, "nanogpt-tiny")
