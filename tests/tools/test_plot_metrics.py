#!/usr/bin/env python3
"""CTest for tools/plot_metrics.py, the training curves.

  test_plot_metrics.py PLOT_METRICS_PY

Writes small metrics files (JSON lines as src/trainer/trainer.cpp writes them) in a
temporary folder: a run resumed from a checkpoint whose later process
repeats steps (and evaluations) the earlier one had written, a run without
evaluation records whose MFU is set, a run started again from scratch in the
same file, and one with a tokens_seen key. Checks the --summary numbers
worked by hand (the resumed run's replaced records must not count), that
figures are written as PNGs with a non-empty image (one run, several
overlaid with --labels, --x tokens), and that bad input (missing file, a
line that is not JSON, a JSON array, no step records, bad options) exits 1
with one line "plot_metrics: error: ..." naming the file and line.
The summary and error checks need no matplotlib; where it is missing the
figure checks are skipped and the test exits 77 (CTest SKIP_RETURN_CODE)
after the rest has passed.
"""

import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL: " + what)


def tool(*args):
    return subprocess.run([sys.executable, TOOL] + [str(a) for a in args],
                          capture_output=True, text=True)


def step_rec(step, loss, tps, mfu=None, lr=1e-3, norm=1.0, elapsed=0.0, **extra):
    r = {"step": step, "loss": loss, "lr": lr, "grad_norm": norm, "tokens_per_s": tps,
         "data_wait_s": 1e-6, "comm_wait_s": 1e-5, "mfu": mfu,
         "peak_rss_bytes_max_rank": 4.5e7, "peak_device_bytes_max_rank": 0,
         "elapsed_s": elapsed}
    r.update(extra)
    return json.dumps(r)


def write(path, lines):
    with open(path, "w") as f:
        f.write("".join(line + "\n" for line in lines))
    return path


def png_size(path):
    """(width, height) from the IHDR chunk, or None if not a PNG."""
    with open(path, "rb") as f:
        head = f.read(24)
    if len(head) < 24 or head[:8] != b"\x89PNG\r\n\x1a\n" or head[12:16] != b"IHDR":
        return None
    return struct.unpack(">II", head[16:24])


def one_error_line(r, what, *needles):
    lines = r.stderr.splitlines()
    check(r.returncode == 1, f"{what}: exit {r.returncode}, want 1 ({r.stderr!r})")
    check(len(lines) == 1, f"{what}: {len(lines)} stderr lines, want 1: {r.stderr!r}")
    check(r.stdout == "", f"{what}: stdout not empty: {r.stdout!r}")
    if lines:
        check(lines[0].startswith("plot_metrics: error: "), f"{what}: {lines[0]!r}")
        for n in needles:
            check(n in lines[0], f"{what}: {n!r} not in {lines[0]!r}")


if len(sys.argv) != 2:
    sys.exit("usage: test_plot_metrics.py PLOT_METRICS_PY")
TOOL = sys.argv[1]
tmp = tempfile.mkdtemp(prefix="plot_metrics_")

# A resumed run. Process 1: val at 0, steps 1..6 (tokens/s 1000*s), val at 4
# and 6, a checkpoint at 4, a diverged step 7. Process 2 resumes from the
# checkpoint at 4: steps 5..8 (tokens/s 10*(s-4)), val at 6 and 8. Kept:
# steps 1-4 of process 1, 5-8 of process 2, val 0 and 4 of process 1, 6 and
# 8 of process 2. The old val at 6 (4.2) was the lowest and must be gone.
p1 = [json.dumps({"step": 0, "val_loss": 5.0})]
for s in range(1, 7):
    p1.append(step_rec(s, 5.0 - 0.1 * s, 1000.0 * s, elapsed=0.1 * s))
    if s == 4:
        p1 += [json.dumps({"step": 4, "val_loss": 4.5}),
               json.dumps({"step": 4, "checkpoint": "/ck/step_00000004.h5"})]
p1 += [json.dumps({"step": 6, "val_loss": 4.2}),
       json.dumps({"step": 7, "loss": None, "grad_norm": None, "diverged": True})]
p2 = []
for s in range(5, 9):
    p2.append(step_rec(s, 3.0 - 0.05 * (s - 5), 10.0 * (s - 4), elapsed=0.05 * (s - 4)))
    if s in (6, 8):
        p2.append(json.dumps({"step": s, "val_loss": {6: 4.4, 8: 4.3}[s]}))
