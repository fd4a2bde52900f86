#!/usr/bin/env python3
"""What a checkpoint costs the training steps, without and with
--async-checkpoint, at gpt-125m's shards on the CPU (issue 35).

    bench/checkpoint/async_save_bench.py FSDPTRAIN TRAIN_H5 DIR [--ranks N] [--steps S]
                                          [--every E] [--repeat R]

Runs fsdptrain --model gpt-125m three ways, R times each in turn: no
checkpoints; --checkpoint-every E (the step waits for the whole save);
--checkpoint-every E --async-checkpoint (the step pays the host copy, the
write runs beside the next steps). Each run's --metrics gives every step's
elapsed_s; from the end of step 2 to the last step's, the time beyond a
run without checkpoints, per save, is what a save costs the training. For
the async mode it also prints what the step waited for in the save (the
host copy, bytes and ms, and the previous save), and the background
write's rate against `dd` writing fresh random bytes of the checkpoint's
size from RAM to DIR with conv=fsync (a save ends with an fsync too),
measured just before and just after each run with background saves. Files
go to DIR and are deleted.

RESULT lines, one per figure, are what a results log quotes."""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import time

ap = argparse.ArgumentParser()
ap.add_argument("exe")
ap.add_argument("data")
ap.add_argument("dir")
ap.add_argument("--ranks", type=int, default=1)
ap.add_argument("--steps", type=int, default=15)
ap.add_argument("--every", type=int, default=5)
ap.add_argument("--repeat", type=int, default=2)
a = ap.parse_args()
os.makedirs(a.dir, exist_ok=True)


def run(mode, i):
    ckpt = os.path.join(a.dir, f"ckpt_{mode}_{i}")
    metrics = os.path.join(a.dir, f"{mode}_{i}.jsonl")
    shutil.rmtree(ckpt, ignore_errors=True)
    if os.path.exists(metrics):
        os.remove(metrics)
    cmd = [a.exe, "--device", "cpu", "--model", "gpt-125m", "--train-data", a.data,
           "--seq-len", "64", "--batch-size", "1", "--steps", str(a.steps), "--log-every", "100",
           "--metrics", metrics]
    if mode != "none":
        cmd += ["--checkpoint-dir", ckpt, "--checkpoint-every", str(a.every),
                "--keep-checkpoints", "1"]
    if mode == "async":
        cmd += ["--async-checkpoint"]
    if a.ranks > 1:
        cmd = ["mpirun", "--oversubscribe", "-np", str(a.ranks)] + cmd
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    shutil.rmtree(ckpt, ignore_errors=True)
    return [json.loads(line) for line in open(metrics)]


