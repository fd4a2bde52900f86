#!/usr/bin/env python3
"""bench/optim/muon_report.py: the table and the steps Muon needs to reach
AdamW's best final loss, on metrics files made here with known curves."""
import json
import os
import subprocess
import sys
import tempfile

tool = sys.argv[1]
d = tempfile.mkdtemp()


def write(name, curve):
    with open(os.path.join(d, name), "w") as f:
        for step, loss in curve:
            f.write(json.dumps({"step": step, "loss": loss + 0.1, "elapsed_s": step / 10}) + "\n")
            f.write(json.dumps({"step": step, "val_loss": loss, "train_s": step / 10}) + "\n")


write("adamw_lr1e-3.jsonl", [(100, 3.0), (200, 2.5), (300, 2.2)])
write("adamw_lr3e-3.jsonl", [(100, 2.9), (200, 2.4), (300, 2.1)])  # AdamW's best: 2.1
write("muon_lr1e-2.jsonl", [(100, 2.6), (200, 2.05), (300, 1.9)])  # passes 2.1 at step 200
write("muon_lr3e-2.jsonl", [(100, 2.8), (200, 2.5), (300, 2.3)])
r = subprocess.run([sys.executable, tool] + [os.path.join(d, n) for n in sorted(os.listdir(d))],
                   capture_output=True, text=True)
out = r.stdout
failed = []
for want in ("best adamw: adamw_lr3e-3, final val 2.1000", "best muon: muon_lr1e-2, final val 1.9000",
             "at step 200 (20.0 s): 0.67 of AdamW's 300 steps, 1.50x fewer tokens"):
    if want not in out:
        failed.append(want)
if r.returncode != 0:
    failed.append(f"exit {r.returncode}: {r.stderr}")
# A Muon that never gets there says so.
os.remove(os.path.join(d, "muon_lr1e-2.jsonl"))
r = subprocess.run([sys.executable, tool] + [os.path.join(d, n) for n in sorted(os.listdir(d))],
                   capture_output=True, text=True)
if "never reaches AdamW's best final val 2.1000" not in r.stdout:
    failed.append("no 'never reaches' line for a Muon that does not get there")
# A file not named <optimizer>_lr<LR>.jsonl is refused by name.
bad = os.path.join(d, "run.jsonl")
open(bad, "w").write("")
r = subprocess.run([sys.executable, tool, bad], capture_output=True, text=True)
if r.returncode == 0 or "run.jsonl" not in r.stderr:
    failed.append("a badly named file was not refused by name")
for f in failed:
    print("FAIL:", f)
print(out)
sys.exit(1 if failed else 0)
