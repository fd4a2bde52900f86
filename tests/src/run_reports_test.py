#!/usr/bin/env python3
"""What a run tells its user, and what it keeps (issue 31's papercuts 2-4):
- --metrics: a fresh run starts the file anew (it once appended to another
  run's lines), a resumed run appends, a run that fails first leaves it as it was;
- a resume on another rank count says that the global batch changed and which
  flag keeps it, and a changed --lr or --steps is named;
- --samples above --batch-size prints every sample asked for (it was cut
  silently to the batch size)."""
import json
import os
import shutil
import subprocess
import sys

exe, example, work = sys.argv[1:4]
mpiexec = os.environ.get("MPIEXEC", "mpirun")
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
failures = []


def run(ranks, *extra, expect_rc=0):
    cmd = ([mpiexec, "--oversubscribe", "-np", str(ranks)] if ranks > 1 else []) + [
        exe, "--device", "cpu", "--model", "tiny", "--seq-len", "32", "--log-every", "1",
        "--train-data", os.path.join(example, "kjv_train.h5"), *extra]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if r.returncode != expect_rc:
        failures.append(f"{' '.join(cmd)} exited {r.returncode}, not {expect_rc}: {r.stderr.strip()}")
    return r


def check(cond, what, detail=""):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what + (f"\n  {detail}" if detail else ""))


def steps_logged(path):
    return [json.loads(l)["step"] for l in open(path) if '"loss"' in l]


# --metrics on a fresh start, after another run wrote the same file.
m = os.path.join(work, "m.jsonl")
run(1, "--steps", "3", "--metrics", m)
first = open(m).read()
r = run(1, "--steps", "2", "--metrics", m)
check(steps_logged(m) == [1, 2], "a fresh run starts --metrics anew", f"steps {steps_logged(m)}")
check("starts it anew" in r.stdout, "and says so in one line", r.stdout[:2000])

# A run that fails after opening the file changes nothing in it.
ck = os.path.join(work, "ck")
run(2, "--batch-size", "2", "--steps", "10", "--checkpoint-dir", ck, "--checkpoint-every", "2",
    "--stop-at-step", "2", "--metrics", os.path.join(work, "ck.jsonl"))
before = open(m).read()
r = run(1, "--steps", "2", "--metrics", m, "--checkpoint-dir", ck, expect_rc=1)
check(open(m).read() == before, "a run refused at set-up leaves --metrics as it was", r.stderr)

# Resumed on 4 ranks instead of 2, same --batch-size, a new --lr and --steps.
r = run(4, "--batch-size", "2", "--steps", "12", "--lr", "0.002", "--checkpoint-dir", ck,
        "--checkpoint-every", "2", "--resume", "auto", "--metrics", os.path.join(work, "ck.jsonl"))
warn = [l for l in r.stderr.splitlines() if "global batch" in l]
check(len(warn) == 1 and "from 4 to 8" in warn[0] and "--batch-size 1 keeps 4" in warn[0],
      "a resume on more ranks names the global batch change and the flag that keeps it",
      r.stderr)
changed = [l for l in r.stdout.splitlines() if "settings changed" in l]
check(len(changed) == 1 and "--lr 0.001 -> 0.002" in changed[0] and "--steps 10 -> 12" in changed[0]
      and "--batch-size" not in changed[0],
      "a resume names the settings that changed, and only those", "\n".join(changed) or r.stdout[:2000])
check(steps_logged(os.path.join(work, "ck.jsonl")) == list(range(1, 13)),
      "a resumed run appends to --metrics", str(steps_logged(os.path.join(work, "ck.jsonl"))))

# The same ranks and settings: nothing to report.
run(2, "--batch-size", "2", "--steps", "10", "--checkpoint-dir", os.path.join(work, "ck2"),
    "--checkpoint-every", "2", "--stop-at-step", "2")
r = run(2, "--batch-size", "2", "--steps", "10", "--checkpoint-dir", os.path.join(work, "ck2"),
        "--checkpoint-every", "2", "--resume", "auto")
check("settings changed" not in r.stdout and "global batch changes" not in r.stderr,
      "an unchanged resume reports no change", r.stdout[:2000] + r.stderr)

# Five samples from a micro-batch of two.
sm = os.path.join(work, "samples.jsonl")
r = run(1, "--batch-size", "2", "--steps", "1", "--samples", "5", "--sample-length", "8",
        "--metrics", sm)
shown = [l for l in r.stdout.splitlines() if l.startswith("--- sample ")]
texts = [json.loads(l)["sample"] for l in open(sm) if '"sample"' in l]
check(shown == [f"--- sample {i} ---" for i in range(1, 6)] and texts == [1, 2, 3, 4, 5],
      "--samples 5 with --batch-size 2 prints and records five samples", "\n".join(shown))

if failures:
    print("\n".join(failures), file=sys.stderr)
    sys.exit(1)
