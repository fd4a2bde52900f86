#!/usr/bin/env python3
"""--time-budget on the real program and the built-in example:
- before it times a step, the run repeats its discarded warm-up pass for
  5% of the budget (at most 2 s: a GPU's clock settles under its power
  limit); a run told --steps N makes one pass;
- the run times its first warmup steps and fixes a count; wsd (these runs'
  schedule) plans once more at 90% of that count's stable phase, from every
  step timed by then, to a count N whose decay starts after the steps taken;
  the run ends at step N with its final validation, its losses equal to a
  run given --steps N, bit for bit (the rate of the steps taken before either
  plan does not depend on the count);
- the count and the time used are in every checkpoint after the plan: a run
  resumed from a checkpoint after the second plan keeps the count and plans
  nothing; one stopped before it keeps the count until its own second plan,
  at the same step; either ends bitwise equal to an uninterrupted --steps N
  run;
- a run stopped within the timed steps saves no count; its resume times the
  rest and plans then, its steps equal to the first run's;
- on 2 ranks both fix the same count (one rank's count would hang the other);
- wsd's second plan keeps its count within the steps taken: steps made
  slower after the first plan (FSDP_TEST_SLOW_STEPS, a test-only sleep) give
  the least count whose decay starts after them, a warning, and a late end;
  timed steps made slower than the rest give the most count whose second
  plan is not still ahead, and an early end; either equals --steps N;
- resuming a checkpoint without a count past the timed steps, a finished
  run, or a budget without warmup each stop with one error line.
Whether a run ends within its budget depends on the machine's load staying
as it was timed; the plan's arithmetic is tested in test_time_budget."""
import json
import math
import os
import shutil
import subprocess
import sys

import h5py

exe, example, work = sys.argv[1:4]
mpiexec = os.environ.get("MPIEXEC", "mpirun")
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
failures = []
BUDGET = "4s"
PROBE = 10  # the timed steps: min(10, --warmup-steps)


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def run(name, extra=(), ranks=1, expect_rc=0, warmup=12, env=None):
    cmd = ([mpiexec, "--oversubscribe", "-np", str(ranks)] if ranks > 1 else []) + [
        exe, "--device", "cpu", "--train-data", os.path.join(example, "kjv_train.h5"),
        "--val-data", os.path.join(example, "kjv_val.h5"), "--seq-len", "32",
        "--batch-size", str(4 // ranks), "--lr", "3e-3", "--min-lr", "3e-4",
        "--warmup-steps", str(warmup), "--lr-schedule", "wsd", "--eval-every", "40",
        "--eval-batches", "2", "--log-every", "50", "--metrics", os.path.join(work, name + ".jsonl"),
        *extra]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                       env={**os.environ, **(env or {})})
    if r.returncode != expect_rc:
        failures.append(f"{name}: exit {r.returncode}, wanted {expect_rc}: {r.stderr.strip()}")
        print(r.stdout[-2000:], r.stderr[-2000:])
    return r


def lines(name):
    return [json.loads(l) for l in open(os.path.join(work, name + ".jsonl"))]


def losses(name):
    return {d["step"]: d["loss"] for d in lines(name) if "loss" in d}


def plans(name):
    return [d for d in lines(name) if "time_budget_steps" in d]


def planned(name):
    """The count of the first plan (None: the run planned nothing)."""
    p = plans(name)
    return p[0]["time_budget_steps"] if p else None


def final(name):
    """The count the run ended with: its last plan's, or None."""
    p = plans(name)
    return p[-1]["time_budget_steps"] if p else None


def decay_start(n, warmup=12, fraction=0.2):
    """wsd's first decay step in a run of n (src/policy/lr_schedule.h; lround of a float 0.2)."""
    return max(warmup, n - max(1, math.floor(n * 0.20000000298023224 + 0.5)))


def replan_step(n):
    """When a run of n plans again (src/policy/time_budget.h: 90% of the stable phase)."""
    return int(0.9 * decay_start(n))


def replan_range(done):
    """The counts wsd's second plan at `done` may choose (src/policy/time_budget.cpp):
    from the least whose decay starts after the steps taken to the most whose
    second plan is not still ahead."""
    least = done + 1
    while decay_start(least) < done:
        least += 1
    most = least
    while replan_step(most + 1) <= done:
        most += 1
    return least, most


def ckpt(name):
    return ["--checkpoint-dir", os.path.join(work, name)]


def budget_attrs(name, step):
    with h5py.File(os.path.join(work, name, f"step_{step:08d}.h5"), "r") as f:
        return {k: f.attrs[k].item() for k in ("time_budget_steps", "time_budget_used_s")
                if k in f.attrs}


