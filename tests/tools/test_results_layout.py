#!/usr/bin/env python3
"""bench/results keeps one layout, so that every GPU figure has its evidence
and a reader finds it in the same place (docs/ARCHITECTURE.md, "GPU checks").

  test_results_layout.py BENCH_RESULTS_DIR

A GPU session's folder is <gpu>_<date>[letter] with a README.md that names
each of its run folders. A run folder (run<N>_<commit>, one device-tool call
of bench/cuda/run_gpu_checks.sh) holds what a reader opens first (summary,
RESULT lines, header, profiles) and one archive, logs.tar.gz, with every
check's log under logs/ and the per-step metrics under runs/; a time-to-loss
folder (ttl_<commit>) holds the TTL lines, the runs' logs, the step profiles
of ttl_run.sh's profile systems and one archive of their metrics. Anything else (a loose .jsonl, a nested folder) fails, as does
a RESULT or TTL line without the device it ran on.
"""
import os
import re
import sys
import tarfile

SESSION = re.compile(r"^[a-z0-9]+_\d{4}-\d{2}-\d{2}[a-z]?$")
RUN = re.compile(r"^run\d+_[0-9a-f]{7,40}$")
TTL = re.compile(r"^ttl_[0-9a-f]{7,40}$")
RUN_REQUIRED = {"header.log", "summary.txt", "logs.tar.gz"}
RUN_ALLOWED = re.compile(r"^(header\.log|summary\.txt|results\.txt|kernels\.txt|logs\.tar\.gz|profile(_\w+)?\.txt)$")
TTL_REQUIRED = {"ttl.txt", "ttl_metrics.tar.xz"}
TTL_ALLOWED = re.compile(r"^(ttl\.txt|ttl_metrics\.tar\.xz|ttl_log(_\w+)?\.txt|profile_\w+\.(txt|json))$")
RESULT_LINE = re.compile(r"^RESULT system=\S+ .* device=\S.*$")
TTL_LINE = re.compile(r"^TTL system=\S+ precision=\S+ optimizer=\S+ model=\S+ train_s=\S+ val_loss=\S+ "
                      r"reach_ref_s=\S+( tokens_per_s=\S+)?( complete=\S+)? device=\S.*$")


def check_archive(path, tops, errors):
    """The archive opens, and its entries sit under the expected top folders (or at the top)."""
    try:
        with tarfile.open(path) as t:
            names = t.getnames()
    except (tarfile.TarError, OSError) as e:
        errors.append(f"{path}: cannot read the archive ({e})")
        return
    if not names:
        errors.append(f"{path}: the archive is empty")
    for n in names:
        top = n.split("/", 1)[0]
        if tops and top not in tops:
            errors.append(f"{path}: '{n}' is outside {sorted(tops)}")
            return


def check_lines(path, pattern, what, errors):
    with open(path, encoding="utf-8") as f:
        lines = [l.rstrip("\n") for l in f if l.strip()]
    if not lines:
        errors.append(f"{path}: no {what} lines")
    for l in lines:
        if not pattern.match(l):
            errors.append(f"{path}: not a {what} line with its device: '{l[:100]}'")


# Per kind of folder: the name pattern, the files it may and must hold, its
# one archive (and the top folders allowed in it; empty: any), the file of
# result lines and their pattern, and what to say of a stray file.
KINDS = [
    (RUN, RUN_ALLOWED, RUN_REQUIRED, "logs.tar.gz", {"logs", "runs"}, "results.txt", RESULT_LINE, "RESULT",
     "a run folder keeps only summary, RESULT lines, header and profiles; logs and per-step metrics "
     "go into logs.tar.gz"),
    (TTL, TTL_ALLOWED, TTL_REQUIRED, "ttl_metrics.tar.xz", set(), "ttl.txt", TTL_LINE, "TTL",
     "a time-to-loss folder keeps its TTL lines and logs; the per-step metrics go into ttl_metrics.tar.xz"),
]


def check_folder(d, files, kind, errors):
    _, allowed, required, archive, tops, lines, pattern, what, stray = kind
    for f in sorted(files):
        if not allowed.match(f):
            errors.append(f"{d}/{f}: {stray}")
    for f in sorted(required - files):
        errors.append(f"{d}: no {f}")
    if archive in files:
        check_archive(os.path.join(d, archive), tops, errors)
    if lines in files:
        check_lines(os.path.join(d, lines), pattern, what, errors)


