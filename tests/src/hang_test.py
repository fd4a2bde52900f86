#!/usr/bin/env python3
"""No hang, ever: a 3-rank run whose peer dies or hangs ends, every rank, within
a bound, with a message; a stop signal to mpirun checkpoints and exits 0.
- one rank SIGSTOPped mid-run (a hung peer): the collective watchdog
  (FSDP_COLLECTIVE_TIMEOUT_S=5) aborts the job with a line naming the rank
  and the collective it waited in;
- every rank held inside a checkpoint save longer than the limit (a stuck file
  system): the job aborts naming the save, and the previous checkpoint stays;
- one rank SIGKILLed mid-run: the job ends, naming the dead rank;
- SIGUSR1 to mpirun: every rank checkpoints the same step, exit 0, and
  --resume auto continues from it;
- a stop already pending when the program starts (a preemption during
  set-up, or a --signal lead longer than the job): exit 3 before any step,
  nothing saved, so a batch script does not requeue it forever;
- a rank that stops calling collectives (the test hook FSDP_TEST_STALL, which
  GPU check group n uses with real NCCL), at a step and in set-up: the live
  ranks name their wait, the job ends.
Every wait is bounded, so a hang fails the test instead of stalling CI."""
import json
import os
import signal
import shutil
import subprocess
import sys
import time

exe, example, work = sys.argv[1:4]
mpiexec = os.environ.get("MPIEXEC", "mpirun")
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
RANKS = 3
LIMIT_S = 5
# Abort after the limit, plus mpirun's SIGTERM-then-SIGKILL of the rest and a
# loaded 2-core machine. A hang never ends, so any finite bound tells them apart.
BOUND_S = LIMIT_S + 55
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def command(tag, steps=100000, extra=()):
    return [mpiexec, "--oversubscribe", "-np", str(RANKS), exe, "--device", "cpu",
            "--train-data", os.path.join(example, "kjv_train.h5"), "--seq-len", "32",
            "--batch-size", "4", "--steps", str(steps), "--log-every", "1",
            "--checkpoint-dir", os.path.join(work, tag),
            "--metrics", os.path.join(work, tag + ".jsonl"), *extra]


def start(tag, env=None, extra=()):
    e = dict(os.environ, FSDP_COLLECTIVE_TIMEOUT_S=str(LIMIT_S), **(env or {}))
    # Own session: the cleanup can reach every rank even if mpirun is wedged.
    return subprocess.Popen(command(tag, extra=extra), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=e, start_new_session=True)


def records(tag, key):
    path = os.path.join(work, tag + ".jsonl")
    if not os.path.exists(path):
        return []
    out = []
    for line in open(path):
        try:
            j = json.loads(line)
        except ValueError:  # a line being written
            continue
        if key in j:
            out.append(j)
    return out


def wait_for_steps(p, tag, n, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline and p.poll() is None and len(records(tag, "loss")) < n:
        time.sleep(0.1)
    return len(records(tag, "loss")) >= n


def ranks_of(mpirun_pid):
    """{MPI rank: pid} of the fsdptrain processes mpirun started."""
    found = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                stat = f.read()
            if f"({os.path.basename(exe)[:15]})" not in stat or int(stat.rsplit(")", 1)[1].split()[1]) != mpirun_pid:
                continue
            env = open(f"/proc/{d}/environ", "rb").read().split(b"\0")
        except OSError:
            continue
        for kv in env:
            if kv.startswith(b"OMPI_COMM_WORLD_RANK="):
                found[int(kv.split(b"=")[1])] = int(d)
    return found


def finish(p, bound):
    """(returncode, stdout, stderr, seconds) or returncode None if it hung."""
    t0 = time.time()
    try:
        out, err = p.communicate(timeout=bound)
        return p.returncode, out, err, time.time() - t0
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGCONT)
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        return None, out, err, time.time() - t0


# 1. A hung peer: SIGSTOP one rank mid-run.
p = start("stop")
ok = wait_for_steps(p, "stop", 3)
pids = ranks_of(p.pid)
check(ok and len(pids) == RANKS, f"stop: running with {len(pids)} ranks found")
if ok and 2 in pids:
    os.kill(pids[2], signal.SIGSTOP)
    rc, out, err, secs = finish(p, BOUND_S)
    lines = [l for l in err.splitlines() if l.startswith("fsdptrain: error: rank ")]
    print("\n".join(lines))
    check(rc is not None and rc != 0,
          f"SIGSTOP of rank 2: job ended (exit {rc}) {secs:.1f} s later (hang if None)")
    check(any(f"did not complete in {LIMIT_S} s" in l and "MPI " in l and "dead or hung" in l
              for l in lines),
          "SIGSTOP: a live rank names the collective it waited in and says a peer is hung")
    # Woken by mpirun's SIGCONT only to be killed, the stopped rank must not
    # count its own stop as waiting and blame the others.
    check(all("rank 2:" not in l for l in lines), "SIGSTOP: the stopped rank 2 blames no one")
else:
    finish(p, 1)

# 2. A stuck file system: every rank held inside a save past the limit.
r = subprocess.run(command("save", steps=2, extra=("--checkpoint-every", "2")),
                   capture_output=True, text=True, timeout=300)
