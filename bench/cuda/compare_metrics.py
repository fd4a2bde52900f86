#!/usr/bin/env python3
"""Compare the training losses of fsdptrain --metrics files (JSON lines).

Only lines with a "loss" field count (val_loss and checkpoint lines are
skipped); "step" is the step the loss belongs to (1-based, as fsdptrain
writes it). A loss of null (fsdptrain writes NaN/Inf as null) always fails.

  compare_metrics.py compare A.jsonl B.jsonl [--tolerance 2e-2] [--steps 11:20]
        max relative loss difference over the steps both files have;
        exit 1 above the tolerance (or on a non-finite loss), 2 when the
        files share fewer than --min-common steps.
  compare_metrics.py compare A.jsonl B.jsonl --field loss --field grad_norm
        the same for each field named (default loss alone), one verdict line
        joining theirs; exit is the worst. Still only the lines with a "loss"
        (training steps); a step without the field is left out.
  compare_metrics.py compare A.jsonl B.jsonl --field loss --field grad_norm=5e-2
        a field may carry its own tolerance (NAME=TOL); the others take --tolerance.
  compare_metrics.py compare A.jsonl B.jsonl --bitwise
        every common step's loss must be identical as written (%.9g, which
        round-trips a float32: equal text means equal bits of the loss).
  compare_metrics.py compare GPU.jsonl CPU.jsonl --window 20 --tolerance 5e-2
        compares means over consecutive windows of 20 steps instead of single
        steps: long bf16-vs-fp32 runs drift step by step but not in trend.
  compare_metrics.py falls A.jsonl [--ratio 0.75] [--last 20]
        the mean loss of the last 20 steps must be below ratio x the first loss.
  compare_metrics.py follows REF.jsonl NEW.jsonl [--val-tolerance 1e-2] [--window 50]
        [--after 100] [--window-tolerance 5e-2]
        NEW's last validation loss at most val-tolerance above REF's, and no
        window of NEW's training loss (50 steps, each starting after step 100)
        more than window-tolerance above REF's mean over the same steps: no
        worse at the end and never diverging on the way (fp8 against bf16).
        Both bars are one-sided: they bound what NEW costs. A NEW below REF
        passes: two bf16 runs of the same 500-step command on an H100 (at two
        commits that leave bf16 unchanged) ended 1.05% apart, 1.2145 and
        1.2273 (bench/results/h100_2026-11-25 and h100_2026-11-26), since
        cuDNN's attention backward is not deterministic.
  compare_metrics.py selftest
        checks this file's own logic on made-up metrics (no fsdptrain needed).

Why a tool of its own: run_gpu_checks.sh needs one line per check that says
PASS or FAIL with the number that decided it, for several kinds of run pair
(GPU vs CPU, resumed vs straight, N ranks vs 1).
"""
import argparse
import json
import math
import os
import sys
import tempfile


def read_losses(path, field="loss"):
    """{step: loss (float, or None for non-finite)} from a metrics file, or
    {step: that field's value} of the same lines. A step written twice (a
    metrics file appended to by a resumed run) keeps its last value, as that
    is the run that continued."""
    out = {}
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise SystemExit(f"compare_metrics: {path}:{n}: not JSON ({e})")
            if "loss" not in rec or "step" not in rec or field not in rec:
                continue
            v = rec[field]
            out[int(rec["step"])] = float(v) if v is not None and math.isfinite(float(v)) else None
    return out


def read_records(path):
    """Every JSON object of a metrics file with a "loss" field, in file order."""
    recs = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                rec = json.loads(line)
                if "loss" in rec:
                    recs.append(rec)
    return recs


def parse_range(text):
    """"11:20" -> (11, 20) inclusive; "11:" -> (11, inf); None -> everything."""
    if not text:
        return (-math.inf, math.inf)
    lo, _, hi = text.partition(":")
    return (int(lo) if lo else -math.inf, int(hi) if hi else math.inf)


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-12)


