#!/usr/bin/env python3
"""Time-to-loss reference: PyTorch trains fsdptrain's model on fsdptrain's batches.

Issue 30's side-by-side asks how soon each system reaches a validation loss
on one GPU. This is the PyTorch side: the model of tools/torch_reference.py
(the one checked against fsdptrain step by step), the same recipe, and the
same data in the same order, so that only the systems differ:

- batches: fsdptrain's sampler (windows of --seq-len + 1 tokens in the
  Feistel order keyed by --seed; tools/torch_reference.py's window_of);
- initialisation (model/params.cpp): matrices normal(0, --init-std), the
  residual branches' output projections (wo, w2) at init_std / sqrt(2 L),
  gains 1; the numbers differ from fsdptrain's, the distribution does not;
- AdamW with decay on matrices only, global-norm clipping, linear warm-up then
  cosine to --min-lr (src/policy/lr_schedule.h), bf16 autocast;
- validation: fsdptrain's --eval-batches 0, every window of the file once,
  the mean over every token (tools/torch_reference.py's val_loss).

  python3 bench/cuda/torch_ttl.py --train-data D_train.h5 --val-data D_val.h5 \\
      --vocab-size 8192 --steps 1500 --eval-every 100 --compile --metrics torch.jsonl

Output: fsdptrain's --metrics format (tools/plot_metrics.py and
bench/cuda/ttl_report.py read it): per step {"step", "loss", "lr"}, per
evaluation {"step", "val_loss", "train_s"}. train_s counts seconds in
training steps alone, as fsdptrain's does: the host waits for the GPU only at
an evaluation (the losses are fetched there), and the warm-up (one discarded
forward and backward, in which torch.compile compiles) and the evaluations
are timed apart and printed. --time-budget S stops at the first evaluation
at or past S seconds of training (the schedule still follows --steps).
"""
import argparse
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
import torch_reference as ref  # noqa: E402  (exits with one line where torch/h5py/numpy are missing)
from torch_reference import Model, lr_at, read_tokens, val_loss, window_of  # noqa: E402

np, torch = ref.np, ref.torch

sys.path.append(os.path.dirname(os.path.abspath(__file__)))  # after tools/ (torch_reference)
from ttl_recipe import add_recipe_args, bench_reference  # noqa: E402

# The preset table and weight initialisation of the speed reference beside this file.
bench_ref = bench_reference()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_recipe_args(ap, bench_ref.PRESETS)
    ap.add_argument("--compile", action="store_true", help="torch.compile the model (training steps)")
    ap.add_argument("--device", default="cuda")
    a = ap.parse_args()

    dev = torch.device(a.device)
    cuda = dev.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    torch.backends.cuda.matmul.allow_tf32 = True
    _, L, d, H, Hkv, ff, _ = bench_ref.PRESETS[a.model]
    B, T, G = a.batch_size, a.seq_len, a.batch_size  # one rank, no accumulation: G = B
    tokens = read_tokens(a.train_data, "--train-data")
    val_tokens = read_tokens(a.val_data, "--val-data")
    if tokens.max() >= a.vocab_size or val_tokens.max() >= a.vocab_size:
        sys.exit(f"torch_ttl: error: a token id is >= --vocab-size {a.vocab_size}")
    windows = (len(tokens) - 1) // T
    seed = a.seed & ref.M64

    cfg = dict(n_head=H, n_kv_head=Hkv, d_model=d, n_layer=L, norm_eps=1e-5, rope_theta=10000.0,
               tie_embeddings=True)
    weights = bench_ref.init_weights(a.vocab_size, L, d, H, Hkv, ff, a.init_std,
                                     a.init_std / math.sqrt(2.0 * L), a.seed)
    model = Model(cfg, weights).to(dev)
    decay = [p for p in model.p.values() if p.ndim >= 2]
    no_decay = [p for p in model.p.values() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(a.beta1, a.beta2), eps=a.adam_eps, fused=cuda)
    fwd = torch.compile(model) if a.compile else model
    autocast = lambda: torch.autocast(dev.type, dtype=torch.bfloat16, enabled=cuda)

    def batch(s):
        rows = [tokens[w * T: w * T + T + 1] for w in (window_of(s * G + j, windows, seed) for j in range(G))]
        return torch.from_numpy(np.stack(rows)).to(dev, non_blocking=True)

    def step_loss(x):
        with autocast():
            loss = fwd(x[:, :-1], x[:, 1:])
        loss.backward()
        return loss

    # Warm-up, discarded as fsdptrain's is: compilation and cuBLAS/cuDNN plans.
    t0 = time.perf_counter()
    step_loss(batch(0))
    opt.zero_grad(set_to_none=True)
    sync()
    warm_s = time.perf_counter() - t0
    print(f"torch_ttl: warm-up (compile={a.compile}) took {warm_s:.1f} s", flush=True)

    out = open(a.metrics, "w")
    train_s, eval_s, pending = 0.0, 0.0, []

    def evaluate(step):
        nonlocal eval_s
        t = time.perf_counter()
        v = val_loss(model, val_tokens, T, B, 1, 0, dev, autocast)  # eager: the shapes vary
        eval_s += time.perf_counter() - t
        out.write(json.dumps({"step": step, "val_loss": v, "train_s": train_s}) + "\n")
        out.flush()
        print(f"step {step:5d}/{a.steps} | val_loss {v:.4f} | train {train_s:.1f} s", flush=True)

    evaluate(0)
    t_mark = time.perf_counter()
    for s in range(a.steps):
        x = batch(s)
        loss = step_loss(x)
        torch.nn.utils.clip_grad_norm_(model.parameters(), a.grad_clip if a.grad_clip > 0 else float("inf"))
        lr = float(lr_at(s, a.steps, a.warmup_steps, a.lr, a.min_lr))
        for g in opt.param_groups:
            g["lr"] = lr
        opt.step()
        opt.zero_grad(set_to_none=True)
        pending.append((s + 1, loss.detach(), lr))
        last = s + 1 == a.steps
        if last or (a.eval_every > 0 and (s + 1) % a.eval_every == 0):
            sync()
            train_s += time.perf_counter() - t_mark
            for n, l, r in pending:
                out.write(json.dumps({"step": n, "loss": l.item(), "lr": r}) + "\n")
            pending = []
            evaluate(s + 1)
            stop = a.time_budget > 0 and train_s >= a.time_budget and not last
            if stop:
                print(f"torch_ttl: --time-budget {a.time_budget:g} s reached after step {s + 1}", flush=True)
                break
            t_mark = time.perf_counter()
    out.close()
    tok_s = (s + 1) * G * T / train_s if train_s > 0 else float("nan")
    print(f"torch_ttl: {s + 1} steps, {train_s:.1f} s training ({tok_s:.0f} tokens/s), "
          f"warm-up {warm_s:.1f} s, evaluation {eval_s:.1f} s", flush=True)


if __name__ == "__main__":
    main()
