#!/usr/bin/env python3
"""--eval-seq-len (issue 33): validation at another context than training's.

A run training at context 32 and validating at 64 must train exactly as one
that validates at 32 (the same losses, digit for digit), and its validation
loss must be the one --eval-only computes for its checkpoint at --seq-len 64
with the same tokens per micro-batch (8 x 32 = 4 x 64), on 1 rank and, within
the sum's rounding, on 3. A validation micro-batch holds the training one's
tokens, so --eval-batches N covers N x batch x seq-len tokens at either
context. Bad combinations are one error line and a non-zero exit."""
import os
import shutil
import sys

from program_checks import check, finish, one_error, records, run

exe, example, work = sys.argv[1:4]
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
train, val = os.path.join(example, "kjv_train.h5"), os.path.join(example, "kjv_val.h5")
base = [exe, "--device", "cpu", "--model", "tiny", "--val-data", val]


def training(name, extra):
    m = os.path.join(work, name + ".jsonl")
    p = run(base + ["--train-data", train, "--seq-len", "32", "--batch-size", "8", "--steps", "20",
                    "--lr", "3e-3", "--eval-every", "10", "--eval-batches", "0", "--log-every", "10",
                    "--metrics", m, "--checkpoint-dir", os.path.join(work, name),
                    "--checkpoint-every", "20"] + extra)
    check(p.returncode == 0, f"{name}: exits 0 ({p.stderr[-300:]})")
    r = records(m)
    return p, [d["loss"] for d in r if "loss" in d], [d["val_loss"] for d in r if "val_loss" in d]


p, losses, vals = training("at64", ["--eval-seq-len", "64"])
check("validation at context 64 (--eval-seq-len), 4 sequences per micro-batch" in p.stdout,
      "the start says where validation runs")
_, plain_losses, plain_vals = training("at32", [])
check(len(losses) == 20 and losses == plain_losses,
      "training is the same digit for digit whatever the validation context")
check(len(vals) == 3 and len(plain_vals) == 3 and all(a != b for a, b in zip(vals, plain_vals)),
      f"validations at steps 0, 10 and 20 each, at different contexts: {vals} vs {plain_vals}")


def eval_only(extra, ranks=1):
    m = os.path.join(work, f"eval_{len(os.listdir(work))}.jsonl")
    p = run(base + ["--eval-only", "--resume", os.path.join(work, "at64", "step_00000020.h5"),
                    "--metrics", m] + extra, ranks)
    r = records(m)
    check(p.returncode == 0 and len(r) == 1, f"--eval-only {' '.join(extra)} on {ranks} rank(s) "
          f"exits 0 with one record ({p.stderr[-300:]})")
    return r[0] if r else {}


# The same windows in the same rows: the loss --eval-only gets at --seq-len 64.
direct = eval_only(["--seq-len", "64", "--batch-size", "4", "--eval-batches", "0"])
check(vals and direct.get("val_loss") == vals[-1],
      f"validation at 64 during training {vals[-1:]} equals --eval-only at --seq-len 64: "
      f"{direct.get('val_loss')}")
np3 = eval_only(["--seq-len", "32", "--batch-size", "5", "--eval-seq-len", "64", "--eval-batches",
                 "0"], ranks=3)
check(vals and abs(np3.get("val_loss", 0) - vals[-1]) <= 1e-5 * vals[-1]
      and np3.get("eval_tokens") == direct.get("eval_tokens"),
      f"3 ranks (2 sequences of 64 per micro-batch) see every window once and agree: {np3}")
for L, rows in ((64, 4), (16, 16)):
    got = eval_only(["--seq-len", "32", "--batch-size", "8", "--eval-seq-len", str(L),
                     "--eval-batches", "2"])
    check(got.get("eval_tokens") == 2 * rows * L == 2 * 8 * 32,
          f"--eval-seq-len {L}: 2 micro-batches of {rows} x {L} tokens: {got.get('eval_tokens')}")


one_error([exe, "--device", "cpu", "--model", "tiny", "--train-data", train, "--eval-seq-len", "64"],
          "--eval-seq-len 64 needs --val-data", "no validation data")
one_error(base + ["--train-data", train, "--eval-seq-len", "65"],
          "--eval-seq-len: '65' is invalid: must be between 1 and the model's --max-seq-len",
          "past the model's context")
one_error(base + ["--train-data", train, "--seq-len", "16", "--batch-size", "2", "--eval-seq-len",
                  "64"], "raise --batch-size to 4", "a micro-batch of fewer tokens than one sequence")

finish("eval-seq-len")
