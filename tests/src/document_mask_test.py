#!/usr/bin/env python3
"""--document-mask (issue 68): attention stopped where documents end, in the
trainer. The example's bytes with the newline (10) stated as the end of
text, so each verse is a document and most windows of 32 hold an end.

The mask changes the losses from the first step; the checkpoint records it;
validation runs under it (a validation equals --eval-only's of the checkpoint
with the flag, and not without it); a sample runs under it; a resume may turn
it off (the weights mean the same); 2 ranks agree with 1. (The masked
training and validation are checked against PyTorch by
tests/tools/torch_parity_test.py's docmask_np2, the missing eos_id refused
by cli_errors_test.py.)"""
import os
import shutil
import sys

import h5py

from program_checks import check, finish, records, run

exe, example, work = sys.argv[1:4]
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)


def with_eos(name):
    path = os.path.join(work, name)
    shutil.copyfile(os.path.join(example, name), path)
    with h5py.File(path, "r+") as f:
        f["tokens"].attrs["eos_id"] = 10
    return path


train, val = with_eos("kjv_train.h5"), with_eos("kjv_val.h5")
common = [exe, "--device", "cpu", "--model", "tiny", "--seq-len", "32"]
data = ["--train-data", train, "--val-data", val, "--lr", "3e-3", "--eval-every", "5",
        "--eval-batches", "4", "--log-every", "5"]
base = common + data + ["--steps", "10"]
mask = ["--document-mask", "true"]


def training(name, extra, ranks=1, batch=8):
    m = os.path.join(work, name + ".jsonl")
    p = run(base + ["--batch-size", str(batch), "--metrics", m, "--checkpoint-dir",
                    os.path.join(work, name), "--checkpoint-every", "5"] + extra, ranks)
    check(p.returncode == 0, f"{name}: exits 0 ({p.stderr[-300:]})")
    r = [d for d in records(m) if "step" in d]
    return [d["loss"] for d in r if "loss" in d], {d["step"]: d["val_loss"] for d in r if "val_loss" in d}


losses, vals = training("masked", mask + ["--samples", "1", "--sample-every", "10"])
plain, plain_vals = training("plain", [])
check(len(losses) == 10 and len(plain) == 10 and losses[0] != plain[0],
      f"the first step's loss under the mask is not the plain one's: {losses[:1]} vs {plain[:1]}")
check(sorted(vals) == [0, 5, 10] and vals[10] != plain_vals.get(10),
      f"validations under the mask: {vals}")
ck = os.path.join(work, "masked", "step_00000010.h5")
with h5py.File(ck, "r") as f:
    check(int(f["model"].attrs.get("document_mask", 0)) == 1, "the checkpoint records the mask")
with h5py.File(os.path.join(work, "plain", "step_00000010.h5"), "r") as f:
    check("document_mask" not in f["model"].attrs, "a checkpoint without it records nothing")


def eval_only(extra):
    m = os.path.join(work, f"eval{len(extra)}.jsonl")  # --eval-only appends to its metrics
    e = run(common + ["--val-data", val, "--batch-size", "8", "--eval-batches", "4", "--eval-only",
                      "--resume", ck, "--metrics", m] + extra)
    got = [d["val_loss"] for d in records(m) if "val_loss" in d]
    check(e.returncode == 0 and len(got) == 1, f"--eval-only {extra} exits 0 with a validation")
    return got[0] if got else None


check(eval_only(mask) == vals[10], "--eval-only with the mask gives the run's validation loss")
check(eval_only([]) not in (None, vals[10]), "--eval-only without it gives another")
samples = [d for d in records(os.path.join(work, "masked.jsonl")) if "sample" in d]
check(len(samples) == 1 and samples[0].get("text"), "a sample under the mask")

# Turned off on resume: the weights mean the same, so the run goes on.
m = os.path.join(work, "masked.jsonl")
p = run(common + data + ["--steps", "15", "--batch-size", "8", "--metrics", m, "--checkpoint-dir",
                os.path.join(work, "masked"), "--resume", "auto"])
check(p.returncode == 0 and len([d for d in records(m) if "loss" in d]) == 15,
      f"a resume without --document-mask goes on ({p.stderr[-300:]})")

# 2 ranks of 4 sequences: each makes its own rows' document starts.
two, _ = training("np2", mask, ranks=2, batch=4)
check(len(two) == 10 and all(abs(a - b) <= 1e-5 * abs(b) for a, b in zip(two, losses)),
      f"2 ranks agree with 1: {two[:3]} vs {losses[:3]}")

finish("document-mask")
