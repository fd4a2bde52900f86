#!/usr/bin/env python3
"""Chaos test (issue 9): a 2-rank run of a few hundred steps of a very small
model, checkpointing every 5 steps and keeping 3, is killed with SIGKILL
again and again at seeded random moments and restarted with --resume auto
each time until it completes. Kill moments: during start-up or the resume
load, between steps, while a save's .tmp file is being written, right after
`latest` moved (while old checkpoints are pruned). Kill targets: every
process at once (power loss), one rank (mpirun must then end the others),
or mpirun alone (the ranks must not outlive it). After every kill no
process of the job may survive, and every restart must resume or start
fresh without an error. The final checkpoint must equal that of an
uninterrupted run on the same ranks bit for bit: every dataset, and the
step, tokens, optimizer-step and sampler attributes; `latest` must name it,
at most 3 checkpoints and no .tmp file may remain.

usage: chaos_test.py FSDPTRAIN EXAMPLE_DIR WORK_DIR
env:   FSDP_CHAOS_SEED (default 5), FSDP_CHAOS_KILLS (15), MPIEXEC."""
import os
import random
import shutil
import signal
import subprocess
import sys
import time

import h5py
import numpy as np

from program_checks import alive, children

exe, example, work = sys.argv[1:4]
mpiexec = os.environ.get("MPIEXEC", "mpirun")
SEED = int(os.environ.get("FSDP_CHAOS_SEED", "5"))
KILLS = int(os.environ.get("FSDP_CHAOS_KILLS", "15"))
# 600 steps: room for every planned kill to land before the job completes (at 300 a
# quiet machine finished it after 9 of them, 2026-11-23)
RANKS, STEPS, EVERY, KEEP = 2, 600, 5, 3
EXIT_LIMIT_S = 30  # how long the job's processes may take to go once one was killed
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)


def command(ckpt):
    return [mpiexec, "--oversubscribe", "-np", str(RANKS), exe, "--device", "cpu", "--model",
            "tiny", "--n-layer", "1", "--d-model", "32", "--n-head", "2", "--n-kv-head", "1",
            "--d-ff", "64", "--seq-len", "16", "--batch-size", "1", "--steps", str(STEPS),
            "--warmup-steps", "5", "--train-data", os.path.join(example, "kjv_val.h5"),
            "--checkpoint-dir", ckpt, "--checkpoint-every", str(EVERY), "--keep-checkpoints",
            str(KEEP), "--log-every", "50", "--resume", "auto"]


def kill(pid):
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def listing(ckpt):
    try:
        return os.listdir(ckpt)
    except FileNotFoundError:
        return []


def latest(ckpt):
    try:
        with open(os.path.join(ckpt, "latest")) as f:
            return f.read()
    except OSError:
        return ""


def wait_for_trigger(p, ckpt, mode, rng):
    """Sleeps until the chosen moment; False if the job ended first."""
    deadline = time.time() + 120
    if mode == "startup":
        time.sleep(rng.uniform(0.02, 0.5))
        return p.poll() is None
    if mode == "step":  # between saves: a few saves in, then a random part of a step interval
        before = {n for n in listing(ckpt) if n.startswith("step_")}
        want = rng.randint(1, 3)
        while p.poll() is None and time.time() < deadline:
            if len({n for n in listing(ckpt) if n.startswith("step_")} - before) >= want:
                time.sleep(rng.uniform(0, 0.03))
                return p.poll() is None
            time.sleep(0.002)
        return False
    if mode == "save":  # a .tmp half written
        skip = rng.randint(0, 2)
        seen = set()
        while p.poll() is None and time.time() < deadline:
            tmps = {n for n in listing(ckpt) if n.endswith(".tmp")}
            fresh = tmps - seen
            seen |= tmps
            if fresh:
                if skip == 0:
                    time.sleep(rng.uniform(0, 0.004))
                    return p.poll() is None
                skip -= 1
            time.sleep(0.0005)
        return False
    # "publish": `latest` just moved, old checkpoints are being pruned
    skip, last = rng.randint(1, 3), latest(ckpt)
    while p.poll() is None and time.time() < deadline:
        now = latest(ckpt)
        if now != last:
            last = now
            skip -= 1
            if skip == 0:
                return p.poll() is None
        time.sleep(0.0005)
    return False


def run_once(ckpt, rng, plan):
    """One start of the job, killed per `plan` (mode, target) or left to
    finish. Returns (killed, exit code, stdout, stderr)."""
    p = subprocess.Popen(command(ckpt), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, start_new_session=True)
    killed = False
    if plan and wait_for_trigger(p, ckpt, plan[0], rng):
        ranks = children(p.pid)
        target = plan[1]
        if target == "rank" and ranks:
            kill(rng.choice(ranks))
        elif target == "mpirun":
            kill(p.pid)
        else:
            for pid in [p.pid] + ranks:
                kill(pid)
        killed, killed_at = True, time.time()
        time.sleep(0.05)
        ranks = ranks or children(p.pid)
    else:
        ranks = []
    try:
        out, err = p.communicate(timeout=EXIT_LIMIT_S if killed else 300)
    except subprocess.TimeoutExpired:
        check(False, f"{'after ' + '/'.join(plan) + ' kill: ' if killed else ''}mpirun still "
              f"running after {EXIT_LIMIT_S if killed else 300} s")
        for pid in children(p.pid) + [p.pid]:
            kill(pid)
        out, err = p.communicate()
    ranks += children(p.pid)
    end = time.time() + EXIT_LIMIT_S
    while any(alive(r) for r in ranks) and time.time() < end:
        time.sleep(0.05)
    if killed and plan[1] == "mpirun":
        # Orphaned ranks go on training (and saving) until they notice.
        print(f"  ranks outlived mpirun by {time.time() - killed_at:.2f} s", flush=True)
    survivors = [r for r in ranks if alive(r)]
    if survivors:
        check(False, f"after a {'/'.join(plan)} kill, rank process(es) {survivors} still ran "
              f"{EXIT_LIMIT_S} s later (they could go on writing the checkpoint directory)")
        for r in survivors:
            kill(r)
    return killed, p.returncode, out, err


