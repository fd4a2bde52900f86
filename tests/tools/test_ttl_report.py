#!/usr/bin/env python3
"""CTest for bench/cuda/ttl_report.py, the time-to-loss report of issue 30.

  test_ttl_report.py TTL_REPORT_PY

Four metrics files made here, with clocks worked by hand: a reference cut
before its last step (complete=false, its last validation stands in), an
fsdptrain run with train_s on its validation lines, a Muon run that never
reaches the reference's loss (optimizer=muon, reach_ref_s=nan), and one from before
train_s existed, whose clock the report rebuilds from the step lines (host
time between steps; a step after an evaluation, and the first, by
tokens / tokens_per_s). Checks each TTL line's train_s, val_loss,
reach_ref_s and tokens_per_s, and that --png writes a picture (where
matplotlib is installed). Then issue 63's torchtitan runs: their names, and
--ref best:torchtitan choosing the run with the lowest final loss.
"""

import json
import os
import subprocess
import sys
import tempfile

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL: " + what)


def write(path, lines):
    with open(path, "w") as f:
        for l in lines:
            f.write(json.dumps(l) + "\n")


def run_report(report, *args):
    """ttl_report.py's exit, output and TTL lines."""
    r = subprocess.run([sys.executable, report, *args], capture_output=True, text=True)
    print(r.stdout + r.stderr)
    return r, [l for l in r.stdout.splitlines() if l.startswith("TTL ")]