before = sorted(n for n in os.listdir(os.path.join(work, "save")) if n.endswith(".h5"))
check(r.returncode == 0 and before == ["step_00000002.h5"], f"save: step 2 saved first ({before})")
p = start("save", env={"FSDP_TEST_CHECKPOINT_PAUSE_S": "3600"},
          extra=("--checkpoint-every", "2", "--resume", "auto"))
rc, out, err, secs = finish(p, BOUND_S)
lines = [l for l in err.splitlines() if l.startswith("fsdptrain: error: rank ")]
print("\n".join(lines))
check(rc is not None and rc != 0, f"save stuck past the limit: job ended (exit {rc}) in {secs:.1f} s")
check(any("checkpoint save of step 4" in l and f"did not complete in {LIMIT_S} s" in l
          for l in lines), "save stuck: the line names the checkpoint save")
r = subprocess.run(command("save", steps=3, extra=("--resume", "auto")),
                   capture_output=True, text=True, timeout=300)
check(r.returncode == 0 and "at step 2" in r.stdout,
      f"save stuck: step 2's checkpoint still resumes (exit {r.returncode})")

# 3. A dead peer: SIGKILL one rank mid-run.
p = start("kill")
ok = wait_for_steps(p, "kill", 3)
pids = ranks_of(p.pid)
if ok and 2 in pids:
    os.kill(pids[2], signal.SIGKILL)
    rc, out, err, secs = finish(p, BOUND_S)
    check(rc is not None and rc != 0, f"SIGKILL of rank 2: job ended (exit {rc}) {secs:.1f} s later")
    check("rank 2" in err, "SIGKILL: the message names rank 2")
else:
    finish(p, 1)
    check(False, "kill: the run did not start")

# 4. SIGUSR1 to mpirun: all ranks checkpoint one step, exit 0, resume continues.
p = subprocess.Popen(command("usr1"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                     start_new_session=True)
ok = wait_for_steps(p, "usr1", 3)
p.send_signal(signal.SIGUSR1)
rc, out, err, secs = finish(p, BOUND_S)
saved = records("usr1", "checkpoint")
check(ok and rc == 0 and len(saved) == 1 and "(SIGUSR1)" in out,
      f"SIGUSR1 to mpirun: exit {rc}, {len(saved)} checkpoint(s): {err.strip()[-300:]}")
if saved:
    stopped = saved[0]["step"]
    r = subprocess.run(command("usr1", steps=stopped + 2, extra=("--resume", "auto")),
                       capture_output=True, text=True, timeout=300)
    check(r.returncode == 0 and f"at step {stopped}" in r.stdout and
          len(records("usr1", "loss")) >= stopped + 2,
          f"SIGUSR1: --resume auto continued from step {stopped} (exit {r.returncode})")

# 5. A stop pending from the start. The signal is sent while blocked in the
# child, so it is pending when fsdptrain starts (the mask and pending set
# survive exec); the program unblocks it with its handlers. One process: a
# launcher resets the mask of the ranks it starts.
single = command("early", steps=3)
single = single[single.index(exe):]


def pending_usr1():
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
    os.kill(os.getpid(), signal.SIGUSR1)


blocked = subprocess.Popen(single, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           start_new_session=True, preexec_fn=pending_usr1)
rc, out, err, secs = finish(blocked, BOUND_S)
check(rc == 3 and "before the first step" in out and not records("early", "loss") and
      not records("early", "checkpoint"),
      f"stop pending at start: exit {rc} (want 3), no step, nothing saved: {out.strip()[-200:]}")

# 6. A rank that stops calling collectives, as a hung peer does, but alive
# (unlike SIGSTOP, its own watchdog runs): at the start of step 3, and in
# set-up before the process groups. A malformed value is one error line.
for where in ("3", "init"):
    p = start("stall_" + where, env={"FSDP_TEST_STALL": "2:" + where})
    rc, out, err, secs = finish(p, BOUND_S)
    lines = [l for l in err.splitlines() if l.startswith("fsdptrain: error: rank ")]
    print("\n".join(lines))
    check(rc is not None and rc != 0,
          f"FSDP_TEST_STALL=2:{where}: job ended (exit {rc}) in {secs:.1f} s (hang if None)")
    check("fsdptrain: test: rank 2 stalls" in err, f"stall at {where}: rank 2 says it stalls")
    check(any(f"did not complete in {LIMIT_S} s" in l and "dead or hung" in l for l in lines) and
          all("rank 2:" not in l for l in lines),
          f"stall at {where}: a live rank names its wait, the stalled rank 2 blames no one")
r = subprocess.run(command("stall_bad", steps=2), capture_output=True, text=True, timeout=300,
                   env=dict(os.environ, FSDP_TEST_STALL="2:soon"))
errors = [l for l in r.stderr.splitlines() if l.startswith("fsdptrain: error:")]
check(r.returncode != 0 and len(errors) >= 1 and all("FSDP_TEST_STALL '2:soon'" in l for l in errors)
      and not records("stall_bad", "loss"),
      f"FSDP_TEST_STALL=2:soon: refused before any step (exit {r.returncode}): {errors[:1]}")

print(f"{0 if failures else 1} passed, {len(failures)} failed")
for f in failures:
    print("FAIL:", f)
sys.exit(1 if failures else 0)
