#!/usr/bin/env python3
"""How far Newton-Schulz in bf16 lands from fp32: the measurement behind the
op table's kNewtonSchulz tolerances (tests/model/op_table/muon_cases.cpp).

The CUDA backend runs Muon's iteration on bf16 matrices with cuBLASLt GEMMs
that accumulate in fp32 and round each output to bf16. PyTorch's bf16 matmul
and addmm on the CPU do the same, so this predicts the GPU's error before a
GPU is at hand. Inputs are the op table's kind: uniform in [-1, 1), rounded to
bf16. Also printed, what the tolerances must catch: one step fewer, and the
second coefficient off by 1.5%. Last, nearly low-rank matrices (rank 8 plus 5%
noise, as gradients often are): there bf16 lands about 1e-1 from fp32, since
the iteration amplifies the small singular directions with their rounding;
that is the published bf16 method's own error, not the op table's case.

Both tables of shard/muon.h: jordan (one quintic every step, the norm as it
is) and polar_express (a quintic per step, the norm with a 1% margin).

    python3 bench/optim/newton_schulz_bf16_error.py   (needs torch)
"""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
from newton_schulz_tables import NS_TABLES as TABLES  # noqa: E402  (shard/muon.h's tables)


def newton_schulz(g, dtype, steps, table, b_factor=1.0):
    quintics, margin = TABLES[table]
    x = g.float()
    tall = x.shape[0] > x.shape[1]
    if tall:
        x = x.T
    x = (x / max(x.norm().item() * margin, 1e-7)).to(dtype)
    for s in range(steps):
        a, b, c = quintics[min(s, len(quintics) - 1)]
        gram = x @ x.T
        poly = torch.addmm(gram, gram, gram, beta=b * b_factor, alpha=c)  # b A + c A A
        x = torch.addmm(x, poly, x, beta=a, alpha=1.0)  # a X + B X
    x = x.float()
    return x.T if tall else x


def rel(a, b):
    return ((a - b).norm() / b.norm()).item()


def main():
    for table in TABLES:
        torch.manual_seed(0)
        print(f"{table}:")
        print("rows cols steps  bf16-vs-fp32  one-step-fewer  coefficient-off")
        for rows, cols in [(64, 96), (96, 64), (50, 70), (160, 48), (128, 128), (256, 1024),
                           (1024, 1024), (2816, 1024)]:
            g = (torch.rand(rows, cols) * 2 - 1).bfloat16().float()
            for steps in (0, 1, 5):
                ref = newton_schulz(g, torch.float32, steps, table)
                err = rel(newton_schulz(g, torch.bfloat16, steps, table), ref)
                line = f"{rows:5d} {cols:5d} {steps:3d}   {err:.2e}"
                if steps > 0:
                    line += f"       {rel(newton_schulz(g, torch.float32, steps - 1, table), ref):.2e}"
                    off = newton_schulz(g, torch.float32, steps, table, 0.985)
                    line += f"        {rel(off, ref):.2e}"
                print(line)
        print("nearly low-rank, 5 steps:")
        for rows, cols in [(256, 1024), (1024, 1024), (2816, 1024)]:
            g = (torch.randn(rows, 8) @ torch.randn(8, cols) + 0.05 * torch.randn(rows, cols))
            g = g.bfloat16().float()
            ref = newton_schulz(g, torch.float32, 5, table)
            print(f"{rows:5d} {cols:5d}   5   {rel(newton_schulz(g, torch.bfloat16, 5, table), ref):.2e}")


if __name__ == "__main__":
    main()
