#!/usr/bin/env python3
"""slurm/h100_4node.sh cannot run here, but its fsdptrain flags can be
checked: bash accepts the script, and every flag it passes is one fsdptrain
parses (a renamed flag would otherwise first fail on a cluster). The program
must get past option parsing and stop only because this machine has no GPU."""
import re
import subprocess
import sys

exe, script, data = sys.argv[1:4]
failures = []
if subprocess.run(["bash", "-n", script]).returncode != 0:
    failures.append("bash -n rejects the script")
text = open(script).read()
call = text[text.index('"$BIN"'):].split("&\n")[0]
flags = re.findall(r"(--[a-z0-9-]+)(?:\s+(\"[^\"]*\"|[^\s\\\\]+))?", call.replace("\\\n", " "))
args = []
for flag, value in flags:
    if flag in ("--mpi", "--kill-on-bad-exit"):
        continue
    args.append(flag)
    if value and not value.startswith("--"):
        args.append("/nonexistent/slurm_test" if "$" in value else value.strip('"'))
args += ["--train-data", data]
r = subprocess.run([exe] + args, capture_output=True, text=True, timeout=60)
err = r.stderr.strip()
print("fsdptrain", " ".join(args), "->", err)
if "unrecognised" in err or "unrecognized" in err or "is invalid" in err:
    failures.append("an option in the script is not accepted: " + err)
elif r.returncode == 0 or "--device cuda" not in err:
    failures.append("expected to stop only for the missing GPU, got: " + err)
print(f"{0 if failures else 1} passed, {1 if failures else 0} failed")
for f in failures:
    print("FAIL:", f)
sys.exit(1 if failures else 0)
