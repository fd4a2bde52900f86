#!/usr/bin/env python3
"""slurm/h100_4node.sh cannot run here, but its fsdptrain flags can be
checked: bash accepts the script, and every flag it passes is one fsdptrain
parses (a renamed flag would otherwise first fail on a cluster). The program
must get past option parsing and stop only because this machine has no GPU.
The script's signal handling runs for real against stand-ins for srun and
scontrol: USR1 (the time limit) reaches the ranks as USR1, requeues and exits
0; SIGTERM (scancel, preemption) reaches them as USR1 and does not requeue."""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

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

# Stand-ins: srun records the signal its "ranks" got and exits 0 as the
# trainer does after checkpointing; scontrol records its arguments.
box = tempfile.mkdtemp(prefix="slurm_script_test.")
with open(os.path.join(box, "srun"), "w") as f:
    f.write(f"""#!/bin/bash
trap 'echo USR1 > {box}/got; exit 0' USR1
trap 'echo TERM > {box}/got; exit 0' TERM
touch {box}/started
while true; do sleep 0.05; done
""")
with open(os.path.join(box, "scontrol"), "w") as f:
    f.write(f"#!/bin/bash\necho \"$@\" >> {box}/scontrol.log\n")
for name in ("srun", "scontrol"):
    os.chmod(os.path.join(box, name), 0o755)


def read(name):
    path = os.path.join(box, name)
    return open(path).read().strip() if os.path.exists(path) else ""


for sig, requeue in [(signal.SIGUSR1, True), (signal.SIGTERM, False)]:
    for name in ("got", "scontrol.log", "started"):
        if os.path.exists(os.path.join(box, name)):
            os.remove(os.path.join(box, name))
    env = dict(os.environ, PATH=box + ":" + os.environ["PATH"], SLURM_SUBMIT_DIR=box,
               SLURM_JOB_NAME="t", SLURM_JOB_ID="7")
    p = subprocess.Popen(["bash", script], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 30
    while time.time() < deadline and not os.path.exists(os.path.join(box, "started")):
        time.sleep(0.05)
    time.sleep(0.2)  # the script is in its wait once srun is up
    p.send_signal(sig)
    try:
        out, _ = p.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        p.kill()
        out, _ = p.communicate()
    got, sc = read("got"), read("scontrol.log")
    print(f"script got {sig.name}: exit {p.returncode}, ranks got {got!r}, scontrol {sc!r}")
    if got != "USR1":
        failures.append(f"{sig.name} to the script: the ranks got {got!r}, not USR1")
    if p.returncode != 0:
        failures.append(f"{sig.name} to the script: exit {p.returncode}, not 0: {out.strip()}")
    if requeue and sc != "requeue 7":
        failures.append(f"{sig.name} to the script: scontrol got {sc!r}, not 'requeue 7'")
    if not requeue and sc:
        failures.append(f"{sig.name} (scancel) to the script requeued the job: scontrol {sc!r}")

shutil.rmtree(box, ignore_errors=True)
print(f"{0 if failures else 1} passed, {1 if failures else 0} failed")
for f in failures:
    print("FAIL:", f)
sys.exit(1 if failures else 0)
