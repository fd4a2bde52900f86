#!/usr/bin/env python3
"""PyTorch reference of fsdptrain's model, for speed and loss comparison on one GPU.

The same architecture as model/transformer.cpp: tied embeddings, pre-norm
blocks with RMSNorm, GQA attention with QK-norm (RMSNorm over each head, before
RoPE), RoPE in the rotate_half convention, causal SDPA, SwiGLU MLP, final
RMSNorm, cross-entropy with targets < 0 ignored.

  python3 bench/cuda/torch_reference.py --model gpt-350m --batch 8 --seq 1024 --steps 20 [--compile]
  python3 bench/cuda/torch_reference.py --init /tmp/init   # loss on bench_cuda_ops' exported weights/batch

Timing covers forward+backward (what bench_cuda_ops times) and a full step with
fused AdamW, under bf16 autocast; MFU uses DESIGN.md's 6N + 12 L d T FLOPs per
token against 989 TFLOP/s.
"""
import argparse
import math
import os
import time

PRESETS = {  # vocab, layers, d_model, heads, kv_heads, d_ff, max_seq
    "tiny": (256, 2, 64, 4, 2, 192, 64),
    "gpt-350m": (50304, 24, 1024, 16, 4, 2816, 1024),
    "gpt-760m": (50304, 24, 1536, 16, 4, 4096, 1024),
}
PEAK_TFLOPS = 989.0


def build(torch, cfg):
    nn, F = torch.nn, torch.nn.functional
    V, L, d, H, Hkv, ff, _ = cfg
    hd = d // H
    eps = 1e-5

    def rms(x, g):
        return F.rms_norm(x, (x.shape[-1],), g, eps)

    class Attn(nn.Module):
        def __init__(self):
            super().__init__()
            self.wq = nn.Linear(d, H * hd, bias=False)
            self.wk = nn.Linear(d, Hkv * hd, bias=False)
            self.wv = nn.Linear(d, Hkv * hd, bias=False)
            self.q_norm = nn.Parameter(torch.ones(hd))
            self.k_norm = nn.Parameter(torch.ones(hd))
            self.wo = nn.Linear(H * hd, d, bias=False)

        def forward(self, x, cos, sin):
            B, T, _ = x.shape
            q = rms(self.wq(x).view(B, T, H, hd), self.q_norm)
            k = rms(self.wk(x).view(B, T, Hkv, hd), self.k_norm)
            v = self.wv(x).view(B, T, Hkv, hd)

            def rope(t):  # rotate_half: pairs (i, i + hd/2)
                a, b = t[..., : hd // 2], t[..., hd // 2:]
                return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)

            q, k = rope(q).transpose(1, 2), rope(k).transpose(1, 2)
            o = F.scaled_dot_product_attention(q, k, v.transpose(1, 2), is_causal=True,
                                               enable_gqa=Hkv != H)
            return self.wo(o.transpose(1, 2).reshape(B, T, H * hd))

    class Mlp(nn.Module):
        def __init__(self):
            super().__init__()
            self.w1 = nn.Linear(d, ff, bias=False)
            self.w3 = nn.Linear(d, ff, bias=False)
            self.w2 = nn.Linear(ff, d, bias=False)

        def forward(self, x):
            return self.w2(F.silu(self.w1(x)) * self.w3(x))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn_norm = nn.Parameter(torch.ones(d))
            self.attn = Attn()
            self.mlp_norm = nn.Parameter(torch.ones(d))
            self.mlp = Mlp()

        def forward(self, x, cos, sin):
            x = x + self.attn(rms(x, self.attn_norm), cos, sin)
            return x + self.mlp(rms(x, self.mlp_norm))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(V, d)
            self.blocks = nn.ModuleList([Block() for _ in range(L)])
            self.final_norm = nn.Parameter(torch.ones(d))

        def forward(self, idx, targets):
            T = idx.shape[1]
            inv = 10000.0 ** (-2.0 * torch.arange(hd // 2, dtype=torch.float64, device=idx.device) / hd)
            ang = torch.arange(T, dtype=torch.float64, device=idx.device)[:, None] * inv[None, :]
            cos, sin = ang.cos().float()[None, :, None, :], ang.sin().float()[None, :, None, :]
            x = self.embed(idx)
            for b in self.blocks:
                x = b(x, cos, sin)
            logits = rms(x, self.final_norm) @ self.embed.weight.t()
            return F.cross_entropy(logits.float().view(-1, V), targets.view(-1), ignore_index=-1)

    return GPT()


def matmul_params(cfg):
    V, L, d, H, Hkv, ff, _ = cfg
    hd = d // H
    return L * (2 * d * H * hd + 2 * d * Hkv * hd + 3 * d * ff) + V * d  # tied head counts


def load_init(torch, model, prefix, device):
    names = [line.split() for line in open(prefix + ".manifest.txt")]
    flat = torch.from_file(prefix + ".weights.bin", size=sum(int(n[1]) for n in names),
                           dtype=torch.float32)
    sd = model.state_dict()
    off = 0
    with torch.no_grad():
        for n in names:
            key = n[0] + ".weight" if n[0] + ".weight" in sd else n[0]
            numel = int(n[1])
            sd[key].copy_(flat[off: off + numel].view(sd[key].shape))
            off += numel


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="gpt-350m", choices=sorted(PRESETS))
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--compile", action="store_true", help="torch.compile the model")
    ap.add_argument("--init", help="PREFIX written by bench_cuda_ops --export-init: load its weights "
                    "and batch and print the loss")
    a = ap.parse_args()

    import torch
    torch.backends.cuda.matmul.allow_tf32 = True
    dev = "cuda"
    cfg = PRESETS[a.model]
    torch.manual_seed(0)
    model = build(torch, cfg).to(dev)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 0.02)
    B, T, V = a.batch, a.seq, cfg[0]
    if a.init:
        load_init(torch, model, a.init, dev)
        seq = torch.from_file(a.init + ".tokens.bin", size=B * (T + 1), dtype=torch.int32)
        seq = seq.view(B, T + 1).long().to(dev)
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(seq[:, :-1], seq[:, 1:])
        print(f"torch first batch mean loss {loss.item():.6f} (bf16 autocast)")
    fwd = torch.compile(model) if a.compile else model
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1, fused=True)
    x = torch.randint(0, V, (B, T + 1), device=dev)

    def fb():
        with torch.autocast("cuda", dtype=torch.bfloat16):
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
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        for _ in range(a.steps):
            fn()
        torch.cuda.synchronize()
        ms = (time.perf_counter() - t0) / a.steps * 1e3
        tok_s = B * T / (ms * 1e-3)
        print(f"torch {name} {a.model} B={B} T={T} compile={a.compile}: {ms:.2f} ms, {tok_s:.0f} tokens/s, "
              f"MFU {100 * flops_tok * tok_s / (PEAK_TFLOPS * 1e12):.1f}%, "
              f"peak memory {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB")
        model.zero_grad(set_to_none=True)


if __name__ == "__main__":
    main()