def check(root):
    errors, runs = [], 0
    for s in sorted(os.listdir(root)):
        sd = os.path.join(root, s)
        if not os.path.isdir(sd):
            continue  # CPU-side measurements: bench/results/*_cpu_<date>.txt
        if not SESSION.match(s):
            errors.append(f"{sd}: a GPU session's folder is named <gpu>_<date>[letter]")
            continue
        readme = os.path.join(sd, "README.md")
        text = open(readme, encoding="utf-8").read() if os.path.isfile(readme) else None
        if text is None:
            errors.append(f"{sd}: no README.md (device, commands, what the runs show)")
        for r in sorted(os.listdir(sd)):
            rd = os.path.join(sd, r)
            if not os.path.isdir(rd):
                if r != "README.md":
                    errors.append(f"{rd}: loose file; it belongs in a run folder")
                continue
            if text is not None and r not in text:
                errors.append(f"{readme}: does not name its folder {r}")
            entries = os.listdir(rd)
            for e in entries:
                if os.path.isdir(os.path.join(rd, e)):
                    errors.append(f"{rd}/{e}: a folder inside a run folder; it belongs in the archive")
            files = {e for e in entries if os.path.isfile(os.path.join(rd, e))}
            kind = next((k for k in KINDS if k[0].match(r)), None)
            if kind:
                check_folder(rd, files, kind, errors)
            else:
                errors.append(f"{rd}: a run folder is named run<N>_<commit> or ttl_<commit>")
            runs += 1
    return errors, runs


def selftest(tmp):
    """The checks catch what they are for, in run and time-to-loss folders: a loose metrics file, a nested
    folder, a line without its device, a folder the README does not name."""
    import io
    import shutil
    root = os.path.join(tmp, "results")
    shutil.rmtree(root, ignore_errors=True)
    run = os.path.join(root, "h100_2026-01-01", "run1_abcdef0")
    os.makedirs(run)
    open(os.path.join(root, "h100_2026-01-01", "README.md"), "w").write("`run1_abcdef0`\n")
    for f in ("header.log", "summary.txt"):
        open(os.path.join(run, f), "w").write("x\n")
    open(os.path.join(run, "results.txt"), "w").write("RESULT system=fsdptrain tokens_per_s=1 device=NVIDIA H100\n")
    def archive(path, mode, name):
        with tarfile.open(path, mode) as t:
            data = b"log\n"
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    archive(os.path.join(run, "logs.tar.gz"), "w:gz", "logs/a1.log")
    ttl = os.path.join(root, "h100_2026-01-01", "ttl_abcdef0")
    os.makedirs(ttl)
    open(os.path.join(root, "h100_2026-01-01", "README.md"), "a").write("`ttl_abcdef0`\n")
    open(os.path.join(ttl, "ttl.txt"), "w").write(
        "TTL system=fsdptrain precision=bf16 optimizer=adamw model=m train_s=1 val_loss=2 reach_ref_s=1 "
        "device=NVIDIA H100\n")
    archive(os.path.join(ttl, "ttl_metrics.tar.xz"), "w:xz", "ttl_fsdptrain_bf16.jsonl")
    errors, _ = check(root)
    assert not errors, f"selftest: a good layout was refused: {errors}"
    bad = [
        ("a loose metrics file", lambda: open(os.path.join(run, "g2.jsonl"), "w").write("{}\n"), "g2.jsonl"),
        ("a nested folder", lambda: os.makedirs(os.path.join(run, "runs")), "runs"),
        ("a RESULT line without its device", lambda: open(os.path.join(run, "results.txt"), "a").write(
            "RESULT system=fsdptrain tokens_per_s=2\n"), "not a RESULT line"),
        ("a TTL line without its device", lambda: open(os.path.join(ttl, "ttl.txt"), "a").write(
            "TTL system=x precision=p optimizer=o model=m train_s=1 val_loss=2 reach_ref_s=1\n"), "not a TTL line"),
        ("a loose metrics file beside the TTL lines",
         lambda: open(os.path.join(ttl, "ttl_torch.jsonl"), "w").write("{}\n"), "ttl_torch.jsonl"),
        ("a run the README does not name", lambda: os.makedirs(os.path.join(root, "h100_2026-01-01", "run2_abcdef1")),
         "does not name its folder run2_abcdef1"),
    ]
    for what, make, expect in bad:
        make()
        errors, _ = check(root)
        assert any(expect in e for e in errors), f"selftest: {what} was not caught: {errors}"
    shutil.rmtree(root)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: test_results_layout.py BENCH_RESULTS_DIR")
    tmp = os.environ.get("TMPDIR", "/tmp")
    selftest(os.path.join(tmp, f"results_layout_{os.getpid()}"))
    errors, runs = check(sys.argv[1])
    for e in errors:
        print(f"FAIL: {e}")
    if errors:
        sys.exit(1)
    print(f"PASS: {runs} run folders under {sys.argv[1]} keep the layout")


if __name__ == "__main__":
    main()
