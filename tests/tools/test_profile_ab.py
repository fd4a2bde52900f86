#!/usr/bin/env python3
"""bench/cuda/profile_ab.py (check group k): two fsdptrain --profile-ops
tables set side by side, on written inputs with hand-worked differences.

  test_profile_ab.py bench/cuda/profile_ab.py
"""
import os
import subprocess
import sys
import tempfile

TOOL = sys.argv[1]
failures = 0


def check(cond, what):
    global failures
    print(("ok: " if cond else "FAIL: ") + what)
    failures += 0 if cond else 1


def table(total, rows, rate):
    head = (f"step     6/6 | loss 4.9269 | lr 1.00e-04 | norm 6.310 | {rate} tok/s | ETA 0:00:00\n"
            f"op profile (cuda, 5 steps): {total:.3f} ms per step inside ops; rate = nominal FLOPs or bytes touched / time\n"
            "    ms/step  share   calls          rate  op and shape\n")
    return head + "".join(f"{ms:11.3f}   1.0%    24.0     1612.1 GB/s  {name}\n" for name, ms in rows)


BASE = table(20.0, [("linear_backward 16384x2816x1024", 12.0), ("rmsnorm_backward+=+amax 16384x1024", 3.913),
                    ("adamw 11274368", 3.0), ("swiglu 16384x2816", 1.087)], "204.9K")
# rmsnorm_backward -1.5; adamw +0.25; linear_backward unchanged; swiglu gone; norm_rope new
NEW = table(18.837, [("linear_backward 16384x2816x1024", 12.0), ("rmsnorm_backward+=+amax 16384x1024", 2.413),
                     ("adamw 11274368", 3.25), ("norm_rope 16384x16x64", 0.087)], "210.1K")

with tempfile.TemporaryDirectory() as d:
    paths = {}
    for name, text in (("base", BASE), ("new", NEW), ("empty", "fsdptrain: no profile here\n")):
        paths[name] = os.path.join(d, name + ".txt")
        with open(paths[name], "w") as f:
            f.write(text)
    r = subprocess.run([sys.executable, TOOL, paths["base"], paths["new"], "--label", "bf16"],
                       capture_output=True, text=True)
    out = r.stdout.splitlines()
    print(r.stdout + r.stderr)
    check(r.returncode == 0, "exit 0")
    rows = [l for l in out if l[:9].strip().replace(".", "").isdigit()]
    names = [l.split("  ")[-1].strip() for l in rows]
    # largest change first; the unchanged GEMM is not listed
    check(names[:4] == ["rmsnorm_backward+=+amax 16384x1024", "swiglu 16384x2816", "adamw 11274368",
                        "norm_rope 16384x16x64"], f"rows by the size of their change: {names[:4]}")
    check("linear_backward 16384x2816x1024" not in names, "an unchanged row is left out")
    check(any("3.913     2.413   -1.500  -38.3%" in l for l in out), "rmsnorm row: 3.913 -> 2.413, -1.500, -38.3%")
    check(any("1.087     0.000   -1.087" in l for l in out), "a row only the baseline has counts as 0 after")
    check(any(l.rstrip().endswith("new  norm_rope 16384x16x64") for l in out), "a row only the new run has is 'new'")
    check(any("20.000    18.837   -1.163   -5.8%  total inside ops" in l for l in out), "the totals line")
    check(out[-1] == "bf16: inside ops 20.00 -> 18.84 ms/step (-5.8%); most changed: "
          "rmsnorm_backward+=+amax 16384x1024 3.91 -> 2.41; tok/s 204.9K -> 210.1K", f"summary line: {out[-1]}")
    r = subprocess.run([sys.executable, TOOL, paths["base"], paths["empty"]], capture_output=True, text=True)
    check(r.returncode == 2 and "has no 'op profile' table" in r.stderr and "empty.txt" in r.stderr,
          f"an output without a profile: exit 2 naming it ({r.returncode}: {r.stderr.strip()})")

print("FAILED" if failures else "all passed")
sys.exit(1 if failures else 0)
