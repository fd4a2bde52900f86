#!/usr/bin/env python3
"""--batch-warmup-steps (issue 68): small-to-large batch warm-up in the trainer.

Each step's record says its global batch, which follows
src/policy/batch_warmup.h's schedule (written again here), and tokens_seen
adds up the steps' tokens; the steps that run one micro-batch are a
--grad-accum 1 run's digit for digit (the same positions, the loss
normalised over the step's own tokens); a run stopped in the warm-up and
resumed computes the uninterrupted run's losses digit for digit; 2 ranks
agree with 1 within the sum's rounding; a --time-budget run measures what a
micro-batch left out saves. A start not below --grad-accum is one error
line. (The positions each step reads are checked against PyTorch by
tests/tools/torch_parity_test.py's batchwarm_np2.)"""
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
base = common + ["--steps", "20", "--lr", "3e-3", "--eval-every", "10", "--eval-batches", "4",
                 "--log-every", "10"]
warm = ["--grad-accum", "4", "--batch-warmup-steps", "12"]


def micro_batches(step, accum=4, steps=12, start=1):
    return accum if step >= steps else start + (accum - start) * step // steps


def training(name, extra, ranks=1, batch=2):
    m = os.path.join(work, name + ".jsonl")
    p = run(base + ["--batch-size", str(batch), "--metrics", m, "--checkpoint-dir",
                    os.path.join(work, name), "--checkpoint-every", "5"] + extra, ranks)
    check(p.returncode == 0, f"{name}: exits 0 ({p.stderr[-300:]})")
    return p, [d for d in records(m) if "step" in d and "loss" in d]


p, steps = training("warm", warm)
want = [2 * micro_batches(s) for s in range(20)]
check([d.get("global_batch") for d in steps] == want, f"each step's record says its batch: {want}")
seen = [sum(want[:s + 1]) * 32 for s in range(20)]
check([d.get("tokens_seen") for d in steps] == seen, "tokens_seen adds up the steps' tokens")
check("fsdptrain: batch warm-up: steps 1-12 run 1 to 3 of the 4 micro-batches (2 to 6 sequences)"
      in p.stdout, "the run says its warm-up")
losses = [d["loss"] for d in steps]

# Steps 1-4 run one micro-batch: the same positions and normalisation as a
# --grad-accum 1 run, whose losses they are digit for digit (step 5 is not).
_, single = training("single", ["--grad-accum", "1"])
single_losses = [d["loss"] for d in single]
check(single and all("global_batch" not in d for d in single),
      "a run without the warm-up records no batch")
check(losses[:4] == single_losses[:4] and losses[4] != single_losses[4],
      f"one micro-batch a step is --grad-accum 1's: {losses[:5]} vs {single_losses[:5]}")
_, full = training("full", ["--grad-accum", "4"])
check(full and losses[0] != full[0]["loss"], "the first step's loss is not the full batch's")

# Stopped at step 7 (two micro-batches), resumed: the same losses digit for digit.
_, first = training("stopped", warm + ["--stop-at-step", "7"])
_, second = training("stopped", warm + ["--resume", "auto"])
check(len(first) == 7, "the first run stops after step 7")
check([d["loss"] for d in second] == losses,
      "a run resumed in the warm-up computes the uninterrupted run's losses")
check([d.get("tokens_seen") for d in second] == seen, "and counts the same tokens")

# 2 ranks of 1 sequence a micro-batch: the same global batch a step.
_, two = training("np2", warm, ranks=2, batch=1)
two_losses = [d["loss"] for d in two]
check(len(two_losses) == 20 and all(abs(a - b) <= 1e-5 * abs(b) for a, b in zip(two_losses, losses)),
      f"2 ranks agree with 1: worst {max(abs(a - b) / abs(b) for a, b in zip(two_losses, losses)):.2e}"
      if len(two_losses) == 20 else "2 ranks: 20 losses")
check([d.get("global_batch") for d in two] == want, "2 ranks record the same batches")

# A budget measures what a micro-batch left out saves, for its plan.
m = os.path.join(work, "budget.jsonl")
b = run(common + ["--batch-size", "2", "--grad-accum", "4", "--time-budget", "6s",
                 "--warmup-steps", "5", "--batch-warmup-steps", "40", "--eval-batches", "2",
                 "--metrics", m])
check(b.returncode == 0, f"a budgeted run exits 0 ({b.stderr[-300:]})")
check("fsdptrain: --batch-warmup-steps 40: each micro-batch a step leaves out saves" in b.stdout
      and "in --time-budget's plan" in b.stdout, "a budgeted run prints what a micro-batch saves")
budget_steps = [d for d in records(m) if "step" in d and "loss" in d]
check(budget_steps and [d.get("global_batch") for d in budget_steps[:40]] ==
      [2 * micro_batches(s, steps=40) for s in range(min(40, len(budget_steps)))],
      "a budgeted run follows the same schedule")

one_error(base + ["--batch-size", "2", "--batch-warmup-steps", "10"],
          "--batch-warmup-start: '0' is invalid: must be 0 or at least 1 and below --grad-accum",
          "a warm-up of --grad-accum 1")
one_error(base + warm + ["--batch-warmup-start", "4"],
          "--batch-warmup-start: '4' is invalid", "a start of --grad-accum micro-batches")

finish("batch-warmup")
