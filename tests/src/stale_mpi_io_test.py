#!/usr/bin/env python3
"""A rank killed inside MPI_File_open must not hang the next run on the node
(comm/mpi_io_choice.h). Open MPI's own MPI-IO layer (ompio) leaves a taken
POSIX semaphore /dev/shm/sem.OMPIO_<file name> behind such a kill, and every
later open of a file of that name waits on it forever; the chaos test's
resumed run hung in the save it had been killed in that way.

This test plants such semaphores (32 zero bytes: glibc's sem_t with value 0)
for the checkpoint a 2-rank run saves at step 3 and for the file a resumed
run then reads, and asserts:
- the run saves step 3 and a resume from it completes, each well within a
  bound (fsdptrain chooses ROMIO, which keeps no such state);
- the planted state is real: the same save with the user's own choice
  OMPI_MCA_io=ompio (which fsdptrain leaves alone) does not get past it.
Skipped (77) without /dev/shm or without Open MPI."""
import os
import shutil
import signal
import subprocess
import sys
import time

exe, example, work = sys.argv[1:4]
mpiexec = os.environ.get("MPIEXEC", "mpirun")
BOUND_S = 60  # a run of a few steps takes about a second
HANG_S = 10  # how long the ompio control is watched before it counts as hung
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)


def command(ckpt, steps):
    return [mpiexec, "--oversubscribe", "-np", "2", exe, "--device", "cpu", "--model", "tiny",
            "--n-layer", "1", "--d-model", "32", "--n-head", "2", "--n-kv-head", "1",
            "--d-ff", "64", "--seq-len", "16", "--batch-size", "1", "--steps", str(steps),
            "--warmup-steps", "1", "--train-data", os.path.join(example, "kjv_val.h5"),
            "--checkpoint-dir", ckpt, "--checkpoint-every", "3", "--log-every", "1",
            "--resume", "auto"]


def kill_session(sid):
    """SIGKILL every process of the session: mpirun and its ranks, which
    mpirun puts in process groups of their own."""
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat") as f:
                if int(f.read().rsplit(")", 1)[1].split()[3]) == sid:
                    os.kill(int(entry), signal.SIGKILL)
        except (OSError, ValueError, IndexError):
            continue


def run(ckpt, steps, limit, env=None):
    """(exit code or None if still running after `limit` s, stdout, stderr)."""
    p = subprocess.Popen(command(ckpt, steps), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=env, start_new_session=True)
    try:
        out, err = p.communicate(timeout=limit)
        return p.returncode, out, err
    except subprocess.TimeoutExpired:
        kill_session(p.pid)
        out, err = p.communicate()
        return None, out, err


def main():
    if not os.path.isdir("/dev/shm"):
        print("skipped: no /dev/shm")
        return 77
    version = subprocess.run([mpiexec, "--version"], capture_output=True, text=True).stdout
    if "Open MPI" not in version and "OpenRTE" not in version:
        print(f"skipped: {mpiexec} is not Open MPI")
        return 77
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    planted = [f"/dev/shm/sem.OMPIO_{name}"
               for name in ("step_00000003.h5.tmp", "step_00000003.h5")]
    try:
        for path in planted:
            with open(path, "wb") as f:
                f.write(bytes(32))

        ckpt = os.path.join(work, "ckpt")
        t0 = time.time()
        rc, out, err = run(ckpt, 3, BOUND_S)
        check(rc == 0, f"a 2-rank run saves step 3 past a stale taken semaphore in "
              f"{time.time() - t0:.1f} s (exit {rc}): {err.strip()[-300:]}")
        check(os.path.exists(os.path.join(ckpt, "step_00000003.h5")), "step_00000003.h5 saved")

        t0 = time.time()
        rc, out, err = run(ckpt, 6, BOUND_S)
        resumed = [l for l in out.splitlines() if "resumed from" in l]
        check(rc == 0 and resumed and "step_00000003.h5" in resumed[0],
              f"--resume auto reads step_00000003.h5 and runs to step 6 in "
              f"{time.time() - t0:.1f} s (exit {rc}): {resumed or err.strip()[-300:]}")

        # The control: the user's choice of ompio is honoured, and the planted
        # semaphore stops it, so the passes above prove the choice of ROMIO.
        env = dict(os.environ, OMPI_MCA_io="ompio")
        rc, out, err = run(os.path.join(work, "control"), 3, HANG_S, env)
        check(rc is None, f"the control (OMPI_MCA_io=ompio) hangs at the planted semaphore "
              f"(exit {rc}; if it ran, this Open MPI no longer keeps that state and the "
              f"test proves nothing)")
    finally:
        for path in planted:
            try:
                os.remove(path)
            except FileNotFoundError:
                pass
    print("passed" if not failures else f"FAILED: {len(failures)}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
