#!/usr/bin/env python3
"""A speed lever's before and after: two fsdptrain --profile-ops tables, op by op.

Issue 64 asks that each speed lever land with its profile rows before and
after from one GPU call. prepare_carry.sh BASELINE=REV bundles the baseline's
fsdptrain as fsdptrain-base; check group k (bench/cuda/checks_k.sh) runs both
on one shape, one after the other, and this sets their tables side by side:

  profile_ab.py BASE_OUT.txt NEW_OUT.txt [--top 12] [--label bf16]

Each input is fsdptrain's output with --profile-ops (its step lines and its
"op profile" table). Rows are matched by op and shape; the table lists the
--top rows whose time changed most, then the total inside ops and each run's
last step line (tokens/s, loss). The last line of the output is a one-line
summary for the check's note. Exit 2 on an input without a profile table.
"""
import argparse
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from profile_compare import read_fsdp  # noqa: E402  (fsdptrain's op table)

TOTAL = re.compile(r"^op profile \(([a-z]+), (\d+) steps\): ([0-9.]+) ms per step inside ops")
STEP = re.compile(r"^step\s+(\d+)/\d+ \| loss ([0-9.naif]+) .*\|\s*([0-9.]+[KM]?) tok/s")


def read_run(path):
    """(rows {op and shape: ms a step}, total ms inside ops, last step line's (step, loss, tok/s))."""
    try:
        text = open(path, encoding="utf-8", errors="replace").read().splitlines()
    except OSError as e:
        sys.exit(f"profile_ab: error: {path}: {e.strerror}")
    total = next((float(m.group(3)) for line in text if (m := TOTAL.match(line))), None)
    if total is None:
        print(f"profile_ab: error: {path} has no 'op profile' table (run fsdptrain with --profile-ops)",
              file=sys.stderr)
        sys.exit(2)
    last = None
    for line in text:
        if m := STEP.match(line):
            last = (int(m.group(1)), m.group(2), m.group(3))
    rows = {}
    for name, ms in read_fsdp(path):
        rows[name] = rows.get(name, 0.0) + ms
    return rows, total, last


def change(a, b):
    return f"{100.0 * (b - a) / a:+6.1f}%" if a > 0 else "   new" if b > 0 else "     -"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("base", help="the baseline fsdptrain's --profile-ops output")
    ap.add_argument("new", help="this tree's fsdptrain's --profile-ops output")
    ap.add_argument("--top", type=int, default=12, help="rows listed, largest change first")
    ap.add_argument("--label", default="", help="a word for the summary line (bf16, fp8)")
    a = ap.parse_args()
    base, base_total, base_last = read_run(a.base)
    new, new_total, new_last = read_run(a.new)

    names = sorted(set(base) | set(new), key=lambda n: -abs(new.get(n, 0.0) - base.get(n, 0.0)))
    changed = [n for n in names if new.get(n, 0.0) != base.get(n, 0.0)]
    print("per-op device time, ms a step: baseline (fsdptrain-base) vs this tree (fsdptrain)")
    print(f"{'base':>9} {'new':>9} {'delta':>8} {'change':>7}  op and shape")
    for n in changed[: a.top]:
        b, c = base.get(n, 0.0), new.get(n, 0.0)
        print(f"{b:9.3f} {c:9.3f} {c - b:+8.3f} {change(b, c)}  {n}")
    if len(changed) > a.top:
        rest_b = sum(base.get(n, 0.0) for n in changed[a.top:])
        rest_c = sum(new.get(n, 0.0) for n in changed[a.top:])
        print(f"{rest_b:9.3f} {rest_c:9.3f} {rest_c - rest_b:+8.3f} {change(rest_b, rest_c)}  "
              f"({len(changed) - a.top} more changed rows)")
    print(f"{base_total:9.3f} {new_total:9.3f} {new_total - base_total:+8.3f} "
          f"{change(base_total, new_total)}  total inside ops")
    for who, last in (("base", base_last), ("new", new_last)):
        print(f"{who}: " + (f"step {last[0]} loss {last[1]} at {last[2]} tok/s" if last else "no step line"))
    top = changed[0] if changed else None
    label = f"{a.label}: " if a.label else ""
    line = f"{label}inside ops {base_total:.2f} -> {new_total:.2f} ms/step ({change(base_total, new_total).strip()})"
    if top:
        line += f"; most changed: {top} {base.get(top, 0.0):.2f} -> {new.get(top, 0.0):.2f}"
    if base_last and new_last:
        line += f"; tok/s {base_last[2]} -> {new_last[2]}"
    print(line)


if __name__ == "__main__":
    main()
