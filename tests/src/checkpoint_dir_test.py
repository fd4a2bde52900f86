#!/usr/bin/env python3
"""The checkpoint directory as a user meets it (issue 9, cases 5, 6, 7, 11):
- a second run into a directory in use refuses at start, naming the holder;
  a run killed with SIGKILL leaves no stale lock;
- an unusable --checkpoint-dir (under a regular file, on a read-only file
  system) is one error line before any training step;
- a full disk: a save that does not fit is one error line saying so, with no
  .tmp left and `latest` and the earlier checkpoint untouched (1 and 2
  ranks, no crash); a disk that fills up during a save does not break it;
- --metrics in a folder not made yet is created;
- warnings go to stderr; .tmp files of crashed saves are removed at start,
  with a line; a checkpoint is the size of its data and has no holes.
The tmpfs cases (read-only file system, full disk) need mount (root in a
container, as in CI) and run as their own CTest entry (PART tmpfs), which
exits 77, reported as skipped, where mounting is not permitted."""
import os
import shutil
import signal
import socket
import subprocess
import sys

import h5py
import numpy as np

from program_checks import wait_for

# PART: "main" (default), or "tmpfs", the cases that mount a tmpfs (root in
# a container, as in CI): a CTest entry of their own, which reports itself
# skipped (exit 77) where mounting is not permitted.
exe, example, work = sys.argv[1], sys.argv[2], sys.argv[-1]
part = sys.argv[3] if len(sys.argv) == 5 else "main"
mpiexec = os.environ.get("MPIEXEC", "mpirun")
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
failures = []
mounts = []
children = []  # killed before unmounting, should a check fail half way


def args(ckpt, steps=4, extra=()):
    return [exe, "--device", "cpu", "--model", "tiny",
            "--train-data", os.path.join(example, "kjv_train.h5"),
            "--seq-len", "32", "--batch-size", "4", "--steps", str(steps), "--log-every", "1",
            "--checkpoint-dir", ckpt, *extra]


def run(ckpt, steps=4, extra=(), ranks=1, env=None):
    cmd = ([mpiexec, "--oversubscribe", "-np", str(ranks)] if ranks > 1 else []) + \
        args(ckpt, steps, extra)
    # A rank left alone in a collective is ended by the watchdog, not the
    # test's timeout; a hang still fails the check instead of the script.
    env = dict(os.environ, FSDP_COLLECTIVE_TIMEOUT_S="60", **(env or {}))
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=150, env=env)
    except subprocess.TimeoutExpired as e:
        text = [x.decode(errors="replace") if isinstance(x, bytes) else (x or "")
                for x in (e.stdout, e.stderr)]
        return subprocess.CompletedProcess(cmd, -9, text[0], text[1] + "[hung]")


def check(cond, what, r=None):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)
        if r is not None:
            print(f"     exit {r.returncode}\n     stdout: {r.stdout[-1500:]}\n"
                  f"     stderr: {r.stderr[-1500:]}")


def errors(r):
    return [l for l in r.stderr.splitlines() if l.startswith("fsdptrain: error:")]


def trained(r):
    return any(l.startswith("step ") for l in r.stdout.splitlines())


def mount_tmpfs(path, options):
    """Mounts a tmpfs at path; returns None or why it could not."""
    os.makedirs(path, exist_ok=True)
    m = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", path],
                       capture_output=True, text=True)
    if m.returncode != 0:
        return (m.stderr or m.stdout).strip() or f"mount exited {m.returncode}"
    mounts.append(path)
    return None


def no_tmp(d):
    return not any(n.endswith(".tmp") for n in os.listdir(d))


def text_of(path):
    try:
        return open(path).read()
    except OSError:
        return ""


def latest(d):
    return text_of(os.path.join(d, "latest")).strip()


