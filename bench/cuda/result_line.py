#!/usr/bin/env python3
"""Turn an fsdptrain --metrics file into one benchmark RESULT line:

  RESULT system=fsdptrain model=<preset> precision=<bf16|fp8> micro_batch=<n> seq=<T>
         tokens_per_s=<x> mfu=<y> peak_gib=<z> device=<name>

(one line; device last because its name may hold spaces). tokens_per_s and mfu
are medians over the steps after the first --skip (warm-up: the first steps
pay cuDNN plan builds, allocations and lazy module loads). mfu is the metrics'
own (6N + 12 L d T FLOPs/token over 989 TFLOP/s per GPU, as in
docs/ARCHITECTURE.md, "FLOPs and MFU"), a fraction. peak_gib: the
device-memory peak from the metrics (peak_device_bytes_max_rank, or any
positive field whose name has "peak" and one of device/gpu/cuda/hbm, in
bytes), else --peak-gib (run_gpu_checks.sh polls nvidia-smi's memory.used,
which also counts the CUDA context and allocator slack), else nan.

  result_line.py m.jsonl --model gpt-350m --micro-batch 8 --seq 1024 \\
      --peak-gib 21.3 --device "NVIDIA H100 80GB HBM3"

Exit 1 (and no RESULT line) when fewer than --min-steps usable steps remain.
"""
import argparse
import math
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_metrics import read_records  # noqa: E402

DEVICE_PEAK = re.compile(r"peak.*(device|gpu|cuda|hbm)|(device|gpu|cuda|hbm).*peak")


def fmt(x, digits):
    return "nan" if x is None or not math.isfinite(x) else f"{x:.{digits}g}"


def result_line(path, system, model, precision, micro_batch, seq, device, peak_gib=None, skip=5,
                min_steps=3):
    recs = read_records(path)
    recs.sort(key=lambda r: int(r["step"]))
    use = [r for r in recs if int(r["step"]) > skip] or []
    tok = [float(r["tokens_per_s"]) for r in use if r.get("tokens_per_s") is not None]
    if len(tok) < min_steps:
        return None, (f"{path}: {len(tok)} steps with tokens_per_s after skipping {skip} "
                      f"(of {len(recs)}); need {min_steps}")
    mfus = [float(r["mfu"]) for r in use if r.get("mfu") is not None]
    peaks = [float(v) for r in recs for k, v in r.items()  # 0 or null: not measured (the CPU)
             if DEVICE_PEAK.search(k) and isinstance(v, (int, float)) and v > 0]
    peak = max(peaks) / 2**30 if peaks else peak_gib
    line = (f"RESULT system={system} model={model} precision={precision} micro_batch={micro_batch} "
            f"seq={seq} tokens_per_s={statistics.median(tok):.0f} "
            f"mfu={fmt(statistics.median(mfus) if mfus else None, 3)} "
            f"peak_gib={fmt(peak, 4)} device={device}")
    return line, f"median of {len(tok)} steps ({int(use[0]['step'])}..{int(use[-1]['step'])})"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("metrics")
    ap.add_argument("--system", default="fsdptrain")
    ap.add_argument("--model", required=True)
    ap.add_argument("--precision", default="bf16")
    ap.add_argument("--micro-batch", type=int, required=True)
    ap.add_argument("--seq", type=int, required=True)
    ap.add_argument("--device", default="unknown", help="GPU name (may contain spaces)")
    ap.add_argument("--peak-gib", type=float, help="device memory peak measured outside, GiB")
    ap.add_argument("--skip", type=int, default=5, help="warm-up steps left out of the medians")
    ap.add_argument("--min-steps", type=int, default=3)
    a = ap.parse_args()
    try:
        line, why = result_line(a.metrics, a.system, a.model, a.precision, a.micro_batch, a.seq, a.device,
                                a.peak_gib, a.skip, a.min_steps)
    except (OSError, ValueError) as e:
        line, why = None, str(e)
    if line is None:
        print(f"result_line: no result: {why}", file=sys.stderr)
        return 1
    print(line)
    print(f"result_line: {why}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
