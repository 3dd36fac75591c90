"""nanoGPT's CPU Shakespeare run with ``torch.optim.AdamW`` beside gradax's, same weights, batches and schedule.

Both sides start from the parameters of ``gradax.cli._nanogpt.init_params`` (seed 0), see the same batches (the
task's sampler with seed 0), use the same learning-rate schedule (linear warmup, cosine to ``min_lr``), the same
AdamW settings (betas (0.9, 0.99), weight decay 0.1 on matrices and embeddings only, eps 1e-8), gradient clipping at
1.0, and are evaluated on the same validation windows. The torch model is the same function written in torch.

    python -m benchmarks.nanogpt_torch                # the full 2,000 iterations on both sides
    python -m benchmarks.nanogpt_torch --iters 20     # a quick check
    python -m benchmarks.nanogpt_torch --tiny --iters 20 --no-gradax

nanoGPT's README reports a validation loss of about 1.88 for this configuration after 2,000 iterations on its own
1 MB Tiny Shakespeare; gradax ships a 320 kB text (Hamlet and Coriolanus), so the numbers differ in kind.
"""

from __future__ import annotations

import argparse
import math
import time

import jax
import numpy as np
import torch

from gradax.cli._nanogpt import NANOGPT, NANOGPT_TINY, adamw_expression, for_steps, learning_rate, nanogpt_task


def torch_forward(p: dict, tok: torch.Tensor, cfg) -> torch.Tensor:
    b, t = tok.shape
    d, nh = cfg.n_embd, cfg.n_head
    hd = d // nh

    def ln(scale, x):
        return torch.nn.functional.layer_norm(x, (d,), scale, None, 1e-5)

    mask = torch.tril(torch.ones(t, t, dtype=torch.bool))
    h = p["wte"][tok] + p["wpe"][:t]
    for i in range(cfg.n_layer):
        qkv = ln(p[f"h.{i}.ln_1.scale"], h) @ p[f"h.{i}.attn.c_attn"]
        q, k, v = (a.reshape(b, t, nh, hd) for a in qkv.split(d, dim=-1))
        att = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(hd)
        att = torch.softmax(att.masked_fill(~mask, float("-inf")), dim=-1)
        y = torch.einsum("bhqk,bkhd->bqhd", att, v).reshape(b, t, d)
        h = h + y @ p[f"h.{i}.attn.c_proj"]
        m = torch.nn.functional.gelu(ln(p[f"h.{i}.ln_2.scale"], h) @ p[f"h.{i}.mlp.c_fc"])
        h = h + m @ p[f"h.{i}.mlp.c_proj"]
    return ln(p["ln_f.scale"], h) @ p["wte"].T


def _flatten(params) -> dict[str, np.ndarray]:
    out = {}
    for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]:
        key = ".".join(str(getattr(k, "key", getattr(k, "idx", k))) for k in path)
        out[key] = np.array(leaf)
    return out


def run_torch(task, cfg, iters: int) -> tuple[float, float]:
    torch.manual_seed(0)
    init = _flatten(task.init(jax.random.PRNGKey(0)))
    p = {k: torch.tensor(v, requires_grad=True) for k, v in init.items()}
    decay = [v for k, v in p.items() if ".ln_" not in k and not k.startswith("ln_")]
    no_decay = [v for k, v in p.items() if ".ln_" in k or k.startswith("ln_")]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=cfg.learning_rate,
        betas=(cfg.beta1, cfg.beta2),
        eps=1e-8,
    )
    sampler = task.sampler(0, cfg.batch_size)
    x_val, y_val = (torch.tensor(np.asarray(a), dtype=torch.long) for a in task.test_data)
    t0 = time.perf_counter()
    for it in range(iters):
        xb, yb = next(sampler)
        for g in opt.param_groups:
            g["lr"] = learning_rate(it, cfg)
        logits = torch_forward(p, torch.tensor(xb, dtype=torch.long), cfg)
        loss = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), torch.tensor(yb, dtype=torch.long).reshape(-1)
        )
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(p.values()), cfg.grad_clip)
        opt.step()
    with torch.no_grad():
        logits = torch_forward(p, x_val, cfg)
        val = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y_val.reshape(-1))
    return float(val), time.perf_counter() - t0


def run_gradax(task, cfg, iters: int) -> tuple[float, float]:
    from gradax.cli._expr import parse_optimizer
    from gradax.cli._run import train

    opt = parse_optimizer(adamw_expression(cfg, iters)).value
    t0 = time.perf_counter()
    hist = train(task, opt, steps=iters, batch_size=cfg.batch_size, seed=0, eval_every=iters, progress=False)
    return hist.final("test_loss"), time.perf_counter() - t0


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--iters", type=int, default=NANOGPT.max_iters, help="iterations (nanoGPT: 2000)")
    ap.add_argument("--tiny", action="store_true", help="the tiny test configuration instead of nanoGPT's")
    ap.add_argument("--no-gradax", action="store_true", help="run only the torch side")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    a = ap.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    base = NANOGPT_TINY if a.tiny else NANOGPT
    cfg = for_steps(base, a.iters)
    task = nanogpt_task(base)
    val_t, wall_t = run_torch(task, cfg, a.iters)
    print(f"torch.optim.AdamW: {a.iters} iterations, final validation loss {val_t:.4f}, wall time {wall_t:.1f} s")
    if not a.no_gradax:
        val_g, wall_g = run_gradax(task, cfg, a.iters)
        print(f"gradax adamw:      {a.iters} iterations, final validation loss {val_g:.4f}, wall time {wall_g:.1f} s")
        print(f"difference (gradax - torch): {val_g - val_t:+.4f}")
    if not a.tiny and a.iters == NANOGPT.max_iters:
        print("nanoGPT's README: about 1.88 after 2,000 iterations on its 1 MB Tiny Shakespeare (different text)")


if __name__ == "__main__":
    main()
