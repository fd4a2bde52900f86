#!/usr/bin/env python3
"""PyTorch speed reference for fsdptrain's model on one GPU.

The model is tools/torch_reference.py's Model, the one whose losses were
checked against fsdptrain step by step (bench/results/torch_parity_cpu_*), so
speed is compared on the same function: tied embeddings, pre-norm RMSNorm
blocks, GQA attention with QK-norm before rotate_half RoPE, causal SDPA,
SwiGLU, final RMSNorm, cross-entropy.

  python3 bench/cuda/torch_reference.py --model gpt-350m --batch 8 --seq 1024 --steps 20 [--compile]
  python3 bench/cuda/torch_reference.py --init /tmp/init   # loss on bench_cuda_ops' exported weights/batch

Timing covers forward+backward (what bench_cuda_ops times) and a full step with
fused AdamW, under bf16 autocast; MFU uses 6N + 12 L d T FLOPs per token against
989 TFLOP/s (docs/ARCHITECTURE.md, "FLOPs and MFU"). The full step ends with one
line in the format run_gpu_checks.sh collects (system torch_eager or
torch_compile; peak_gib is torch.cuda.max_memory_allocated over the timed steps,
without the CUDA context and the caching allocator's slack that nvidia-smi would
count):

  RESULT system=torch_eager model=gpt-350m precision=bf16 micro_batch=8 seq=1024 tokens_per_s=... mfu=0.41 peak_gib=... device=NVIDIA H100 80GB HBM3
"""
import argparse
import math
import os
import sys
import time

PRESETS = {  # vocab, layers, d_model, heads, kv_heads, d_ff, max_seq
    "tiny": (256, 2, 64, 4, 2, 192, 64),
    "gpt-125m": (50304, 12, 768, 12, 4, 2048, 1024),
    "gpt-350m": (50304, 24, 1024, 16, 4, 2816, 1024),
    "gpt-760m": (50304, 24, 1536, 16, 4, 4096, 1024),
    "gpt-1.3b": (50304, 24, 2048, 16, 4, 5632, 1024),
}  # model/config.cpp's presets (d_ff = swiglu_width(d, 256))
PEAK_TFLOPS = 989.0


def init_weights(V, L, d, H, Hkv, ff, std=0.02, out_std=0.02, seed=0):
    """Random weights in fsdptrain's parameter names: matrices normal(0, std),
    the residual branches' output projections (wo, w2) normal(0, out_std),
    gains 1. Drawn in float32 (gpt-1.3b in seconds), in a fixed order."""
    import numpy as np
    hd = d // H
    rng = np.random.default_rng(seed)
    mat = lambda r, c, s=std: rng.standard_normal((r, c), dtype=np.float32) * np.float32(s)
    ones = lambda n: np.ones(n, np.float32)
    t = {"embed.weight": mat(V, d), "final_norm": ones(d)}
    for l in range(L):
        b = f"blocks.{l}."
        t.update({b + "attn_norm": ones(d), b + "attn.wq": mat(H * hd, d), b + "attn.wk": mat(Hkv * hd, d),
                  b + "attn.wv": mat(Hkv * hd, d), b + "attn.q_norm": ones(hd), b + "attn.k_norm": ones(hd),
                  b + "attn.wo": mat(d, H * hd, out_std), b + "mlp_norm": ones(d), b + "mlp.w1": mat(ff, d),
                  b + "mlp.w3": mat(ff, d), b + "mlp.w2": mat(d, ff, out_std)})
    return t


