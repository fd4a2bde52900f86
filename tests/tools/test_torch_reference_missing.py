#!/usr/bin/env python3
"""CTest for tools/torch_reference.py where PyTorch is missing, as in the
project's venv after tools/setup.sh: one line saying how to get it, exit 2,
no traceback. Exits 77 (skipped) where this python has torch.

  test_torch_reference_missing.py TORCH_REFERENCE_PY
"""

import importlib.util
import subprocess
import sys

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL: " + what)


def one_line_error(r, what, *needles):
    check(r.returncode == 2, f"{what}: exit {r.returncode}, want 2")
    check("Traceback" not in r.stderr, f"{what}: a traceback: {r.stderr}")
    check(r.stdout == "", f"{what}: stdout {r.stdout!r}")
    check(r.stderr.startswith("torch_reference: error: needs ") and r.stderr.count("\n") == 1,
          f"{what}: not one 'torch_reference: error:' line: {r.stderr!r}")
    for n in needles:
        check(n in r.stderr, f"{what}: the message lacks '{n}': {r.stderr!r}")


def main():
    tool = sys.argv[1]
    if importlib.util.find_spec("torch") is not None:
        print("skipped: this python has torch")
        sys.exit(77)
    r = subprocess.run([sys.executable, tool, "ck.h5", "--metrics", "m.jsonl"],
                       capture_output=True, text=True)
    one_line_error(r, "without torch", "PyTorch", "tools/setup.sh does not install",
                   ".venv/bin/python -m pip install torch --index-url "
                   "https://download.pytorch.org/whl/cpu")
    # Without site-packages (-S) h5py and numpy are missing too: the same
    # kind of line, naming the first.
    r = subprocess.run([sys.executable, "-S", tool, "ck.h5"], capture_output=True, text=True)
    if subprocess.run([sys.executable, "-S", "-c", "import h5py"],
                      capture_output=True).returncode != 0:
        one_line_error(r, "without h5py", "the python package h5py", ".venv/bin/python")
    print("torch_reference without torch: " + ("FAILED" if failures else "all checks passed"))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
