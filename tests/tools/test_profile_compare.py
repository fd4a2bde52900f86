#!/usr/bin/env python3
"""bench/cuda/profile_compare.py sorts fsdptrain's --profile-ops rows and
torchtitan's kernels (H100 names as torch.profiler reports them) into the
same categories, and says how much of a step no kernel ran.

  test_profile_compare.py bench/cuda/profile_compare.py

The inputs are written here: an op table in fsdptrain's format (rows of the
first H100 profile, bench/results/h100_2026-11-23b) and a titan_ttl.py
--profile-out file whose kernel names are those of torch 2.11 on an H100
(cuBLAS's nvjet, flash attention, inductor's triton fusions, the fused
AdamW's multi_tensor_apply). Each category's sum is worked by hand.
"""
import json
import os
import re
import subprocess
import sys
import tempfile

TOOL = sys.argv[1]
failures = 0


def check(cond, what):
    global failures
    print(("ok: " if cond else "FAIL: ") + what)
    failures += 0 if cond else 1


FSDP = """fsdptrain: model gpt-350m
step     5/6 | loss 5.1079 | lr 2.32e-04 | norm 6.753 | 200.0K tok/s | ETA 0:00:00
step     6/6 | loss 4.8527 | lr 1.00e-04 | norm 6.634 | 204.8K tok/s | ETA 0:00:00
op profile (cuda, 5 steps): 60.000 ms per step inside ops; rate = nominal FLOPs or bytes touched / time
    ms/step  share   calls          rate  op and shape
     12.000  20.0%    48.0  733.47 TFLOP/s  linear_backward 16384x2816x1024
     10.000  16.7%    24.0  199.24 TFLOP/s  attention_backward 16x1024x16x4x64
      6.000  10.0%    48.0  733.65 TFLOP/s  linear 16384x2816x1024
      4.000   6.7%    24.0     3008.1 GB/s  swiglu_backward 46137344
      3.500   5.8%    48.0     1796.1 GB/s  rmsnorm_backward+= 16384x1024
      3.000   5.0%    24.0     2624.6 GB/s  adamw 11274368
      2.500   4.2%    24.0  302.07 TFLOP/s  attention 16x1024x16x4x64
      2.000   3.3%     1.0     2003.9 GB/s  cross_entropy+grad 16384x50304
      1.500   2.5%    24.0     2463.6 GB/s  norm_rope 16384x16x64
      1.000   1.7%     1.0     1385.9 GB/s  sum_squares_each 26x322097152
      1.000   1.7%    48.0     2898.2 GB/s  quantize_fp8_amax 16384x1024
      0.500   0.8%     1.0      104.4 GB/s  embedding_backward 16384x1024
      0.400   0.7%     2.0      900.0 GB/s  to_host 256
     12.600  21.0%    24.0  700.00 TFLOP/s  linear_fp8+r 16384x1024x2816
      0.000   0.0%     7.0                  (rows under 0.20% each)
"""
# gemm 12 + 6 + 12.6 = 30.6; attention 12.5; pointwise 4 + 3.5 + 1.5 = 9;
# fp8_cast 1; loss_embed 2.5; optimizer 3 + 1 = 4; other 0.4 (+0 small rows)
FSDP_CATS = {"gemm": 30.6, "attention": 12.5, "pointwise": 9.0, "fp8_cast": 1.0, "loss_embed": 2.5,
             "optimizer": 4.0, "other": 0.4}

TITAN = {"system": "torchtitan_bf16", "device": "NVIDIA H100 80GB HBM3", "steps": "41-45", "step_ms": 90.0,
         "kernels": [
             {"name": "nvjet_tst_192x192_64x4_2x1_v_bz_coopB_TNT", "calls": 48, "ms_per_step": 20.0},
             {"name": "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64", "calls": 24, "ms_per_step": 15.0},
             {"name": "void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<...>", "calls": 24,
              "ms_per_step": 11.0},
             {"name": "void pytorch_flash::flash_fwd_kernel<...>", "calls": 24, "ms_per_step": 3.0},
             {"name": "triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_3", "calls": 48, "ms_per_step": 4.0},
             {"name": "triton_poi_fused_mul_silu_2", "calls": 24, "ms_per_step": 2.5},
             {"name": "triton_red_fused__log_softmax_nll_loss_0", "calls": 1, "ms_per_step": 1.5},
             {"name": "triton_poi_fused_embedding_dense_backward_1", "calls": 1, "ms_per_step": 0.5},
             {"name": "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<...FusedAdamMathFunctor...>",
              "calls": 10, "ms_per_step": 5.0},
             {"name": "void at::native::lpnorm_cleanup<float, (at::native::NormType)1, float, float>", "calls": 1,
              "ms_per_step": 0.2},
             {"name": "triton_red_fused_abs_amax_clamp_0", "calls": 96, "ms_per_step": 2.0},
             {"name": "Memset (Device)", "calls": 5, "ms_per_step": 0.3},
             {"name": "sm90_xmma_gemm_e4m3e4m3_bf16f32_f32_tn_n_tilesize128x128x128_cga1x2x1", "calls": 1,
              "ms_per_step": 1.0},
             {"name": "triton_poi_fused__to_copy_clamp_mul_reciprocal_5", "calls": 8, "ms_per_step": 0.5},
         ]}
