#!/usr/bin/env python3
"""--async-checkpoint (issue 35, part 3): checkpoints written on their own
thread while training goes on.

- Same files: on 1, 2 and 4 ranks, every checkpoint of a run with background
  saves equals, bit for bit (tensors, checksums, data position), the one a
  run with ordinary saves writes; the losses are the same; each save has a
  started and a finished record, the last one finished before the run ends;
  no .tmp is left.
- Resumes bitwise: stopped at step 4 and resumed to step 8, both with
  background saves, the step-8 checkpoint equals an uninterrupted run's.
- Training goes on during a save, at most one is in flight, and a crash
  during one leaves the previous checkpoint intact (the chaos test): with
  the save of step 4 held half written (FSDP_TEST_CHECKPOINT_PAUSE_S), steps
  5 to 8 are trained, step 9 is not (the save of step 8 waits for it); then
  every process is killed with SIGKILL. Step 2's checkpoint and `latest`
  are untouched, and --resume auto goes on from step 2 to the weights of a
  run that was never killed, bit for bit (1 and 2 ranks).
- A rollback waits for the save in flight and ends as one with ordinary saves.
- A background save that fails (a full disk: a 2 MiB tmpfs, where mounting
  is allowed) is one error line, a non-zero exit, no .tmp, step 1 untouched.
- --async-checkpoint without --checkpoint-dir is one error line."""
import os
import shutil
import subprocess
import sys
import time

import h5py
import numpy as np

from program_checks import (check, checkpoint_state as state, error_lines, finish, kill_job,
                            one_error, records, run as run_program, state_difference,
                            wait_for)

exe, example, work = sys.argv[1:4]
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
mpiexec = os.environ.get("MPIEXEC", "mpirun")


