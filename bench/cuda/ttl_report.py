#!/usr/bin/env python3
"""Time-to-loss report: validation loss against training seconds, per system.

  ttl_report.py RUN.jsonl [RUN.jsonl ...] --ref torch_compile --device NAME
                [--model gpt-350m] [--expected-steps SYS=N,...] [--png docs/time_to_loss.png]
                [--tokens-per-step 16384]

Each RUN is a --metrics file of bench/cuda/ttl_run.sh, named
ttl_<system>.jsonl (ttl_torch_compile, ttl_fsdptrain_bf16, ttl_fsdptrain_bf16_muon,
ttl_torchtitan_bf16, ttl_torchtitan_fp8_rowwise, ...). For each one line, in
issue 30's format:

  TTL system=fsdptrain precision=bf16 optimizer=adamw model=gpt-350m train_s=112.9
      val_loss=2.7679 reach_ref_s=61.2 tokens_per_s=145123 device=NVIDIA H100 80GB HBM3

train_s is the training seconds at the last validation; reach_ref_s the
training seconds at the first validation whose loss is at or below the
reference's final one (nan if never; the resolution is the validation
interval); tokens_per_s the steps to the last validation times
--tokens-per-step over train_s. The reference is a run (--ref torch_compile)
or a system's best run, the one with the lowest final loss (--ref
best:torchtitan, issue 63). A reference run that stopped before its last
step (cut by a time limit) has no final loss: its last validation stands in
and the line says complete=false.

Training seconds come from the validation lines' train_s. Metrics from an
fsdptrain without that field (before 40176ba) are timed from the step lines:
the host's elapsed_s between consecutive steps, and for a step that follows
an evaluation (or the first, which follows the warm-up) its device time
(tokens / tokens_per_s), since its elapsed_s also holds the evaluation.
"""
import argparse
import json
import math
import os
import sys


def load(path):
    lines = [json.loads(l) for l in open(path) if l.strip()]
    steps = {l["step"]: l for l in lines if "loss" in l}
    vals = [l for l in lines if "val_loss" in l]
    if not vals:
        sys.exit(f"ttl_report: error: {path} has no validation lines")
    if all("train_s" in v for v in vals):
        curve = [(v["train_s"], v["val_loss"], v["step"]) for v in vals]
    else:  # older fsdptrain: rebuild the clock from the step lines
        clock, t = {0: 0.0}, 0.0
        evals = {v["step"] for v in vals}
        for n in sorted(steps):
            s, prev = steps[n], steps.get(n - 1)
            if prev is None or (n - 1) in evals:
                tokens = s["tokens_seen"] - (prev["tokens_seen"] if prev else 0)
                t += tokens / s["tokens_per_s"]
            else:
                t += s["elapsed_s"] - prev["elapsed_s"]
            clock[n] = t
        curve = [(clock[v["step"]], v["val_loss"], v["step"]) for v in vals]
    # a run's metrics may repeat its last evaluation (final step == eval step)
    seen, out = set(), []
    for c in curve:
        if c[2] not in seen:
            seen.add(c[2])
            out.append(c)
    last_step = max(steps) if steps else 0
    return out, last_step


def system_of(path):
    name = os.path.basename(path)
    name = name[len("ttl_"):] if name.startswith("ttl_") else name
    return name[:-len(".jsonl")] if name.endswith(".jsonl") else name


def describe(sys_name):
    """(system, precision, optimizer) of a run's name: torch_compile (bf16, AdamW),
    torchtitan_<precision> (AdamW; fp8_tensorwise, fp8_rowwise), fsdptrain_<precision>
    (AdamW) or fsdptrain_<precision>_muon."""
    if sys_name.startswith("torchtitan_"):
        return "torchtitan", sys_name[len("torchtitan_"):], "adamw"
    if sys_name.startswith("torch"):
        return "torch_compile", "bf16", "adamw"
    parts = sys_name.split("_")
    if parts[-1] == "muon":
        return "fsdptrain", parts[-2], "muon"
    return "fsdptrain", parts[-1], "adamw"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--ref", default="torch_compile",
                    help="the reference run (default torch_compile), or best:SYSTEM for that system's run "
                    "with the lowest final loss")
    ap.add_argument("--tokens-per-step", type=int, default=16 * 1024, help="global batch x sequence length")
    ap.add_argument("--device", required=True, help="nvidia-smi's name of the GPU")
    ap.add_argument("--model", default="gpt-350m")
    ap.add_argument("--expected-steps", default="", metavar="SYS=N,...",
                    help="each system's --steps: a run whose last step is short of it is incomplete")
    ap.add_argument("--png", help="write the curves here")
    a = ap.parse_args()
    expected = dict(kv.split("=") for kv in a.expected_steps.split(",") if kv)
    runs = {system_of(p): load(p) for p in a.runs}
    ref = a.ref
    if ref.startswith("best:"):
        mine = [n for n in runs if describe(n)[0] == ref[len("best:"):]]
        if not mine:
            sys.exit(f"ttl_report: error: no run of system '{ref[len('best:'):]}' among the runs for --ref {ref}")
        ref = min(mine, key=lambda n: runs[n][0][-1][1])
        print(f"ttl_report: reference {ref} (the lowest final loss of {', '.join(sorted(mine))})")
    if ref not in runs:
        sys.exit(f"ttl_report: error: no ttl_{ref}.jsonl among the runs")
    ref_curve, ref_last = runs[ref]
    ref_loss = ref_curve[-1][1]
    for sys_name, (curve, last_step) in runs.items():
        complete = not (sys_name in expected and last_step < int(expected[sys_name]))
        reach = next((t for t, v, _ in curve if v <= ref_loss), float("nan"))
        system, precision, optimizer = describe(sys_name)
        train_s, val, step = curve[-1]
        tok_s = f"{step * a.tokens_per_step / train_s:.0f}" if train_s > 0 else "nan"
        print(f"TTL system={system} precision={precision} optimizer={optimizer} model={a.model} "
              f"train_s={train_s:.1f} val_loss={val:.4f} reach_ref_s="
              f"{'nan' if math.isnan(reach) else f'{reach:.1f}'} tokens_per_s={tok_s}"
              f"{'' if complete else ' complete=false'} device={a.device}")
    if a.png:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
        for sys_name, (curve, last_step) in runs.items():
            label = sys_name
            if sys_name in expected and last_step < int(expected[sys_name]):
                label += f" (cut at step {last_step} of {expected[sys_name]})"
            ax.plot([c[0] for c in curve], [c[1] for c in curve], marker="o", ms=3, label=label)
        ax.axhline(ref_loss, color="grey", lw=0.8, ls=":", label=f"{ref}'s last: {ref_loss:.3f}")
        ax.set_xlabel("training seconds (warm-up, compilation and evaluation excluded)")
        ax.set_ylabel("validation loss")
        ax.set_ylim(top=min(6.0, max(c[1] for r in runs.values() for c in r[0])))
        ax.set_title(f"{a.model}, one {a.device}", fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(a.png)
        print(f"ttl_report: wrote {a.png}")


if __name__ == "__main__":
    main()
