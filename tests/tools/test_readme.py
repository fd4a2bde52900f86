#!/usr/bin/env python3
"""CTest: the documentation's CPU commands, run as written; its links and a table.

  test_readme.py REPO_ROOT BUILD_DIR

Every ```sh block that follows a line `<!-- readme-test -->` in README.md and
in the pages of docs/ listed in PAGES is run by `bash -euo pipefail`,
unchanged, page by page in PAGES' order (a newcomer's reading order) and in
page order within a page, in one scratch directory that looks like the
repository root to it: `build` is a link to BUILD_DIR, `.venv` to the
environment of the python running this test, and every other top-level entry
of the repository a link to it. So a block sees what the blocks before it
wrote (data, checkpoints), as a user following the pages does, and writes
nothing into the checkout. The files a reader brings are stand-ins made here:
`mytext.txt` and `input.txt` (English text decoded from the built-in example)
and `tokens.npy` (its bytes as token ids).

The environment is the user's, except for what Open MPI needs in a container
(shared-memory transport without ptrace's single copy, no ssh agent) and the
one OpenBLAS thread a process that CTest gives every test (cmake/Testing.cmake);
running as root and more ranks than cores are the pages' own flags to show.

Fails when a marked block exits non-zero, holds a `...` placeholder (a block
that cannot run as written must not be marked), when fewer than MIN_BLOCKS
blocks are marked (markers lost in an edit), when a page of docs/ marks
blocks but is not in PAGES (they would never run), when the blocks changed
the checkout (`git status`: a path that lands in one of the repository's own
folders, as `--out data/...` once did in the source folder data/), when a
page of docs/ is not linked from README.md (a newcomer could not find it),
when a relative link in README.md or docs/ names a file that does not exist
or an anchor that no heading of its page makes (a section moved or renamed),
or when the scaling-plan table in docs/CLUSTER.md differs from
`tools/plan.py --table`'s.
"""

import os
import re
import subprocess
import sys
import tempfile
import time

MARK = "<!-- readme-test -->"
# The pages whose marked blocks run, in this order: later pages use what
# earlier ones made (CHECKPOINTS.md's ckpt/ is what HUGGING_FACE.md exports).
PAGES = ["README.md", "docs/RUNNING.md", "docs/DATA.md", "docs/CHECKPOINTS.md",
         "docs/HUGGING_FACE.md", "docs/CLUSTER.md"]
PLAN_TABLE_PAGE = "docs/CLUSTER.md"
MIN_BLOCKS = 14
CONTAINER_MPI_ENV = {
    "OMPI_MCA_btl": "self,vader",
    "OMPI_MCA_btl_vader_single_copy_mechanism": "none",
    "OMPI_MCA_plm": "^rsh",
}

failures = []


def fail(what):
    failures.append(what)
    print("FAIL: " + what, flush=True)


def read_lines(root, page):
    return open(os.path.join(root, page), encoding="utf-8").read().splitlines()


def marked_blocks(page, lines):
    """(where: PAGE:LINE of the block's first command, block text) for each marked block."""
    out = []
    for i, line in enumerate(lines):
        if line.strip() != MARK:
            continue
        if i + 1 >= len(lines) or lines[i + 1].strip() != "```sh":
            fail(f"{page}:{i + 1}: {MARK} must be followed at once by a ```sh block")
            continue
        end = i + 2
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        out.append((f"{page}:{i + 3}", "\n".join(lines[i + 2:end])))
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
    for where, block in blocks:
        if re.search(r"(^|\s)\.\.\.(\s|$)", block):
            fail(f"{where}: a marked block holds a '...' placeholder")
            continue
        print(f"== {where}\n{block}", flush=True)
        t0 = time.monotonic()
        r = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=scratch, env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        tail = "\n".join(r.stdout.splitlines()[-15:])
        print(f"-- exit {r.returncode} in {time.monotonic() - t0:.1f} s; last lines:\n{tail}",
              flush=True)
        if r.returncode != 0:
            fail(f"{where}: the block exited {r.returncode}")


