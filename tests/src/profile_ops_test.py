#!/usr/bin/env python3
"""The measuring flags of issue 12 leave the training itself alone:

- `--profile-ops` prints one table at the end (the rows every step of
  a transformer must have, with ms and a rate) and trains to the same losses,
  bit for bit, as the run without it (the CPU is deterministic);
- `--single-rank-direct false` keeps FSDP's gather and reduce-scatter on one
  rank: its memory plan shows the buffers the in-place path does without, and
  with one micro-batch a step the same sums in the same order give the same
  losses bit for bit."""
import json
import os
import re
import subprocess
import sys

exe, example, workdir = sys.argv[1:4]
os.makedirs(workdir, exist_ok=True)
data = os.path.join(example, "kjv_train.h5")
failures = []


def train(name, *extra):
    metrics = os.path.join(workdir, name + ".jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    cmd = [exe, "--device", "cpu", "--model", "tiny", "--train-data", data, "--seq-len", "64",
           "--batch-size", "4", "--steps", "6", "--log-every", "1", "--metrics", metrics, *extra]
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {run.returncode}: {run.stderr}")
    losses = [json.loads(l)["loss"] for l in open(metrics) if '"loss"' in l]
    return run.stdout, losses


plain_out, plain = train("plain")
prof_out, prof = train("profiled", "--profile-ops")
if prof != plain:
    failures.append(f"--profile-ops changed the losses: {prof} vs {plain}")
if "op profile" in plain_out:
    failures.append("a table without --profile-ops")
head = re.search(r"^op profile \(cpu, (\d+) steps\): ([0-9.]+) ms per step", prof_out, re.M)
if not head:
    failures.append("no 'op profile' header line")
else:
    if int(head.group(1)) != 5:  # steps 2..6: the first is left out
        failures.append(f"the table covers {head.group(1)} steps, not the 5 after the first")
    if not float(head.group(2)) > 0:
        failures.append("zero time in ops")
rows = re.findall(r"^\s+([0-9.]+)\s+([0-9.]+)%\s+([0-9.]+)\s+(?:[0-9.]+ (?:TFLOP|GB)/s)?\s+(\S+)",
                  prof_out, re.M)
ops = {r[3] for r in rows}
for op in ("linear", "linear_backward", "attention", "attention_backward", "norm_rope",
           "rmsnorm", "adamw", "cross_entropy+grad"):
    if op not in ops:
        failures.append(f"no row for {op} (rows: {sorted(ops)})")
share = sum(float(r[1]) for r in rows)
if rows and abs(share - 100) > 1:
    failures.append(f"shares add up to {share:.1f}%, not 100%")

direct_plan = re.search(r"gather buffers ([0-9.]+) \+ grad buffers ([0-9.]+)", plain_out)
coll_out, coll = train("collective", "--single-rank-direct", "false")
coll_plan = re.search(r"gather buffers ([0-9.]+) \+ grad buffers ([0-9.]+)", coll_out)
if not direct_plan or not coll_plan:
    failures.append("no memory plan line")
else:
    if float(direct_plan.group(1)) != 0 or float(direct_plan.group(2)) != 0:
        failures.append(f"one rank in place plans buffers: {direct_plan.group(0)}")
    if not float(coll_plan.group(1)) > 0:
        failures.append(f"--single-rank-direct false plans no gather buffers: {coll_plan.group(0)}")
if coll != plain:
    failures.append(f"--single-rank-direct false changed the losses: {coll} vs {plain}")

if failures:
    sys.exit("FAIL: " + "; ".join(failures))
print("3 runs: same losses with --profile-ops and --single-rank-direct false; table rows "
      f"{len(rows)}; 1 passed, 0 failed")