resumed = write(os.path.join(tmp, "resumed.jsonl"),
                p1 + ["", json.dumps({"event": "a record kind the tool does not know"})] + p2)

# No evaluation records, MFU set (a GPU run), last loss 2.5 at step 5.
noval = write(os.path.join(tmp, "noval.jsonl"),
              [step_rec(s, 3.0 - 0.1 * s, 500.0 + s, mfu=0.30 + 0.01 * (s - 1))
               for s in range(1, 6)])

# Started again from scratch in the same file: val 0 then steps 1-2 again.
fresh = write(os.path.join(tmp, "fresh.jsonl"),
              [json.dumps({"step": 0, "val_loss": 6.0})] +
              [step_rec(s, 9.0, 100.0) for s in (1, 2, 3)] +
              [json.dumps({"step": 0, "val_loss": 5.5})] +
              [step_rec(s, 4.0 + s, 200.0) for s in (1, 2)])

# Token counts in the records.
seen = write(os.path.join(tmp, "seen.jsonl"),
             [json.dumps({"step": 0, "val_loss": 5.0})] +
             [step_rec(s, 5.0 - 0.2 * s, 300.0, tokens_seen=512 * s) for s in range(1, 4)] +
             [json.dumps({"step": 3, "val_loss": 4.0})])

# --- --summary -------------------------------------------------------------
r = tool(resumed, noval, fresh, "--summary", "--labels", "res,nv,fr")
check(r.returncode == 0, f"--summary exited {r.returncode}: {r.stderr}")
lines = r.stdout.splitlines()
check(len(lines) == 3, f"--summary printed {len(lines)} lines, want 3: {r.stdout!r}")
if len(lines) == 3:
    res, nv, fr = lines
    check(res.startswith("res: steps 1-8 (8 step records, 2 replaced on resume)"), res)
    check("last loss 2.8500 at step 8" in res, res)
    check("best val loss 4.3000 at step 8" in res, res)  # not the replaced 4.2
    check("median tokens/s 520.0" in res, res)  # of 10,20,30,40,1000..4000
    check("median MFU n/a" in res, res)
    check("diverged" not in res, res)  # the diverged step 7 was replaced
    check(nv.startswith("nv: steps 1-5 (5 step records, 0 replaced on resume)"), nv)
    check("last loss 2.5000 at step 5" in nv, nv)
    check("best val loss n/a" in nv, nv)
    check("median tokens/s 503.0" in nv, nv)
    check("median MFU 32.00%" in nv, nv)
    check(fr.startswith("fr: steps 1-2 (2 step records, 3 replaced on resume)"), fr)
    check("last loss 6.0000 at step 2" in fr, fr)
    check("best val loss 5.5000 at step 0" in fr, fr)
    check("median tokens/s 200.0" in fr, fr)

# Labels default to the file stems; a diverged last step is named.
div = write(os.path.join(tmp, "div.jsonl"),
            [step_rec(1, 5.0, 100.0),
             json.dumps({"step": 2, "loss": None, "grad_norm": None, "diverged": True})])
r = tool(div, "--summary")
check(r.returncode == 0 and r.stdout.startswith("div: steps 1-1 "), f"stem label: {r.stdout!r}")
check("diverged at step 2" in r.stdout, f"diverged not named: {r.stdout!r}")

# --on-divergence rollback: step 6 spiked and went back to step 4; steps 5-8
# follow. A second process resumed from step 4's checkpoint repeats that
# rollback, which is listed once, and replaces steps 5-8 once more.
def rollback_rec(step, back):
    return json.dumps({"step": step, "loss": 50.0, "grad_norm": 1.0, "diverged": True,
                       "reason": "its loss is 10 times ...", "rollback_to_step": back,
                       "skipped_sequences": [32, 48], "rollbacks": 1})


process = [step_rec(5, 5.0, 100.0), rollback_rec(6, 4)] + [step_rec(s, 4.0, 100.0) for s in (5, 6, 7, 8)]
rb = write(os.path.join(tmp, "rb.jsonl"),
           [step_rec(s, 6.0, 100.0) for s in (1, 2, 3, 4)] + process + process)
r = tool(rb, "--summary")
check(r.returncode == 0 and "steps 1-8 (8 step records, 6 replaced on resume)" in r.stdout,
      f"rollback: the replayed steps replace the undone ones: {r.stdout!r}")