def prose(lines):
    """(line number, line) of the lines outside fenced code blocks."""
    inside = False
    for i, line in enumerate(lines):
        if line.lstrip().startswith("```"):
            inside = not inside
        elif not inside:
            yield i + 1, line


def anchors(lines):
    """The anchors GitHub makes for a page's headings: lower case, punctuation
    but '-' and '_' dropped, spaces as '-', a repeated one suffixed -1, -2, ..."""
    out, seen = set(), {}
    for _, line in prose(lines):
        m = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        slug = re.sub(r"[^\w\- ]", "", m.group(1).lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


LINK = re.compile(r"\]\(([^)\s]+)\)")


def check_links(root, pages):
    """Every relative link of README.md and docs/*.md reaches a file, and its
    #anchor a heading of that page; returns the pages each page links to."""
    targets, headings = {}, {}
    for page in pages:
        lines = read_lines(root, page)
        here = os.path.dirname(page)
        targets[page] = set()
        for line_no, line in prose(lines):
            for target in LINK.findall(line.replace("`", "")):
                if re.match(r"[a-z]+:", target):
                    continue  # https:, mailto:
                path, _, anchor = target.partition("#")
                dest = os.path.normpath(os.path.join(here, path)) if path else page
                targets[page].add(dest)
                if not os.path.exists(os.path.join(root, dest)):
                    fail(f"{page}:{line_no}: the link '{target}' names {dest}, which does not exist")
                    continue
                if dest.endswith(".md") and dest not in headings:
                    headings[dest] = anchors(read_lines(root, dest))
                if anchor and dest.endswith(".md") and anchor not in headings[dest]:
                    fail(f"{page}:{line_no}: the link '{target}': {dest} has no heading "
                         f"whose anchor is '#{anchor}'")
    return targets


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
        fail(f"{PLAN_TABLE_PAGE} has no scaling-plan table ('| model | GPUs |')")
    elif shown != made:
        for a, b in zip(shown, made):
            if a != b:
                print(f"{PLAN_TABLE_PAGE}: {a}\nplan.py: {b}")
        fail(f"{PLAN_TABLE_PAGE}'s scaling-plan table differs from tools/plan.py --table "
             "(paste its output)")


def checkout_state(root):
    r = subprocess.run(["git", "-C", root, "status", "--porcelain", "--untracked-files=all"],
                       capture_output=True, text=True)
    return r.stdout if r.returncode == 0 else None  # None: not a git checkout


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    root, build = (os.path.abspath(a) for a in sys.argv[1:])
    docs = sorted("docs/" + n for n in os.listdir(os.path.join(root, "docs")) if n.endswith(".md"))
    linked = check_links(root, ["README.md"] + docs)
    for page in docs:
        if page not in linked["README.md"]:
            fail(f"README.md does not link {page}: add it to README's Documentation table")
    check_plan_table(read_lines(root, PLAN_TABLE_PAGE), root, build)
    blocks = []
    for page in PAGES:
        blocks += marked_blocks(page, read_lines(root, page))
    for page in docs:
        if page not in PAGES and marked_blocks(page, read_lines(root, page)):
            fail(f"{page} marks blocks with {MARK} but is not in test_readme.py's PAGES")
    if len(blocks) < MIN_BLOCKS:
        fail(f"the pages mark {len(blocks)} blocks with {MARK}, expected at least {MIN_BLOCKS}")
    before = checkout_state(root)
    with tempfile.TemporaryDirectory(prefix="readme_test.") as scratch:
        make_scratch(root, build, scratch)
        run_blocks(blocks, scratch)
    after = checkout_state(root)
    if before != after:
        new = sorted(set(after.splitlines()) - set(before.splitlines()))
        fail("the pages' blocks changed the checkout: " + "; ".join(new[:10]))
    print(f"{len(blocks)} blocks of {len(PAGES)} pages run; {len(failures)} failure(s)")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
