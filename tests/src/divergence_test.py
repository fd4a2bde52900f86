#!/usr/bin/env python3
"""Divergence never reaches the weights or a checkpoint (issue 9, case 8).

At --lr 1e5 the example's loss stays finite for one more step while the
gradient norm is already NaN. That step must be refused before the update:
one error line naming the step and the non-finite norm, a non-zero exit,
no checkpoint of it, every saved tensor finite and `latest` naming the last
good step, so `--resume auto` continues from finite weights. On 1 and 2 ranks."""
import os
import re
import shutil
import subprocess
import sys

import h5py
import numpy as np

exe, example, work = sys.argv[1:4]
mpiexec = os.environ.get("MPIEXEC", "mpirun")
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def all_finite(path):
    bad = []
    with h5py.File(path, "r") as f:
        def visit(name, obj):
            if isinstance(obj, h5py.Dataset) and obj.dtype.kind == "f":
                if not np.isfinite(obj[()]).all():
                    bad.append(name)
        f.visititems(visit)
    return bad


def run(ranks, ckpt, lr="1e5", steps=6, extra=()):
    cmd = ([mpiexec, "--oversubscribe", "-np", str(ranks)] if ranks > 1 else []) + [
        exe, "--device", "cpu", "--train-data", os.path.join(example, "kjv_train.h5"),
        "--seq-len", "32", "--batch-size", str(8 // ranks), "--steps", str(steps), "--lr", lr,
        "--min-lr", "0", "--warmup-steps", "0", "--checkpoint-dir", ckpt,
        "--checkpoint-every", "1", *extra]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


for ranks in (1, 2):
    ckpt = os.path.join(work, f"np{ranks}")
    p = run(ranks, ckpt)
    errors = [l for l in p.stderr.splitlines() if l.startswith("fsdptrain: error:")]
    tag = f"np{ranks}:"
    check(p.returncode != 0, f"{tag} exit code {p.returncode} is non-zero")
    check(len(errors) == 1, f"{tag} exactly one error line (got {len(errors)}): {errors}")
    m = re.search(r"diverged at step (\d+): loss \S+, gradient norm (\S+)", errors[0] if errors else "")
    check(m is not None, f"{tag} the error names the step and the gradient norm: {errors}")
    saved = sorted(f for f in os.listdir(ckpt) if f.startswith("step_") and f.endswith(".h5"))
    for f in saved:
        bad = all_finite(os.path.join(ckpt, f))
        check(not bad, f"{tag} {f} holds only finite tensors (non-finite: {bad[:3]})")
    if not m:
        continue
    bad_step = int(m.group(1))
    check(m.group(2).lower().lstrip("-") in ("nan", "inf"), f"{tag} the norm is non-finite: {m.group(2)}")
    check(bad_step >= 2, f"{tag} step 1 trained (diverged at step {bad_step})")
    steps = [int(f[5:13]) for f in saved]
    check(steps == list(range(1, bad_step)),
          f"{tag} checkpoints are the steps before {bad_step}, none of it: {saved}")
    latest = open(os.path.join(ckpt, "latest")).read().strip()
    check(latest == f"step_{bad_step - 1:08d}.h5", f"{tag} latest names step {bad_step - 1}: {latest}")

    # --resume auto picks the last good checkpoint, whose weights are finite
    # (the weights after step 1 at this rate are too large to train on, so
    # the same step is refused again, and again nothing is saved).
    r = run(ranks, ckpt, lr="1e-3", steps=bad_step + 2, extra=["--resume", "auto"])
    check(f"resumed from '{os.path.join(ckpt, latest)}' at step {bad_step - 1}" in r.stdout,
          f"{tag} --resume auto continues from {latest}")
    again = [l for l in r.stderr.splitlines() if l.startswith("fsdptrain: error:")]
    check(len(again) == 1 and f"diverged at step {bad_step}:" in again[0],
          f"{tag} the resumed run refuses the same step: {again}")
    saved_after = sorted(f for f in os.listdir(ckpt) if f.startswith("step_") and f.endswith(".h5"))
    check(saved_after == saved, f"{tag} the resumed run saved nothing: {saved_after}")

if failures:
    sys.exit(f"{len(failures)} check(s) failed")