def build(torch, cfg):
    """The parity-checked model of tools/torch_reference.py, randomly initialised
    (std 0.02 matrices, unit gains) in fsdptrain's parameter names."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
    from torch_reference import Model
    V, L, d, H, Hkv, ff, T = cfg
    c = dict(n_head=H, n_kv_head=Hkv, d_model=d, n_layer=L, norm_eps=1e-5, rope_theta=10000.0,
             tie_embeddings=True)
    return Model(c, init_weights(V, L, d, H, Hkv, ff))


def matmul_params(cfg):
    V, L, d, H, Hkv, ff, _ = cfg
    hd = d // H
    return L * (2 * d * H * hd + 2 * d * Hkv * hd + 3 * d * ff) + V * d  # tied head counts


def load_init(torch, model, prefix, device):
    names = [line.split() for line in open(prefix + ".manifest.txt")]
    flat = torch.from_file(prefix + ".weights.bin", size=sum(int(n[1]) for n in names),
                           dtype=torch.float32)
    off = 0
    with torch.no_grad():
        for n in names:
            p, numel = model.w(n[0]), int(n[1])
            p.copy_(flat[off: off + numel].view(p.shape))
            off += numel


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="gpt-350m", choices=sorted(PRESETS))
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--vocab-size", type=int, help="override the preset's vocabulary (the tokenizer's)")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model")
    ap.add_argument("--device", default="cuda", help="cuda (the comparison), or cpu for a smoke run")
    ap.add_argument("--result-device", help="device name for the RESULT line (default: torch's name "
                    "for the GPU)")
    ap.add_argument("--init", help="PREFIX written by bench_cuda_ops --export-init: load its weights "
                    "and batch and print the loss")
    a = ap.parse_args()

    import torch
    torch.backends.cuda.matmul.allow_tf32 = True
    dev = a.device
    cfg = PRESETS[a.model]
    if a.vocab_size:
        cfg = (a.vocab_size,) + cfg[1:]
    torch.manual_seed(0)
    model = build(torch, cfg).to(dev)
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    B, T, V = a.batch, a.seq, cfg[0]
    if a.init:
        load_init(torch, model, a.init, dev)
        seq = torch.from_file(a.init + ".tokens.bin", size=B * (T + 1), dtype=torch.int32)
        seq = seq.view(B, T + 1).long().to(dev)
        with torch.no_grad(), torch.autocast(dev, dtype=torch.bfloat16):
            loss = model(seq[:, :-1], seq[:, 1:])
        print(f"torch first batch mean loss {loss.item():.6f} (bf16 autocast)")
    fwd = torch.compile(model) if a.compile else model
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1, fused=dev == "cuda")
    x = torch.randint(0, V, (B, T + 1), device=dev)

    def fb():
        with torch.autocast(dev, dtype=torch.bfloat16):
            loss = fwd(x[:, :-1], x[:, 1:])
        loss.backward()

    def full():
        fb()
        opt.step()
        opt.zero_grad(set_to_none=True)

    flops_tok = 6 * matmul_params(cfg) + 12 * cfg[1] * cfg[2] * T
    for name, fn in (("fwd+bwd", fb), ("fwd+bwd+adamw", full)):
        for _ in range(3):
            fn()
        sync()
        if dev == "cuda":
            torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        for _ in range(a.steps):
            fn()
        sync()
        ms = (time.perf_counter() - t0) / a.steps * 1e3
        tok_s = B * T / (ms * 1e-3)
        mfu = flops_tok * tok_s / (PEAK_TFLOPS * 1e12)
        peak_gib = torch.cuda.max_memory_allocated() / 2**30 if dev == "cuda" else float("nan")
        print(f"torch {name} {a.model} B={B} T={T} compile={a.compile}: {ms:.2f} ms, {tok_s:.0f} tokens/s, "
              f"MFU {100 * mfu:.1f}%, peak memory {peak_gib:.2f} GiB", flush=True)
        model.zero_grad(set_to_none=True)
    # The full step (with the optimizer) is what fsdptrain's tokens_per_s measures.
    name = a.result_device or (torch.cuda.get_device_name() if dev == "cuda" else "cpu")
    print(f"RESULT system=torch_{'compile' if a.compile else 'eager'} model={a.model} precision=bf16 "
          f"micro_batch={B} seq={T} tokens_per_s={tok_s:.0f} mfu={mfu:.3g} peak_gib={peak_gib:.4g} "
          f"device={name}", flush=True)


if __name__ == "__main__":
    main()