# A whole budgeted run, and the same run told its count.
r = run("budget", ["--time-budget", BUDGET, *ckpt("b"), "--checkpoint-every", "20",
                   "--keep-checkpoints", "0"])
n0, n = planned("budget"), final("budget")
check(n0 is not None and n0 > PROBE + 100,
      f"the budget run fixed a count after the {PROBE} timed steps, well beyond them: {n0}")
n0, n = n0 or PROBE + 1, n or PROBE + 1
ps = plans("budget")
plan = ps[0]
check(plan["step"] == PROBE and plan["planned_end_s"] <= 4 * 0.99 and plan["step_s"] > 0,
      f"the plan came at step {PROBE} and ends within the budget less 1%: {plan}")
again = ps[-1]
check(len(ps) == 2 and again["step"] == replan_step(n0) and again["replanned_from"] == n0
      and decay_start(n) >= again["step"] and replan_step(n) <= again["step"],
      f"wsd planned once more, at step {replan_step(n0)} (90% of {n0}'s stable phase), a count "
      f"{n} whose decay starts after the steps taken: {ps[1:]}")
check(f"planned again before the decay, from steps 2-{again['step']}" in r.stdout,
      "the second plan is printed")
vals = [d["step"] for d in lines("budget") if "val_loss" in d]
check(vals[0] == 0 and vals[-1] == n, f"validated before the timed steps and at step {n}: {vals}")
report = [d for d in lines("budget") if "time_used_s" in d]
check(len(report) == 1 and report[0]["step"] == n and report[0]["time_budget_s"] == 4,
      f"the final validation's time against the budget is reported: {report}")
check(f"--time-budget {BUDGET}: {n0} steps" in r.stdout, "the plan is printed")
warm = [l for l in r.stdout.splitlines() if l.startswith("fsdptrain: warm-up (")]
passes = warm[0].split("(")[1].split()[0] if len(warm) == 1 else ""
took = float(warm[0].rsplit("took ", 1)[1].split()[0]) if len(warm) == 1 else 0
check(passes.isdigit() and int(passes) > 1 and took >= 0.2,
      f"the warm-up passes went on for 5% of the {BUDGET} budget before the timed steps: {warm}")
r = run("fixed", ["--steps", str(n)])
check("fsdptrain: warm-up (one forward+backward, discarded)" in r.stdout,
      "a run told its count makes one warm-up pass")
a, b = losses("budget"), losses("fixed")
check(list(a) == list(range(1, n + 1)), f"the budget run took steps 1..{n}")
check(a == b, f"the budget run equals --steps {n} bit for bit")

