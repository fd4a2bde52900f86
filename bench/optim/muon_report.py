#!/usr/bin/env python3
"""Table and picture of bench/optim/muon_vs_adamw.sh's runs.

  muon_report.py RUN.jsonl [RUN.jsonl ...] [--png FILE]

Each RUN is an fsdptrain --metrics file named <optimizer>_lr<lr>.jsonl. The
table gives, per run, its final and best validation loss and its training
seconds (the validation lines' train_s: evaluation excluded). Below it: the
best final loss of each optimizer over its learning rates and, for the best
Muon run, the first validated step at which its loss is at or below AdamW's
best final loss (the resolution is the validation interval), as a fraction of
AdamW's steps: the tokens Muon needs for AdamW's result. The PNG shows
validation loss against step and against training seconds.
"""
import argparse
import json
import math
import os
import re
import sys


def load(path):
    m = re.match(r"(adamw|muon)_lr(.+)\.jsonl$", os.path.basename(path))
    if not m:
        sys.exit(f"muon_report: error: {path} is not named <adamw|muon>_lr<LR>.jsonl")
    vals = [json.loads(l) for l in open(path) if '"val_loss"' in l]
    if not vals:
        sys.exit(f"muon_report: error: {path} has no validation lines")
    curve, seen = [], set()
    for v in vals:  # the last step may be validated twice (every N and at the end)
        if v["step"] not in seen:
            seen.add(v["step"])
            curve.append((v["step"], v.get("train_s", math.nan), v["val_loss"]))
    return {"opt": m.group(1), "lr": float(m.group(2)), "name": os.path.basename(path)[:-6], "curve": curve}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--png")
    a = ap.parse_args()
    runs = sorted((load(p) for p in a.runs), key=lambda r: (r["opt"], r["lr"]))
    print(f"{'run':<18} {'steps':>6} {'train_s':>8} {'final val':>10} {'best val':>9}")
    for r in runs:
        s, t, v = r["curve"][-1]
        print(f"{r['name']:<18} {s:>6} {t:>8.1f} {v:>10.4f} {min(c[2] for c in r['curve']):>9.4f}")
    best = {}
    for o in ("adamw", "muon"):
        mine = [r for r in runs if r["opt"] == o]
        if mine:
            best[o] = min(mine, key=lambda r: r["curve"][-1][2])
            print(f"best {o}: {best[o]['name']}, final val {best[o]['curve'][-1][2]:.4f}")
    if len(best) == 2:
        target, steps = best["adamw"]["curve"][-1][2], best["adamw"]["curve"][-1][0]
        reach = next((c for c in best["muon"]["curve"] if c[2] <= target), None)
        if reach:
            print(f"Muon ({best['muon']['name']}) reaches AdamW's best final val {target:.4f} at step {reach[0]} "
                  f"({reach[1]:.1f} s): {reach[0] / steps:.2f} of AdamW's {steps} steps, "
                  f"{steps / reach[0]:.2f}x fewer tokens")
        else:
            print(f"Muon ({best['muon']['name']}) never reaches AdamW's best final val {target:.4f}")
    if a.png:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
        colors = {"adamw": plt.cm.Blues, "muon": plt.cm.Oranges}
        for o in ("adamw", "muon"):
            mine = [r for r in runs if r["opt"] == o]
            for i, r in enumerate(mine):
                c = colors[o](0.4 + 0.6 * (i + 1) / len(mine))
                for ax, x in zip(axes, (0, 1)):
                    ax.plot([p[x] for p in r["curve"]], [p[2] for p in r["curve"]], color=c,
                            label=f"{o} lr {r['lr']:g}", lw=1.6 if r is best.get(o) else 1.0)
        lo = min(min(p[2] for p in r["curve"]) for r in runs)
        for ax, label in zip(axes, ("step", "training seconds (evaluation excluded)")):
            ax.set_xlabel(label)
            ax.set_ylim(lo - 0.05, lo + 1.0)
            ax.grid(alpha=0.3)
        axes[0].set_ylabel("validation loss")
        axes[0].legend(fontsize=8, ncol=2)
        fig.suptitle("AdamW vs Muon, `tiny` on the built-in corpus (CPU)")
        fig.tight_layout()
        fig.savefig(a.png, dpi=110)
        print(f"muon_report: wrote {a.png}")


if __name__ == "__main__":
    main()