# gemm 20 + 15 + 1 (FP8's) = 36; attention 14; pointwise 4 + 2.5 = 6.5;
# fp8_cast 2 + 0.5 (a clamp) = 2.5; loss_embed 2; optimizer 5 + 0.2 = 5.2
# (the grad norm's clean-up); other 0.3; kernels 66.5
TITAN_CATS = {"gemm": 36.0, "attention": 14.0, "pointwise": 6.5, "fp8_cast": 2.5, "loss_embed": 2.0,
              "optimizer": 5.2, "other": 0.3}


def run(*args):
    p = subprocess.run([sys.executable, TOOL, *args], capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


with tempfile.TemporaryDirectory() as d:
    fsdp, titan, bad = (os.path.join(d, n) for n in ("fsdp.txt", "titan.json", "bad.txt"))
    with open(fsdp, "w") as f:
        f.write(FSDP)
    with open(titan, "w") as f:
        json.dump(TITAN, f)
    with open(bad, "w") as f:
        f.write("step 1/1 | loss 3\n")

    rc, out = run("--fsdp", fsdp, "--tokens-per-step", "16384", "--titan", titan)
    print(out)
    check(rc == 0, "exit 0")
    rows = {}
    for line in out.splitlines():
        m = re.match(r"^(\w[\w ]*?)\s{2,}\s*(-?[0-9.]+)\s+(-?[0-9.]+)(?:\s+(-?[0-9.]+))?\s*$", line)
        if m:
            rows[m.group(1).strip()] = [float(x) for x in m.groups()[1:] if x is not None]
    for c, want in FSDP_CATS.items():
        check(c in rows and abs(rows[c][0] - want) < 0.011, f"fsdptrain {c} {want} ms ({rows.get(c)})")
    for c, want in TITAN_CATS.items():
        check(c in rows and abs(rows[c][1] - want) < 0.011, f"titan {c} {want} ms ({rows.get(c)})")
    check("kernels" in rows and abs(rows["kernels"][0] - 60.0) < 0.011 and abs(rows["kernels"][1] - 66.5) < 0.011,
          "kernel sums 60 and 66.5 ms")
    # fsdptrain's step from the last tok/s line: 16384 tokens / 204.8K tok/s = 80 ms
    check("step" in rows and abs(rows["step"][0] - 80.0) < 0.011 and abs(rows["step"][1] - 90.0) < 0.011,
          "steps 80 (from tok/s) and 90 ms")
    check("no kernel" in rows and abs(rows["no kernel"][0] - 20.0) < 0.011 and abs(rows["no kernel"][1] - 23.5) < 0.011,
          "no-kernel time 20 and 23.5 ms")
    check("linear_fp8+r 16384x1024x2816" in out and "nvjet_tst" in out, "the largest names listed")

    rc, out = run("--fsdp", fsdp, "--fsdp-step-ms", "70", "--titan", titan)
    check(rc == 0 and re.search(r"^step\s+70\.00\s+90\.00\s+20\.00", out, re.M) is not None,
          "--fsdp-step-ms wins over the log's tok/s")
    rc, out = run("--fsdp", fsdp, "--titan", titan)
    gap = [l.split()[2:] for l in out.splitlines() if l.startswith("no kernel")]
    check(rc == 0 and gap == [["23.50"]], f"no step time: fsdptrain's gap left blank ({gap})")
    rc, out = run("--fsdp", bad, "--titan", titan)
    check(rc != 0 and "profile_compare: error:" in out and "--profile-ops" in out, "no op table: one error line")
    rc, out = run("--fsdp", fsdp, "--titan", bad)
    check(rc != 0 and "profile_compare: error:" in out and "--profile-steps" in out, "not a titan profile: one error line")

print(f"{failures} failure(s)")
sys.exit(1 if failures else 0)