check(r.stdout.count("rolled back at step 6 (to 4)") == 1 and "diverged at" not in r.stdout,
      f"rollback named once, not as a stop: {r.stdout!r}")

# --- errors ----------------------------------------------------------------
missing = os.path.join(tmp, "nope.jsonl")
one_error_line(tool(missing, "--summary"), "missing file", missing, "no such file")
one_error_line(tool(noval, missing, "-o", os.path.join(tmp, "x.png")),
               "missing second file", missing)
check(not os.path.exists(os.path.join(tmp, "x.png")), "a figure was written despite the error")
bad = write(os.path.join(tmp, "bad.jsonl"),
            [step_rec(1, 5.0, 1.0), step_rec(2, 4.0, 1.0), '{"step": 3, "loss": 4.'])
one_error_line(tool(bad, "--summary"), "truncated JSON", bad, "line 3", "not JSON lines")
text = write(os.path.join(tmp, "text.jsonl"), ["step 1 loss 5.0"])
one_error_line(tool(text, "--summary"), "plain text", text, "line 1", "not JSON lines")
arr = write(os.path.join(tmp, "arr.jsonl"), ["", "[1, 2]"])
one_error_line(tool(arr, "--summary"), "JSON array", arr, "line 2", "not an object")
only_val = write(os.path.join(tmp, "only_val.jsonl"),
                 [json.dumps({"step": 0, "val_loss": 5.0}),
                  json.dumps({"step": 5, "checkpoint": "/ck/x.h5"})])
one_error_line(tool(only_val, "--summary"), "no step records", only_val, "no step records")
empty = write(os.path.join(tmp, "empty.jsonl"), [])
one_error_line(tool(empty, "--summary"), "empty file", empty, "no step records")
one_error_line(tool(tmp, "--summary"), "a directory", tmp)
one_error_line(tool(noval, resumed, "--summary", "--labels", "a"), "labels count", "--labels")
one_error_line(tool(noval), "nothing to do", "-o")
one_error_line(tool(noval, "--summary", "--x", "sideways"), "bad --x", "--x")
one_error_line(tool(noval, "-o", os.path.join(tmp, "t.png"), "--x", "tokens"),
               "--x tokens without a token count", noval, "--tokens-per-step")
one_error_line(tool(noval, "--summary", "--tokens-per-step", "0"), "tokens per step 0",
               "--tokens-per-step")

# --- figures ----------------------------------------------------------------
has_mpl = subprocess.run([sys.executable, "-c", "import matplotlib"],
                         capture_output=True).returncode == 0
if has_mpl:
    def figure(out, *args):
        r = tool(*args, "-o", out)
        check(r.returncode == 0, f"{args}: exit {r.returncode}: {r.stderr}")
        check(r.stderr == "", f"{args}: stderr not empty: {r.stderr!r}")
        size = png_size(out) if os.path.exists(out) else None
        check(size is not None, f"{args}: {out} is not a PNG")
        if size:
            check(size[0] > 0 and size[1] > 0, f"{args}: image size {size}")
            check(os.path.getsize(out) > 10000, f"{args}: {os.path.getsize(out)} bytes")
        return r

    figure(os.path.join(tmp, "one.png"), resumed)  # no MFU, no token count: notes
    figure(os.path.join(tmp, "noval.png"), noval)  # no validation records
    r = figure(os.path.join(tmp, "all.png"), resumed, noval, fresh, seen,
               "--labels", "a,b,c,d", "--summary")
    check(len(r.stdout.splitlines()) == 4, f"-o with --summary: {r.stdout!r}")
    figure(os.path.join(tmp, "tokens.png"), resumed, noval, "--x", "tokens",
           "--tokens-per-step", "512,1024", "--dpi", "60")
    figure(os.path.join(tmp, "seen.png"), seen, "--x", "tokens")
    # The output folder does not exist: an error naming the file.
    out = os.path.join(tmp, "no_dir", "x.png")
    one_error_line(tool(noval, "-o", out), "unwritable output", out)

if failures:
    sys.exit(f"{len(failures)} check(s) failed (files kept in {tmp})")
shutil.rmtree(tmp, ignore_errors=True)
if not has_mpl:
    print(f"SKIP: matplotlib is not installed for {sys.executable} (tools/setup.sh "
          "installs it); the summary and error checks passed, the figures were not made")
    sys.exit(77)
print("ok")