def args(ranks, ckpt, metrics, steps=6, every=2, async_save=True, extra=()):
    return [exe, "--device", "cpu", "--model", "tiny", "--train-data",
            os.path.join(example, "kjv_train.h5"), "--seq-len", "32",
            "--batch-size", str(8 // ranks), "--steps", str(steps), "--log-every", "1",
            "--checkpoint-dir", ckpt, "--checkpoint-every", str(every), "--metrics", metrics,
            *(["--async-checkpoint"] if async_save else []), *extra]


def run(ranks, tag, env=None, **kw):
    ckpt, metrics = os.path.join(work, tag), os.path.join(work, tag + ".jsonl")
    p = run_program(args(ranks, ckpt, metrics, **kw), ranks,
                    env=dict(os.environ, FSDP_COLLECTIVE_TIMEOUT_S="60", **(env or {})))
    return p, ckpt, metrics


def h5s(d):
    return sorted(n for n in os.listdir(d) if n.endswith(".h5"))


def tmps(d):
    return [n for n in os.listdir(d) if n.endswith(".tmp")]


def attrs(path):
    with h5py.File(path, "r") as f:
        return {k: np.asarray(f.attrs[k]).tolist() for k in
                ("step", "tokens_seen", "optimizer_steps", "tensor_checksums", "world_size")}


def losses(metrics):
    return [(r["step"], r["loss"]) for r in records(metrics) if "loss" in r]


# Same files, same losses, every save finished.
for ranks in (1, 2, 4):
    tag = f"np{ranks}"
    a, a_dir, a_m = run(ranks, tag + "_async")
    s, s_dir, s_m = run(ranks, tag + "_sync", async_save=False)
    check(a.returncode == 0 and s.returncode == 0,
          f"{tag}: both runs end well: {a.stderr.strip()[-300:]} {s.stderr.strip()[-300:]}")
    if a.returncode or s.returncode:
        continue
    names = h5s(s_dir)
    check(h5s(a_dir) == names == [f"step_0000000{i}.h5" for i in (2, 4, 6)] and not tmps(a_dir),
          f"{tag}: the same checkpoint files, no .tmp: {h5s(a_dir)} {tmps(a_dir)}")
    diffs = [n + ": " + state_difference(state(os.path.join(a_dir, n)),
                                         state(os.path.join(s_dir, n)))
             for n in names if n in h5s(a_dir)]
    diffs = [d for d in diffs if not d.endswith(": ")]
    check(not diffs, f"{tag}: every checkpoint equals the ordinary save's bit for bit {diffs[:1]}")
    check(all(attrs(os.path.join(a_dir, n)) == attrs(os.path.join(s_dir, n)) for n in names),
          f"{tag}: the same step, tokens, optimizer steps and tensor checksums")
    check(open(os.path.join(a_dir, "latest")).read() == open(os.path.join(s_dir, "latest")).read(),
          f"{tag}: `latest` names the same file")
    check(losses(a_m) == losses(s_m) and len(losses(a_m)) == 6, f"{tag}: the same losses")
    recs = records(a_m)
    started = [r["step"] for r in recs if "checkpoint_started" in r]
    finished = [r["step"] for r in recs if r.get("background") and "checkpoint" in r]
    check(started == finished == [2, 4, 6], f"{tag}: each save started and finished once, "
          f"the last before the run ended: {started} {finished}")
    copies = [r for r in recs if "checkpoint_started" in r]
    check(all(r["host_copy_bytes"] > 0 and r["host_copy_s"] >= 0 for r in copies) and
          len({r["host_copy_bytes"] for r in copies}) == 1,
          f"{tag}: each start records the bytes copied to host (the same each time)")

# Resumed from background saves: bitwise an uninterrupted run.
for ranks in (1, 2):
    tag = f"resume_np{ranks}"
    p, d, m = run(ranks, tag, steps=8, extra=("--stop-at-step", "4"))
    q, d, m = run(ranks, tag, steps=8, extra=("--resume", "auto"))
    u, u_dir, _ = run(ranks, tag + "_whole", steps=8, async_save=False)
    ok = p.returncode == q.returncode == u.returncode == 0 and "at step 4" in q.stdout
    check(ok, f"{tag}: stopped at step 4 and resumed: {q.stderr.strip()[-300:]}")
    if ok:
        diff = state_difference(state(os.path.join(d, "step_00000008.h5")),
                                state(os.path.join(u_dir, "step_00000008.h5")))
        check(diff == "", f"{tag}: step 8 equals an uninterrupted run's bit for bit {diff}")


def trained(metrics):
    return {r["step"] for r in records(metrics) if "loss" in r}


# The chaos test: training goes on while step 4 is half written (four steps:
# more than the data reader holds read ahead, so a save that held the HDF5
# lock throughout would stall them), step 9 waits for it, then every process
# is killed.
for ranks in (1, 2):
    tag = f"chaos_np{ranks}"
    p, d, m = run(ranks, tag, steps=10, every=4, extra=("--stop-at-step", "2"))
    check(p.returncode == 0 and h5s(d) == ["step_00000002.h5"], f"{tag}: step 2 saved")
    before = state(os.path.join(d, "step_00000002.h5"))
    go = os.path.join(work, tag + ".go")
    env = dict(os.environ, FSDP_TEST_CHECKPOINT_PAUSE_S="120", FSDP_TEST_CHECKPOINT_PAUSE_UNTIL=go,
               FSDP_COLLECTIVE_TIMEOUT_S="300")
    cmd = args(ranks, d, m, steps=10, every=4, extra=("--resume", "auto"))
    if ranks > 1:
        cmd = [mpiexec, "--oversubscribe", "-np", str(ranks)] + cmd
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)
    held = wait_for(lambda: "step_00000004.h5.tmp" in tmps(d) and 8 in trained(m))
    check(held, f"{tag}: steps 5 to 8 trained while the save of step 4 is half written")
    time.sleep(2)
    check(9 not in trained(m) and "step_00000004.h5.tmp" in tmps(d),
          f"{tag}: at most one save in flight: step 9 waits for step 4's save "
          f"(trained {sorted(trained(m))})")
    check(kill_job(proc), f"{tag}: every process of the job killed with SIGKILL")
    check(h5s(d) == ["step_00000002.h5"] and
          open(os.path.join(d, "latest")).read().strip() == "step_00000002.h5" and
          state_difference(state(os.path.join(d, "step_00000002.h5")), before) == "",
          f"{tag}: killed during the background save: step 2 and `latest` are untouched")
    r, d, m = run(ranks, tag, steps=10, every=4, extra=("--resume", "auto"))
    u, u_dir, _ = run(ranks, tag + "_whole", steps=10, every=4, async_save=False)
    ok = r.returncode == 0 and "at step 2" in r.stdout and "removed '" in r.stdout and not tmps(d)
    check(ok, f"{tag}: --resume auto removes the .tmp and goes on from step 2" +
          ("" if ok else f": {error_lines(r)} {r.stdout.strip()[-300:]}"))
    if r.returncode == 0 and u.returncode == 0:
        diff = state_difference(state(os.path.join(d, "step_00000010.h5")),
                                state(os.path.join(u_dir, "step_00000010.h5")))
        check(diff == "", f"{tag}: step 10 equals a run never killed, bit for bit {diff}")

