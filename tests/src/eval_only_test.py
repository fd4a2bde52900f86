#!/usr/bin/env python3
"""--eval-only (issue 11): the validation loss of a checkpoint without training.

A short run saves its last step and evaluates the whole validation split
(--eval-batches 0); --eval-only on that checkpoint must print and record the
same loss over the same number of tokens on 1 rank and on 3 ranks with another
micro-batch (every window once, padding ignored), leave the checkpoint
directory as it was, and need no --train-data. Bad combinations are one error
line and a non-zero exit."""
import os
import re
import shutil
import subprocess
import sys
import tempfile

import h5py
from program_checks import check, finish, one_error, records, run

exe, example, work = sys.argv[1:4]
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
val = os.path.join(example, "kjv_val.h5")
base = [exe, "--device", "cpu", "--model", "tiny", "--seq-len", "64", "--val-data", val]


ckpt = os.path.join(work, "ckpt")
train = run(base + ["--train-data", os.path.join(example, "kjv_train.h5"), "--batch-size", "8",
                    "--steps", "30", "--lr", "3e-3", "--eval-batches", "0", "--checkpoint-dir",
                    ckpt, "--checkpoint-every", "30", "--metrics", os.path.join(work, "train.jsonl")])
check(train.returncode == 0, f"the training run exits 0 ({train.stderr[-300:]})")
want = [r["val_loss"] for r in records(os.path.join(work, "train.jsonl")) if "val_loss" in r]
check(len(want) == 1, f"one whole-split validation at the end: {want}")
before = sorted(os.listdir(ckpt)) if os.path.isdir(ckpt) else []
saved = os.path.join(ckpt, "step_00000030.h5")
check(os.path.exists(saved), "step 30 was saved")

for ranks, batch, resume in ((1, 8, ["--resume", saved]),
                             (3, 5, ["--resume", "auto", "--checkpoint-dir", ckpt])):
    tag = f"np{ranks} batch {batch}:"
    m = os.path.join(work, f"eval_np{ranks}.jsonl")
    p = run(base + ["--eval-only", "--eval-batches", "0", "--batch-size", str(batch), "--metrics", m]
            + resume, ranks)
    check(p.returncode == 0, f"{tag} exits 0 ({p.stderr[-300:]})")
    line = re.search(r"eval of (\S+) \(step (\d+)\): val_loss ([0-9.]+), perplexity [0-9.]+, over (\d+) "
                     r"tokens \(the whole split\)", p.stdout)
    check(line is not None and line.group(2) == "30", f"{tag} one line names the checkpoint and step 30")
    rec = records(m)
    check(len(rec) == 1 and rec[0].get("eval_only") is True and rec[0].get("step") == 30,
          f"{tag} one eval_only metrics record at step 30: {rec}")
    if rec and want:
        got = rec[0]["val_loss"]
        check(abs(got - want[0]) <= 1e-5 * want[0],
              f"{tag} val_loss {got} equals the training run's {want[0]} (1e-5)")
        windows = int(re.search(r"(\d+) windows of 65", p.stdout).group(1))
        check(rec[0]["eval_tokens"] == windows * 64,
              f"{tag} {rec[0]['eval_tokens']} tokens: every one of {windows} windows once")
    check(sorted(os.listdir(ckpt)) == before, f"{tag} the checkpoint directory is unchanged")
    check(re.search(r"^step +\d+/", p.stdout, re.M) is None, f"{tag} no training step ran")

# A fixed number of batches per rank, as during training: fewer tokens.
p = run(base + ["--eval-only", "--eval-batches", "2", "--batch-size", "4", "--resume", saved])
n = re.search(r"over (\d+) tokens in", p.stdout)
check(p.returncode == 0 and n is not None and int(n.group(1)) == 2 * 4 * 64,
      f"--eval-batches 2 covers 2 x 4 x 64 tokens: {p.stdout[-200:]}")

# Issue 65: a validation split smaller than --eval-batches' batches. The
# default count (and any count past the split) wrapped around and counted
# windows twice: 3,730 tokens reported "over 16384 tokens". Now the whole
# split, each window once, said so at the start and on the result line, on 1
# rank and on 3 (whose batches interleave).
import h5py  # noqa: E402

small = os.path.join(work, "small_val.h5")
with h5py.File(val, "r") as f, h5py.File(small, "w") as g:
    g["tokens"] = f["tokens"][:3730]
    for k, v in f["tokens"].attrs.items():  # vocab_size, the tokenizer
        g["tokens"].attrs[k] = v
    for k, v in f.attrs.items():
        g.attrs[k] = v