def dd_mb_s(nbytes):
    """dd of fresh random bytes held in RAM (/dev/shm) to DIR, 64 MiB blocks,
    conv=fsync. Not /dev/zero: this machine's virtual disk writes zeros about
    five times faster than data; not /dev/urandom directly: it makes bytes
    slower than the disk takes them."""
    src = os.path.join("/dev/shm" if os.path.isdir("/dev/shm") else a.dir, "dd_source.bin")
    path = os.path.join(a.dir, "dd.bin")
    count = max(1, nbytes // (64 << 20))
    subprocess.run(["dd", "if=/dev/urandom", f"of={src}", "bs=64M", f"count={count}"],
                   check=True, capture_output=True)
    t0 = time.time()
    subprocess.run(["dd", f"if={src}", f"of={path}", "bs=64M", "conv=fsync"], check=True,
                   capture_output=True)
    s = time.time() - t0
    os.remove(path)
    os.remove(src)
    return count * (64 << 20) / 1e6 / s


def timed(recs):
    """Seconds from the end of step 2 to the end of the last step, and the
    saves made in between (step 1 and 2 pay one-time costs)."""
    ends = {r["step"]: r["elapsed_s"] for r in recs if "loss" in r}
    saved = {r["step"] for r in recs if "checkpoint" in r or "checkpoint_started" in r}
    last = max(ends)
    return ends[last] - ends[2], len([x for x in saved if 2 <= x < last])


def med(v):
    return statistics.median(v) if v else float("nan")


found = {m: [] for m in ("none", "sync", "async")}
dd = []
file_bytes = 0
for i in range(a.repeat):
    found["none"].append(run("none", i))
    found["sync"].append(run("sync", i))
    # dd just before and just after the background saves: this VM's disk
    # rate swings by 2-3x from one minute to the next.
    dd.append(dd_mb_s(file_bytes or (1370 << 20)))
    found["async"].append(run("async", i))
    saves = [r for r in found["async"][-1] if r.get("background")]
    file_bytes = max([r["file_bytes"] for r in saves] + [file_bytes])
    dd.append(dd_mb_s(file_bytes))

print(f"gpt-125m on {a.ranks} rank(s), seq-len 64, batch 1, {a.steps} steps, "
      f"saves every {a.every}; {a.repeat} run(s) per mode, in turn")
base_s = med([timed(r)[0] for r in found["none"]])
n_steps = a.steps - 2
print(f"none : steps 3-{a.steps} took {base_s:.2f} s (median): {base_s / n_steps:.3f} s a step")
per_save = {}
for mode in ("sync", "async"):
    t = med([timed(r)[0] for r in found[mode]])
    saves = timed(found[mode][0])[1]
    per_save[mode] = (t - base_s) / saves
    print(f"{mode:5s}: steps 3-{a.steps} took {t:.2f} s (median), with {saves} saves: "
          f"{per_save[mode]:.2f} s more a save")
copies = [r for run_ in found["async"] for r in run_ if "checkpoint_started" in r]
writes = [r for run_ in found["async"] for r in run_ if r.get("background")]
later = [r for r in copies if r["step"] > a.every] or copies  # the buffers exist
copy_ms = med([r["host_copy_s"] * 1e3 for r in later])
first_copy_ms = med([r["host_copy_s"] * 1e3 for r in copies if r["step"] == a.every])
wait_ms = med([r["waited_for_previous_save_s"] * 1e3 for r in copies])
write_mb_s = med([r["write_mb_per_s"] for r in writes])
copy_bytes = copies[0]["host_copy_bytes"] if copies else 0
print(f"async: the step waits in the save for the host copy, {copy_bytes / 1e6:.0f} MB in "
      f"{copy_ms:.0f} ms (median; the first of a run, which allocates the buffers, "
      f"{first_copy_ms:.0f} ms), and for the previous save, {wait_ms:.0f} ms (median); the rest "
      f"of the {per_save['async']:.2f} s is the steps run beside the write, which shares the "
      f"machine's {os.cpu_count()} cores (checksums, HDF5's copies)")
print(f"async: background write {write_mb_s:.0f} MB/s (median of {len(writes)}), file "
      f"{file_bytes / 1e6:.0f} MB; dd of random bytes from RAM to the same directory, "
      f"conv=fsync: {med(dd):.0f} MB/s (median of {len(dd)}: {', '.join(f'{x:.0f}' for x in dd)})")
print(f"RESULT step_s_no_checkpoints={base_s / n_steps:.3f}")
print(f"RESULT extra_s_per_save_sync={per_save['sync']:.2f}")
print(f"RESULT extra_s_per_save_async={per_save['async']:.2f}")
print(f"RESULT async_host_copy_bytes={copy_bytes} async_host_copy_ms={copy_ms:.0f} "
      f"first_copy_ms={first_copy_ms:.0f} waited_for_previous_ms={wait_ms:.0f}")
sync_mb_s = file_bytes / 1e6 / per_save["sync"] if per_save["sync"] > 0 else float("nan")
print(f"sync : a save's {file_bytes / 1e6:.0f} MB over its {per_save['sync']:.2f} s: "
      f"{sync_mb_s:.0f} MB/s")
print(f"RESULT async_write_mb_s={write_mb_s:.0f} dd_mb_s={med(dd):.0f} "
      f"ratio={write_mb_s / med(dd):.2f} dd_min_mb_s={min(dd):.0f} dd_max_mb_s={max(dd):.0f}")
print(f"RESULT sync_save_mb_s={sync_mb_s:.0f}")
