#!/usr/bin/env python3
"""How far healthy runs' step losses rise above their recent median: the
number --spike-factor (src/policy/divergence.h) must stay clear of.

  bench/spike_ratio.py METRICS.jsonl [...] [--windows 16,32,64]

For each --metrics file and window W, prints the largest ratio of a step's
loss to the median of the W applied steps before it (the test fsdptrain
makes), and the step where it occurred. Diverged steps are left out."""
import argparse
import json
import statistics

ap = argparse.ArgumentParser()
ap.add_argument("files", nargs="+")
ap.add_argument("--windows", default="16,32,64")
args = ap.parse_args()
for path in args.files:
    losses = []
    for line in open(path):
        r = json.loads(line) if line.strip() else {}
        if r.get("loss") is not None and not r.get("diverged"):
            losses.append((r["step"], r["loss"]))
    for w in (int(x) for x in args.windows.split(",")):
        worst, at = 0.0, None
        for i in range(w, len(losses)):
            ratio = losses[i][1] / statistics.median(l for _, l in losses[i - w:i])
            if ratio > worst:
                worst, at = ratio, losses[i][0]
        print(f"RESULT {path} steps {len(losses)} window {w}: max loss/median {worst:.3f} at step {at}")
