#!/usr/bin/env python3
"""Every kind of bad input gets exactly one line `fsdptrain: error: ...` on
stderr naming the file, flag or value, a non-zero exit, and no training.
Also under mpirun with two ranks: still one error line in all."""
import os
import subprocess
import sys

import h5py
import numpy as np

exe, work = sys.argv[1:3]
os.makedirs(work, exist_ok=True)


def h5(name, data, vocab=256, dataset="tokens", eos=None):
    path = os.path.join(work, name)
    with h5py.File(path, "w") as f:
        d = f.create_dataset(dataset, data=data)
        if vocab is not None:
            d.attrs["vocab_size"] = vocab
        if eos is not None:
            d.attrs["eos_id"] = eos
    return path


good = h5("good.h5", np.arange(4096, dtype=np.uint16) % 256)
floats = h5("floats.h5", np.zeros(4096, dtype=np.float32) + 0.5)
big_token = h5("big_token.h5", np.concatenate([np.zeros(1000, np.uint16), [300], np.zeros(10, np.uint16)]).astype(np.uint16))
short = h5("short.h5", np.arange(10, dtype=np.uint16))
no_vocab = h5("no_vocab.h5", np.arange(100, dtype=np.uint16), vocab=None)
big_vocab = h5("big_vocab.h5", np.arange(4096, dtype=np.uint16), vocab=50000)
not_h5 = os.path.join(work, "not_h5.h5")
open(not_h5, "w").write("this is text, not HDF5\n")
bad_ini = os.path.join(work, "bad.ini")
open(bad_ini, "w").write("lr = fast\n")
inf_ini = os.path.join(work, "inf.ini")
open(inf_ini, "w").write("lr = inf\n")
unknown_key_ini = os.path.join(work, "unknown_key.ini")
open(unknown_key_ini, "w").write("lr = 0.01\nlearning-rate = 0.02\n")
nested_ini = os.path.join(work, "nested.ini")  # --config is a flag only: this would be ignored
open(nested_ini, "w").write(f"config = {inf_ini}\n")
step_ini = os.path.join(work, "step.ini")  # a prefix of `steps`: no guessing, here or on the command line
open(step_ini, "w").write("step = 1\n")
good2 = h5("good2.h5", np.arange(4096, dtype=np.uint16) % 256)
ini_dir = os.path.join(work, "config_dir.ini")
eos10 = h5("eos10.h5", np.arange(4096, dtype=np.uint16) % 256, eos=10)
eos11 = h5("eos11.h5", np.arange(4096, dtype=np.uint16) % 256, eos=11)
os.makedirs(ini_dir, exist_ok=True)

