#!/usr/bin/env python3
"""--init-from (issue 34): a run that starts from a checkpoint's weights alone.

A 1-rank AdamW run saves step 12. From it:
- a run's first loss equals --eval-only's loss of that file on the same
  tokens (a training file of exactly one global batch), on 1 and 2 ranks;
- runs on 1 and 3 ranks, and with --optimizer muon, start at step 0 on the
  fresh schedule (the same learning rates as a run from random weights) and
  follow each other; what they save says step N and N optimizer steps;
- with --resume auto, a rerun after --stop-at-step continues its own
  checkpoint (not the --init-from file) and ends bit for bit as the
  uninterrupted run;
- a missing file, or one of another model, is one error line naming
  --init-from, and a non-zero exit."""
import os
import re
import shutil
import sys

import h5py
import numpy as np

from program_checks import check, finish, one_error, records, run

exe, example, work = sys.argv[1:4]
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
train = os.path.join(example, "kjv_train.h5")
base = [exe, "--device", "cpu", "--model", "tiny", "--seq-len", "64", "--log-every", "1"]


def metrics(name):
    return os.path.join(work, name + ".jsonl")


def losses(name):
    return [r["loss"] for r in records(metrics(name)) if "loss" in r]


def lrs(name):
    return [r["lr"] for r in records(metrics(name)) if "lr" in r]


def attrs(path):
    with h5py.File(path, "r") as f:
        return int(f.attrs["step"]), int(f.attrs["optimizer_steps"])


src_dir = os.path.join(work, "src")
p = run(base + ["--train-data", train, "--batch-size", "4", "--steps", "12", "--lr", "3e-3",
                "--checkpoint-dir", src_dir, "--checkpoint-every", "12"])
check(p.returncode == 0, f"the source run exits 0 ({p.stderr[-300:]})")
src = os.path.join(src_dir, "step_00000012.h5")

# A training file of exactly one global batch (4 windows of 65 tokens): the
# first step's loss, before its update, is the mean over the same tokens as
# --eval-only over the whole file.
one_batch = os.path.join(work, "one_batch.h5")
with h5py.File(os.path.join(example, "kjv_val.h5"), "r") as f, h5py.File(one_batch, "w") as g:
    for name, d in f.items():
        data = d[: 4 * 64 + 1] if name == "tokens" else d[()]
        g.create_dataset(name, data=data)
        g[name].attrs.update(dict(d.attrs))
e = run(base + ["--val-data", one_batch, "--eval-only", "--eval-batches", "0", "--batch-size", "4",
                "--init-from", src, "--metrics", metrics("eval")])
check(e.returncode == 0, f"--eval-only --init-from exits 0 ({e.stderr[-300:]})")
# the weights' own step, the file's 12 (issue 65: it said and recorded 0)
check(f"eval of {src} (step 12)" in e.stdout and [r.get("step") for r in records(metrics("eval"))] == [12],
      "--eval-only names the --init-from file and the step its weights were saved at")
