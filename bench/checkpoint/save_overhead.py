#!/usr/bin/env python3
"""What a save costs beyond the kernel's own write: one ordinary gpt-125m save
on one rank, under `strace -T`, split into the time inside pwrite64 and fsync
(the copy into the page cache and the flush, which `dd` pays too) and the
rest (HDF5, checksums, the save's own bookkeeping). The rest is what the code
can shrink; the syscalls are the disk's. On a noisy virtual disk, where dd
moved between 395 and 1043 MB/s within minutes
(bench/results/checkpoint_checksum_cpu_2026-11-26.txt), this split is
steadier than a ratio to dd.

  save_overhead.py DATA DIR EXE [EXE ...] [--pairs 5]

Several EXEs (say, builds of two commits) run in turn, --pairs rounds of
one save each, so that they see the same minutes of the disk. Needs strace.
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess

ap = argparse.ArgumentParser()
ap.add_argument("data")
ap.add_argument("dir")
ap.add_argument("exe", nargs="+")
ap.add_argument("--pairs", type=int, default=5)
a = ap.parse_args()

CALL = re.compile(r"^\d+\s+(\d+\.\d+) (\w+)\((.*)<(\d+\.\d+)>$")


def one_save(exe):
    ckpt = os.path.join(a.dir, "ckpt_overhead")
    trace = os.path.join(a.dir, "overhead.strace")
    shutil.rmtree(ckpt, ignore_errors=True)
    cmd = [exe, "--device", "cpu", "--model", "gpt-125m", "--train-data", a.data, "--seq-len", "64",
           "--batch-size", "1", "--steps", "2", "--log-every", "100", "--checkpoint-dir", ckpt,
           "--checkpoint-every", "2"]
    subprocess.run(["strace", "-f", "-ttt", "-T", "-e", "trace=openat,pwrite64,fsync,rename",
                    "-o", trace] + cmd, check=True, capture_output=True)
    calls = [m.groups() for m in map(CALL.match, open(trace).read().splitlines()) if m]
    assert calls, f"no system calls read from {trace}"
    tmp = os.path.join(ckpt, "step_00000002.h5.tmp")
    t0 = next(float(t) for t, name, args, _ in calls if name == "openat" and tmp in args)
    t1 = next(float(t) for t, name, args, _ in calls if name == "rename" and tmp in args)
    inside = {n: sum(float(d) for t, name, _, d in calls if name == n and t0 <= float(t) <= t1)
              for n in ("pwrite64", "fsync")}
    size = sum(os.path.getsize(os.path.join(ckpt, f)) for f in os.listdir(ckpt) if f.endswith(".h5"))
    shutil.rmtree(ckpt)
    os.remove(trace)
    return t1 - t0, inside["pwrite64"], inside["fsync"], size


a.dir = os.path.abspath(a.dir)
os.makedirs(a.dir, exist_ok=True)
runs = {exe: [] for exe in a.exe}
for i in range(a.pairs):
    for exe in a.exe:
        save, pw, fs, size = one_save(exe)
        runs[exe].append((save, pw, fs))
        print(f"round {i}: {exe}: save {save:.2f} s = pwrite64 {pw:.2f} + fsync {fs:.2f} "
              f"+ the rest {save - pw - fs:.2f} s ({size / 1e6:.0f} MB)", flush=True)
for n, exe in enumerate(a.exe):
    save = statistics.median(r[0] for r in runs[exe])
    calls = statistics.median(r[1] + r[2] for r in runs[exe])
    rest = statistics.median(r[0] - r[1] - r[2] for r in runs[exe])
    print(f"{exe}: median save {save:.2f} s, inside pwrite64+fsync {calls:.2f} s, "
          f"the rest {rest:.2f} s; the save runs at {calls / save:.2f} of its own syscalls' rate")
    print(f"RESULT exe={n} save_s={save:.2f} syscalls_s={calls:.2f} rest_s={rest:.2f} "
          f"of_syscall_rate={calls / save:.2f}")
