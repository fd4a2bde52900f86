#!/usr/bin/env python3
"""slurm/h100_4node.sh, unmodified, under a real Slurm (slurm_box.py): 4
emulated nodes x 2 tasks, on the CPU, the tiny model on the example data.
The script's sbatch options are overridden on the sbatch command line
(--ntasks-per-node=2) and its fsdptrain defaults by flags after the script
name, as the script documents.

    slurm_cases.py BOX FSDPTRAIN SCRIPT EXAMPLE_DIR WORK CASE...

CASE is one of the cases below, or `all` (starts and stops the cluster
itself; CTest runs each case against the `slurm_box` fixture instead):
  srun         4 x 2 ranks through srun --mpi=pmix: 8 ranks on 4 nodes, shard
               group 2 (a node), replicas 4; trains to the end; metrics land
  mpirun       the same through FSDP_LAUNCHER=mpirun; losses equal srun's
  preempt      scancel --batch --signal=USR1 mid-run: checkpoint, requeue,
               resume; losses equal an uninterrupted run's; one log, both runs
  preempt_mpirun  the same through FSDP_LAUNCHER=mpirun
  timer        --time=2 --signal=B:USR1@60: the time limit's USR1 requeues,
               the job resumes and finishes
  guard        USR1 before the first step: exit 3, not requeued, log says why
  scancel      plain scancel: the ranks checkpoint, the job is CANCELLED
  rank_killed  kill -9 of one rank on n3: the job ends within 60 s naming it,
               no rank left, the last checkpoint resumes
  transient    3 x 2 ranks, a one-time fault on n2's first rank at step 6
               (FSDP_TEST_TRANSIENT_FAULT): exit 4 naming rank 2 on n2, the
               job requeued without n2 (ExcNodeList), resumed on the other
               nodes from step 4, finished; nothing of step 6 saved by run 1
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import slurm_box  # noqa: E402

box_dir, exe, script, example, work = sys.argv[1:6]
cases = sys.argv[6:]


def train(batch=4):
    return ["--model", "tiny", "--device", "cpu", "--precision", "fp32",
            "--train-data", os.path.join(example, "kjv_train.h5"), "--seq-len", "64",
            "--batch-size", str(batch), "--lr", "3e-3", "--warmup-steps", "5"]


TRAIN = train()
STEPS = 40  # ~0.12 s a step on 2 cores: a run takes seconds, a signal lands mid-run
SBATCH = ["--ntasks-per-node=2"]  # 4 nodes x 2 tasks instead of x 8 (2 cores)
failures = []
logs = []  # every job's log, for startup_crash()


def saved_steps(text, total):
    """The steps a log says were saved: an ordinary save's step line, or the
    line of a save written in the background (the script passes
    --async-checkpoint), printed once the file is on disk."""
    found = re.findall(rf"step +(\d+)/{total} \| saved |fsdptrain: saved \S+ \(step (\d+), "
                       r"written in the background", text)
    return [a or b for a, b in found]


# A rank of an srun launch used to crash inside MPI_Init on a loaded machine:
# a call through a null active-message callback (tag 0x41) from opal_progress
# in ompi_mpi_init, a peer's first message arriving before this rank's PML
# had registered its callbacks. The cause was Slurm's default "mixed" PMIx
# fence, and the cluster now runs every fence on one engine (MPI_CONF in
# slurm_box.py, with the measurements). Should a case's job still show a
# crash before any rank printed a line, it is run again, at most
# STARTUP_RETRIES times, and says so; any other failure stands. The crashes
# come in bursts: a CI run on 2026-11-30 saw three of four launches crash
# within 30 s (the timer case), after none in the six cases before it and
# with no test beside them; so a retry first waits RETRY_PAUSE_S.
STARTUP_RETRIES = 3
RETRY_PAUSE_S = 20
box = None
jobs = []  # every job submitted, cancelled at the end whatever happens


def check(cond, what, detail=""):
    """DETAIL (a log's tail) is printed only on failure."""
    print(("ok   " if cond else "FAIL ") + what + (f"\n{detail}" if detail and not cond else ""),
          flush=True)
    if not cond:
        failures.append(what)
    return cond


def submit(name, args, sbatch=(), env=None):
    log = os.path.join(work, name + ".out")
    if os.path.exists(log):  # --open-mode=append: a log of an earlier test run
        os.remove(log)
    j = box.sbatch([*SBATCH, *sbatch, f"--output={log}", script, *args],
                   env=dict(env or {}, FSDPTRAIN=exe), cwd=work)
    jobs.append(j)
    logs.append(log)
    print(f"     job {j}: {name}", flush=True)
    return j, log


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def losses(metrics):
    """step -> loss; a resumed run appends, so the last line of a step wins."""
    out = {}
    for line in read(metrics).splitlines():
        m = json.loads(line)
        if "loss" in m:
            out[m["step"]] = m["loss"]
    return out


def last_step(metrics):
    steps = losses(metrics)
    return max(steps) if steps else 0


def wait_for(pred, timeout, what, job):
    """Until pred() holds; fails at once when JOB has ended instead (a run
    that crashed at start is not waited for)."""
    deadline = time.time() + timeout
    polled = 0.0
    while not pred():
        if time.time() > deadline:
            raise TimeoutError(f"no {what} after {timeout} s")
        if time.time() - polled > 1.0:
            polled = time.time()
            state = box.job(job).get("JobState")
            if state not in (None, "PENDING", "RUNNING", "CONFIGURING", "REQUEUED") and not pred():
                raise RuntimeError(f"job {job} ended ({state}) before {what}")
        time.sleep(0.05)


def no_ranks_left(j, timeout=15):
    deadline = time.time() + timeout
    while box.job_processes(j) and time.time() < deadline:
        time.sleep(0.2)
    left = box.job_processes(j)
    check(not left, f"job {j}: no fsdptrain process left "
          f"({[pid for pid, _ in left]} still running)" if left else
          f"job {j}: no fsdptrain process left")


def stays_ended(j, state, seconds=6):
    """The scheduler runs every 2 s: a requeued job would show up as PENDING
    (or RUNNING again, with Restarts up) within a few cycles."""
    time.sleep(seconds)
    info = box.job(j)
    check(info.get("JobState") == state and info.get("Restarts") == "0",
          f"job {j}: stays {state}, not requeued (JobState={info.get('JobState')}, "
          f"Restarts={info.get('Restarts')})")


def reference():
    """Losses of an uninterrupted 4 x 2 run of TRAIN for STEPS (the srun
    case's, saved in BOX; run here when that case did not run)."""
    path = os.path.join(box_dir, "srun_losses.json")
    if os.path.exists(path):
        saved = json.load(open(path))
        if saved["args"] == TRAIN + ["--steps", str(STEPS)]:
            return {int(k): v for k, v in saved["losses"].items()}
    ckpt = os.path.join(work, "reference")
    shutil.rmtree(ckpt, ignore_errors=True)
    j, _ = submit("reference", TRAIN + ["--steps", str(STEPS), "--checkpoint-dir", ckpt])
    box.wait_done(j, 120)
    return losses(os.path.join(ckpt, "metrics.jsonl"))


def start_line(log):
    return re.search(r"fsdptrain: (\d+) rank\(s\) on (\d+) node\(s\), shard group (\d+)\b.*?"
                     r"replicas (\d+)", read(log))


def case_launch(launcher):
    """Cases srun and mpirun: the whole run, and what the ranks saw."""
    ckpt = os.path.join(work, launcher, "ckpt")
    shutil.rmtree(os.path.join(work, launcher), ignore_errors=True)
    env = {"FSDP_LAUNCHER": launcher} if launcher == "mpirun" else {}
    # --checkpoint-dir in both spellings replaces the script's default (a
    # repeated flag would stop fsdptrain); --metrics follows it.
    ckflag = ["--checkpoint-dir", ckpt] if launcher == "srun" else [f"--checkpoint-dir={ckpt}"]
    t0 = time.time()
    j, log = submit(launcher, TRAIN + ["--steps", str(STEPS)] + ckflag, env=env)
    info = box.wait_done(j, 120)
    print(f"     {launcher}: job took {time.time() - t0:.1f} s")
    check(info["JobState"] == "COMPLETED" and info["ExitCode"] == "0:0",
          f"{launcher}: job COMPLETED with exit 0:0 (JobState={info['JobState']}, "
          f"ExitCode={info['ExitCode']})", read(log)[-1500:])
    m = start_line(log)
    check(m is not None and m.groups() == ("8", "4", "2", "4"),
          f"{launcher}: rank 0 reports 8 ranks on 4 nodes, shard group 2 (a node), replicas 4 "
          f"(got {m.group(0) if m else 'no start line'})")
    check(re.search(rf"fsdptrain.sh: job {j} restart 0 at .* on n\[1-4\] \(8 tasks, {launcher}\)",
                    read(log)) is not None, f"{launcher}: the script's header line")
    metrics = os.path.join(ckpt, "metrics.jsonl")
    got = losses(metrics)
    check(sorted(got) == list(range(1, STEPS + 1)) and all(v == v for v in got.values()),
          f"{launcher}: {metrics} holds steps 1..{STEPS} (got {len(got)} steps)")
    check(got and got[STEPS] < got[1], f"{launcher}: the loss falls "
          f"({got.get(1)} -> {got.get(STEPS)})")
    check(os.path.exists(os.path.join(ckpt, f"step_{STEPS:08d}.h5")),
          f"{launcher}: the final checkpoint step_{STEPS:08d}.h5 is saved")
    no_ranks_left(j)
    if launcher == "srun" and not failures:
        with open(os.path.join(box_dir, "srun_losses.json"), "w") as f:
            json.dump({"args": TRAIN + ["--steps", str(STEPS)], "losses": got}, f)
    if launcher == "mpirun":
        ref = reference()
        check(got == ref, "mpirun: losses equal srun's, bit for bit "
              f"({sum(got.get(s) != ref.get(s) for s in ref)} of {len(ref)} steps differ)")


def case_preempt(launcher):
    name = "preempt" if launcher == "srun" else "preempt_" + launcher
    ckpt = os.path.join(work, name)
    shutil.rmtree(ckpt, ignore_errors=True)
    metrics = os.path.join(ckpt, "metrics.jsonl")
    # CHECKPOINT_DIR (the script's other override); no --checkpoint-every:
    # the default (1000) saves nothing before the signal does.
    j, log = submit(name, TRAIN + ["--steps", str(STEPS)],
                    env={"CHECKPOINT_DIR": ckpt,
                         **({"FSDP_LAUNCHER": launcher} if launcher != "srun" else {})})
    wait_for(lambda: last_step(metrics) >= 8, 60, "step 8", j)
    box.run("scancel", "--batch", "--signal=USR1", j)
    t0 = time.time()
    info = box.wait(j, lambda i: i.get("Restarts") == "1", 60, "requeue")
    info = box.wait_done(j, 120)
    print(f"     {name}: requeue to end {time.time() - t0:.1f} s")
    check(info["JobState"] == "COMPLETED" and info["Restarts"] == "1",
          f"{name}: requeued once and COMPLETED (JobState={info['JobState']}, "
          f"Restarts={info['Restarts']})")
    text = read(log)
    runs = text.split(f"fsdptrain.sh: job {j} restart ")
    check(len(runs) == 3 and runs[1].startswith("0 ") and runs[2].startswith("1 "),
          f"{name}: the log keeps both runs (headers restart 0 and 1; --open-mode=append)")
    first, second = (runs + ["", "", ""])[1:3]
    saved = saved_steps(first, r"\d+")
    check("SIGUSR1 received" in first and "requeueing job" in first and len(saved) == 1,
          f"{name}: run 1 got USR1, saved one checkpoint (steps {saved}) and requeued")
    k = int(saved[0]) if saved else -1
    check(8 <= k < STEPS, f"{name}: run 1 stopped mid-run (step {k} of {STEPS})")
    check(re.search(rf"resumed from '{re.escape(ckpt)}/step_{k:08d}.h5' at step {k}", second)
          is not None, f"{name}: run 2 resumed from step {k}")
    got, ref = losses(metrics), reference()
    check(sorted(got) == list(range(1, STEPS + 1)), f"{name}: metrics hold steps 1..{STEPS}")
    check(got == ref, f"{name}: losses equal an uninterrupted run's, bit for bit "
          f"({sum(got.get(s) != ref.get(s) for s in ref)} of {len(ref)} steps differ)")
    no_ranks_left(j)


def case_timer():
    """slurmctld checks limits every ~30 s: with --time=2 and @60 the USR1
    comes 32-59 s after the start. The run is sized to take ~70 s, so it is
    still training then, and the rest fits in the next run (if a slower
    machine needs another requeue, the job still must finish)."""
    ckpt = os.path.join(work, "timer")
    shutil.rmtree(ckpt, ignore_errors=True)
    # Steps for ~70 s of training at this machine's measured speed: the run
    # must outlast the latest USR1 (59 s) on a faster machine too.
    cal = os.path.join(work, "timer_calibrate")
    shutil.rmtree(cal, ignore_errors=True)
    j, _ = submit("timer_calibrate", train(8) + ["--steps", "30", "--checkpoint-dir", cal])
    box.wait_done(j, 120)
    elapsed = [json.loads(line)["elapsed_s"] for line in read(os.path.join(cal, "metrics.jsonl"))
               .splitlines() if '"loss"' in line]
    if not check(len(elapsed) == 30, "timer: the calibration run trained 30 steps"):
        return
    per_step = (elapsed[-1] - elapsed[4]) / 25
    steps = int(70 / per_step)
    print(f"     timer: {per_step:.3f} s a step: {steps} steps")
    t0 = time.time()
    j, log = submit("timer", train(8) + ["--steps", str(steps), "--checkpoint-dir", ckpt],
                    sbatch=["--time=2", "--signal=B:USR1@60"])
    info = box.wait(j, lambda i: i.get("Restarts", "0") != "0" or i.get("JobState") in (
        "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"), 150, "requeue")
    usr1 = time.time() - t0
    info = box.wait_done(j, 240)
    print(f"     timer: first requeue after {usr1:.0f} s, job took {time.time() - t0:.0f} s")
    text = read(log)
    check(info["JobState"] == "COMPLETED" and int(info.get("Restarts", 0)) >= 1,
          f"timer: requeued by the time limit's USR1 and COMPLETED (JobState="
          f"{info['JobState']}, Restarts={info.get('Restarts')})", text[-1500:])
    check(text.count("SIGUSR1 received") == int(info.get("Restarts", 0)) >= 1 and
          text.count("resumed from") == int(info.get("Restarts", 0)),
          "timer: each run but the last got USR1 and the next resumed "
          f"({text.count('SIGUSR1 received')} USR1, {text.count('resumed from')} resumes)")
    check(os.path.exists(os.path.join(ckpt, f"step_{steps:08d}.h5")) and
          sorted(losses(os.path.join(ckpt, "metrics.jsonl"))) == list(range(1, steps + 1)),
          f"timer: the job trained to step {steps} (metrics and checkpoint)")
    no_ranks_left(j)


def case_guard():
    """A USR1 during set-up (here: the warm-up of a large batch) ends the
    ranks with status 3 and nothing saved; the script must not requeue, or a
    --signal lead longer than the run would requeue forever."""
    ckpt = os.path.join(work, "guard")
    shutil.rmtree(ckpt, ignore_errors=True)
    j, log = submit("guard", train(128) + ["--steps", "2",
                                           "--checkpoint-dir", ckpt])
    wait_for(lambda: start_line(log) is not None, 60, "start line", j)
    box.run("scancel", "--batch", "--signal=USR1", j)
    info = box.wait_done(j, 60)
    text = read(log)
    check(info["JobState"] == "FAILED" and info["ExitCode"] == "3:0",
          f"guard: the job ends with exit 3 (JobState={info['JobState']}, "
          f"ExitCode={info['ExitCode']})", text[-1500:])
    check("arrived before the first step" in text and
          "not requeued: stopped before the first step" in text and "requeueing" not in text,
          "guard: the log says why it is not requeued", text[-1500:])
    check(not any(n.startswith("step_") for n in os.listdir(ckpt)), "guard: nothing saved")
    stays_ended(j, "FAILED")
    no_ranks_left(j)


def case_scancel():
    ckpt = os.path.join(work, "scancel")
    shutil.rmtree(ckpt, ignore_errors=True)
    j, log = submit("scancel", TRAIN + ["--steps", "2000", "--checkpoint-dir", ckpt])
    metrics = os.path.join(ckpt, "metrics.jsonl")
    wait_for(lambda: last_step(metrics) >= 5, 60, "step 5", j)
    t0 = time.time()
    box.run("scancel", j)
    info = box.wait_done(j, 30)
    print(f"     scancel: ended {time.time() - t0:.1f} s after scancel")
    check(info["JobState"] == "CANCELLED", f"scancel: the job is CANCELLED "
          f"(JobState={info['JobState']})")
    no_ranks_left(j)
    text = read(log)
    saved = saved_steps(text, 2000)
    check("SIGTERM received" in text and len(saved) == 1 and "requeueing" not in text,
          f"scancel: the ranks checkpointed (steps {saved}) and the script did not requeue")
    stays_ended(j, "CANCELLED")


def case_rank_killed():
    ckpt = os.path.join(work, "rank_killed")
    shutil.rmtree(ckpt, ignore_errors=True)
    args = TRAIN + ["--steps", "2000", "--checkpoint-dir", ckpt, "--checkpoint-every", "5"]
    j, log = submit("rank_killed", args)
    metrics = os.path.join(ckpt, "metrics.jsonl")
    wait_for(lambda: last_step(metrics) >= 12, 60, "step 12", j)
    victims = [pid for pid, env in box.job_processes(j)
               if env.get("SLURM_NODEID") == "2" and env.get("SLURM_PROCID") == "5"]
    check(len(victims) == 1, f"rank_killed: rank 5 runs on n3 (node 2): pids {victims}")
    if not victims:
        return
    t0 = time.time()
    os.kill(victims[0], signal.SIGKILL)
    info = box.wait_done(j, 90)
    took = time.time() - t0
    print(f"     rank_killed: job ended {took:.1f} s after kill -9")
    text = read(log)
    check(took < 60, f"rank_killed: the job ended within 60 s ({took:.1f} s)")
    check(info["JobState"] == "FAILED" and info["Restarts"] == "0",
          f"rank_killed: FAILED, not requeued (JobState={info['JobState']}, "
          f"Restarts={info['Restarts']})")
    first = re.search(r"srun: error: (.*)", text)
    check(first is not None and first.group(1) == "n3: task 5: Killed",
          "rank_killed: srun's first error names the killed rank ('n3: task 5: Killed')",
          text[-1500:])
    no_ranks_left(j)
    latest = read(os.path.join(ckpt, "latest")).strip()
    m = re.search(r"step_(\d+)\.h5", latest)
    check(m is not None, f"rank_killed: 'latest' names a checkpoint ({latest!r})")
    if not m:
        return
    k = int(m.group(1))
    r = subprocess.run([sys.executable, os.path.join(os.path.dirname(script), "..", "tools",
                                                     "inspect_checkpoint.py"),
                        os.path.join(ckpt, os.path.basename(latest))],
                       capture_output=True, text=True)
    check(r.returncode == 0, f"rank_killed: inspect_checkpoint.py reads step {k}",
          r.stderr.strip()[-600:])
    # The user's next step: submit again; it resumes from the last save.
    j2, log2 = submit("rank_killed_resume", TRAIN + ["--steps", "2000", "--checkpoint-dir", ckpt,
                                                     "--stop-at-step", str(k + 2)])
    info = box.wait_done(j2, 60)
    text = read(log2)
    check(info["JobState"] == "COMPLETED" and
          re.search(rf"resumed from '{re.escape(ckpt)}/step_{k:08d}.h5' at step {k}", text)
          is not None and saved_steps(text, 2000) == [str(k + 2)],
          f"rank_killed: a new job resumes from step {k} and saves step {k + 2} "
          f"(JobState={info['JobState']})", text[-1500:])


def case_transient():
    ckpt = os.path.join(work, "transient")
    shutil.rmtree(ckpt, ignore_errors=True)
    # 6 ranks x 4 sequences: step 6 reads positions [120, 144). An Inf
    # gradient (":grad") diverges the step whatever the spike window.
    args = TRAIN + ["--steps", "12", "--checkpoint-dir", ckpt, "--checkpoint-every", "4"]
    j, log = submit("transient", args, sbatch=["--nodes=3"],
                    env={"FSDP_TEST_TRANSIENT_FAULT": "n2:130:grad"})
    info = box.wait(j, lambda i: i.get("Restarts") == "1", 90, "requeue")
    info = box.wait_done(j, 120)
    text = read(log)
    check(info["JobState"] == "COMPLETED" and info["Restarts"] == "1"
          and info.get("ExcNodeList") == "n2",
          f"transient: requeued once without n2 and COMPLETED (JobState={info['JobState']}, "
          f"Restarts={info['Restarts']}, ExcNodeList={info.get('ExcNodeList')})", text[-1500:])
    runs = text.split(f"fsdptrain.sh: job {j} restart ")
    first, second = (runs + ["", "", ""])[1:3]
    check(first.startswith("0 ") and " on n[1-3] " in first.splitlines()[0]
          and re.search(r"transient fault at step 6: rank 2 on node n2 computed another result",
                        first) is not None
          and "fsdptrain.sh: transient fault on n2: requeueing job" in first,
          "transient: run 1 on n[1-3] names rank 2 on n2 and the script requeues without it",
          first[-1500:])
    check(second.startswith("1 ") and "n2" not in second.splitlines()[0]
          and re.search(rf"resumed from '{re.escape(ckpt)}/step_00000004.h5' at step 4", second)
          is not None, "transient: run 2, on other nodes, resumes from step 4",
          second[:1500])
    saved = saved_steps(first, 12)
    check(saved == ["4"], f"transient: run 1 saved step 4 only (steps {saved})")
    records = [json.loads(line) for line in read(os.path.join(ckpt, "metrics.jsonl")).splitlines()]
    faults = [r for r in records if r.get("transient_fault")]
    check(len(faults) == 1 and faults[0]["fault_ranks"] == [2] and faults[0]["fault_nodes"] == ["n2"],
          f"transient: the metrics name rank 2 on n2: {faults}")
    check(sorted(losses(os.path.join(ckpt, "metrics.jsonl"))) == list(range(1, 13)),
          "transient: the metrics hold steps 1..12")
    no_ranks_left(j)


CASES = {"srun": lambda: case_launch("srun"), "mpirun": lambda: case_launch("mpirun"),
         "preempt": lambda: case_preempt("srun"),
         "preempt_mpirun": lambda: case_preempt("mpirun"), "timer": case_timer, "guard": case_guard,
         "scancel": case_scancel, "rank_killed": case_rank_killed,
         "transient": case_transient}


def startup_crash(paths):
    """The first lines of a run in these logs where a rank died of a signal
    before fsdptrain printed anything (rank 0 prints only after every rank
    has left MPI_Init and joined the first collectives), else None."""
    for path in paths:
        for run in read(path).split("fsdptrain.sh: job ")[1:]:
            banner = run.find("*** Process received signal ***")
            if banner >= 0 and "\nfsdptrain: " not in run[:banner]:
                return " | ".join(run.splitlines()[:3])
    return None


def cleanup():
    """Cancel what this run submitted, so a failed case leaves no job for
    the next one (the fixture's cleanup stops the cluster)."""
    for j in jobs:
        box.run("scontrol", "update", f"JobId={j}", "Requeue=0", check=False)
        box.run("scancel", j, check=False)
    for j in jobs:
        try:
            box.wait_done(j, 20)
        except Exception as e:
            print(f"     cleanup: {e}")


def main():
    global box
    unknown = [c for c in cases if c not in CASES and c != "all"]
    if not cases or unknown:
        print(__doc__)
        return 2
    signal.signal(signal.SIGTERM, lambda s, f: sys.exit(128 + s))
    os.makedirs(work, exist_ok=True)
    own = "all" in cases
    todo = list(CASES) if own else cases
    skip = os.path.join(box_dir, "skip")
    if own:
        starter = slurm_box.Starter(box_dir)
        reason = starter.start()
        if reason:
            starter.abort()
            print("SKIP: " + reason)
            return slurm_box.SKIP
    elif os.path.exists(skip):
        print("SKIP: " + read(skip).strip())
        return slurm_box.SKIP
    try:
        box = slurm_box.Box(box_dir)
        box.cancel_all()  # a case killed by its timeout may have left a job running
        for c in todo:
            t0 = time.time()
            print(f"---- {c}", flush=True)
            for attempt in range(STARTUP_RETRIES + 1):
                n_failures, n_logs = len(failures), len(logs)
                try:
                    CASES[c]()
                except Exception as e:  # a case that cannot go on fails; the next one runs
                    traceback.print_exc()
                    check(False, f"{c}: {type(e).__name__}: {e}")
                crash = startup_crash(logs[n_logs:]) if len(failures) > n_failures else None
                if crash is None or attempt == STARTUP_RETRIES:
                    break
                print(f"RETRY {c}: Open MPI crashed inside MPI_Init (see STARTUP_RETRIES): "
                      f"{crash}", flush=True)
                del failures[n_failures:]
                box.cancel_all()
                time.sleep(RETRY_PAUSE_S)
            print(f"---- {c}: {time.time() - t0:.1f} s", flush=True)
    finally:
        if box is not None:
            cleanup()
        if own:
            left = slurm_box.stop(box_dir)
            starter.handed_over = True
            check(not left, f"no job process outlived its job: {left}")
    print(f"{len(failures)} failure(s)")
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