def compare(a_path, b_path, tolerance=2e-2, bitwise=False, steps=None, window=1, min_common=1,
            quiet=False, field="loss"):
    """Returns (exit code, one-line verdict)."""
    a, b = read_losses(a_path, field), read_losses(b_path, field)
    name = field.replace("_", " ")
    lo, hi = parse_range(steps)
    common = sorted(s for s in a.keys() & b.keys() if lo <= s <= hi)
    if len(common) < min_common:
        return 2, (f"only {len(common)} common steps (need {min_common}): "
                   f"{os.path.basename(a_path)} has {len(a)}, {os.path.basename(b_path)} has {len(b)}")
    bad = [s for s in common if a[s] is None or b[s] is None]
    if bad:
        return 1, f"non-finite {name} at step(s) {bad[:5]}"
    if bitwise:
        diff = [s for s in common if a[s] != b[s]]
        worst = max(common, key=lambda s: rel(a[s], b[s]))
        if not quiet:
            for s in common:
                print(f"  step {s:5d}  {a[s]:.9g}  {b[s]:.9g}{'  <-- differs' if a[s] != b[s] else ''}")
        if diff:
            return 1, (f"{len(diff)}/{len(common)} steps differ{'' if field == 'loss' else ' in ' + name} "
                       f"(first at step {diff[0]}); "
                       f"max rel diff {rel(a[worst], b[worst]):.3e} at step {worst}")
        return 0, (f"{'' if field == 'loss' else name + ' '}bitwise identical over {len(common)} steps "
                   f"({common[0]}..{common[-1]})")
    # windowed means: consecutive groups of `window` common steps
    groups = [common[i:i + window] for i in range(0, len(common), window)]
    if window > 1 and len(groups) > 1 and len(groups[-1]) < window:
        groups[-2] += groups.pop()  # fold a short tail into the previous window
    worst, worst_at = -1.0, None
    for g in groups:
        ma = sum(a[s] for s in g) / len(g)
        mb = sum(b[s] for s in g) / len(g)
        d = rel(ma, mb)
        if not quiet:
            label = f"step {g[0]:5d}" if len(g) == 1 else f"steps {g[0]}..{g[-1]}"
            print(f"  {label:16s} {ma:.6f}  {mb:.6f}  rel {d:.2e}{'  <-- over' if d > tolerance else ''}")
        if d > worst:
            worst, worst_at = d, g
    per_step = max(rel(a[s], b[s]) for s in common)
    what = (f"step {worst_at[0]}" if len(worst_at) == 1 else f"steps {worst_at[0]}..{worst_at[-1]}")
    msg = (f"max rel {name} diff {worst:.3e} at {what} over {len(common)} common steps "
           f"({common[0]}..{common[-1]}{f', window {window}' if window > 1 else ''}; "
           f"tolerance {tolerance:g})")
    if window > 1:
        msg += f"; per-step max {per_step:.3e}"
    return (0 if worst <= tolerance else 1), msg


def compare_fields(a_path, b_path, fields=("loss",), **kw):
    """compare() for each field: the worst exit code, the verdicts joined. A
    field written NAME=TOL is held to its own tolerance instead of the shared
    one (group n's gradient norms, whose rounding floor is measured apart)."""
    results = []
    for f in fields:
        name, _, tol = f.partition("=")
        fkw = dict(kw, tolerance=float(tol)) if tol else kw
        results.append(compare(a_path, b_path, field=name, **fkw))
    return max(c for c, _ in results), "; ".join(m for _, m in results)


def falls(path, ratio=0.75, last=20):
    losses = read_losses(path)
    if len(losses) < 2:
        return 2, f"only {len(losses)} loss lines"
    steps = sorted(losses)
    if any(losses[s] is None for s in steps):
        return 1, "non-finite loss"
    first = losses[steps[0]]
    tail = [losses[s] for s in steps[-last:]]
    mean = sum(tail) / len(tail)
    ok = mean < ratio * first
    return (0 if ok else 1), (f"loss {first:.4f} at step {steps[0]} -> mean {mean:.4f} over the last "
                              f"{len(tail)} steps (must be < {ratio:g} x first = {ratio * first:.4f})")


def read_val(path):
    with open(path) as f:
        return [float(r["val_loss"]) for r in (json.loads(l) for l in f if l.strip().startswith("{"))
                if r.get("val_loss") is not None]