want = [r["val_loss"] for r in records(metrics("eval")) if "val_loss" in r]
for ranks in (1, 2):
    name = f"first_np{ranks}"
    ck = os.path.join(work, "ck_" + name)
    p = run(base + ["--train-data", one_batch, "--batch-size", str(4 // ranks), "--steps", "1",
                    "--init-from", src, "--metrics", metrics(name), "--checkpoint-dir", ck], ranks)
    check(p.returncode == 0, f"{name} exits 0 ({p.stderr[-300:]})")
    got = losses(name)
    check(len(want) == 1 and len(got) == 1 and abs(got[0] - want[0]) <= 1e-6 * want[0],
          f"{name}: the first loss {got} equals --eval-only's {want} on those tokens (1e-6)")

# AdamW's moments started at zero: after one step m = (1-b1) g and
# v = (1-b2) g^2, so v = m^2 (1-b2)/(1-b1)^2 (the source's moments would break it).
with h5py.File(os.path.join(work, "ck_first_np1", "step_00000001.h5"), "r") as f:
    m = np.concatenate([d[()].ravel() for d in f["optim/exp_avg"].values()]).astype(np.float64)
    v = np.concatenate([d[()].ravel() for d in f["optim/exp_avg_sq"].values()]).astype(np.float64)
want_v = m * m * (1 - 0.95) / (1 - 0.9) ** 2
check(np.count_nonzero(m) > 0.9 * m.size and np.allclose(v, want_v, rtol=1e-4, atol=1e-30),
      f"the moments after one step are one gradient's (max rel. error "
      f"{np.max(np.abs(v - want_v) / np.maximum(want_v, 1e-30)):.1e})")

# Fresh schedule and optimizer, any rank count, either optimizer.
common = ["--train-data", train, "--steps", "6", "--lr", "3e-3", "--warmup-steps", "3"]
p = run(base + common + ["--batch-size", "6", "--metrics", metrics("scratch")])
check(p.returncode == 0, f"a run from random weights exits 0 ({p.stderr[-300:]})")
runs = {}
for name, ranks, extra in (("np1", 1, ["--batch-size", "6"]), ("np3", 3, ["--batch-size", "2"]),
                           ("muon", 1, ["--batch-size", "6", "--optimizer", "muon"])):
    ck = os.path.join(work, "ck_" + name)
    p = run(base + common + extra + ["--init-from", src, "--checkpoint-dir", ck,
                                     "--checkpoint-every", "6", "--metrics", metrics(name)], ranks)
    check(p.returncode == 0, f"{name}: exits 0 ({p.stderr[-300:]})")
    check(re.search(r"--init-from '.*step_00000012\.h5': the weights it saved at step 12 \(on 1 "
                    r"rank\(s\)\); optimizer state, step, schedule and data order start afresh",
                    p.stdout) is not None, f"{name}: says what it took from the file")
    check(lrs(name) == lrs("scratch") and len(lrs(name)) == 6,
          f"{name}: steps 1-6 on the fresh schedule ({lrs(name)} vs {lrs('scratch')})")
    saved = os.path.join(ck, "step_00000006.h5")
    check(os.path.exists(saved) and attrs(saved) == (6, 6),
          f"{name}: its checkpoint is at step 6 after 6 optimizer steps "
          f"({attrs(saved) if os.path.exists(saved) else 'none'})")
    runs[name] = losses(name)
first = losses("scratch")[:1]
check(runs["np1"][:1] != first and runs["np1"][0] < first[0],
      f"the first loss is the trained weights' ({runs['np1'][:1]}), not random weights' ({first})")
check(len(runs["np3"]) == 6 and all(abs(a - b) <= 1e-5 * abs(b) for a, b in zip(runs["np3"], runs["np1"])),
      f"3 ranks follow 1 rank within 1e-5 ({runs['np3']} vs {runs['np1']})")
check(runs["muon"][0] == runs["np1"][0] and runs["muon"][1:] != runs["np1"][1:],
      "--optimizer muon from an AdamW file: the same first loss, then its own steps")

# Preempted and rerun with the same command: the run's own checkpoint wins.
# The --init-from file may be gone by then: the rerun no longer needs it.
ck = os.path.join(work, "ck_rerun")
src_copy = os.path.join(work, "src_copy.h5")
shutil.copy(src, src_copy)
cmd = base + common + ["--batch-size", "6", "--init-from", src_copy, "--checkpoint-dir", ck,
                       "--resume", "auto", "--metrics", metrics("rerun")]
p = run(cmd + ["--stop-at-step", "3"])
check(p.returncode == 0 and "starting from --init-from" in p.stdout,
      f"the first part starts from --init-from ({p.stderr[-300:]})")
os.remove(src_copy)
p = run(cmd)
check(p.returncode == 0 and "resumed from" in p.stdout and "the weights it saved" not in p.stdout,
      f"the rerun resumes its own step 3, the --init-from file gone ({p.stderr[-300:]})")
rerun = [r["loss"] for r in records(metrics("rerun")) if "loss" in r]
check(rerun == runs["np1"], f"and ends bit for bit as the uninterrupted run ({rerun} vs {runs['np1']})")

one_error(base + ["--train-data", train, "--init-from", os.path.join(work, "nope.h5")],
          "--init-from: checkpoint", "a missing file")
one_error(base + ["--train-data", train, "--init-from", os.path.join(work, "nope.h5"),
                  "--checkpoint-dir", os.path.join(work, "ck_none"), "--resume", "auto"],
          "--init-from: checkpoint", "a missing file where --resume auto finds nothing")
one_error(base + ["--train-data", train, "--d-model", "128", "--init-from", src],
          "--d-model 64", "a file of another model")
one_error(base + ["--train-data", train, "--head-dim", "32", "--init-from", src],
          "--head-dim 0 (this run: 32)", "a file whose heads are another width")
one_error(base + ["--train-data", train, "--qk-norm", "false", "--init-from", src],
          "--qk-norm true (this run: false)", "a file with QK-norm into a model without")
finish("init_from_test")
