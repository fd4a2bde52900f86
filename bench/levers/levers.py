#!/usr/bin/env python3
"""Issue 68's measure of a token-saving lever: each lever against the Muon
baseline, several seeds, several corpora, equal steps and equal time, on the CPU.

  levers.py run OUT --corpus NAME=TRAIN.h5,VAL.h5[,EVAL_BATCHES] ... \\
                    --lever NAME='FLAGS' ... [--seeds 1 2 3] [--steps N] \\
                    [--jobs 1] [-- COMMON FSDPTRAIN FLAGS]
  levers.py report OUT [--md FILE]

`run` trains fsdptrain once per (corpus, lever, seed): the common flags (the
model shape, batch, the Muon recipe: SHAPE below unless given after `--`),
with the lever's own flags replacing or joining them (every flag written as
`--flag VALUE`, so a lever such as `--lr 2e-2 --min-lr 2e-3` is a sweep
point). A corpus's EVAL_BATCHES are micro-batches of the common --batch-size:
a lever with a --batch-size of its own validates as many more (or fewer)
micro-batches, so every run is judged on the same windows. A lever may set its own `--steps`: one that trains on fewer tokens a
step early (`--batch-warmup-steps`) is then compared at equal tokens, its
"final" being its own last step's. The lever named `baseline` is always run, with no flags of its own. A seed sets both the initialisation and the data order, and
a lever run shares its seed's order and draws with the baseline's (only what
the lever changes differs), so each lever has a paired baseline. A run that
finished under the same command (its log's first line) is kept: a sweep
stopped halfway goes on where it was, and a run whose flags changed runs
again. Output: OUT/<corpus>/<lever>_s<seed>.jsonl and .log, and
OUT/sweep.json (the settings, for the report).

`report` prints, for each corpus and lever, over its seeds:
- equal steps: the mean final validation loss, its difference from the
  baseline's (negative: better), and each seed's difference from the baseline
  run of its seed (how consistent the effect is);
- equal time: the validation loss each run had reached when the baseline run
  of its seed had trained its whole time (train_s, evaluation excluded),
  interpolated linearly between validations; a run that ended sooner counts
  its final loss (it is not extrapolated);
- cost: the mean train_s against the baseline's;
- spread: the larger of the baseline's and the lever's range (max - min over
  seeds) of final loss; the verdict `wins` when the lever beats the baseline's
  mean by more than twice that spread at equal steps and at equal time on
  every corpus, `loses` when it is worse by as much at equal steps or at equal
  time on some corpus, else `within noise`
  (`one seed` when a sweep has no spread to judge by).
With --md the same as a Markdown table (docs/LEVERS.md takes it).
"""
import argparse
import json
import math
import os
import shlex
import statistics
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The CPU stand-in for gpt-350m's recipe: the same block (GQA 2:1, QK-norm,
# SwiGLU, RoPE, tied head) at 4 layers of 128, an 8192-token BPE, 16 x 128
# tokens a step, Muon at its best learning rate on this shape (docs/LEVERS.md,
# "Baseline"), cosine to lr/10.
SHAPE = ("--device cpu --model tiny --vocab-size 8192 --n-layer 4 --d-model 128 --n-head 4 "
         "--n-kv-head 2 --d-ff 352 --max-seq-len 128 --seq-len 128 --batch-size 16 "
         "--optimizer muon --lr 1e-2 --min-lr 1e-3 --warmup-steps 20 --eval-every 50 "
         "--log-every 50 --samples 0")


def fail(msg):
    sys.exit(f"levers: error: {msg}")


def parse_corpus(text):
    name, sep, rest = text.partition("=")
    parts = rest.split(",")
    if not sep or not name or len(parts) not in (2, 3):
        fail(f"--corpus {text!r}: expected NAME=TRAIN.h5,VAL.h5[,EVAL_BATCHES]")
    for p in parts[:2]:
        if not os.path.isfile(p):
            fail(f"--corpus {name}: no file {p}")
    if len(parts) == 3 and not parts[2].isdigit():
        fail(f"--corpus {name}: EVAL_BATCHES {parts[2]!r} is not a count (0: the whole split)")
    return name, {"train": os.path.abspath(parts[0]), "val": os.path.abspath(parts[1]),
                  "eval_batches": int(parts[2]) if len(parts) == 3 else 16}


def parse_lever(text):
    name, sep, flags = text.partition("=")
    if not sep or not name or name == "baseline" or "/" in name:
        fail(f"--lever {text!r}: expected NAME='FLAGS' (NAME not 'baseline')")
    return name, flags