def follows(ref_path, new_path, val_tolerance=1e-2, window=50, after=100, window_tolerance=5e-2):
    ref, new = read_losses(ref_path), read_losses(new_path)
    bad = [s for s, v in new.items() if v is None]
    if bad:
        return 1, f"non-finite loss at step(s) {bad[:5]}"
    ref_val, new_val = read_val(ref_path), read_val(new_path)
    if not ref_val or not new_val:
        return 2, "no validation loss in one of the files"
    worst, worst_at = -math.inf, None
    common = sorted(s for s in ref.keys() & new.keys() if s > after and ref[s] is not None)
    for start in range(after + 1, (common[-1] if common else after) - window + 2):
        w = [s for s in common if start <= s < start + window]
        if not w or start not in ref:
            continue
        r = sum(new[s] for s in w) / sum(ref[s] for s in w) - 1
        if r > worst:
            worst, worst_at = r, start
    if worst_at is None:
        return 2, f"no {window}-step window after step {after} in both files"
    v = new_val[-1] / ref_val[-1] - 1
    ok = v <= val_tolerance and worst <= window_tolerance
    return (0 if ok else 1), (f"val_loss {new_val[-1]:.4f} vs {ref_val[-1]:.4f} ({v:+.2%}, tolerance "
                              f"{val_tolerance:+.0%}); worst {window}-step window {worst:+.2%} from step "
                              f"{worst_at} (tolerance {window_tolerance:+.0%})")


