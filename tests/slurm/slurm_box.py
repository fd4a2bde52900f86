#!/usr/bin/env python3
"""A real Slurm cluster on this machine, for tests (../shared/slurm-box):
munged with its own socket and key, slurmctld, and one slurmd per emulated
node n1..n4, each in its own UTS namespace (its own host name, so Open MPI's
shared memory does not mix ranks of different "nodes"), with 8 fake GPUs per
node (gres files that are symlinks to /dev/null).

    slurm_box.py start BOX   # exit 0 when every node is idle, 77 (skip) when
                             # the platform refuses, with the reason in BOX/skip
    slurm_box.py stop BOX    # cancels jobs, stops exactly the daemons started
                             # (pids in BOX/daemons.json), fails if a job
                             # process was left behind

The daemons run as root in the foreground of their own sessions, so their
pids are known without pid files and survive the starting process (the CTest
fixture's setup); BOX/daemons.json records pid and start time, and `stop`
signals a pid only while it is still that process. Used as a module, Box()
wraps the client commands with the cluster's environment."""
import atexit
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

NODES = ["n1", "n2", "n3", "n4"]
PACKAGES = ["slurmctld", "slurmd", "slurm-client", "munge"]
SKIP = 77
DAEMONS = ("munged", "slurmctld", "slurmd")


def _root(box):
    """The daemons' folder: short (Unix socket paths are limited to 108 bytes;
    PMIx puts its sockets under TmpFS) and fixed for a given BOX."""
    return "/tmp/slurmbox-" + hashlib.sha1(os.path.abspath(box).encode()).hexdigest()[:10]