windows = (3730 - 1) // 64  # whole windows of 64 + 1 tokens, one token shared
for ranks in (1, 3):
    tag = f"small split, np{ranks}:"
    m = os.path.join(work, f"small_np{ranks}.jsonl")
    p = run([exe, "--device", "cpu", "--model", "tiny", "--seq-len", "64", "--val-data", small,
             "--eval-only", "--batch-size", "8", "--resume", saved, "--metrics", m], ranks)
    rec = records(m) if os.path.exists(m) else []
    check(p.returncode == 0 and len(rec) == 1 and rec[0]["eval_tokens"] == windows * 64,
          f"{tag} {rec[0]['eval_tokens'] if rec else None} tokens, each of {windows} windows once "
          f"({p.stderr[-200:]})")
    check("reaches past the validation split" in p.stdout and "(the whole split)" in p.stdout,
          f"{tag} says it validated the whole split: {p.stdout[-300:]}")
# the whole split at the default count equals --eval-batches 0 exactly
p0 = run([exe, "--device", "cpu", "--model", "tiny", "--seq-len", "64", "--val-data", small, "--eval-only",
          "--eval-batches", "0", "--batch-size", "8", "--resume", saved, "--metrics", os.path.join(work, "s0.jsonl")])
r0, r1 = records(os.path.join(work, "s0.jsonl")), records(os.path.join(work, "small_np1.jsonl"))
check(p0.returncode == 0 and r0 and r1 and r0[0]["val_loss"] == r1[0]["val_loss"],
      f"the default count gives --eval-batches 0's loss: {r0} {r1}")

# A Muon checkpoint: evaluating needs its weights only, so --eval-only takes it
# without --optimizer muon (training on from it would not) and gives the loss
# the training run's final validation gave.
mck = os.path.join(work, "ckpt_muon")
mtrain = run(base + ["--train-data", os.path.join(example, "kjv_train.h5"), "--batch-size", "8",
                     "--steps", "10", "--optimizer", "muon", "--eval-batches", "0", "--checkpoint-dir",
                     mck, "--checkpoint-every", "10", "--metrics", os.path.join(work, "muon.jsonl")])
mwant = [r["val_loss"] for r in records(os.path.join(work, "muon.jsonl")) if "val_loss" in r]
check(mtrain.returncode == 0 and len(mwant) == 1, f"the Muon run saves and validates ({mtrain.stderr[-300:]})")
m = os.path.join(work, "eval_muon.jsonl")
p = run(base + ["--eval-only", "--eval-batches", "0", "--batch-size", "8", "--resume", "auto",
                "--checkpoint-dir", mck, "--metrics", m])
rec = records(m) if os.path.exists(m) else []
check(p.returncode == 0 and len(rec) == 1 and mwant and abs(rec[0]["val_loss"] - mwant[0]) <= 1e-5 * mwant[0],
      f"--eval-only of a Muon checkpoint without --optimizer muon: {rec} vs {mwant} ({p.stderr[-300:]})")
one_error(base + ["--train-data", os.path.join(example, "kjv_train.h5"), "--batch-size", "8", "--steps", "20",
                  "--resume", "auto", "--checkpoint-dir", mck],
          "was trained with --optimizer muon", "training on from a Muon checkpoint under AdamW")

# Samples from the checkpoint: greedy text is a function of the weights alone,
# so 1 rank and 3 ranks (sharded weights, gathered) print the same; each
# sample starts with the data's first tokens (no eos_id in the example) and is
# written to the metrics.
texts = {}
for ranks in (1, 3):
    m = os.path.join(work, f"samples_np{ranks}.jsonl")
    p = run(base + ["--eval-only", "--batch-size", "3", "--resume", saved, "--samples", "2",
                    "--sample-length", "24", "--temperature", "0", "--metrics", m], ranks)
    got = [r for r in records(m) if "text" in r]
    check(p.returncode == 0 and len(got) == 2 and all(r["step"] == 30 for r in got),
          f"np{ranks}: two samples at step 30 in the metrics ({p.stderr[-200:]})")
    check(p.stdout.count("--- sample ") == 2, f"np{ranks}: two samples printed")
    texts[ranks] = [r["text"] for r in got]
check(texts.get(1) == texts.get(3) and len(texts.get(1, [])) == 2,
      f"greedy samples equal on 1 and 3 ranks: {texts}")
check(all(t.startswith("whether") and len(t.encode()) >= 8 + 24 for t in texts.get(1, [""])),
      f"each sample is the 8-token prompt plus 24 new bytes: {texts.get(1)}")
check(len(set(texts.get(1, []))) == 1, "greedy gives one text for every row")

# --prompt (issue 65, item 6): each sample starts from its prompt's text,
# --samples of each (one without --samples), numbered in the metrics. Two
# prompts of different lengths share a micro-batch, each row drawing from its
# own position: greedy text equals each prompt's run alone, and 1 rank equals 3.
A, B = "And God said", "In the beginning was the Word"
prompted = {}
for i, (ranks, prompts) in enumerate(((1, [A, B]), (3, [A, B]), (1, [A]), (1, [B]))):
    m = os.path.join(work, f"prompt_{i}.jsonl")
    flags = [x for t in prompts for x in ("--prompt", t)]
    # The initial weights: greedy text from them is arbitrary, so it shows
    # whether each row reads its own prompt at its own positions.
    p = run(base + ["--eval-only", "--batch-size", "4", "--samples", "2",
                    "--sample-length", "16", "--temperature", "0", "--metrics", m] + flags, ranks)
    got = [r for r in records(m) if "text" in r]
    check(p.returncode == 0 and [r.get("prompt") for r in got] == [1, 1, 2, 2][:2 * len(prompts)],
          f"np{ranks} {len(prompts)} prompt(s): 2 samples of each, numbered ({p.stderr[-200:]})")
    prompted[ranks, tuple(prompts)] = [r["text"] for r in got]