def main():
    report = sys.argv[1]
    with tempfile.TemporaryDirectory() as d:
        ref = os.path.join(d, "ttl_torch_compile.jsonl")
        write(ref, [{"step": 0, "val_loss": 5.0, "train_s": 0.0}] +
              [{"step": n, "loss": 4.0, "lr": 1e-3} for n in range(1, 201)] +
              [{"step": 100, "val_loss": 4.0, "train_s": 10.0},
               {"step": 200, "val_loss": 3.5, "train_s": 20.0}])
        bf16 = os.path.join(d, "ttl_fsdptrain_bf16.jsonl")
        write(bf16, [{"step": 0, "val_loss": 5.0, "train_s": 0.0}] +
              [{"step": n, "loss": 4.0, "tokens_seen": 100 * n, "tokens_per_s": 50.0,
                "elapsed_s": 1.0 * n, "train_s": 0.03 * n} for n in range(1, 301)] +
              [{"step": 100, "val_loss": 3.6, "train_s": 5.0},
               {"step": 200, "val_loss": 3.4, "train_s": 9.0},
               {"step": 300, "val_loss": 3.2, "train_s": 13.0},
               {"step": 300, "val_loss": 3.2, "train_s": 13.0}])  # the final evaluation again
        # Before train_s: elapsed_s holds the warm-up (step 1) and the
        # evaluation at step 2 (step 3): the clock is 2, 5, 7, 10.
        fp8 = os.path.join(d, "ttl_fsdptrain_fp8.jsonl")
        elapsed = {1: 10.0, 2: 13.0, 3: 20.0, 4: 23.0}
        write(fp8, [{"step": 0, "val_loss": 5.0}] +
              [{"step": n, "loss": 4.0, "tokens_seen": 100 * n, "tokens_per_s": 50.0,
                "elapsed_s": elapsed[n]} for n in (1, 2)] +
              [{"step": 2, "val_loss": 3.5}] +
              [{"step": n, "loss": 4.0, "tokens_seen": 100 * n, "tokens_per_s": 50.0,
                "elapsed_s": elapsed[n]} for n in (3, 4)] +
              [{"step": 4, "val_loss": 3.3}])
        # Muon in bf16: named by its optimizer on the TTL line; never reaches 3.5
        muon = os.path.join(d, "ttl_fsdptrain_bf16_muon.jsonl")
        write(muon, [{"step": 0, "val_loss": 5.0, "train_s": 0.0}] +
              [{"step": n, "loss": 4.0, "train_s": 0.05 * n} for n in range(1, 101)] +
              [{"step": 100, "val_loss": 3.7, "train_s": 6.0}])
        png = os.path.join(d, "ttl.png")
        args = [ref, bf16, fp8, muon, "--device", "GPU X", "--expected-steps", "torch_compile=300,fsdptrain_bf16=300"]
        try:
            import matplotlib  # noqa: F401
            args += ["--png", png]
        except ImportError:
            png = None
        r, lines = run_report(report, *args)
        check(r.returncode == 0, f"ttl_report exited {r.returncode}")
        # tokens_per_s: steps to the last validation x 16384 / train_s
        want = [
            "TTL system=torch_compile precision=bf16 optimizer=adamw model=gpt-350m train_s=20.0 "
            "val_loss=3.5000 reach_ref_s=20.0 tokens_per_s=163840 complete=false device=GPU X",
            "TTL system=fsdptrain precision=bf16 optimizer=adamw model=gpt-350m train_s=13.0 "
            "val_loss=3.2000 reach_ref_s=9.0 tokens_per_s=378092 device=GPU X",
            "TTL system=fsdptrain precision=fp8 optimizer=adamw model=gpt-350m train_s=10.0 "
            "val_loss=3.3000 reach_ref_s=5.0 tokens_per_s=6554 device=GPU X",
            "TTL system=fsdptrain precision=bf16 optimizer=muon model=gpt-350m train_s=6.0 "
            "val_loss=3.7000 reach_ref_s=nan tokens_per_s=273067 device=GPU X",
        ]
        check(lines == want, f"TTL lines {lines}")
        if png:
            check(os.path.getsize(png) > 1000, "--png wrote no picture")
        r, _ = run_report(report, bf16, "--device", "GPU X")
        check(r.returncode != 0 and "ttl_torch_compile.jsonl" in r.stderr,
              f"without the reference's file: exit {r.returncode}, {r.stderr.strip()!r}")
        # Issue 63: torchtitan's runs named by precision; --ref best:torchtitan picks
        # the one with the lowest final loss (rowwise, 3.4), whatever the order given.
        tw = os.path.join(d, "ttl_torchtitan_fp8_tensorwise.jsonl")
        write(tw, [{"step": 0, "val_loss": 5.0, "train_s": 0.0}, {"step": 100, "val_loss": 3.6, "train_s": 8.0}])
        rw = os.path.join(d, "ttl_torchtitan_fp8_rowwise.jsonl")
        write(rw, [{"step": 0, "val_loss": 5.0, "train_s": 0.0}, {"step": 50, "val_loss": 3.9, "train_s": 4.0},
                   {"step": 100, "val_loss": 3.4, "train_s": 8.0}])
        r, lines = run_report(report, tw, rw, bf16, "--device", "GPU X", "--ref", "best:torchtitan",
                              "--tokens-per-step", "1000")
        want = [
            "TTL system=torchtitan precision=fp8_tensorwise optimizer=adamw model=gpt-350m train_s=8.0 "
            "val_loss=3.6000 reach_ref_s=nan tokens_per_s=12500 device=GPU X",
            "TTL system=torchtitan precision=fp8_rowwise optimizer=adamw model=gpt-350m train_s=8.0 "
            "val_loss=3.4000 reach_ref_s=8.0 tokens_per_s=12500 device=GPU X",
            "TTL system=fsdptrain precision=bf16 optimizer=adamw model=gpt-350m train_s=13.0 "
            "val_loss=3.2000 reach_ref_s=9.0 tokens_per_s=23077 device=GPU X",
        ]
        check(r.returncode == 0 and lines == want, f"--ref best:torchtitan: TTL lines {lines}")
        check("reference torchtitan_fp8_rowwise" in r.stdout, "--ref best:torchtitan names its choice")
        r, _ = run_report(report, bf16, "--device", "GPU X", "--ref", "best:torchtitan")
        check(r.returncode != 0 and "no run of system 'torchtitan'" in r.stderr,
              f"--ref best: without such a run: exit {r.returncode}, {r.stderr.strip()!r}")
    print(f"{len(failures)} failure(s)")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