# Resumed from a checkpoint after the second plan: the count stays, nothing is planned.
# (n > 100 puts the second plan at most at 72% of it: a save every 20 steps lands between.)
after = (again["step"] // 20 + 1) * 20
attrs = budget_attrs("b", after) if after < n else {}
check(after < n and attrs.get("time_budget_steps") == n,
      f"the checkpoint at step {after}, before the end {n}, holds the second plan's count: {attrs}")
path = os.path.join(work, "b", f"step_{after:08d}.h5")
r = run("tail", ["--time-budget", BUDGET, "--resume", path], expect_rc=0 if after < n else 1)
t = losses("tail") if after < n else {}
check(planned("tail") is None and f"the step count {n} was fixed by the checkpoint" in r.stdout
      and list(t) == list(range(after + 1, n + 1)) and all(t[k] == a[k] for k in t),
      f"resumed at step {after}, the run keeps {n}, plans nothing and equals the first")

# Stopped after the first plan, resumed: the count stays until the same second plan.
stop = PROBE + 8
run("first", ["--time-budget", BUDGET, *ckpt("c"), "--stop-at-step", str(stop)])
n1 = planned("first")
attrs = budget_attrs("c", stop)
check(n1 is not None and attrs.get("time_budget_steps") == n1 and attrs["time_budget_used_s"] > 0,
      f"the checkpoint at step {stop} holds the count {n1} and the time used: {attrs}")
r = run("second", ["--time-budget", BUDGET, *ckpt("c"), "--resume", "auto"])
ps2, n2 = plans("second"), final("second") or 1
check(f"the step count {n1} was fixed by the checkpoint" in r.stdout and len(ps2) == 1
      and ps2[0]["step"] == replan_step(n1 or 0) and ps2[0]["replanned_from"] == n1,
      f"the resumed run keeps the count {n1} until its second plan at step "
      f"{replan_step(n1 or 0)}, and plans only that: {ps2}")
run("straight", ["--steps", str(n2)])
s, whole = losses("second"), losses("straight")
check(n1 is not None and list(s) == list(range(stop + 1, n2 + 1))
      and all(s[k] == whole[k] for k in s),
      f"resumed steps {stop + 1}..{n2} equal an uninterrupted --steps {n2} run bit for bit")
r = run("again", ["--time-budget", BUDGET, *ckpt("c"), "--resume", "auto"], expect_rc=1)
check("it is finished" in r.stderr, f"resuming the finished run is refused: {r.stderr.strip()}")

# Stopped within the timed steps: no count saved; the resume plans.
run("early", ["--time-budget", BUDGET, *ckpt("e"), "--stop-at-step", "5"])
check(budget_attrs("e", 5).get("time_budget_steps") == 0,
      "a checkpoint from the timed steps holds count 0 (not fixed)")
run("late", ["--time-budget", BUDGET, *ckpt("e"), "--resume", "auto"])
late = losses("late")
check(planned("late") is not None and max(late) == final("late"),
      f"the resumed run timed steps 6..{PROBE}, planned and ended at its count")
check(all(late[k] == a[k] for k in range(6, PROBE + 1)),
      "its timed steps equal the first budget run's (the count does not reach them)")

# Two ranks fix one count.
r = run("np2", ["--time-budget", BUDGET], ranks=2)
n2 = final("np2")
check(r.returncode == 0 and n2 is not None and len(plans("np2")) == 2
      and max(losses("np2")) == n2,
      f"2 ranks plan {n2} steps together, twice (wsd), and end there")

# The second plan held within its range (replan_range), shown by slowing steps.
def slowed(name, spec):
    """A budget run with FSDP_TEST_SLOW_STEPS=spec: its output, its plans, the
    step of its second plan (0: none), the count it ended with and its report
    of the time used."""
    r = run(name, ["--time-budget", BUDGET], env={"FSDP_TEST_SLOW_STEPS": spec})
    ps = plans(name)
    report = [d for d in lines(name) if "time_used_s" in d]
    return r, ps, ps[-1]["step"] if len(ps) == 2 else 0, final(name) or 1, report


# Steps after the timed ones run twice as slow: the budget is spent before the
# decay could start, so the run takes the least count, warns and ends late.
r, ps3, done3, n3, late = slowed("slower", f"{PROBE + 1}:1000000:2")
least, _ = replan_range(done3)
check(len(ps3) == 2 and n3 == least and max(losses("slower")) == least,
      f"steps slowed after the first plan: the second plan takes the least count {least} whose "
      f"decay starts after step {done3}: {ps3[1:]}")
check("the steps ran so much slower than the first plan's" in r.stderr
      and len(late) == 1 and late[0]["time_used_s"] > late[0]["time_budget_s"]
      and "past it" in r.stderr,
      f"it warns that the run ends late, and it does: {late}, {r.stderr.strip()}")
run("slower_fixed", ["--steps", str(n3)])
check(losses("slower") == losses("slower_fixed"), f"it equals --steps {n3} bit for bit")
# The timed steps run three times as slow as the rest: the second plan would
# give many more steps, but a count whose own second plan is still ahead
# would plan a third time; the run takes the most count and ends early.
r, ps4, done4, n4, early = slowed("faster", f"1:{PROBE}:3")
_, most = replan_range(done4)
check(len(ps4) == 2 and n4 == most and max(losses("faster")) == most
      and "ran so much slower" not in r.stderr,
      f"timed steps slowed: the second plan takes the most count {most} whose own second plan "
      f"is at or before step {done4}, without a warning: {ps4}")
check(len(early) == 1 and early[0]["time_used_s"] < early[0]["time_budget_s"],
      f"and ends within the budget: {early}")
run("faster_fixed", ["--steps", str(n4)])
check(losses("faster") == losses("faster_fixed"), f"it equals --steps {n4} bit for bit")

# Refusals.
run("plain", ["--steps", "40", *ckpt("p"), "--stop-at-step", "15"])
r = run("plain2", ["--time-budget", BUDGET, *ckpt("p"), "--resume", "auto"], expect_rc=1)
err = [l for l in r.stderr.splitlines() if l.startswith("fsdptrain: error:")]
check(len(err) == 1 and "holds no step count fixed by a time budget" in err[0],
      f"a checkpoint without a count past the timed steps is refused: {err}")
r = run("nowarm", ["--time-budget", BUDGET], warmup=0, expect_rc=1)
check("--time-budget: '4s' is invalid: needs --warmup-steps" in r.stderr
      and r.stderr.count("fsdptrain: error:") == 1,
      f"a budget without warmup is refused by name: {r.stderr.strip()}")

if failures:
    print(f"{len(failures)} failure(s)")
    sys.exit(1)
print("all time-budget checks passed")
