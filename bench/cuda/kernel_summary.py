#!/usr/bin/env python3
"""Per-kernel GPU time totals from an Nsight Compute CSV export, so the speed
work can pick the kernels that cost the most.

  ncu --clock-control none --metrics gpu__time_duration.sum -o prof fsdptrain ...
  ncu -i prof.ncu-rep --csv --page raw --print-units base > prof.csv
  kernel_summary.py prof.csv [--top 30] [--step-seconds 0.061]

Reads both CSV layouts ncu writes: --page raw (one row per kernel, one column
per metric; the second row holds units) and --page details (one row per
kernel and metric: "Metric Name", "Metric Unit", "Metric Value"). Other lines
(the profiled program's own output, ==PROF== messages) are ignored. Kernel
names are shortened to the part before the first '(' or '<' so that template
instances of one kernel add up; --full keeps them whole.

Prints: kernels profiled, total GPU time, then one line per kernel name with
calls, total ms, share, mean us, sorted by total. --step-seconds (the wall
time per step from the metrics) with --steps adds how much of a step the
kernels fill: the rest is launch gaps, host work and synchronisation.
"""
import argparse
import csv
import io
import re
import sys
from collections import defaultdict

METRIC = "gpu__time_duration.sum"
NAME_COLUMNS = ("Kernel Name", "Function Name", "Demangled Name", "Name")
SCALE = {"ns": 1e-9, "nsecond": 1e-9, "usecond": 1e-6, "us": 1e-6, "msecond": 1e-3, "ms": 1e-3,
         "second": 1.0, "s": 1.0}


def number(text):
    return float(text.replace(",", "").strip())


def short(name):
    name = name.strip()
    for prefix in ("void ", "__global__ "):
        if name.startswith(prefix):
            name = name[len(prefix):]
    return re.split(r"[(<]", name, 1)[0].strip() or name


def parse(text):
    """[(kernel name, seconds)] from ncu CSV text."""
    lines = [l for l in text.splitlines() if l.startswith('"')]
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    if not rows:
        return []
    header = rows[0]
    out = []
    name_col = next((c for c in NAME_COLUMNS if c in header), None)
    if name_col is None:
        raise SystemExit(f"kernel_summary: no kernel name column ({', '.join(NAME_COLUMNS)}) in {header[:8]}")
    if METRIC in header:  # --page raw
        k, m = header.index(name_col), header.index(METRIC)
        unit = "ns"
        body = rows[1:]
        if body and not re.match(r"^[\d.,]+$", body[0][m].strip() or "x"):  # the units row
            unit = body[0][m].strip() or "ns"
            body = body[1:]
        for r in body:
            if len(r) > max(k, m) and r[m].strip():
                try:
                    out.append((r[k], number(r[m]) * SCALE.get(unit, 1e-9)))
                except ValueError:
                    pass
        return out
    if {"Metric Name", "Metric Value"} <= set(header):  # --page details
        k, n, v = header.index(name_col), header.index("Metric Name"), header.index("Metric Value")
        u = header.index("Metric Unit") if "Metric Unit" in header else None
        for r in rows[1:]:
            if len(r) > max(k, n, v) and r[n] in (METRIC, "Duration"):
                unit = r[u].strip() if u is not None else "ns"
                try:
                    out.append((r[k], number(r[v]) * SCALE.get(unit, 1e-9)))
                except ValueError:
                    pass
        return out
    raise SystemExit(f"kernel_summary: no '{METRIC}' column and no Metric Name/Value columns in {header[:8]}")


def summary(pairs, top=30, full=False, step_seconds=None, steps=None):
    by = defaultdict(lambda: [0, 0.0])
    for name, sec in pairs:
        e = by[name if full else short(name)]
        e[0] += 1
        e[1] += sec
    total = sum(e[1] for e in by.values())
    lines = [f"kernels profiled: {len(pairs)} launches, {len(by)} distinct, total GPU time {total * 1e3:.2f} ms"]
    if step_seconds and steps:
        lines.append(f"per step: {total / steps * 1e3:.2f} ms of kernels in {step_seconds * 1e3:.2f} ms wall "
                     f"({100 * total / steps / step_seconds:.0f}% busy if kernels never overlap)")
    lines.append(f"{'calls':>7} {'total ms':>10} {'share':>6} {'mean us':>9}  kernel")
    for name, (calls, sec) in sorted(by.items(), key=lambda kv: -kv[1][1])[:top]:
        lines.append(f"{calls:7d} {sec * 1e3:10.3f} {100 * sec / total if total else 0:5.1f}% "
                     f"{sec / calls * 1e6:9.1f}  {name}")
    return "\n".join(lines)


def selftest():
    raw = ('==PROF== Connected to process 1\nstep 1/2 | loss 5.5\n'
           '"ID","Kernel Name","gpu__time_duration.sum"\n"","","nsecond"\n'
           '"0","void gemm<128>(float*)","1,000"\n"1","void gemm<64>(float*)","3000"\n'
           '"2","rmsnorm_kernel(int)","500"\n')
    det = ('"ID","Kernel Name","Metric Name","Metric Unit","Metric Value"\n'
           '"0","gemm(int)","gpu__time_duration.sum","usecond","2"\n'
           '"0","gemm(int)","sm__throughput","%","50"\n'
           '"1","softmax(int)","gpu__time_duration.sum","usecond","1.5"\n')
    a, b = parse(raw), parse(det)
    ok = (len(a) == 3 and abs(sum(s for _, s in a) - 4.5e-6) < 1e-12 and len(b) == 2
          and abs(sum(s for _, s in b) - 3.5e-6) < 1e-12 and "gemm" in summary(a).splitlines()[2])
    print(summary(a, step_seconds=1e-5, steps=1))
    print("selftest:", "ok" if ok else "FAIL")
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv", help="ncu CSV, or 'selftest'")
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--full", action="store_true", help="keep whole (templated) kernel names")
    ap.add_argument("--step-seconds", type=float)
    ap.add_argument("--steps", type=int)
    a = ap.parse_args()
    if a.csv == "selftest":
        return selftest()
    pairs = parse(open(a.csv, errors="replace").read())
    if not pairs:
        print("kernel_summary: no kernel rows", file=sys.stderr)
        return 1
    print(summary(pairs, a.top, a.full, a.step_seconds, a.steps))
    return 0


if __name__ == "__main__":
    sys.exit(main())