try:
    if part == "main":
        # Case 7: the lock. The first run trains until told to stop; a second one
        # into the same directory, with or without --resume, refuses at once.
        lock_dir = os.path.join(work, "locked")
        first = subprocess.Popen(args(lock_dir, steps=100000), stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
        children.append(first)
        wait_for(lambda: "pid" in text_of(os.path.join(lock_dir, ".lock")), seconds=30)
        for extra in [(), ("--resume", "auto")]:
            r = run(lock_dir, extra=extra)
            e = errors(r)
            check(r.returncode != 0 and len(e) == 1 and lock_dir in e[0] and
                  f"held by pid {first.pid} on host {socket.gethostname()} since" in e[0] and
                  not trained(r),
                  f"second run {' '.join(extra) or '(fresh)'} into a directory in use: refused at "
                  "start, naming the holder", r)
        check(first.poll() is None, "the first run goes on")
        first.send_signal(signal.SIGTERM)
        out, err = first.communicate(timeout=120)
        check(first.returncode == 0 and len(os.listdir(lock_dir)) >= 3,
              f"the first run stops and saves normally (exit {first.returncode})")

        # A run killed with SIGKILL holds nothing: the next one starts.
        killed = subprocess.Popen(args(lock_dir, steps=100000, extra=("--resume", "auto")),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        check(wait_for(lambda: f"pid {killed.pid}\n" in text_of(os.path.join(lock_dir, ".lock")),
                       seconds=60), "the next run takes the lock and writes its pid into it")
        killed.kill()
        killed.communicate()
        saved_step = int(latest(lock_dir)[len("step_"):-len(".h5")])
        r = run(lock_dir, steps=saved_step + 1, extra=("--resume", "auto"))
        check(r.returncode == 0 and f"at step {saved_step}" in r.stdout,
              "after kill -9 of the holder the directory is free again", r)

        # Case 5: unusable directories are found before any training.
        plain = os.path.join(work, "a_file")
        open(plain, "w").write("x")
        bad = os.path.join(plain, "ckpt")
        r = run(bad, steps=3)
        e = errors(r)
        check(r.returncode != 0 and len(e) == 1 and bad in e[0] and "--checkpoint-dir" in e[0] and
              not trained(r), "--checkpoint-dir under a regular file: one error line, no training", r)

        # --metrics inside a checkpoint folder not made yet (a first sbatch
        # submission): the folders are created; under a regular file, one error.
        fresh = os.path.join(work, "fresh", "ckpt")
        r = run(fresh, steps=2, extra=("--metrics", os.path.join(fresh, "logs", "metrics.jsonl")))
        check(r.returncode == 0 and os.path.exists(os.path.join(fresh, "logs", "metrics.jsonl")),
              "--metrics in a folder that does not exist yet: created, metrics written", r)
        r = run(os.path.join(work, "m2"), steps=2,
                extra=("--metrics", os.path.join(plain, "m", "metrics.jsonl")))
        e = errors(r)
        check(r.returncode != 0 and len(e) == 1 and "--metrics" in e[0] and plain in e[0] and
              not trained(r), "--metrics under a regular file: one error line, no training", r)

    if part == "tmpfs":
        ro = os.path.join(work, "ro")
        why = mount_tmpfs(ro, "ro,size=1m")
        if why:
            print(f"skipped: cannot mount a tmpfs here ({why}); the read-only and full-disk "
                  "cases need it (root in a container, as in CI)")
            sys.exit(77)
        for d in [ro, os.path.join(ro, "sub")]:
            r = run(d, steps=3)
            e = errors(r)
            check(r.returncode != 0 and len(e) == 1 and d in e[0] and
                  ("not writable" in e[0] or "cannot be created" in e[0]) and not trained(r),
                  f"--checkpoint-dir {os.path.relpath(d, work)} on a read-only file system: one "
                  "error line, no training", r)

        # Case 6: a full disk.
        full = os.path.join(work, "full")
        why = mount_tmpfs(full, "size=2m")
        check(why is None, f"a second tmpfs mounts for the full disk ({why or 'mounted'})")
        for ranks in [1, 2]:
            d = os.path.join(full, f"np{ranks}")
            r = run(d, steps=3, extra=("--checkpoint-every", "1"), ranks=ranks)
            e = errors(r)
            check(r.returncode not in (0, 139) and r.returncode > 0 and len(e) == 1 and
                  "cannot save step 2 to '" + os.path.join(d, "step_00000002.h5") + "'" in e[0] and
                  "the disk is full" in e[0] and "mca_fbtl" not in r.stderr and
                  "Segmentation" not in r.stderr,
                  f"{ranks} rank(s): a save that does not fit is one error line saying the disk "
                  "is full, and a clean exit", r)
            check(no_tmp(d) and latest(d) == "step_00000001.h5" and
                  sorted(n for n in os.listdir(d) if n.endswith(".h5")) == ["step_00000001.h5"],
                  f"{ranks} rank(s): no .tmp left, `latest` and step 1 untouched")
            with h5py.File(os.path.join(d, "step_00000001.h5"), "r") as f:
                check(int(f.attrs["step"]) == 1 and
                      np.isfinite(f["model/blocks.0.attn.wq"][()]).all(),
                      f"{ranks} rank(s): step 1 still reads")
            shutil.rmtree(d)

        # A disk that fills up while a save is under way: the save had its
        # space set aside before writing, so it completes.
        full = os.path.join(work, "full4")
        mount_tmpfs(full, "size=4m")
        d = os.path.join(full, "race")
        r = run(d, steps=4, extra=("--checkpoint-every", "2", "--stop-at-step", "2"))
        go = os.path.join(work, "go")
        env = dict(os.environ, FSDP_TEST_CHECKPOINT_PAUSE_S="60",
                   FSDP_TEST_CHECKPOINT_PAUSE_UNTIL=go)
        p = subprocess.Popen(args(d, steps=4, extra=("--checkpoint-every", "2", "--resume", "auto")),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        children.append(p)
        wait_for(lambda: os.path.exists(os.path.join(d, "step_00000004.h5.tmp")))
        try:
            with open(os.path.join(full, "filler"), "wb", buffering=0) as f:
                while True:
                    f.write(b"\0" * 4096)
        except OSError:
            pass  # full
        check(shutil.disk_usage(full).free < 4096, "the disk is full while the save is paused")
        open(go, "w").close()
        out, err = p.communicate(timeout=120)
        check(p.returncode == 0 and latest(d) == "step_00000004.h5" and no_tmp(d),
              f"the disk filled up during the save of step 4: it still completes "
              f"(exit {p.returncode}; {err.strip()[-300:]})")
        os.remove(os.path.join(full, "filler"))

    if part == "main":
        # Case 11: warnings on stderr; .tmp of crashed saves removed at start.
        w = os.path.join(work, "w")
        run(w, steps=6, extra=("--checkpoint-every", "2", "--stop-at-step", "4"))
        with open(os.path.join(w, "step_00000004.h5"), "r+b") as f:
            f.truncate(os.path.getsize(os.path.join(w, "step_00000004.h5")) // 3)
        for n in ["step_00000006.h5.tmp", "latest.tmp", "notes.tmp"]:
            open(os.path.join(w, n), "w").write("half")
        r = run(w, steps=6, extra=("--resume", "auto", "--stop-at-step", "5"))
        check(r.returncode == 0 and "warning" in r.stderr and "step_00000004.h5" in r.stderr and
              "warning" not in r.stdout and "at step 2" in r.stdout,
              "the damaged newest checkpoint is skipped with a warning on stderr, not stdout", r)
        check(not os.path.exists(os.path.join(w, "step_00000006.h5.tmp")) and
              not os.path.exists(os.path.join(w, "latest.tmp")) and
              os.path.exists(os.path.join(w, "notes.tmp")) and
              "removed '" + os.path.join(w, "step_00000006.h5.tmp") + "'" in r.stdout,
              "stray .tmp files of our names are removed at start with a line, others kept", r)

        # Case 11: a checkpoint is the size of its data, without holes.
        path = os.path.join(w, "step_00000005.h5")
        with h5py.File(path, "r") as f:
            data = []
            f.visititems(lambda n, o: data.append(o.nbytes) if isinstance(o, h5py.Dataset) else None)
        st = os.stat(path)
        check(sum(data) <= st.st_size <= sum(data) * 1.05 + 64 * 1024 and
              st.st_blocks * 512 >= st.st_size,
              f"checkpoint is {st.st_size} bytes for {sum(data)} bytes of tensors, "
              f"{st.st_blocks * 512} on disk (no holes)")
finally:
    for c in children:
        if c.poll() is None:
            c.kill()
            c.communicate()
    for m in reversed(mounts):
        # Lazily where a failed run's processes still hold files there.
        if subprocess.run(["umount", m]).returncode != 0:
            subprocess.run(["umount", "-l", m])

print(f"{0 if failures else 1} passed, {1 if failures else 0} failed")
for f in failures:
    print("FAIL:", f)
sys.exit(1 if failures else 0)
