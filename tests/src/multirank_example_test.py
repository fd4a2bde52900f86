#!/usr/bin/env python3
"""`mpirun -np N fsdptrain --device cpu` on the built-in example gives the loss
curve of one rank: the same global batch of 12 sequences, split 12x1, 6x2,
4x3, 3x4 over ranks, and 3x4 in two shard groups of 2 (hybrid sharding).
`--device-comm staged` (the several-ranks-on-one-GPU test mode; here its host
stager) runs the same engine over the staging communicator and must agree too.

Tolerance 1e-5 relative per step (fp32, a different summation order); lr
1e-3 keeps Adam from amplifying that rounding (see tests/shard/engine_harness.h)."""
import json
import os
import subprocess
import sys

exe, example, workdir = sys.argv[1:4]
mpiexec = os.environ.get("MPIEXEC", "mpirun")
os.makedirs(workdir, exist_ok=True)
STEPS, GLOBAL = 20, 12


def run(ranks, extra=()):
    name = f"np{ranks}" + "".join(extra).replace("-", "")
    metrics = os.path.join(workdir, name + ".jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    cmd = [mpiexec, "--oversubscribe", "-np", str(ranks), exe, "--device", "cpu",
           "--train-data", os.path.join(example, "kjv_train.h5"),
           "--val-data", os.path.join(example, "kjv_val.h5"),
           "--seq-len", "32", "--batch-size", str(GLOBAL // ranks), "--steps", str(STEPS),
           "--lr", "1e-3", "--min-lr", "1e-4", "--warmup-steps", "2", "--eval-batches", "2",
           "--log-every", "10", "--metrics", metrics, *extra]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {r.returncode}:\n{r.stdout}\n{r.stderr}")
    lines = [json.loads(l) for l in open(metrics)]
    return ([l["loss"] for l in lines if "loss" in l],
            [l["val_loss"] for l in lines if "val_loss" in l], name)


ref_loss, ref_val, _ = run(1)
failures, passed = [], 0
for ranks, extra in [(2, ()), (3, ()), (4, ()), (4, ("--shard-group-size", "2")),
                     (2, ("--reshard-after-forward", "false")), (3, ("--recompute", "block")),
                     (1, ("--recompute", "mlp")), (2, ("--device-comm", "staged")),
                     (4, ("--device-comm", "staged", "--shard-group-size", "2"))]:
    loss, val, name = run(ranks, extra)
    worst = max(abs(a - b) / b for a, b in zip(loss, ref_loss))
    worst_val = max(abs(a - b) / b for a, b in zip(val, ref_val))
    ok = len(loss) == STEPS and worst <= 1e-5 and worst_val <= 1e-5
    print(f"{name}: worst train-loss rel. error {worst:.2e}, val {worst_val:.2e}")
    if ok:
        passed += 1
    else:
        failures.append(name)
if ref_loss[-1] >= ref_loss[0] - 0.2:
    failures.append(f"reference did not train: {ref_loss[0]:.3f} -> {ref_loss[-1]:.3f}")
print(f"{passed} passed, {len(failures)} failed")
sys.exit(1 if failures else 0)