# A rollback waits for the save in flight (the newest checkpoint).
spike = {"FSDP_TEST_SPIKE_POSITION": "41"}
roll = ("--on-divergence", "rollback", "--spike-window", "3")
a, a_dir, a_m = run(2, "roll_async", env=spike, steps=12, every=4, extra=roll)
s, s_dir, s_m = run(2, "roll_sync", env=spike, steps=12, every=4, async_save=False, extra=roll)
ok = a.returncode == s.returncode == 0
check(ok and [r for r in records(a_m) if "rollback_to_step" in r][0]["rollback_to_step"] == 4,
      f"2 ranks: a spike in step 6 rolls back to step 4 under --async-checkpoint "
      f"{a.stderr.strip()[-300:]}")
if ok:
    diff = state_difference(state(os.path.join(a_dir, "step_00000012.h5")),
                            state(os.path.join(s_dir, "step_00000012.h5")))
    check(diff == "", f"the rolled-back run's step 12 equals the ordinary saves' bit for bit {diff}")


# A background save that fails: one error line, nothing lost.
full = os.path.join(work, "full")
os.makedirs(full)
m = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", full],
                   capture_output=True, text=True)
if m.returncode != 0:
    print(f"skip full disk: cannot mount a tmpfs here ({(m.stderr or m.stdout).strip()})")
else:
    try:
        for ranks in (1, 2):
            d = os.path.join(full, f"np{ranks}")
            p = run_program(args(ranks, d, os.path.join(work, f"full{ranks}.jsonl"), steps=3,
                                 every=1), ranks,
                            env=dict(os.environ, FSDP_COLLECTIVE_TIMEOUT_S="60"))
            e = error_lines(p)
            check(p.returncode == 1 and len(e) == 1 and "cannot save step 2" in e[0] and
                  "the disk is full" in e[0],
                  f"{ranks} rank(s): a background save that does not fit is one error line and "
                  f"exit 1: {p.returncode} {e}")
            check(h5s(d) == ["step_00000001.h5"] and not tmps(d) and
                  open(os.path.join(d, "latest")).read().strip() == "step_00000001.h5",
                  f"{ranks} rank(s): no .tmp left, step 1 and `latest` untouched")
            shutil.rmtree(d)
    finally:
        subprocess.run(["umount", full])

one_error([exe, "--device", "cpu", "--model", "tiny", "--train-data",
           os.path.join(example, "kjv_train.h5"), "--async-checkpoint"],
          "--async-checkpoint", "--async-checkpoint without --checkpoint-dir")

finish("async_checkpoint_test")
