#!/usr/bin/env python3
"""slurm/h100_4node.sh without a cluster, against stand-ins for srun, mpirun
and scontrol that record what they are given (the real cluster runs are in
slurm_cases.py; this one runs everywhere, in a second):
- bash accepts the script; its defaults are flags fsdptrain parses (it must
  stop only because this machine has no GPU);
- saves are written in the background (--async-checkpoint) unless
  ASYNC_CHECKPOINT=0 or the user passes the flag himself;
- each default is dropped when the user passes the same flag, as `--flag
  value` or `--flag=value`; --metrics follows --checkpoint-dir, which the
  script creates; CHECKPOINT_DIR and FSDPTRAIN still work;
- FSDP_LAUNCHER=mpirun starts SLURM_NTASKS ranks packed by node;
- USR1 (time limit) reaches the ranks as USR1 and requeues only when they
  exit 0; status 3 (stopped before the first step) is not requeued and says
  why; TERM (scancel) reaches them as USR1 and does not requeue;
- FSDP_TENSORBOARD_DIR starts tools/follow_metrics.py on the run's metrics
  (--metrics if given), which has written them all when the job ends.

    script_test.py FSDPTRAIN SCRIPT TRAIN_DATA WORK"""
import json
import os
import shutil
import signal
import subprocess
import sys
import time

exe, script, data, work = map(os.path.abspath, sys.argv[1:5])
shutil.rmtree(work, ignore_errors=True)
standin = os.path.join(work, "bin")
os.makedirs(standin)
failures = []


def check(cond, what, detail=""):
    print(("ok   " if cond else "FAIL ") + what + (f": {detail}" if detail and not cond else ""))
    if not cond:
        failures.append(what)


# srun/mpirun record their arguments, then exit (or wait for a signal and
# exit STANDIN_RC, as fsdptrain does after its checkpoint); scontrol records.
LAUNCHER = """#!/bin/bash
printf '%s\\n' "$@" > "$STANDIN_DIR/args"
trap 'echo USR1 > "$STANDIN_DIR/got"; exit ${STANDIN_RC:-0}' USR1
trap 'echo TERM > "$STANDIN_DIR/got"; exit ${STANDIN_RC:-0}' TERM
[[ -n ${STANDIN_WAIT:-} ]] || exit ${STANDIN_RC:-0}
touch "$STANDIN_DIR/started"
while true; do sleep 0.05; done
"""
for name in ("srun", "mpirun"):
    with open(os.path.join(standin, name), "w") as f:
        f.write(LAUNCHER)
with open(os.path.join(standin, "scontrol"), "w") as f:
    f.write('#!/bin/bash\necho "$@" >> "$STANDIN_DIR/scontrol"\n')
for name in ("srun", "mpirun", "scontrol"):
    os.chmod(os.path.join(standin, name), 0o755)


def read(name):
    path = os.path.join(work, name)
    return open(path).read() if os.path.exists(path) else ""


