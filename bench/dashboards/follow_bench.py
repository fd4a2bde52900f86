#!/usr/bin/env python3
"""What tools/follow_metrics.py costs a run (issue 67: dashboards "without
slowing the step"), and how fast it reads.

  follow_bench.py BUILD_DIR [--pairs 5] [--steps 600] [--records 100000]

1. Step time beside a follower. The CPU demo model (tools/tiny_demo.ini,
   --steps of them) runs --pairs times alone and --pairs times with a live
   follower writing TensorBoard and W&B (offline) at --poll 0.5 (four times
   more often than its default), alternating, so that drift on the machine
   falls on both alike. Per run: the median tokens/s of its steps after the
   first 10; reported: the median over runs of each kind, their ratio, and
   the follower's own CPU seconds per run (os.wait4; its start-up imports
   included). The demo's step is ~15 ms on two cores, far shorter than a
   GPU run's, so each poll weighs more here than it would there.
2. Reading speed. A metrics file of --records step records (a long run's),
   written here, is read by `--once` into a fresh TensorBoard folder (what
   a follower started late, or started again after a requeue, replays
   before it is live); reported: records per second, the whole command.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FOLLOW = os.path.join(ROOT, "tools", "follow_metrics.py")


def demo(build, metrics, steps):
    cmd = [os.path.join(build, "src", "fsdptrain"), "--config", os.path.join(ROOT, "tools", "tiny_demo.ini"),
           "--train-data", os.path.join(build, "example", "kjv_train.h5"),
           "--val-data", os.path.join(build, "example", "kjv_val.h5"), "--steps", str(steps),
           "--samples", "0", "--metrics", metrics]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    tok = [r["tokens_per_s"] for r in map(json.loads, open(metrics)) if "loss" in r and r["step"] > 10]
    return statistics.median(tok)


def step_time(build, work, pairs, steps):
    env = dict(os.environ, WANDB_MODE="offline", WANDB_SILENT="true")
    alone, beside, cpu = [], [], []
    for i in range(pairs):
        m = os.path.join(work, f"alone{i}.jsonl")
        alone.append(demo(build, m, steps))
        m = os.path.join(work, f"beside{i}.jsonl")
        open(m, "w").close()
        f = subprocess.Popen([sys.executable, FOLLOW, m, "--tensorboard", os.path.join(work, f"tb{i}"),
                              "--wandb", "bench", "--wandb-dir", os.path.join(work, f"wb{i}"),
                              "--poll", "0.5"], env=env)
        time.sleep(3)  # its imports done, it is polling
        t0 = time.time()
        beside.append(demo(build, m, steps))
        wall = time.time() - t0
        f.terminate()
        _, _, usage = os.wait4(f.pid, 0)  # the follower's own CPU time
        f.returncode = 0
        cpu.append(usage.ru_utime + usage.ru_stime)
        print(f"pair {i + 1}: alone {alone[-1]:.0f} tok/s, beside a follower {beside[-1]:.0f} tok/s; "
              f"the follower's CPU {cpu[-1]:.2f} s (start-up included) over a {wall:.1f} s run", flush=True)
    a, b = statistics.median(alone), statistics.median(beside)
    print(f"MEASURED step time beside a follower (TensorBoard + W&B offline, --poll 0.5), {pairs} pairs of "
          f"{steps}-step demo runs: median tokens/s alone {a:.0f}, beside {b:.0f}, ratio {b / a:.3f}; "
          f"follower CPU median {statistics.median(cpu):.2f} s a run, start-up included")


def reading(work, records):
    m = os.path.join(work, "long.jsonl")
    with open(m, "w") as f:
        f.write(json.dumps({"run_start_unix_s": 1.8e9, "start_step": 0, "resumed_from": None, "ranks": 8,
                            "config": {"lr": 0.003}}) + "\n")
        for i in range(1, records + 1):
            f.write(json.dumps({"step": i, "loss": 3 + 1 / i, "lr": 0.003, "grad_norm": 0.3,
                                "tokens_seen": i * 524288, "tokens_per_s": 1.8e5, "data_wait_s": 1e-5,
                                "comm_wait_s": 0.001, "mfu": 0.5, "peak_rss_bytes_max_rank": 4e9,
                                "peak_device_bytes_max_rank": 6e10, "elapsed_s": i * 0.3,
                                "train_s": i * 0.3}) + "\n")
            if i % 1000 == 0:
                f.write(json.dumps({"step": i, "val_loss": 3.1, "train_s": i * 0.3}) + "\n")
    t0 = time.time()
    subprocess.run([sys.executable, FOLLOW, m, "--tensorboard", os.path.join(work, "tb_long"), "--once"],
                   check=True)
    s = time.time() - t0
    mb = os.path.getsize(m) / 1e6
    print(f"MEASURED reading: {records} step records ({mb:.0f} MB) to TensorBoard with --once in {s:.1f} s, "
          f"{records / s:.0f} records/s")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("build")
    p.add_argument("--pairs", type=int, default=5)
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--records", type=int, default=100000)
    a = p.parse_args()
    work = tempfile.mkdtemp(prefix="follow_bench_")
    try:
        print(f"machine: {os.cpu_count()} CPUs; python {sys.version.split()[0]}", flush=True)
        step_time(a.build, work, a.pairs, a.steps)
        reading(work, a.records)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