base = ["--train-data", good, "--steps", "1"]
cases = [  # (arguments, substrings the one error line must contain)
    (["--train-data", "/nonexistent.h5"], ["--train-data", "/nonexistent.h5"]),
    (["--train-data", not_h5], ["--train-data", not_h5]),
    (["--train-data", good + ":/nope"], ["/nope", good]),
    (["--train-data", floats], [floats, "/tokens"]),
    (["--train-data", big_token], [big_token, "300", "1000"]),
    (["--train-data", short], [short, "10"]),
    (["--train-data", no_vocab], [no_vocab, "vocab_size"]),
    (["--train-data", big_vocab], [big_vocab, "--vocab-size"]),
    (base + ["--val-data", "/missing_val.h5"], ["--val-data", "/missing_val.h5"]),
    (["--steps", "1"], ["--train-data"]),
    (base + ["--lr", "-1"], ["--lr", "-1"]),
    (base + ["--lr", "fast"], ["fast"]),
    (base + ["--batch-size", "-1"], ["--batch-size", "-1"]),
    (base + ["--seq-len", "100000"], ["--seq-len", "100000"]),
    (base + ["--model", "gpt-7b"], ["gpt-7b", "gpt-350m"]),
    (base + ["--n-kv-head", "3"], ["--n-kv-head", "3"]),
    (base + ["--bogus-flag"], ["bogus-flag"]),
    (base + ["--config", "/nonexistent.ini"], ["--config", "/nonexistent.ini"]),
    (base + ["--config", bad_ini], [bad_ini, "fast"]),
    (base + ["--config", inf_ini], [inf_ini, "--lr", "inf"]),
    (base + ["--config", unknown_key_ini], [unknown_key_ini, "learning-rate"]),
    (base + ["--config", nested_ini], [nested_ini, "config"]),
    (base + ["--config", ini_dir], ["--config", ini_dir, "directory"]),
    # Non-finite numbers: an infinite --lr trains NaN and checkpoints it.
    (base + ["--lr", "inf"], ["--lr", "inf"]),
    (base + ["--lr", "nan"], ["--lr", "nan"]),
    (base + ["--beta2", "nan"], ["--beta2", "nan"]),
    (base + ["--grad-clip", "inf"], ["--grad-clip", "inf"]),
    (base + ["--rope-theta", "inf"], ["--rope-theta", "inf"]),
    (base + ["--lr", "1e39"], ["--lr", "1e39"]),
    (base + ["0.01"], ["0.01"]),  # a stray word is not silently dropped
    # Boost once took --step for --steps (prefix guessing) but refused it in a file.
    (["--train-data", good, "--step", "1"], ["'--step'", "did you mean --steps?"]),
    (["--train-data", good, "--config", step_ini], [step_ini, "'step'", "did you mean steps?"]),
    # An unquoted glob, expanded by the shell: say to quote it.
    (["--train-data", good, good2, "--steps", "1"], [good2, "--train-data", "quote it"]),
    (base + ["--val-data", good, good2], [good2, "--val-data", "quote it"]),
    (base + ["--device", "tpu"], ["--device", "tpu"]),
    (base + ["--device", "cuda"], ["--device cuda"]),
    # --document-mask reads where documents end from the data's eos_id.
    (base + ["--document-mask", "true"], ["--document-mask", good, "eos_id"]),
    (["--train-data", eos10, "--val-data", eos11, "--steps", "1", "--document-mask", "true"],
     ["--document-mask", "--val-data", eos11, "eos_id 11", "10"]),
    (base + ["--precision", "bf16"], ["--precision", "bf16"]),
    (base + ["--resume", "/no/such/ckpt.h5", "--checkpoint-dir", work], ["/no/such/ckpt.h5"]),
    (base + ["--stop-at-step", "1"], ["--checkpoint-dir"]),
    (base + ["--shard-group-size", "-2"], ["--shard-group-size"]),
    (base + ["--recompute", "all"], ["--recompute", "all"]),
    (base + ["--reduce-dtype", "bf16"], ["--reduce-dtype", "bf16"]),
    (base + ["--reduce-dtype", "fp16"], ["--reduce-dtype", "fp16"]),
    (base + ["--device-comm", "nvlink"], ["--device-comm", "nvlink"]),
    (base + ["--on-divergence", "rollback"], ["--on-divergence rollback", "--checkpoint-dir"]),
    (base + ["--on-divergence", "retry"], ["--on-divergence", "retry"]),
    (base + ["--spike-factor", "-1"], ["--spike-factor", "-1"]),
    (base + ["--spike-window", "0"], ["--spike-window", "0"]),
    (base + ["--spike-window", "5000"], ["--spike-window", "5000"]),
]

failures = []


def check(cmd, needles, label, exact_stderr):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    errs = [l for l in r.stderr.splitlines() if l.strip()]
    ours = [l for l in errs if l.startswith("fsdptrain: error: ")]
    why = []
    if r.returncode == 0:
        why.append("exit code 0")
    if len(ours) != 1:
        why.append(f"{len(ours)} error lines")
    if exact_stderr and len(errs) != 1:
        why.append(f"stderr has {len(errs)} lines")
    line = ours[0] if ours else ""
    why += [f"missing '{n}'" for n in needles if n not in line]
    if "step " in r.stdout:
        why.append("training started")
    if why:
        failures.append(f"{label}: {', '.join(why)}\n  stderr: {r.stderr.strip()}")


for args, needles in cases:
    check([exe] + args, needles, " ".join(args), exact_stderr=True)

# A run that diverges under --debug stops at the first unit that produces
# NaN/Inf, naming it, with one error line (and no MPI abort banner on 1 rank).
r = subprocess.run([exe, "--train-data", good, "--seq-len", "16", "--steps", "3", "--debug",
                    "--lr", "1e30", "--grad-clip", "0", "--warmup-steps", "0"],
                   capture_output=True, text=True, timeout=120)
errs = [l for l in r.stderr.splitlines() if l.strip()]
if r.returncode == 0 or len(errs) != 1 or "produced NaN or Inf" not in errs[0] or "unit '" not in errs[0]:
    failures.append(f"--debug divergence: rc {r.returncode}, stderr {r.stderr.strip()!r}")

mpiexec = os.environ.get("MPIEXEC", "mpirun")
check([mpiexec, "--oversubscribe", "-np", "2", exe, "--train-data", "/nonexistent.h5"],
      ["/nonexistent.h5"], "mpirun -np 2 --train-data /nonexistent.h5", exact_stderr=False)

# A failure on one rank only (rank 0 opens --metrics) must not leave the other
# ranks waiting in a collective: one error line, non-zero exit, no hang.
check([mpiexec, "--oversubscribe", "-np", "2", exe, "--train-data", good,
       "--metrics", good + "/m.jsonl"],
      ["--metrics", good + "/m.jsonl"], "mpirun -np 2 --metrics under a regular file",
      exact_stderr=False)

total = len(cases) + 3
for f in failures:
    print("FAIL:", f)
print(f"{total - len(failures)} passed, {len(failures)} failed")
sys.exit(1 if failures else 0)
