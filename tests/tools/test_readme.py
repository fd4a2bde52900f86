#!/usr/bin/env python3
"""CTest: README.md's CPU commands, run as written, and its figures that a tool makes.

  test_readme.py REPO_ROOT BUILD_DIR

Every ```sh block that follows a line `<!-- readme-test -->` in README.md is
run by `bash -euo pipefail`, unchanged, in README order, in one scratch
directory that looks like the repository root to it: `build` is a link to
BUILD_DIR, `.venv` to the environment of the python running this test, and
every other top-level entry of the repository a link to it. So a block sees
what the blocks before it wrote (data, checkpoints), as a user following the
README does, and writes nothing into the checkout. The files a README reader
brings are stand-ins made here: `mytext.txt` and `input.txt` (English text
decoded from the built-in example) and `tokens.npy` (its bytes as token ids).

The environment is the user's, except for what Open MPI needs in a container
(shared-memory transport without ptrace's single copy, no ssh agent); running
as root and more ranks than cores are the README's own flags to show.

Fails when a marked block exits non-zero, holds a `...` placeholder (a block
that cannot run as written must not be marked), when fewer than MIN_BLOCKS
blocks are marked (markers lost in an edit), when the blocks changed the
checkout (`git status`: a path that lands in one of the repository's own
folders, as `--out data/...` once did in the source folder data/), or when
README's scaling-plan table differs from `tools/plan.py --table`'s.
"""

import os
import re
import subprocess
import sys
import tempfile
import time

MARK = "<!-- readme-test -->"
MIN_BLOCKS = 8
CONTAINER_MPI_ENV = {
    "OMPI_MCA_btl": "self,vader",
    "OMPI_MCA_btl_vader_single_copy_mechanism": "none",
    "OMPI_MCA_plm": "^rsh",
}

failures = []


def fail(what):
    failures.append(what)
    print("FAIL: " + what, flush=True)


def marked_blocks(lines):
    """(line number of the block's first command, block text) for each marked block."""
    out = []
    for i, line in enumerate(lines):
        if line.strip() != MARK:
            continue
        if i + 1 >= len(lines) or lines[i + 1].strip() != "```sh":
            fail(f"README.md:{i + 1}: {MARK} must be followed at once by a ```sh block")
            continue
        end = i + 2
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        out.append((i + 3, "\n".join(lines[i + 2:end])))
    return out


def make_scratch(root, build, scratch):
    for name in os.listdir(root):
        if name in (".git", "build", ".venv"):
            continue
        os.symlink(os.path.join(root, name), os.path.join(scratch, name))
    os.symlink(build, os.path.join(scratch, "build"))
    os.symlink(sys.prefix, os.path.join(scratch, ".venv"))
    import h5py
    import numpy as np
    with h5py.File(os.path.join(build, "example", "kjv_train.h5"), "r") as f:
        text = f["tokens"][:600_000].astype(np.uint8).tobytes()
    for name in ("mytext.txt", "input.txt"):
        with open(os.path.join(scratch, name), "wb") as out:
            out.write(text)
    np.save(os.path.join(scratch, "tokens.npy"), np.frombuffer(text, np.uint8).astype(np.uint16))


def run_blocks(blocks, scratch):
    env = dict(os.environ, **CONTAINER_MPI_ENV)
    for key in ("OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM",
                "OMPI_MCA_rmaps_base_oversubscribe"):
        env.pop(key, None)
    for line_no, block in blocks:
        if re.search(r"(^|\s)\.\.\.(\s|$)", block):
            fail(f"README.md:{line_no}: a marked block holds a '...' placeholder")
            continue
        print(f"== README.md:{line_no}\n{block}", flush=True)
        t0 = time.monotonic()
        r = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=scratch, env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        tail = "\n".join(r.stdout.splitlines()[-15:])
        print(f"-- exit {r.returncode} in {time.monotonic() - t0:.1f} s; last lines:\n{tail}",
              flush=True)
        if r.returncode != 0:
            fail(f"README.md:{line_no}: the block exited {r.returncode}")


def table_rows(lines, header_start):
    rows, inside = [], False
    for line in lines:
        if line.startswith(header_start):
            inside = True
        if inside:
            if not line.startswith("|"):
                break
            rows.append(line.rstrip())
    return rows


def check_plan_table(lines, root, build):
    r = subprocess.run([sys.executable, os.path.join(root, "tools", "plan.py"), "--table",
                        "--memory-plan-exe", os.path.join(build, "tools", "fsdp_memory_plan")],
                       capture_output=True, text=True)
    if r.returncode != 0:
        fail(f"plan.py --table exited {r.returncode}: {r.stderr.strip()}")
        return
    made = [l.rstrip() for l in r.stdout.splitlines() if l.startswith("|")]
    shown = table_rows(lines, "| model | GPUs |")
    if not shown:
        fail("README.md has no scaling-plan table ('| model | GPUs |')")
    elif shown != made:
        for a, b in zip(shown, made):
            if a != b:
                print(f"README:  {a}\nplan.py: {b}")
        fail("README's scaling-plan table differs from tools/plan.py --table (paste its output)")


def checkout_state(root):
    r = subprocess.run(["git", "-C", root, "status", "--porcelain", "--untracked-files=all"],
                       capture_output=True, text=True)
    return r.stdout if r.returncode == 0 else None  # None: not a git checkout


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    root, build = (os.path.abspath(a) for a in sys.argv[1:])
    lines = open(os.path.join(root, "README.md"), encoding="utf-8").read().splitlines()
    check_plan_table(lines, root, build)
    blocks = marked_blocks(lines)
    if len(blocks) < MIN_BLOCKS:
        fail(f"README.md marks {len(blocks)} blocks with {MARK}, expected at least {MIN_BLOCKS}")
    before = checkout_state(root)
    with tempfile.TemporaryDirectory(prefix="readme_test.") as scratch:
        make_scratch(root, build, scratch)
        run_blocks(blocks, scratch)
    after = checkout_state(root)
    if before != after:
        new = sorted(set(after.splitlines()) - set(before.splitlines()))
        fail("README's blocks changed the checkout: " + "; ".join(new[:10]))
    print(f"{len(blocks)} README blocks run; {len(failures)} failure(s)")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