def flag_pairs(flags, what):
    """`--flag VALUE ...` as an ordered dict, so a lever's flag replaces the same common one."""
    words = shlex.split(flags) if isinstance(flags, str) else list(flags)
    if len(words) % 2 or any(not w.startswith("--") for w in words[::2]):
        fail(f"{what}: {shlex.join(words)!r} is not a list of --flag VALUE pairs")
    return dict(zip(words[::2], words[1::2]))


def val_lines(path):
    """The validation records of a metrics file: (step, train_s, val_loss),
    each step once (the last step is validated by --eval-every and at the end)."""
    out, seen = [], set()
    if not os.path.exists(path):
        return out
    for line in open(path):
        r = json.loads(line)
        if "step" in r and "val_loss" in r and r["step"] not in seen:
            seen.add(r["step"])
            out.append((r["step"], r.get("train_s", math.nan), r["val_loss"]))
    return out


def run(a):
    corpora = dict(parse_corpus(c) for c in a.corpus)
    levers = {"baseline": ""}
    levers.update(parse_lever(x) for x in a.lever)
    common = flag_pairs(a.common if a.common else SHAPE, "common flags")
    for l, flags in levers.items():
        for c in corpora.values():  # found now, not after hours of runs
            eval_batches(flag_pairs(flags, f"--lever {l}"), common, c["eval_batches"], l)
    exe = os.environ.get("FSDPTRAIN", os.path.join(ROOT, "build/src/fsdptrain"))
    os.makedirs(a.out, exist_ok=True)
    sweep = {"corpora": corpora, "levers": levers, "seeds": a.seeds, "steps": a.steps,
             "common": shlex.join(w for kv in common.items() for w in kv), "fsdptrain": exe}
    json.dump(sweep, open(os.path.join(a.out, "sweep.json"), "w"), indent=1)
    jobs = [(c, l, s) for c in corpora for s in a.seeds for l in levers]

    def one(job):
        c, l, s = job
        d = os.path.join(a.out, c)
        os.makedirs(d, exist_ok=True)
        metrics, log = os.path.join(d, f"{l}_s{s}.jsonl"), os.path.join(d, f"{l}_s{s}.log")
        flags = {**common, "--train-data": corpora[c]["train"], "--val-data": corpora[c]["val"],
                 "--eval-batches": str(corpora[c]["eval_batches"]), "--steps": str(a.steps),
                 "--seed": str(s), "--metrics": metrics, **flag_pairs(levers[l], l)}
        if "--eval-batches" not in flag_pairs(levers[l], l):  # a lever's own is taken as it is
            flags["--eval-batches"] = str(eval_batches(flags, common, corpora[c]["eval_batches"], l))
        cmd = [exe, *(w for kv in flags.items() for w in kv)]
        header = "$ " + shlex.join(cmd) + "\n"
        # Kept only when it finished under this very command: a lever or a
        # common flag changed since runs again.
        steps = lever_steps(levers[l], a.steps)
        done = val_lines(metrics)
        if done and done[-1][0] == steps and os.path.exists(log) and open(log).readline() == header:
            return f"  {c} {l} seed {s}: kept (val {done[-1][2]:.4f})"
        if os.path.exists(metrics):
            os.remove(metrics)
        with open(log, "w") as f:
            f.write(header)
            f.flush()
            rc = subprocess.call(cmd, stdout=f, stderr=subprocess.STDOUT)
        v = val_lines(metrics)
        if rc != 0 or not v or v[-1][0] != steps:
            return f"  {c} {l} seed {s}: FAILED (exit {rc}; {log})"
        return f"  {c} {l} seed {s}: val {v[-1][2]:.4f}, {v[-1][1]:.1f} s"

    print(f"levers: {len(jobs)} runs ({len(corpora)} corpora x {len(levers)} levers x "
          f"{len(a.seeds)} seeds), {a.jobs} at a time, into {a.out}", flush=True)
    failed = 0
    with ThreadPoolExecutor(a.jobs) as pool:
        for line in pool.map(one, jobs):
            print(line, flush=True)
            failed += "FAILED" in line
    if failed:
        fail(f"{failed} runs failed")


def eval_batches(flags, common, n, lever):
    """The validation micro-batches that cover n of the common --batch-size's
    (0, the whole split, stays 0): the same windows for every lever."""
    mine, theirs = int(flags.get("--batch-size", common.get("--batch-size", "8"))), \
        int(common.get("--batch-size", "8"))
    if n == 0 or mine == theirs:
        return n
    if mine <= 0 or (n * theirs) % mine:
        fail(f"--lever {lever}: --batch-size {mine} does not divide the validation's "
             f"{n} x {theirs} sequences (a corpus's EVAL_BATCHES are of the common --batch-size)")
    return n * theirs // mine


def lever_steps(flags, steps):
    """The steps a lever's runs end at: its own --steps, or the sweep's."""
    return int(flag_pairs(flags, "lever").get("--steps", steps))