def selftest():
    d = tempfile.mkdtemp(prefix="compare_metrics_")

    def write(name, rows, extra=(), norms=None):
        p = os.path.join(d, name)
        with open(p, "w") as f:
            for s, l in rows:
                rec = {"step": s, "loss": l, "lr": 1e-3}
                if norms:
                    rec["grad_norm"] = norms(s)
                f.write(json.dumps(rec) + "\n")
            for e in extra:
                f.write(json.dumps(e) + "\n")
        return p

    base = [(s, 5.5 * 0.95 ** s) for s in range(1, 21)]
    a = write("a.jsonl", base, extra=[{"step": 20, "val_loss": 9.0}, {"step": 20, "checkpoint": "x.h5"}])
    b = write("b.jsonl", [(s, l * (1 + 1e-3)) for s, l in base])
    c = write("c.jsonl", [(s, l * (1 + 5e-2) if s == 15 else l) for s, l in base])
    nan = write("nan.jsonl", [(s, None if s == 3 else l) for s, l in base])
    tail = write("tail.jsonl", [(s, l) for s, l in base if s > 10])
    flat = write("flat.jsonl", [(s, 5.5) for s in range(1, 21)])
    checks = [
        (compare(a, a, bitwise=True, quiet=True)[0], 0, "identical files are bitwise equal"),
        (compare(a, b, bitwise=True, quiet=True)[0], 1, "1e-3 off is not bitwise equal"),
        (compare(a, b, 2e-3, quiet=True)[0], 0, "1e-3 off passes 2e-3"),
        (compare(a, b, 5e-4, quiet=True)[0], 1, "1e-3 off fails 5e-4"),
        (compare(a, c, 2e-2, quiet=True)[0], 1, "one step 5e-2 off fails 2e-2"),
        (compare(a, c, 2e-2, steps="1:14", quiet=True)[0], 0, "--steps leaves that step out"),
        (compare(a, c, 2e-2, window=10, quiet=True)[0], 0, "a window of 10 averages it to 5e-3"),
        (compare(a, nan, 1.0, quiet=True)[0], 1, "a null loss fails"),
        (compare(tail, a, bitwise=True, quiet=True)[0], 0, "only common steps count"),
        (compare(tail, a, min_common=11, quiet=True)[0], 2, "too few common steps is exit 2"),
        (falls(a)[0], 0, "a falling curve falls"),
        (falls(flat)[0], 1, "a flat curve does not"),
        (falls(nan)[0], 1, "a null loss does not fall"),
    ]
    curve = [(s, 5.0 - 3.0 * s / 400) for s in range(10, 401, 10)]
    ref = write("ref.jsonl", curve, extra=[{"step": 400, "val_loss": 2.0}])
    same = write("same.jsonl", [(s, l * 1.003) for s, l in curve], extra=[{"step": 400, "val_loss": 2.01}])
    worse = write("worse.jsonl", curve, extra=[{"step": 400, "val_loss": 2.05}])
    better = write("better.jsonl", curve, extra=[{"step": 400, "val_loss": 1.95}])
    spike = write("spike.jsonl", [(s, l * 1.3 if 200 <= s < 260 else l) for s, l in curve],
                  extra=[{"step": 400, "val_loss": 2.0}])
    early = write("early.jsonl", [(s, l * 1.3 if s < 100 else l) for s, l in curve],
                  extra=[{"step": 400, "val_loss": 2.0}])
    checks += [
        (follows(ref, same)[0], 0, "0.5% and 0.3% off follows"),
        (follows(ref, worse)[0], 1, "a final val_loss 2.5% above does not"),
        (follows(ref, better)[0], 0, "one 2.5% below does: the bars bound what NEW costs"),
        (follows(ref, spike)[0], 1, "a 30% excursion after step 100 does not"),
        (follows(ref, early)[0], 0, "one before step 100 is not judged"),
        (follows(ref, b)[0], 2, "files without validation loss: exit 2"),
    ]
    g = write("g.jsonl", base, norms=lambda s: 2.0 - s / 40)
    g_off = write("g_off.jsonl", base, norms=lambda s: (2.0 - s / 40) * (1.01 if s == 7 else 1))
    g_loss = write("g_loss.jsonl", [(s, l * (1 + 1e-3)) for s, l in base], norms=lambda s: 2.0 - s / 40)
    both = ("loss", "grad_norm")
    checks += [
        (compare(g, g_off, 1e-3, quiet=True)[0], 0, "by default only the loss counts"),
        (compare(g, g_off, 1e-3, quiet=True, field="grad_norm")[0], 1, "a grad_norm 1e-2 off fails 1e-3"),
        (compare_fields(g, g_off, both, tolerance=1e-3, quiet=True)[0], 1, "two fields: either fails"),
        (compare_fields(g, g_loss, both, tolerance=5e-4, quiet=True)[0], 1, "... the loss too"),
        (compare_fields(g, g_loss, both, tolerance=2e-3, quiet=True)[0], 0, "both inside passes"),
        (compare_fields(g, a, both, quiet=True)[0], 2, "a file without grad_norm: too few common steps"),
        (compare_fields(g, g, both, bitwise=True, quiet=True)[0], 0, "bitwise in both fields"),
        (compare_fields(g, g_off, ("loss", "grad_norm=2e-2"), tolerance=1e-3, quiet=True)[0], 0,
         "grad_norm=2e-2: its own tolerance"),
        (compare_fields(g, g_off, ("loss", "grad_norm=5e-3"), tolerance=1e-1, quiet=True)[0], 1,
         "... which binds even below the shared one"),
    ]
    bad = 0
    for got, want, what in checks:
        ok = got == want
        bad += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {what} (exit {got}, want {want})")
    print(f"selftest: {len(checks) - bad}/{len(checks)} passed")
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("compare", help="loss difference of two metrics files")
    c.add_argument("a")
    c.add_argument("b", help="the reference: relative differences are |a-b|/|b|")
    c.add_argument("--tolerance", type=float, default=2e-2)
    c.add_argument("--bitwise", action="store_true")
    c.add_argument("--steps", help="LO:HI, inclusive, either side may be empty")
    c.add_argument("--window", type=int, default=1)
    c.add_argument("--min-common", type=int, default=1)
    c.add_argument("--quiet", action="store_true", help="only the verdict line")
    c.add_argument("--field", action="append",
                   help="metrics field to compare (repeatable; default loss): e.g. grad_norm, "
                        "or grad_norm=5e-3 with its own tolerance")
    f = sub.add_parser("falls", help="the loss must fall")
    f.add_argument("a")
    f.add_argument("--ratio", type=float, default=0.75)
    f.add_argument("--last", type=int, default=20)
    w = sub.add_parser("follows", help="a run keeps up with a reference run")
    w.add_argument("ref")
    w.add_argument("new")
    w.add_argument("--val-tolerance", type=float, default=1e-2)
    w.add_argument("--window", type=int, default=50)
    w.add_argument("--after", type=int, default=100)
    w.add_argument("--window-tolerance", type=float, default=5e-2)
    sub.add_parser("selftest")
    a = ap.parse_args()
    if a.cmd == "selftest":
        return selftest()
    try:
        if a.cmd == "compare":
            code, msg = compare_fields(a.a, a.b, tuple(a.field or ["loss"]), tolerance=a.tolerance,
                                       bitwise=a.bitwise, steps=a.steps, window=max(1, a.window),
                                       min_common=a.min_common, quiet=a.quiet)
        elif a.cmd == "follows":
            code, msg = follows(a.ref, a.new, a.val_tolerance, a.window, a.after, a.window_tolerance)
        else:
            code, msg = falls(a.a, a.ratio, a.last)
    except OSError as e:
        code, msg = 2, f"cannot read: {e}"
    print(f"{'PASS' if code == 0 else 'FAIL'}: {msg}")
    return code


if __name__ == "__main__":
    sys.exit(main())