def _start_time(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def _environ(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            items = f.read().split(b"\0")
    except OSError:
        return {}
    env = {}
    for item in items:
        k, sep, v = item.partition(b"=")
        if sep:
            env[k.decode(errors="replace")] = v.decode(errors="replace")
    return env


def _cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def _pids():
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def _free_ports(n):
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def client_env(root, uts=True):
    """The environment of sbatch/scontrol and of the jobs (sbatch passes it
    on): the cluster's config, Open MPI on loopback, as root. The CTest
    environment of the single-host MPI tests (btl self,vader) is dropped:
    ranks here talk across emulated nodes."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OMPI_", "PMIX_", "SLURM_", "SBATCH_", "SRUN_", "SALLOC_"))}
    env.update(SLURM_CONF=os.path.join(root, "slurm.conf"),
               OMPI_MCA_btl_tcp_if_include="lo", OMPI_MCA_oob_tcp_if_include="lo",
               OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               # 8 ranks on 2 cores: a waiting rank gives its core away.
               OMPI_MCA_mpi_yield_when_idle="1", OPENBLAS_NUM_THREADS="1",
               OMP_NUM_THREADS="1")
    if not uts:
        env["OMPI_MCA_btl"] = "self,tcp"
    return env


class Box:
    """Client side of a started cluster."""

    def __init__(self, box):
        self.box = os.path.abspath(box)
        self.root = _root(box)
        with open(os.path.join(self.root, "daemons.json")) as f:
            self.state = json.load(f)
        self.env = client_env(self.root, self.state["uts"])

    def run(self, *cmd, check=True, env=None, timeout=60):
        r = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout,
                           env=env or self.env)
        if check and r.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} exited {r.returncode}: {r.stderr.strip()}")
        return r

    def sbatch(self, args, env=None, cwd=None):
        e = dict(self.env)
        e.update(env or {})
        r = subprocess.run(["sbatch", "--parsable", *args], capture_output=True, text=True,
                           timeout=60, env=e, cwd=cwd)
        if r.returncode != 0:
            raise RuntimeError(f"sbatch {' '.join(args)} exited {r.returncode}: "
                               f"{r.stderr.strip()}")
        return r.stdout.strip().split(";")[0]

    def job(self, job_id):
        """scontrol show job as a dict (JobState, Restarts, ExitCode, ...);
        no accounting here, and finished jobs stay for MinJobAge."""
        r = self.run("scontrol", "show", "job", "-o", str(job_id), check=False)
        out = {}
        for m in re.finditer(r"(\w+)=(\S*)", r.stdout):
            out.setdefault(m.group(1), m.group(2))
        return out

    def wait(self, job_id, pred, timeout, what):
        deadline = time.time() + timeout
        while True:
            j = self.job(job_id)
            if pred(j):
                return j
            if time.time() > deadline:
                raise TimeoutError(f"job {job_id}: no {what} after {timeout} s "
                                   f"(JobState={j.get('JobState')}, Restarts={j.get('Restarts')})")
            time.sleep(0.5)

    def wait_done(self, job_id, timeout):
        return self.wait(job_id, lambda j: j.get("JobState") in (
            "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
            "BOOT_FAIL", "DEADLINE", "PREEMPTED"), timeout, "end")

    def job_processes(self, job_id=None, name="fsdptrain"):
        """(pid, environ) of the processes called NAME that a job of this
        cluster (or job JOB_ID) started, found by their environment."""
        out = []
        for pid in _pids():
            if pid == os.getpid():
                continue
            env = _environ(pid)
            if env.get("SLURM_CONF") != self.env["SLURM_CONF"] or "SLURM_JOB_ID" not in env:
                continue
            if job_id is not None and env["SLURM_JOB_ID"] != str(job_id):
                continue
            try:
                comm = open(f"/proc/{pid}/comm").read().strip()
            except OSError:
                continue
            if name is None or comm == name:
                out.append((pid, env))
        return out

    def cancel_all(self, timeout=30):
        """Cancel every job (with no requeue) and wait until none runs."""
        r = self.run("squeue", "-h", "-o", "%i", check=False)
        jobs = r.stdout.split()
        for j in jobs:
            self.run("scontrol", "update", f"JobId={j}", "Requeue=0", check=False)
            self.run("scancel", j, check=False)
        deadline = time.time() + timeout
        while time.time() < deadline:
            r = self.run("squeue", "-h", "-o", "%i", check=False)
            if r.returncode == 0 and not r.stdout.split():
                return
            time.sleep(0.5)


def _conf(root, ports, hostname):
    nodes = "\n".join(
        f"NodeName={n} NodeHostname={n} NodeAddr=127.0.0.1 Port={p} CPUs=64 RealMemory=4000 "
        f"Gres=gpu:8 State=UNKNOWN" for n, p in zip(NODES, ports[1:]))
    return f"""ClusterName=box
SlurmctldHost={hostname}(127.0.0.1)
SlurmctldPort={ports[0]}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={root}/munge/munge.socket,cred_expire=10
SlurmUser=root
SlurmdUser=root
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool/%n
TmpFS={root}/tmp/%n
SlurmctldPidFile={root}/run/slurmctld.pid
SlurmdPidFile={root}/run/slurmd-%n.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2,bf_interval=2
MpiDefault=pmix
SlurmdParameters=config_overrides
ReturnToService=2
MailProg=/bin/true
KillWait=5
InactiveLimit=0
MinJobAge=300
GresTypes=gpu
{nodes}
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""


# Slurm 22.05's PMIx plugin runs the two fences of Open MPI 4.1's MPI_Init on
# two collective engines by default ("mixed": the modex, which carries data,
# on a ring; the final barrier, which carries none, on a tree). Under CPU
# load a rank then now and then leaves the barrier while another is still
# inside the modex, sends it the first message of MPI_Allreduce, and the
# other, whose PML has not yet registered its receive callbacks, calls a
# null pointer (core dump: tag 0x41, no ob1 callback in the table). Measured
# with a bare MPI_Init_thread + MPI_Allreduce program, 8 tasks on 4 emulated
# nodes, 3 busy loops on 2 cores: mixed 3/25 launches crashed, tree 0/25,
# ring 0/25 (and 0/60 with this file). One engine for every fence, as a site
# sets it in mpi.conf.
MPI_CONF = "PMIxCollFence=tree\n"


class Starter:
    """Starts the daemons; until handed over, stops them again on any
    failure, exception, exit or signal."""

    def __init__(self, box):
        self.box = os.path.abspath(box)
        self.root = _root(box)
        self.daemons = []  # {"name", "pid", "start"}
        self.handed_over = False
        atexit.register(self.abort)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, self._on_signal)

    def _on_signal(self, sig, frame):
        self.abort()
        sys.exit(128 + sig)

    def abort(self):
        if not self.handed_over and self.daemons:
            stop_daemons(self.daemons)
            self.daemons = []

    def spawn(self, name, cmd, env):
        log = open(os.path.join(self.root, "log", f"{name}.stdout"), "ab")
        p = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=log,
                             stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        self.daemons.append({"name": name, "pid": p.pid, "start": None})
        # The exec'd daemon keeps the pid; its start time identifies it later.
        for _ in range(50):
            st = _start_time(p.pid)
            if st is not None:
                self.daemons[-1]["start"] = st
                break
            time.sleep(0.01)
        return p

    def start(self):
        for p in PACKAGES:
            if shutil.which({"slurmctld": "slurmctld", "slurmd": "slurmd",
                             "slurm-client": "sbatch", "munge": "munged"}[p]) is None:
                install()
                break
        missing = [c for c in ("munged", "slurmctld", "slurmd", "sbatch", "scontrol",
                               "unshare") if shutil.which(c) is None]
        if missing:
            return f"missing after installing {' '.join(PACKAGES)}: {' '.join(missing)}"
        if os.geteuid() != 0:
            return "needs root (slurmd runs jobs as any user; munged as root here)"
        root = self.root
        os.makedirs(self.box, exist_ok=True)
        if os.path.exists(os.path.join(root, "daemons.json")):
            stop(self.box)  # a cluster left by an aborted run of this BOX
        shutil.rmtree(root, ignore_errors=True)
        for d in ["munge", "state", "run", "log", "dev"] + \
                 [f"{k}/{n}" for k in ("spool", "tmp") for n in NODES]:
            os.makedirs(os.path.join(root, d), exist_ok=True)
        os.chmod(root, 0o755)
        os.chmod(os.path.join(root, "munge"), 0o755)
        key = os.path.join(root, "munge", "munge.key")
        with open(key, "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(key, 0o400)
        for i in range(8):  # gres files must be devices: plain files make nodes INVAL
            os.symlink("/dev/null", os.path.join(root, "dev", f"gpu{i}"))
        with open(os.path.join(root, "gres.conf"), "w") as f:
            f.write(f"Name=gpu File={root}/dev/gpu[0-7]\n")
        ports = _free_ports(1 + len(NODES))
        with open(os.path.join(root, "slurm.conf"), "w") as f:
            f.write(_conf(root, ports, socket.gethostname()))
        with open(os.path.join(root, "mpi.conf"), "w") as f:
            f.write(MPI_CONF)
        # SLURM_BOX_UTS=0 tries the fallback where namespaces are allowed.
        uts = os.environ.get("SLURM_BOX_UTS", "1") != "0" and subprocess.run(
            ["unshare", "--uts", "sh", "-c", "hostname n0"], capture_output=True).returncode == 0
        env = client_env(root, uts)
        t0 = time.time()
        sock = os.path.join(root, "munge", "munge.socket")
        self.spawn("munged", ["munged", "-F", "--force", f"--socket={sock}", f"--key-file={key}",
                              f"--pid-file={root}/run/munged.pid",
                              f"--log-file={root}/log/munged.log",
                              f"--seed-file={root}/munge/munge.seed"], env)
        if not _wait(lambda: os.path.exists(sock), 10):
            return "munged did not start: " + _tail(os.path.join(root, "log", "munged.log"))
        p = self.spawn("slurmctld", ["slurmctld", "-D", "-i"], env)
        ok = _wait(lambda: p.poll() is None and subprocess.run(
            ["scontrol", "ping"], env=env, capture_output=True, text=True).stdout.count("UP"), 20)
        if not ok:
            return "slurmctld did not start: " + _tail(os.path.join(root, "log", "slurmctld.log"))
        for n in NODES:
            cmd = ["slurmd", "-D", "-N", n]
            if uts:
                cmd = ["unshare", "--uts", "sh", "-c", f"hostname {n} && exec {' '.join(cmd)}"]
            self.spawn("slurmd", cmd, env)

        def idle():
            r = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %t"], env=env,
                               capture_output=True, text=True)
            states = dict(l.split() for l in r.stdout.splitlines() if l.strip())
            return all(states.get(n) == "idle" for n in NODES)

        if not _wait(idle, 60):
            r = subprocess.run(["sinfo", "-N"], env=env, capture_output=True, text=True)
            return ("the nodes did not become idle: " + r.stdout.strip() + " | " +
                    _tail(os.path.join(root, "log", "slurmd-n1.log")))
        with open(os.path.join(root, "daemons.json"), "w") as f:
            json.dump({"box": self.box, "uts": uts, "daemons": self.daemons}, f)
        self.handed_over = True
        print(f"slurm_box: {len(NODES)} nodes idle in {time.time() - t0:.1f} s under {root} "
              f"({'own host names' if uts else 'one host name, OMPI_MCA_btl=self,tcp'})")
        return None


def _wait(pred, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return True
        time.sleep(0.2)
    return False


def _tail(path, n=5):
    try:
        return " | ".join(open(path, errors="replace").read().strip().splitlines()[-n:])
    except OSError:
        return f"(no {path})"


def install():
    """apt-get install the Slurm packages (tools/setup.sh does the same)."""
    if shutil.which("apt-get") is None or os.geteuid() != 0:
        return
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    print("slurm_box: installing " + " ".join(PACKAGES))
    r = subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *PACKAGES],
                       env=env, capture_output=True, text=True)
    if r.returncode != 0:
        subprocess.run(["apt-get", "update", "-qq"], env=env, capture_output=True)
        subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *PACKAGES],
                       env=env, capture_output=True)


