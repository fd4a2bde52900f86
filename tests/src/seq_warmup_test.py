#!/usr/bin/env python3
"""--seq-warmup-steps (issue 68): short-to-long sequence warm-up in the trainer.

Each step's record says its context, which follows src/policy/seq_warmup.h's
schedule (written again here); the warm-up changes the first steps' losses
(attention stops at each piece) and nothing after them but through the
weights; validations and samples in the middle of the warm-up run at the
full context (a validation equals --eval-only's of the checkpoint saved
there); a run stopped in the warm-up and resumed computes the uninterrupted
run's losses digit for digit; 2 ranks agree with 1 within the sum's
rounding; a --time-budget run measures what each short context saves.
A start that does not divide --seq-len is one error line. (The tokens each
step trains on, cut into pieces, are checked against PyTorch by
tests/tools/torch_parity_test.py's seqwarm_np2.)"""
import os
import shutil
import sys

from program_checks import check, finish, one_error, records, run

exe, example, work = sys.argv[1:4]
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
train, val = os.path.join(example, "kjv_train.h5"), os.path.join(example, "kjv_val.h5")
common = [exe, "--device", "cpu", "--model", "tiny", "--train-data", train, "--val-data", val,
          "--seq-len", "32"]
base = common + ["--steps", "20", "--lr", "3e-3", "--eval-every", "5", "--eval-batches", "4",
                 "--log-every", "10"]
warm = ["--seq-warmup-steps", "12", "--seq-warmup-start", "4"]


def context(step, T=32, steps=12, start=4):
    if step >= steps:
        return T
    c = start + (T - start) * step // steps
    while T % c:
        c -= 1
    return c


def training(name, extra, ranks=1, batch=8, every=5):
    m = os.path.join(work, name + ".jsonl")
    p = run(base + ["--batch-size", str(batch), "--metrics", m, "--checkpoint-dir",
                    os.path.join(work, name), "--checkpoint-every", str(every)] + extra, ranks)
    check(p.returncode == 0, f"{name}: exits 0 ({p.stderr[-300:]})")
    r = [d for d in records(m) if "step" in d]
    return p, r


p, r = training("warm", warm + ["--samples", "1", "--sample-every", "3"], every=1)
steps = [d for d in r if "loss" in d]
want = [context(s) for s in range(20)]
check([d.get("seq_len") for d in steps] == want, f"each step's record says its context: {want}")
check(sorted({d.get("seq_len") for d in steps}) == [4, 8, 16, 32],
      "the run passes through every stage")
losses = [d["loss"] for d in steps]
vals = {d["step"]: d["val_loss"] for d in r if "val_loss" in d}
_, plain = training("plain", [])
plain_losses = [d["loss"] for d in plain if "loss" in d]
check(plain and all("seq_len" not in d for d in plain if "loss" in d),
      "a run without the warm-up records no context")
check(len(plain_losses) == 20 and plain_losses[0] != losses[0],
      f"the first step's loss at context 4 is not the full context's: {losses[0]} vs "
      f"{plain_losses[0]}")


def eval_only(step, extra):
    """--eval-only of the warm run's checkpoint at `step`: its records."""
    m = os.path.join(work, f"eval{step}.jsonl")
    e = run([exe, "--device", "cpu", "--model", "tiny", "--val-data", val, "--seq-len", "32",
             "--batch-size", "8", "--eval-batches", "4", "--eval-only", "--resume",
             os.path.join(work, "warm", f"step_{step:08d}.h5"), "--metrics", m] + extra)
    got = records(m)
    check(e.returncode == 0 and got, f"--eval-only at step {step} exits 0 with records")
    return got


def sample_at(recs, step):
    return [d["text"] for d in recs if d.get("step") == step and "sample" in d]


# Step 5's validation (context 8 then) is at the full context, as is step 6's
# sample (context 8, no validation before it): --eval-only's of their checkpoints.
got = [d.get("val_loss") for d in eval_only(5, []) if "val_loss" in d]
check(got == [vals.get(5)], f"validation in the warm-up is at the full context: {vals.get(5)} vs "
      f"--eval-only {got}")
mine, theirs = sample_at(r, 6), sample_at(eval_only(6, ["--samples", "1"]), 6)
check(len(mine) == 1 and mine == theirs,
      f"a sample in the warm-up is the full context's: {mine} vs {theirs}")

# Stopped at step 7 (context 16), resumed: the same losses digit for digit.
_, first = training("stopped", warm + ["--stop-at-step", "7"])
p2, second = training("stopped", warm + ["--resume", "auto"])
check(len([d for d in first if "loss" in d]) == 7, "the first run stops after step 7")
resumed = [d["loss"] for d in second if "loss" in d]  # the metrics file goes on
check(resumed == losses, "a run resumed in the warm-up computes the uninterrupted run's losses")

# 2 ranks of 4 sequences: each cuts its own rows; the same global batch.
_, two = training("np2", warm, ranks=2, batch=4)
two_losses = [d["loss"] for d in two if "loss" in d]
check(len(two_losses) == 20 and all(abs(a - b) <= 1e-5 * abs(b) for a, b in zip(two_losses, losses)),
      f"2 ranks agree with 1: worst {max(abs(a - b) / abs(b) for a, b in zip(two_losses, losses)):.2e}"
      if len(two_losses) == 20 else "2 ranks: 20 losses")

# A budget measures what each short context saves, for its plan.
m = os.path.join(work, "budget.jsonl")
b = run(common + ["--batch-size", "8", "--time-budget", "6s", "--warmup-steps", "5",
                 "--seq-warmup-steps", "40", "--seq-warmup-start", "4", "--eval-batches", "2",
                 "--metrics", m])
check(b.returncode == 0, f"a budgeted run exits 0 ({b.stderr[-300:]})")
check("fsdptrain: --seq-warmup-steps 40: a micro-batch at context 4 saves" in b.stdout
      and ", 16 saves" in b.stdout and "in --time-budget's plan" in b.stdout,
      "a budgeted run prints what each context saves")
budget_steps = [d for d in records(m) if "step" in d and "loss" in d]
check(budget_steps and [d.get("seq_len") for d in budget_steps[:40]] ==
      [context(s, steps=40) for s in range(min(40, len(budget_steps)))],
      "a budgeted run follows the same schedule")

one_error(base + ["--batch-size", "8", "--seq-warmup-steps", "10", "--seq-warmup-start", "5"],
          "--seq-warmup-start: '5' is invalid: must be 0 or divide --seq-len", "a start that does "
          "not divide --seq-len")
one_error(common[:-1] + ["28", "--seq-warmup-steps", "10"],
          "--seq-warmup-start: '0' is invalid", "an eighth of --seq-len that does not divide it")

finish("seq-warmup")