def final_state(path):
    with h5py.File(path, "r") as f:
        tensors = {}
        f.visititems(lambda n, o: tensors.__setitem__(n, o[()])
                     if isinstance(o, h5py.Dataset) else None)
        attrs = {k: np.asarray(f.attrs[k]) for k in
                 ("step", "tokens_seen", "optimizer_steps", "tensor_checksums") if k in f.attrs}
        attrs.update({"sampler/" + k: np.asarray(v) for k, v in f["sampler"].attrs.items()})
    return tensors, attrs


def main():
    rng = random.Random(SEED)
    t0 = time.time()
    ref = os.path.join(work, "reference")
    killed, rc, out, err = run_once(ref, rng, None)
    final = f"step_{STEPS:08d}.h5"
    if rc != 0 or not os.path.exists(os.path.join(ref, final)):
        print(f"FAIL the uninterrupted run failed (exit {rc}): {err.strip()}")
        return 1
    print(f"uninterrupted run: {time.time() - t0:.1f} s", flush=True)

    ckpt = os.path.join(work, "chaos")
    modes = ["startup", "step", "step", "save", "save", "publish"]
    targets = ["all", "all", "rank", "mpirun"]
    kills, starts, done, resumed_from = 0, 0, False, ""
    resume_lines = []  # every start's "resumed from" line, killed or not
    last_kill = None   # the plan of the last start that was killed
    unpruned = 0       # checkpoints a kill may have left before their pruning
    while not done and starts < KILLS * 3 + 5 and time.time() - t0 < 240:
        starts += 1
        plan = (rng.choice(modes), rng.choice(targets)) if kills < KILLS else None
        killed, rc, out, err = run_once(ckpt, rng, plan)
        resumed = [l for l in out.splitlines() if "resumed from" in l or "starting fresh" in l]
        print(f"start {starts}: {'killed (' + '/'.join(plan) + ')' if killed else 'ran'}, "
              f"exit {rc}; {resumed[0] if resumed else 'no resume line'}; on disk: "
              f"{sorted(n for n in listing(ckpt) if n.startswith('step_') or n.endswith('.tmp'))}",
              flush=True)
        if resumed:
            resume_lines.append(resumed[0])
        if killed:
            kills += 1
            last_kill = plan
            continue
        resumed_from = resumed[0] if resumed else ""
        errors = [l for l in err.splitlines() if l.startswith("fsdptrain: error:")]
        if rc == 0:
            done = True
        elif errors and "already reaches --steps" in errors[0]:
            # The previous start was killed after its final save: nothing was
            # left to do, and the pruning that counts was that start's, which
            # protected the file it had resumed from.
            done = True
            resumed_from = resume_lines[-1] if resume_lines else ""
            # Killed while publishing the final save ("publish": `latest`
            # moved, pruning under way), its pruning may not have run: the
            # file the save before it kept is still there.
            unpruned = 1 if last_kill and last_kill[0] == "publish" else 0
        else:
            check(False, f"start {starts} after {kills} kills failed (exit {rc}): "
                  f"{(errors or err.strip().splitlines() or ['no output'])[-1]}")
            break
    print(f"{kills} kills, {starts} starts, {time.time() - t0:.0f} s", flush=True)
    check(done, f"the chaos run completed {STEPS} steps")
    check(kills >= min(KILLS, 10), f"{kills} kills landed while the job ran (wanted {KILLS})")
    if not done:
        return 1

    names = listing(ckpt)
    check(latest(ckpt).strip().endswith(final), f"`latest` names {final}: {latest(ckpt)!r}")
    saved = sorted(n for n in names if n.startswith("step_") and n.endswith(".h5"))
    # The file the last start resumed from is kept besides the newest KEEP
    # (CheckpointDir::prune's `protect`).
    extra = [n for n in saved[:-(KEEP + unpruned)] if n not in resumed_from]
    check(not extra, f"only the newest {KEEP} checkpoints and the one resumed from are kept: "
          f"{saved}")
    stray = [n for n in names if not (n.startswith("step_") and n.endswith(".h5"))
             and n not in ("latest", ".lock")]
    check(not stray, f"no .tmp or other stray file left: {sorted(names)}")
    if final not in saved:
        check(False, f"{final} exists")
        return 1
    want_t, want_a = final_state(os.path.join(ref, final))
    got_t, got_a = final_state(os.path.join(ckpt, final))
    check(got_t.keys() == want_t.keys(), f"same {len(want_t)} datasets as the uninterrupted run")
    differ = [n for n in want_t if n in got_t and not (
        got_t[n].shape == want_t[n].shape and got_t[n].tobytes() == want_t[n].tobytes())]
    check(not differ, f"every dataset bitwise equal to the uninterrupted run's (differ: {differ})")
    bad = [k for k in want_a if k not in got_a or not np.array_equal(got_a[k], want_a[k])]
    check(not bad, f"step, tokens, optimizer steps, sampler state and checksums equal "
          f"(differ: {[(k, got_a.get(k), want_a[k]) for k in bad]})")
    print(f"{'passed' if not failures else 'FAILED'} in {time.time() - t0:.0f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