def stop_daemons(daemons, wait_s=10):
    """TERM, then KILL, each recorded daemon that is still the same process."""
    live = [d for d in daemons if d["start"] is not None and _start_time(d["pid"]) == d["start"]]
    # slurmd first (they tell slurmctld), munged last (the others need it).
    order = {"slurmd": 0, "slurmctld": 1, "munged": 2}
    for d in sorted(live, key=lambda d: order.get(d["name"], 0)):
        try:
            os.kill(d["pid"], signal.SIGTERM)
        except ProcessLookupError:
            continue
        _wait(lambda: _start_time(d["pid"]) != d["start"] or _zombie(d["pid"]), wait_s)
        if _start_time(d["pid"]) == d["start"] and not _zombie(d["pid"]):
            os.kill(d["pid"], signal.SIGKILL)
    for d in live:
        try:
            os.waitpid(d["pid"], os.WNOHANG)  # our own child when stopped by the starter
        except ChildProcessError:
            pass
    return live


def _zombie(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def stop(box):
    """Stop the cluster of BOX: returns the job processes that outlived
    their jobs (killed here, but a failure)."""
    root = _root(box)
    path = os.path.join(root, "daemons.json")
    if not os.path.exists(path):
        return []
    b = Box(box)
    try:
        b.cancel_all()
    except Exception as e:  # a dead slurmctld cannot cancel; the daemons still stop
        print(f"slurm_box: cancelling jobs failed: {e}")
    # Give the step daemons KillWait to end their tasks before the daemons go.
    _wait(lambda: not b.job_processes(name=None), 15)
    stopped = stop_daemons(b.state["daemons"])
    print(f"slurm_box: stopped {len(stopped)} daemon(s): "
          + ", ".join(f"{d['name']} {d['pid']}" for d in stopped))
    left = []
    for pid, env in b.job_processes(name=None):
        left.append(f"{pid} ({_cmdline(pid)[:80]}, job {env.get('SLURM_JOB_ID')})")
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    os.remove(path)
    return left


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("start", "stop"):
        print(__doc__)
        return 2
    cmd, box = sys.argv[1:]
    os.makedirs(box, exist_ok=True)
    skip_file = os.path.join(box, "skip")
    if cmd == "start":
        for name in ("skip", "srun_losses.json"):  # results of an earlier cluster
            if os.path.exists(os.path.join(box, name)):
                os.remove(os.path.join(box, name))
        s = Starter(box)
        reason = s.start()
        if reason:
            s.abort()
            with open(skip_file, "w") as f:
                f.write(reason + "\n")
            print("slurm_box: SKIP: " + reason)
            return SKIP
        return 0
    left = stop(box)
    if left:
        print("slurm_box: FAIL: job processes outlived their jobs (killed now): " + "; ".join(left))
        return 1
    print("slurm_box: no daemon or job process left")
    return 0


if __name__ == "__main__":
    sys.exit(main())
