#!/usr/bin/env python3
"""Throughput of tools/prepare_data.py's `import` (issue 67: at least 1 GB/s
of input on a warm disk), beside a plain copy of the same bytes.

  import_bench.py [--gb 2] [--work /tmp/import_bench] [--repeat 3]

The input is nanoGPT's layout (raw uint16, GPT-2's end-of-text 50256 after
each document of 1-1000 tokens), --gb gigabytes of it, and the same tokens
as a Megatron dataset (its .bin is the same bytes, hard-linked; the .idx has
one sequence per document). It is read once first, so that it is in the page
cache ("warm"). Each import writes 100M-token shards and a 10M-token
validation tail, as a large corpus would be imported, to two places: the
--work directory's disk, and /dev/shm (memory), which shows the program's own
speed apart from the disk's. `cp` of the input to each place is the ceiling.
GB/s are 1e9 bytes of input per second of the whole command's wall time,
Python's start-up included; best and median of --repeat runs (a virtual
disk's write-back makes single runs vary twofold).
"""

import argparse
import os
import platform
import shutil
import struct
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
PREPARE = os.path.join(HERE, "..", "..", "tools", "prepare_data.py")
EOT = 50256


def make_input(work, gb):
    raw = os.path.join(work, "train.bin")
    n = int(gb * 1e9) // 2
    if not os.path.exists(raw) or os.path.getsize(raw) != 2 * n:
        rng = np.random.default_rng(0)
        with open(raw + ".tmp", "wb") as f:
            step = 1 << 26
            for start in range(0, n, step):
                part = rng.integers(0, EOT, min(step, n - start), dtype=np.uint16)
                # Documents of 1-1000 tokens: an end-of-text every ~500 on average.
                part[rng.random(len(part)) < 1 / 500] = EOT
                part.tofile(f)
        os.replace(raw + ".tmp", raw)
    prefix = os.path.join(work, "meg_text_document")
    if not os.path.exists(prefix + ".idx"):
        if os.path.exists(prefix + ".bin"):
            os.remove(prefix + ".bin")
        os.link(raw, prefix + ".bin")
        tokens = np.memmap(raw, dtype=np.uint16, mode="r")
        ends = np.concatenate((np.flatnonzero(tokens == EOT) + 1, [n]))
        ends = np.unique(ends)
        lengths = np.diff(np.concatenate(([0], ends))).astype(np.int32)
        with open(prefix + ".idx", "wb") as f:
            f.write(b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, 8, len(ends), len(ends) + 1))
            f.write(lengths.tobytes())
            f.write((np.concatenate(([0], ends[:-1])) * 2).astype("<i8").tobytes())
            f.write(np.arange(len(ends) + 1, dtype="<i8").tobytes())
    return raw, prefix, n


def warm(path):
    with open(path, "rb", buffering=0) as f:
        while f.read(1 << 24):
            pass


def timed(cmd):
    """(wall seconds, stdout, peak RSS in MB) of one command."""
    t = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = p.stdout.read()
    _, status, usage = os.wait4(p.pid, 0)
    dt = time.monotonic() - t
    if status:
        sys.exit(f"import_bench: {' '.join(cmd)} failed:\n{out}")
    return dt, out, usage.ru_maxrss / 1024


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gb", type=float, default=2.0)
    ap.add_argument("--work", default="/tmp/import_bench")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    raw, prefix, n = make_input(args.work, args.gb)
    size = os.path.getsize(raw)
    print(f"import_bench: {platform.node()}, {os.cpu_count()} cores, python "
          f"{platform.python_version()}, numpy {np.__version__}")
    print(f"input: {n:,} uint16 tokens ({size / 1e9:.2f} GB), as raw and as a Megatron dataset")
    places = [("disk", os.path.join(args.work, "out"))]
    if os.path.isdir("/dev/shm"):
        places.append(("memory", "/dev/shm/import_bench_out"))
    cases = [("raw", [raw, "--eos-id", str(EOT)]),
             ("megatron", [prefix, "--eos-id", str(EOT)]),
             ("megatron --append-eos", [prefix, "--eos-id", str(EOT), "--append-eos"])]
    for where, out in places:
        for label, extra in [("cp", None)] + cases:
            times, rss, note = [], 0, ""
            for _ in range(args.repeat):
                shutil.rmtree(out, ignore_errors=True)
                os.makedirs(out)
                warm(raw)
                if extra is None:
                    dt, _, mb = timed(["cp", raw, os.path.join(out, "copy.bin")])
                else:
                    fmt = label.split()[0]
                    dt, stdout, mb = timed([sys.executable, PREPARE, "import", fmt, *extra,
                                            "--out", os.path.join(out, "t"), "--vocab-size",
                                            str(EOT + 1), "--shard-tokens", "100M",
                                            "--val-tokens", "10M"])
                    note = [ln for ln in stdout.splitlines() if "done:" in ln][0]
                times.append(dt)
                rss = max(rss, mb)
            best, median = min(times), sorted(times)[len(times) // 2]
            print(f"{where:6s} {label:22s} best {size / 1e9 / best:5.2f} GB/s, median "
                  f"{size / 1e9 / median:5.2f} GB/s  (runs {', '.join(f'{t:.2f}' for t in times)}"
                  f" s; peak RSS {rss:.0f} MB)")
            if note:
                print(f"       {note}")
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
