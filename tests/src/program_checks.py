"""What the program tests (tests/src/*_test.py) share: a check that prints
ok/FAIL and remembers failures, runs of fsdptrain on one rank or under
mpirun, --metrics files read back, and the one-error-line rule for bad input.
A test imports these (its own directory is on sys.path) and ends with
finish()."""
import json
import os
import signal
import subprocess
import sys
import time

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


def children(pid):
    """The ranks: mpirun starts them as its own children."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry))
    return out


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def kill_job(p, seconds=30):
    """SIGKILL to a job started with subprocess.Popen (mpirun or one rank)
    and to every rank, as a power loss would; returns once none is left,
    or False if some process outlived `seconds`."""
    pids = children(p.pid) + [p.pid]
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    p.communicate()
    end = time.time() + seconds
    while any(alive(pid) for pid in pids) and time.time() < end:
        time.sleep(0.05)
    return not any(alive(pid) for pid in pids)


def wait_for(cond, seconds=120):
    """Polls cond() until it holds (True) or `seconds` pass (False)."""
    deadline = time.time() + seconds
    while time.time() < deadline and not cond():
        time.sleep(0.05)
    return cond()


def records(path):
    """A --metrics file's lines as dicts ([] when there is none)."""
    return [json.loads(l) for l in open(path)] if os.path.exists(path) else []


def error_lines(p):
    """A finished run's 'fsdptrain: error:' lines."""
    return [l for l in p.stderr.splitlines() if l.startswith("fsdptrain: error:")]


def checkpoint_state(path):
    """A checkpoint's every dataset by name, with '@consumed' (its data
    position), '@rollbacks' and '@skipped' (its rollback record): what two
    runs that must end alike are compared on."""
    import h5py  # only the tests that read checkpoints need it
    out = {}
    with h5py.File(path, "r") as f:
        def visit(name, obj):
            if isinstance(obj, h5py.Dataset):
                out[name] = obj[()]
        f.visititems(visit)
        out["@consumed"] = int(f["sampler"].attrs["consumed"])
        out["@rollbacks"] = int(f.attrs.get("rollbacks", 0))
        out["@skipped"] = [int(v) for v in f.attrs.get("skipped_sequences", [])]
    return out


def state_difference(a, b, records_too=True):
    """'' when two checkpoint_state()s are equal bit for bit, else what
    differs first; without records_too the '@' entries are left out."""
    import numpy as np
    keys = [k for k in a.keys() | b.keys() if records_too or not k.startswith("@")]
    missing = sorted(k for k in keys if k not in a or k not in b)
    if missing:
        return f"names differ: {missing[:4]}"
    return next((f"{k} differs" for k in sorted(keys) if not np.array_equal(a[k], b[k])), "")


def one_error(cmd, needle, what):
    """Bad input: exactly one 'fsdptrain: error:' line, naming `needle`, and a non-zero exit."""
    p = run(cmd)
    errors = error_lines(p)
    check(p.returncode != 0 and len(errors) == 1 and needle in errors[0],
          f"{what}: one error line with '{needle}' (exit {p.returncode}, {errors})")


def finish(name):
    if failures:
        sys.exit(f"{len(failures)} check(s) failed")
    print(f"{name}: all checks passed")