def loss_at(curve, t):
    """Validation loss reached after t training seconds: linear between the
    validations around t; the final loss when the run ended before t."""
    prev = None
    for step, ts, v in curve:
        if ts >= t:
            if prev is None or ts == prev[0]:
                return v
            return prev[1] + (v - prev[1]) * (t - prev[0]) / (ts - prev[0])
        prev = (ts, v)
    return curve[-1][2]


def spread(xs):
    return max(xs) - min(xs) if len(xs) > 1 else math.nan


def summarise(out):
    sweep = json.load(open(os.path.join(out, "sweep.json")))
    rows = []
    for c in sweep["corpora"]:
        curves = {}
        for l in sweep["levers"]:
            for s in sweep["seeds"]:
                v = val_lines(os.path.join(out, c, f"{l}_s{s}.jsonl"))
                if not v or v[-1][0] != lever_steps(sweep["levers"][l], sweep["steps"]):
                    fail(f"{out}/{c}/{l}_s{s}.jsonl is missing or unfinished (run `levers.py run` again)")
                curves[l, s] = v
        seeds = sweep["seeds"]
        base_final = [curves["baseline", s][-1][2] for s in seeds]
        base_time = [curves["baseline", s][-1][1] for s in seeds]
        for l in sweep["levers"]:
            final = [curves[l, s][-1][2] for s in seeds]
            timed = [loss_at(curves[l, s], curves["baseline", s][-1][1]) for s in seeds]
            rows.append({
                "corpus": c, "lever": l, "final": statistics.mean(final),
                "d_steps": statistics.mean(final) - statistics.mean(base_final),
                "per_seed": [f - b for f, b in zip(final, base_final)],
                "d_time": statistics.mean(timed) - statistics.mean(base_final),
                "spread": max(spread(final), spread(base_final)),
                "cost": statistics.mean(curves[l, s][-1][1] for s in seeds) / statistics.mean(base_time),
            })
    for r in rows:
        bar = 2 * r["spread"]
        r["verdict_one"] = ("one seed" if math.isnan(bar) else
                            "wins" if r["d_steps"] < -bar and r["d_time"] < -bar else
                            "loses" if r["d_steps"] > bar or r["d_time"] > bar else "within noise")
    for r in rows:  # a lever wins only where it wins on every corpus
        mine = [x["verdict_one"] for x in rows if x["lever"] == r["lever"]]
        r["verdict"] = ("baseline" if r["lever"] == "baseline" else
                        "one seed" if "one seed" in mine else
                        "wins" if all(v == "wins" for v in mine) else
                        "loses" if "loses" in mine else "within noise")
    return sweep, rows


def report(a):
    sweep, rows = summarise(a.out)
    head = ("corpus", "lever", "final val", "d steps", "per seed", "d time", "spread", "cost",
            "verdict")
    fmt = lambda r: (r["corpus"], r["lever"], f"{r['final']:.4f}", f"{r['d_steps']:+.4f}",
                     " ".join(f"{d:+.3f}" for d in r["per_seed"]), f"{r['d_time']:+.4f}",
                     f"{r['spread']:.4f}", f"{r['cost']:.3f}x",
                     r["verdict"] if r["lever"] != "baseline" else "")
    widths = [max(len(h), *(len(fmt(r)[i]) for r in rows)) for i, h in enumerate(head)]
    print(f"{sweep['steps']} steps, seeds {' '.join(map(str, sweep['seeds']))}; common flags: "
          f"{sweep['common']}")
    print("  ".join(h.ljust(w) for h, w in zip(head, widths)))
    for r in rows:
        print("  ".join(x.ljust(w) for x, w in zip(fmt(r), widths)))
    for l, flags in sweep["levers"].items():
        if l != "baseline":
            print(f"{l}: {flags}")
    if a.md:
        with open(a.md, "w") as f:
            f.write("| " + " | ".join(head) + " |\n|" + "---|" * len(head) + "\n")
            for r in rows:
                f.write("| " + " | ".join(fmt(r)) + " |\n")
        print(f"levers: wrote {a.md}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="what", required=True)
    r = sub.add_parser("run")
    r.add_argument("out")
    r.add_argument("--corpus", action="append", required=True)
    r.add_argument("--lever", action="append", default=[])
    r.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    r.add_argument("--steps", type=int, default=300)
    r.add_argument("--jobs", type=int, default=1)
    p = sub.add_parser("report")
    p.add_argument("out")
    p.add_argument("--md")
    argv = sys.argv[1:] if argv is None else list(argv)
    common = argv[argv.index("--") + 1:] if "--" in argv else []
    a = ap.parse_args(argv[:len(argv) - len(common) - (1 if "--" in argv else 0)])
    a.common = common
    if a.what == "run":
        run(a)
    else:
        report(a)


if __name__ == "__main__":
    main()
