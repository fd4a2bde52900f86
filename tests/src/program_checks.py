"""What the program tests (tests/src/*_test.py) share: a check that prints
ok/FAIL and remembers failures, runs of fsdptrain on one rank or under
mpirun, --metrics files read back, and the one-error-line rule for bad input.
A test imports these (its own directory is on sys.path) and ends with
finish()."""
import json
import os
import subprocess
import sys

failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def run(cmd, ranks=1, timeout=300, env=None):
    """cmd on `ranks` ranks ($MPIEXEC, default mpirun, when more than one),
    in `env` (default: this process's environment)."""
    if ranks > 1:
        cmd = [os.environ.get("MPIEXEC", "mpirun"), "--oversubscribe", "-np", str(ranks)] + cmd
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


def records(path):
    """A --metrics file's lines as dicts ([] when there is none)."""
    return [json.loads(l) for l in open(path)] if os.path.exists(path) else []


def one_error(cmd, needle, what):
    """Bad input: exactly one 'fsdptrain: error:' line, naming `needle`, and a non-zero exit."""
    p = run(cmd)
    errors = [l for l in p.stderr.splitlines() if l.startswith("fsdptrain: error:")]
    check(p.returncode != 0 and len(errors) == 1 and needle in errors[0],
          f"{what}: one error line with '{needle}' (exit {p.returncode}, {errors})")


def finish(name):
    if failures:
        sys.exit(f"{len(failures)} check(s) failed")
    print(f"{name}: all checks passed")