both = prompted.get((1, (A, B)), [])
check(len(both) == 4 and both[0].startswith(A) and both[2].startswith(B)
      and all(len(t.encode()) == len(q) + 16 for t, q in zip(both, [A, A, B, B])),
      f"each sample is its prompt plus 16 new bytes: {both}")
check(both == prompted.get((3, (A, B))), "--prompt samples equal on 1 and 3 ranks")
check(both[:2] == prompted.get((1, (A,))) and both[2:] == prompted.get((1, (B,))),
      f"in one micro-batch, each prompt's text equals its run alone: {prompted}")
p = run(base + ["--eval-only", "--prompt", A])
check(p.returncode == 0 and p.stdout.count("--- sample ") == 1, "--prompt alone prints one sample")
one_error(base + ["--eval-only", "--resume", saved, "--prompt", ""], "--prompt: '' is invalid: "
          "must not be empty", "an empty --prompt")
one_error(base + ["--eval-only", "--resume", saved, "--prompt", A, "--samples", "0"],
          "--prompt needs --samples", "--prompt with --samples 0")
one_error(base + ["--eval-only", "--resume", saved, "--prompt", "x" * 64], "leaves no room",
          "a --prompt as long as --seq-len")
one_error(base + ["--eval-only", "--resume", saved, "--prompt", "caf\udcff"], "not valid UTF-8",
          "a --prompt that is not UTF-8")
# A token file that does not say how its tokenizer encodes text.
odd = os.path.join(work, "odd_val.h5")
shutil.copy(val, odd)
with h5py.File(odd, "r+") as f:
    f["tokens"].attrs["tokenizer"] = "odd_tokenizer.json"
    if "text_encoder" in f["tokens"].attrs:
        del f["tokens"].attrs["text_encoder"]
one_error([exe, "--device", "cpu", "--model", "tiny", "--seq-len", "64", "--val-data", odd,
           "--eval-only", "--resume", saved, "--prompt", A], "does not say how to encode text",
          "--prompt on data whose tokenizer the trainer cannot encode with")


# Issue 65, item 7: evaluation holds what evaluation needs. A model of 25M
# parameters whose weights (4 bytes each on the CPU) dwarf a 2 x 64 forward:
# training's gradients and AdamW moments would add 12 bytes a parameter (300
# MiB), its per-layer activations and backward scratch more. --eval-only
# plans and allocates the weights and one forward's activations only; its
# peak resident memory, less a tiny model's (the process itself), stays under
# twice the weights (before: 377 MiB above it for 96 MiB of weights; after,
# measured here: 59).
def peak_rss(cmd):
    """(exit code, stdout, peak resident MiB) of cmd alone (os.wait4's rusage)."""
    with tempfile.TemporaryFile("w+") as out:
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, text=True)
        _, status, usage = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        return p.returncode, out.read(), usage.ru_maxrss / 1024


wide = ["--d-model", "512", "--n-head", "8", "--n-kv-head", "4", "--d-ff", "1536", "--n-layer", "8"]
peaks = {}
for name, shape in (("tiny", []), ("wide", wide)):
    code, out, peaks[name] = peak_rss(base + shape + ["--eval-only", "--batch-size", "2",
                                                      "--eval-batches", "1"])
    check(code == 0, f"--eval-only of the {name} model exits 0 ({out[-300:]})")
    plan = re.search(r"memory plan \(MiB\)(, evaluation only)?: params ([0-9.]+) .* total ([0-9.]+)", out)
    check(plan is not None and plan.group(1) is not None,
          f"{name}: the memory plan is evaluation's, without gradients or AdamW")
    if name == "wide" and plan:
        params = float(plan.group(2))
        check(float(plan.group(3)) < 1.2 * params,
              f"wide: planned total {plan.group(3)} MiB is the weights ({params} MiB) and a forward")
        extra = peaks["wide"] - peaks["tiny"]
        check(extra < 2 * params,
              f"wide: peak memory {peaks['wide']:.0f} MiB, {extra:.0f} above the tiny model's, "
              f"is under twice its {params:.0f} MiB of weights")

one_error([exe, "--device", "cpu", "--model", "tiny", "--eval-only"], "--eval-only needs --val-data",
          "no --val-data")
empty = os.path.join(work, "empty")
os.makedirs(empty)
one_error(base + ["--eval-only", "--resume", "auto", "--checkpoint-dir", empty],
          "no checkpoint", "--resume auto on an empty directory")
one_error([exe, "--device", "cpu", "--model", "tiny", "--val-data", val], "--train-data is required",
          "training without --train-data")

finish("eval-only")
