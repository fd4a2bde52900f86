#!/usr/bin/env python3
"""--precision fp8 on the CPU (issue 13): the block GEMMs on FP8 codes (the
casts bit for bit as an H100 makes them, the products summed in fp32).

README's demo run (`tiny`, 300 steps) must end no more than 1% above the fp32
run's validation loss, the bar the issue sets for what FP8 costs against bf16
on a GPU, and must say it runs FP8. The bar is one-sided, as the claim is: FP8
costs at most 1%; ending below fp32 costs nothing. How far apart the two end
depends on the CPU (OpenBLAS picks other fp32 kernels with AVX-512, and FP8's
casts turn those last-bit differences into other codes): fp8 ended 0.21%
above fp32 on an AVX2 EPYC (2.1284 vs 2.1241) and 1.04% below it on an
AVX-512 machine (2.1083 vs 2.1304), a spread of 1.25% in the difference; the
highest seen is 0.8% under the bar, more than half that spread. (Across seeds
the demo's final loss spreads about 4%, in fp32 and fp8 alike.)

On 2 ranks under mpirun, the block weights are all-gathered as e4m3 codes
with scales agreed across the ranks: the loss curve must be the one of
gathering fp32 weights and casting them before each GEMM (--fp8-gather
false), exactly. Clipping is off for that pair: the gradient norm sums each
rank's shard in its layout's order, which the FP8 gather changes.

bf16 stays refused on the CPU with one error line."""
import json
import os
import subprocess
import sys

exe, example, ini, workdir = sys.argv[1:5]
os.makedirs(workdir, exist_ok=True)
failures = []


mpiexec = os.environ.get("MPIEXEC", "mpirun")


def train(precision, ranks=1, extra=()):
    name = f"{precision}_np{ranks}" + "".join(extra).replace("-", "")
    metrics = os.path.join(workdir, name + ".jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    launch = [mpiexec, "--oversubscribe", "-np", str(ranks)] if ranks > 1 else []
    # The demo's 8 sequences a step, split over the ranks.
    cmd = launch + [exe, "--config", ini, "--train-data", os.path.join(example, "kjv_train.h5"),
                    "--val-data", os.path.join(example, "kjv_val.h5"), "--precision", precision,
                    "--batch-size", str(8 // ranks), "--metrics", metrics, *extra]
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {run.returncode}: {run.stderr}")
    lines = [json.loads(l) for l in open(metrics)]
    return run.stdout, [l["val_loss"] for l in lines if "val_loss" in l], [
        l["loss"] for l in lines if "loss" in l]


out32, v32, _ = train("fp32")
out8, v8, _ = train("fp8")
if "FP8" in out32:
    failures.append("the fp32 run's start line mentions FP8")
if "FP8 block GEMMs" not in out8:
    failures.append("the fp8 run's start line does not say the GEMMs run in FP8")
if not v32 or not v8:
    failures.append("no validation loss")
else:
    cost = (v8[-1] - v32[-1]) / v32[-1]
    print(f"final val_loss fp32 {v32[-1]:.4f}, fp8 {v8[-1]:.4f}: fp8 {cost:+.2%}")
    if cost > 0.01:
        failures.append(f"fp8 ends {cost:.2%} above fp32 ({v8[-1]:.4f} vs {v32[-1]:.4f}), over 1%")
    if v8 == v32:
        failures.append("fp8 gave fp32's losses exactly: the FP8 path did not run")

short = ("--steps", "40", "--log-every", "1", "--eval-every", "20", "--grad-clip", "0",
         "--samples", "0")
out_codes, _, codes = train("fp8", 2, short)
out_cast, _, cast = train("fp8", 2, short + ("--fp8-gather", "false"))
if "gathered as e4m3" not in out_codes or "gathered as f32" not in out_cast:
    failures.append("the start lines do not say how the FP8 weights are gathered")
if len(codes) != 40 or codes != cast:
    failures.append(f"2 ranks: gathering e4m3 codes gave losses {codes[:4]}..., casting the "
                    f"gathered fp32 weights {cast[:4]}...: not the same run")
elif codes[-1] > codes[0] - 1.0:
    failures.append(f"2 ranks: the fp8 loss went from {codes[0]:.3f} to {codes[-1]:.3f}")
else:
    print(f"2 ranks, 40 steps: e4m3 gather and fp32 gather + cast give the same losses "
          f"({codes[0]:.4f} -> {codes[-1]:.4f})")

bad = subprocess.run([exe, "--device", "cpu", "--precision", "bf16", "--train-data",
                      os.path.join(example, "kjv_train.h5")], capture_output=True, text=True)
errors = [l for l in bad.stderr.splitlines() if l.startswith("fsdptrain: error:")]
if bad.returncode == 0 or len(errors) != 1 or "--precision bf16" not in errors[0]:
    failures.append(f"--device cpu --precision bf16: exit {bad.returncode}, stderr {bad.stderr!r}")

if failures:
    sys.exit("FAIL: " + "; ".join(failures))
print("1 passed, 0 failed")
