#!/usr/bin/env python3
"""bench/levers/levers.py (issue 68's lever sweep): a real sweep of fsdptrain
runs at tiny scale (the lever's flags reach fsdptrain, a lever's flag replaces
the common one, a stopped sweep keeps its finished runs), then the report on
metrics files written here with hand-worked numbers (equal steps, paired,
equal time interpolated between validations, spread, every verdict), and the
one-line errors.

  test_levers.py LEVERS.py FSDPTRAIN EXAMPLE_DIR
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

tool, exe, example = sys.argv[1:4]
work = tempfile.mkdtemp(prefix="levers_test.")
failed = []


def check(ok, what):
    if not ok:
        failed.append(what)
        print("FAIL:", what, flush=True)


def levers(*args, env=None):
    return subprocess.run([sys.executable, tool, *args], capture_output=True, text=True,
                          env={**os.environ, "FSDPTRAIN": exe, **(env or {})})


def vals(path):
    return [json.loads(l) for l in open(path) if '"val_loss"' in l]


# 1. A real sweep: the built-in corpus twice (two names, so the corpus loop
# runs), two seeds, a lever that changes the model and one that replaces a
# common flag.
train, val = os.path.join(example, "kjv_train.h5"), os.path.join(example, "kjv_val.h5")
common = ["--device", "cpu", "--model", "tiny", "--seq-len", "64", "--batch-size", "4",
          "--optimizer", "muon", "--lr", "3e-3", "--warmup-steps", "2", "--eval-every", "5",
          "--log-every", "5", "--samples", "0"]
out = os.path.join(work, "sweep")
args = ["run", out, "--corpus", f"kjv={train},{val},2", "--corpus", f"kjv2={train},{val},2",
        "--lever", "zero=--zero-init-out true", "--lever", "hot=--lr 1e-2", "--seeds", "1", "2",
        "--steps", "10", "--", *common]
r = levers(*args)
check(r.returncode == 0, f"the sweep failed: {r.stdout}{r.stderr}")
if r.returncode == 0:
    check(len(re.findall(r": val \d", r.stdout)) == 12, f"not 12 runs trained: {r.stdout}")
    cmd = lambda c, l, s: open(os.path.join(out, c, f"{l}_s{s}.log")).readline()
    check(cmd("kjv", "hot", 1).count("--lr ") == 1 and "--lr 1e-2" in cmd("kjv", "hot", 1),
          f"the lever's --lr did not replace the common one: {cmd('kjv', 'hot', 1)}")
    check("--zero-init-out true" in cmd("kjv", "zero", 2) and "--seed 2" in cmd("kjv", "zero", 2),
          "the lever's flag or the seed did not reach fsdptrain")
    check("--eval-batches 2" in cmd("kjv2", "baseline", 1), "the corpus's eval batches were not used")
    # The lever took effect: zeroed output projections give another model at
    # step 0 for the same seed; the baseline and the lr lever start equal.
    v0 = lambda l, s: vals(os.path.join(out, "kjv", f"{l}_s{s}.jsonl"))[0]["val_loss"]
    check(v0("zero", 1) != v0("baseline", 1), "--zero-init-out left the initial model as it was")
    check(v0("hot", 1) == v0("baseline", 1), "an lr lever changed the initial model")
    check(v0("baseline", 1) != v0("baseline", 2), "the seed did not change the initial model")
    # Run again: every finished run is kept, none trained anew.
    os.remove(os.path.join(out, "kjv2", "hot_s2.jsonl"))
    r = levers(*args)
    check(r.returncode == 0 and r.stdout.count(": kept") == 11 and r.stdout.count(": val ") == 1,
          f"a second run did not keep the 11 finished runs and redo the missing one: {r.stdout}")
    # A lever whose flags changed runs again, under its new flags; the rest are kept.
    args[args.index("hot=--lr 1e-2")] = "hot=--lr 2e-2"
    r = levers(*args)
    check(r.returncode == 0 and r.stdout.count(": kept") == 8 and r.stdout.count(": val ") == 4
          and "--lr 2e-2" in cmd("kjv", "hot", 1),
          f"a second run with the lever changed did not redo its 4 runs alone: {r.stdout}")
    r = levers("report", out)
    check(r.returncode == 0 and re.search(r"^kjv2 +zero ", r.stdout, re.M),
          f"the report of a real sweep failed: {r.stdout}{r.stderr}")

# A lever with its own --steps (equal tokens for a batch warm-up) ends there,
# is kept there on a second run, and is reported at its own last step.
own = os.path.join(work, "own_steps")
args = ["run", own, "--corpus", f"kjv={train},{val},2", "--lever", "long=--steps 12", "--seeds",
        "1", "--steps", "10", "--", *common]
r = levers(*args)
check(r.returncode == 0 and r.stdout.count(": val ") == 2,
      f"a lever with its own --steps did not finish: {r.stdout}{r.stderr}")
if r.returncode == 0:
    check(vals(os.path.join(own, "kjv", "long_s1.jsonl"))[-1]["step"] == 12,
          "the lever's --steps did not reach fsdptrain")
    r = levers(*args)
    check(r.returncode == 0 and r.stdout.count(": kept") == 2,
          f"a second run did not keep a lever that ended at its own --steps: {r.stdout}")
    r = levers("report", own)
    final = vals(os.path.join(own, "kjv", "long_s1.jsonl"))[-1]["val_loss"]
    check(r.returncode == 0 and re.search(rf"^kjv +long +{final:.4f} ", r.stdout, re.M),
          f"the report did not take the lever's step 12: {final:.4f} in {r.stdout}{r.stderr}")

# A lever with a --batch-size of its own validates the same windows: the
# corpus's 2 micro-batches of 4 are 4 of 2 (the whole split, 0, stays 0).
small = os.path.join(work, "small_batch")
r = levers("run", small, "--corpus", f"kjv={train},{val},2", "--corpus", f"all={train},{val},0",
           "--lever", "half=--batch-size 2 --grad-accum 2", "--seeds", "1", "--steps", "5", "--",
           *common)
check(r.returncode == 0, f"a lever with its own --batch-size failed: {r.stdout}{r.stderr}")
if r.returncode == 0:
    line = lambda c, l: open(os.path.join(small, c, f"{l}_s1.log")).readline()
    check("--eval-batches 4 " in line("kjv", "half") and "--eval-batches 2 " in line("kjv", "baseline")
          and "--eval-batches 0 " in line("all", "half"),
          f"the validation's micro-batches were not scaled: {line('kjv', 'half')}")
    v = lambda l: vals(os.path.join(small, "kjv", f"{l}_s1.jsonl"))[0]["val_loss"]
    check(abs(v("half") - v("baseline")) <= 1e-5 * v("baseline"),
          f"the same initial model on the same windows validated differently: {v('half')} vs "
          f"{v('baseline')}")
r = levers("run", small, "--corpus", f"kjv={train},{val},2", "--lever", "odd=--batch-size 3",
           "--seeds", "1", "--steps", "5", "--", *common)
check(r.returncode != 0 and r.stderr.startswith("levers: error: --lever odd: --batch-size 3")
      and r.stderr.count("\n") == 1, f"an undividable batch was not one error line: {r.stderr}")

# 2. The report's arithmetic, on curves written here. Baseline: finals 2.00
# and 2.02 (spread 0.02), 10 s. `fast` ends at 1.80 and 1.83 (spread 0.03, so
# the bar is 0.06) in 8 s: wins at equal steps and at equal time (its final
# counts, never extrapolated). `slow` ends the same but takes 12 s: at 10 s
# it is at 2.8 + (1.8 - 2.8) * 4/6 and 2.9 + (1.83 - 2.9) * 4/6, mean 2.16,
# +0.15: loses. `noise`: 2.00 and 2.03, within noise. `one` wins on corpus a
# only: within noise overall.
rep = os.path.join(work, "report")
curves = {
    "baseline": [[(50, 5, 3.0), (100, 10, 2.00)], [(50, 5, 3.1), (100, 10, 2.02)]],
    "fast": [[(50, 4, 2.8), (100, 8, 1.80)], [(50, 4, 2.9), (100, 8, 1.83)]],
    "slow": [[(50, 6, 2.8), (100, 12, 1.80)], [(50, 6, 2.9), (100, 12, 1.83)]],
    "noise": [[(50, 5, 3.0), (100, 10, 2.00)], [(50, 5, 3.1), (100, 10, 2.03)]],
}
curves_b = dict(curves, one=curves["noise"])
curves["one"] = curves["fast"]
for corpus, cs in (("a", curves), ("b", curves_b)):
    os.makedirs(os.path.join(rep, corpus))
    for lever, per_seed in cs.items():
        for seed, curve in zip((1, 2), per_seed):
            with open(os.path.join(rep, corpus, f"{lever}_s{seed}.jsonl"), "w") as f:
                f.write(json.dumps({"run_start_unix_s": 1, "config": {}}) + "\n")  # no step: skipped
                f.write(json.dumps({"step": 0, "val_loss": 9.0, "train_s": 0}) + "\n")
                for step, t, v in curve:
                    f.write(json.dumps({"step": step, "loss": v + 0.1, "lr": 1e-2}) + "\n")
                    f.write(json.dumps({"step": step, "val_loss": v, "train_s": t}) + "\n")
                f.write(json.dumps({"step": 100, "val_loss": curve[-1][2], "train_s": curve[-1][1]}) + "\n")
json.dump({"corpora": {"a": {}, "b": {}}, "levers": {l: f"--{l} x" for l in curves}, "seeds": [1, 2],
           "steps": 100, "common": "--device cpu", "fsdptrain": exe},
          open(os.path.join(rep, "sweep.json"), "w"))
md = os.path.join(work, "table.md")
r = levers("report", rep, "--md", md)
check(r.returncode == 0, f"report failed: {r.stdout}{r.stderr}")
if r.returncode == 0:
    table = open(md).read()
    for want in ("| a | baseline | 2.0100 | +0.0000 | +0.000 +0.000 | +0.0000 | 0.0200 | 1.000x |  |",
                 "| a | fast | 1.8150 | -0.1950 | -0.200 -0.190 | -0.1950 | 0.0300 | 0.800x | wins |",
                 "| a | slow | 1.8150 | -0.1950 | -0.200 -0.190 | +0.1500 | 0.0300 | 1.200x | loses |",
                 "| a | noise | 2.0150 | +0.0050 | +0.000 +0.010 | +0.0050 | 0.0300 | 1.000x | within noise |",
                 "| a | one | 1.8150 | -0.1950 | -0.200 -0.190 | -0.1950 | 0.0300 | 0.800x | within noise |",
                 "| b | fast | 1.8150 | -0.1950 | -0.200 -0.190 | -0.1950 | 0.0300 | 0.800x | wins |",
                 "| b | one | 2.0150 | +0.0050 | +0.000 +0.010 | +0.0050 | 0.0300 | 1.000x | within noise |"):
        check(want in table, f"report row missing: {want}\n{table}")

# One seed has no spread: no verdict but `one seed`.
sweep = json.load(open(os.path.join(rep, "sweep.json")))
json.dump(dict(sweep, seeds=[1]), open(os.path.join(rep, "sweep.json"), "w"))
r = levers("report", rep)
check(r.returncode == 0 and re.search(r"^a +fast .* nan .* one seed *$", r.stdout, re.M)
      and "wins" not in r.stdout, f"a one-seed sweep was judged: {r.stdout}{r.stderr}")
json.dump(sweep, open(os.path.join(rep, "sweep.json"), "w"))

# 3. One-line errors naming what is wrong.
for args, want in ((["run", out, "--corpus", "kjv"], "--corpus 'kjv'"),
                   (["run", out, "--corpus", f"x={train},/nonexistent.h5"], "/nonexistent.h5"),
                   (["run", out, "--corpus", f"x={train},{val}", "--lever", "zero=--zero-init-out"],
                    "--lever zero"),
                   (["run", out, "--corpus", f"x={train},{val},all"], "EVAL_BATCHES 'all'"),
                   (["run", out, "--corpus", f"x={train},{val}", "--lever", "baseline=--lr 1"],
                    "not 'baseline'")):
    r = levers(*args)
    check(r.returncode != 0 and r.stderr.startswith("levers: error: ") and want in r.stderr
          and r.stderr.count("\n") == 1, f"{args}: no one-line error naming {want!r}: {r.stderr}")
os.remove(os.path.join(rep, "b", "slow_s2.jsonl"))
r = levers("report", rep)
check(r.returncode != 0 and "b/slow_s2.jsonl is missing or unfinished" in r.stderr,
      f"a missing run was not named: {r.stderr}")

if not failed:
    shutil.rmtree(work)
print(f"test_levers: {'FAILED ' + str(len(failed)) if failed else 'passed'}")
sys.exit(1 if failed else 0)
