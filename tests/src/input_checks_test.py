#!/usr/bin/env python3
"""Issue 9, cases 1, 4 and 9, as a user meets them:
- --val-data of another vocabulary is one error naming both files and sizes;
- two token files of exactly one window each train a step (the reader once
  merged their windows across the file boundary and stopped);
- a model too large for memory is refused before anything large is
  allocated, with the plan's and the free memory's numbers; an absurd shape
  is refused naming its field.
Each run is limited to 4 GiB of address space, so a build without the memory
check fails these cases with std::bad_alloc instead of filling the machine."""
import json
import os
import resource
import subprocess
import sys

import h5py
import numpy as np

exe, work = sys.argv[1:3]
os.makedirs(work, exist_ok=True)
mpiexec = os.environ.get("MPIEXEC", "mpirun")
ADDRESS_SPACE = 4 << 30


def h5(name, tokens, vocab):
    path = os.path.join(work, name)
    with h5py.File(path, "w") as f:
        f.create_dataset("tokens", data=np.asarray(tokens, dtype=np.uint16)).attrs["vocab_size"] = vocab
    return path


def limit_memory():
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def run(cmd):
    """Returns (exit code, stdout, stderr)."""
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, preexec_fn=limit_memory)
    return r.returncode, r.stdout, r.stderr


def run_measured(cmd):
    """Like run(), plus the peak RSS of that one process (wait4), in bytes."""
    pid = os.fork()
    if pid == 0:
        limit_memory()
        out = os.open(os.path.join(work, "child.out"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        err = os.open(os.path.join(work, "child.err"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(out, 1)
        os.dup2(err, 2)
        os.execv(cmd[0], cmd)
    _, status, usage = os.wait4(pid, 0)
    read = lambda n: open(os.path.join(work, n)).read()
    return os.waitstatus_to_exitcode(status), read("child.out"), read("child.err"), usage.ru_maxrss * 1024


failures = []
checks = 0


def expect(label, ok, detail):
    global checks
    checks += 1
    if not ok:
        failures.append(f"{label}: {detail}")


def expect_one_error(label, rc, out, err, needles):
    lines = [l for l in err.splitlines() if l.strip()]
    ours = [l for l in lines if l.startswith("fsdptrain: error: ")]
    line = ours[0] if ours else ""
    why = []
    if rc == 0:
        why.append("exit code 0")
    if len(ours) != 1:
        why.append(f"{len(ours)} error lines")
    why += [f"missing '{n}'" for n in needles if n not in line]
    if "step " in out or "val_loss" in out:
        why.append("training started")
    expect(label, not why, ", ".join(why) + f"\n  stderr: {err.strip()}")


rng = np.random.default_rng(9)
train = h5("train.h5", rng.integers(0, 256, 4096), 256)
base = [exe, "--device", "cpu", "--train-data", train, "--seq-len", "16", "--steps", "1"]

# Case 1: the validation file has vocab_size 300 (its tokens would still be
# valid ids for a model of --vocab-size 384, so nothing else would stop it).
val300 = h5("val300.h5", rng.integers(0, 256, 4096), 300)
for launcher in ([], [mpiexec, "--oversubscribe", "-np", "2"]):
    rc, out, err = run(launcher + base + ["--vocab-size", "384", "--val-data", val300])
    expect_one_error(f"{'mpirun -np 2 ' if launcher else ''}--val-data of vocab_size 300", rc, out,
                     err, ["--val-data", val300, "300", "--train-data", train, "256"])

# Case 9: windows of seq_len + 1 = 17 tokens; files that are exactly one
# window, one shorter than a window between them, and one of two windows.
# With --batch-size 4 every window of the stream is read in one call.
files = [h5(f"shard_{i}.h5", rng.integers(0, 256, n), 256) for i, n in enumerate([17, 17, 5, 33])]
metrics = os.path.join(work, "boundary.jsonl")
if os.path.exists(metrics):
    os.remove(metrics)
rc, out, err = run([exe, "--device", "cpu", "--train-data", ",".join(files), "--seq-len", "16",
                    "--batch-size", "4", "--steps", "2", "--metrics", metrics])
steps = []
if os.path.exists(metrics):
    steps = [json.loads(l) for l in open(metrics) if '"loss"' in l]
expect("two files of one window each", rc == 0 and len(steps) == 2 and
       all(np.isfinite(s["loss"]) for s in steps),
       f"rc {rc}, {len(steps)} steps logged\n  stderr: {err.strip()}")

# Case 4: refused before any allocation the plan sizes: the numbers are in
# the message, and the process never held more than a few hundred MiB.
for flags, needles in [
    (["--d-model", "65536"], ["memory plan needs", "GiB per rank", "GiB free", "ranks on more nodes"]),
    (["--n-layer", "100000"], ["memory plan needs", "GiB per rank", "GiB free", "--recompute"]),
    (["--n-layer", "2000000000", "--d-model", "4096", "--n-head", "32", "--n-kv-head", "8"],
     ["--n-layer", "2000000000", "parameters"]),
]:
    rc, out, err, peak = run_measured(base + flags)
    expect_one_error(" ".join(flags), rc, out, err, needles)
    expect(" ".join(flags) + ": peak RSS", peak < 512 << 20, f"peak RSS {peak / 2**20:.0f} MiB")

rc, out, err = run([mpiexec, "--oversubscribe", "-np", "2"] + base + ["--n-layer", "100000"])
expect_one_error("mpirun -np 2 --n-layer 100000", rc, out, err,
                 ["memory plan needs", "for the 2 ranks that share this node's memory"])

for f in failures:
    print("FAIL:", f)
print(f"{checks - len(failures)} checks passed, {len(failures)} failed")
sys.exit(1 if failures else 0)
