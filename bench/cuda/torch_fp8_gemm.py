"""FP8 GEMM speed of PyTorch (torch._scaled_mm, e4m3 x e4m3 -> bf16, per-tensor
scales) and its bf16 matmul, at one model's block-projection shapes: the
yardstick for fsdptrain's linear_fp8 (bench_cuda_ops prints its own rates for
the same shapes). One line per shape: ms and TFLOP/s for each.

    python3 bench/cuda/torch_fp8_gemm.py --tokens 16384 --d-model 1024 --q-dim 1024 \
        --kv-dim 256 --d-ff 2816
"""
import argparse

import torch


def timed(fn, iters):
    fn()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    best = float("inf")
    for _ in range(iters):
        a.record()
        fn()
        b.record()
        b.synchronize()
        best = min(best, a.elapsed_time(b))
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--d-model", type=int, default=1024)
    ap.add_argument("--q-dim", type=int, default=1024)
    ap.add_argument("--kv-dim", type=int, default=256)
    ap.add_argument("--d-ff", type=int, default=2816)
    ap.add_argument("--iters", type=int, default=20)
    a = ap.parse_args()
    M, d = a.tokens, a.d_model
    # The model's block GEMMs: q|k|v and w1|w3 as one each (their weights are packed), wo, w2.
    shapes = [("wq|wk|wv", a.q_dim + 2 * a.kv_dim, d), ("wo", d, a.q_dim),
              ("w1|w3", 2 * a.d_ff, d), ("w2", d, a.d_ff)]
    one = torch.ones((), device="cuda")
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    for name, N, K in shapes:
        x = torch.randn(M, K, device="cuda")
        w = torch.randn(N, K, device="cuda") * 0.02
        xb, wb = x.bfloat16(), w.bfloat16()
        x8, w8 = x.to(torch.float8_e4m3fn), (w * 20).to(torch.float8_e4m3fn)
        flops = 2.0 * M * N * K
        t_bf16 = timed(lambda: xb @ wb.t(), a.iters)
        t_fp8 = timed(lambda: torch._scaled_mm(x8, w8.t(), scale_a=one, scale_b=one,
                                               out_dtype=torch.bfloat16), a.iters)
        print(f"torch {name:8s} M={M} N={N} K={K}: bf16 {t_bf16:.4f} ms {flops / t_bf16 * 1e-9:.1f} "
              f"TFLOP/s; fp8 _scaled_mm {t_fp8:.4f} ms {flops / t_fp8 * 1e-9:.1f} TFLOP/s "
              f"({t_bf16 / t_fp8:.2f}x)")


if __name__ == "__main__":
    main()