def job(args=(), env=None, sig=None):
    """Runs the script as a batch job would; returns (exit, output, the
    launcher's arguments)."""
    for name in ("args", "got", "scontrol", "started"):
        if os.path.exists(os.path.join(work, name)):
            os.remove(os.path.join(work, name))
    e = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    e.pop("FSDPTRAIN", None)
    e.pop("CHECKPOINT_DIR", None)
    e.pop("FSDP_LAUNCHER", None)
    e.update(PATH=standin + ":" + os.environ["PATH"], STANDIN_DIR=work, SLURM_SUBMIT_DIR=work,
             SLURM_JOB_NAME="fsdptrain", SLURM_JOB_ID="7", SLURM_NTASKS="32",
             SLURM_JOB_NUM_NODES="4", SLURM_JOB_NODELIST="n[1-4]", SLURM_NTASKS_PER_NODE="8")
    e.update(env or {})
    e = {k: v for k, v in e.items() if v is not None}
    if sig:
        e["STANDIN_WAIT"] = "1"
    p = subprocess.Popen(["bash", script, *args], env=e, cwd=work, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    if sig:
        deadline = time.time() + 30
        while time.time() < deadline and not os.path.exists(os.path.join(work, "started")):
            time.sleep(0.05)
        time.sleep(0.2)  # the script is in its wait once the launcher is up
        p.send_signal(sig)
    try:
        out, _ = p.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        p.kill()
        out, _ = p.communicate()
    return p.returncode, out, read("args").splitlines()


check(subprocess.run(["bash", "-n", script]).returncode == 0, "bash -n accepts the script")

# The defaults, and that fsdptrain accepts every one of them.
ck = os.path.join(work, "checkpoints", "fsdptrain")
rc, out, args = job(["--train-data", data])
bin_default = os.path.join(work, "build", "src", "fsdptrain")
expect = ["--mpi=pmix", "--kill-on-bad-exit=1", bin_default,
          "--model", "gpt-350m", "--device", "cuda", "--precision", "bf16",
          "--checkpoint-dir", ck, "--checkpoint-every", "1000", "--resume", "auto",
          "--metrics", ck + "/metrics.jsonl", "--async-checkpoint", "--train-data", data]
check(rc == 0 and args == expect, "defaults: srun gets the default flags", f"{args} / {out}")
check(os.path.isdir(ck), "defaults: the checkpoint folder is created before the start")
check("fsdptrain.sh: job 7 restart 0 at " in out and "on n[1-4] (32 tasks, srun)" in out,
      "defaults: a header line names job, restart count, time and nodes", out)
r = subprocess.run([exe, *args[3:]], capture_output=True, text=True, timeout=60)
err = r.stderr.strip()
check(r.returncode != 0 and "--device cuda" in err and "unrecogni" not in err and
      "is invalid" not in err, "fsdptrain accepts the defaults and stops only for the missing GPU",
      err)

# Overrides: both spellings drop the default; --metrics follows --checkpoint-dir.
d = os.path.join(work, "mine")
rc, out, args = job(["--model", "tiny", "--device=cpu", "--precision", "fp32",
                     "--checkpoint-dir", d, "--resume=" + d + "/step_00000005.h5",
                     "--train-data", data], env={"FSDPTRAIN": exe})
expect = ["--mpi=pmix", "--kill-on-bad-exit=1", exe, "--checkpoint-every", "1000",
          "--metrics", d + "/metrics.jsonl", "--async-checkpoint", "--model", "tiny", "--device=cpu",
          "--precision", "fp32", "--checkpoint-dir", d, "--resume=" + d + "/step_00000005.h5",
          "--train-data", data]
check(rc == 0 and args == expect, "overrides: user flags replace defaults (--flag v, --flag=v)",
      f"{args} / {out}")
check(os.path.isdir(d), "overrides: --checkpoint-dir's folder is created")
rc, out, args = job([f"--checkpoint-dir={d}2", "--metrics=" + d + "/m.jsonl"])
check(rc == 0 and args.count(f"--checkpoint-dir={d}2") == 1 and "--checkpoint-dir" not in args
      and "--metrics" not in args and os.path.isdir(d + "2"),
      "overrides: --checkpoint-dir=D and --metrics=F replace theirs", str(args))
rc, out, args = job(env={"ASYNC_CHECKPOINT": "0"})
check(rc == 0 and "--async-checkpoint" not in args and "--resume" in args,
      "ASYNC_CHECKPOINT=0: saves stop the steps (no --async-checkpoint)", str(args))
rc, out, args = job(["--async-checkpoint"])
check(rc == 0 and args.count("--async-checkpoint") == 1,
      "--async-checkpoint given by the user is passed once", str(args))
rc, out, args = job(env={"CHECKPOINT_DIR": d + "3"})
check(rc == 0 and args[args.index("--checkpoint-dir") + 1] == d + "3" and
      args[args.index("--metrics") + 1] == d + "3/metrics.jsonl" and os.path.isdir(d + "3"),
      "CHECKPOINT_DIR names the folder", str(args))

# Dashboards: the follower reads the metrics the ranks wrote (here written
# before the job) and has flushed them all when the job ends.
try:
    import tensorboard  # noqa: F401
    have_tb = True
except ImportError:
    have_tb = False
    print("skipped: FSDP_TENSORBOARD_DIR (no tensorboard in this Python; tools/setup.sh installs it)")
if have_tb:
    os.symlink(os.path.join(os.path.dirname(os.path.dirname(script)), "tools"),
               os.path.join(work, "tools"))
    lines = ['{"run_start_unix_s": 1.8e9, "start_step": 0, "resumed_from": null, "ranks": 32, '
             '"config": {"model": "gpt-350m", "lr": 0.003}}\n',
             '{"step": 0, "val_loss": 11.0, "train_s": 0}\n'] + \
            [f'{{"step": {i}, "loss": {11 - i / 10}, "lr": 0.003, "elapsed_s": {i}}}\n' for i in (1, 2, 3)]
    for flags, metrics in (([], os.path.join(ck, "metrics.jsonl")),
                           (["--metrics", os.path.join(d, "m2.jsonl")], os.path.join(d, "m2.jsonl"))):
        with open(metrics, "w") as f:
            f.writelines(lines)
        tb = os.path.join(work, "tb" + str(len(flags)))
        rc, out, args = job(flags, env={"FSDP_TENSORBOARD_DIR": tb, "FSDP_PYTHON": sys.executable})
        try:
            state = json.load(open(os.path.join(tb, "follow_metrics.json")))
        except (OSError, ValueError):
            state = {}
        runs = [e for e in os.listdir(tb) if os.path.isdir(os.path.join(tb, e))] if os.path.isdir(tb) else []
        check(rc == 0 and state.get("metrics") == metrics and state.get("offset") == os.path.getsize(metrics)
              and len(runs) == 1 and os.listdir(os.path.join(tb, runs[0])),
              f"FSDP_TENSORBOARD_DIR: the follower wrote all of {os.path.basename(metrics)} "
              "before the job ended", f"{rc} {state} {runs} {out}")

# The mpirun fallback: all tasks, packed by node.
rc, out, args = job(env={"FSDP_LAUNCHER": "mpirun"})
check(rc == 0 and args[:5] == ["-np", "32", "--map-by", "ppr:8:node", bin_default],
      "FSDP_LAUNCHER=mpirun: mpirun -np 32 --map-by ppr:8:node", str(args))
rc, out, args = job(env={"FSDP_LAUNCHER": "mpirun", "SLURM_NTASKS": "8",
                         "SLURM_NTASKS_PER_NODE": None})
check(rc == 0 and args[:4] == ["-np", "8", "--map-by", "ppr:2:node"],
      "FSDP_LAUNCHER=mpirun without SLURM_NTASKS_PER_NODE: ppr from tasks / nodes", str(args))
rc, out, args = job(env={"STANDIN_RC": "1"})
check(rc == 1, f"a failing launcher fails the job (exit {rc})")

# Signals to the batch shell.
for sig, ranks_rc, want_rc, requeue, says in [
        (signal.SIGUSR1, "0", 0, True, "requeueing job 7"),
        (signal.SIGUSR1, "3", 3, False, "not requeued: stopped before the first step"),
        (signal.SIGUSR1, "1", 1, False, "not requeued: fsdptrain exited with status 1"),
        (signal.SIGTERM, "0", 0, False, "SIGTERM received")]:
    rc, out, _ = job(env={"STANDIN_RC": ranks_rc}, sig=sig)
    got, sc = read("got").strip(), read("scontrol").strip()
    what = f"{sig.name}, ranks exit {ranks_rc}"
    check(got == "USR1", f"{what}: the ranks get USR1", got)
    check(rc == want_rc, f"{what}: the script exits {want_rc}", f"{rc}: {out}")
    check(sc == ("requeue 7" if requeue else ""),
          f"{what}: {'requeues' if requeue else 'does not requeue'}", sc)
    check(says in out, f"{what}: the log says '{says}'", out)

shutil.rmtree(work, ignore_errors=True)
print(f"{len(failures)} failure(s)")
for f in failures:
    print("FAIL:", f)
sys.exit(1 if failures else 0)
