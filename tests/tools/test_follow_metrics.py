#!/usr/bin/env python3
"""CTest for tools/follow_metrics.py: an fsdptrain run on TensorBoard and
W&B (offline), read back by their own readers.

  test_follow_metrics.py FOLLOW_METRICS_PY FSDPTRAIN EXAMPLE_DIR

The run is real: fsdptrain trains with a rollback (the test-only spike of
tests/src/rollback_test.py), is resumed from a checkpoint before it (so
steps, evaluations and the rollback are repeated in the metrics file), and
a fresh run then starts the file anew. The follower runs live beside the
trainer and is stopped and started again between processes, as a requeued
batch script does. What the dashboards must show is worked out from the
metrics file by tools/plot_metrics.py's reader (later processes win), an
implementation of its own.

Read back with: TensorBoard's Python loader (EventAccumulator, also
`tensorboard --load_fast false`); `tensorboard --logdir`'s data server over
HTTP (skipped, and said so, where the package has no server for this
machine); W&B's offline run files, record by record (wandb's protobuf
Record in the LevelDB log layout wandb writes). No point may appear twice.
"""

import glob
import json
import math
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

try:
    from tensorboard.backend.event_processing import plugin_event_accumulator as pea
    from tensorboard.plugins.hparams import plugin_data_pb2
    from wandb.proto import wandb_internal_pb2
except ImportError as e:
    print(f"SKIP: {e} (tools/setup.sh installs tensorboard and wandb into .venv)")
    sys.exit(77)

FOLLOW, EXE, EXAMPLE = (os.path.abspath(p) for p in sys.argv[1:4])
sys.path.insert(0, os.path.dirname(FOLLOW))
import plot_metrics  # noqa: E402

failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)
    return ok


def env_offline():
    env = dict(os.environ, WANDB_MODE="offline", WANDB_SILENT="true")
    env.pop("WANDB_API_KEY", None)
    return env


# --- the trainer ------------------------------------------------------------

def train(metrics, ckpt, steps, extra=(), spike=True, wait=True):
    cmd = [EXE, "--device", "cpu", "--model", "tiny", "--seq-len", "32", "--batch-size", "8",
           "--train-data", os.path.join(EXAMPLE, "kjv_train.h5"),
           "--val-data", os.path.join(EXAMPLE, "kjv_val.h5"), "--eval-every", "3",
           "--eval-batches", "2", "--steps", str(steps), "--checkpoint-dir", ckpt,
           "--checkpoint-every", "4", "--on-divergence", "rollback", "--spike-window", "3",
           "--metrics", metrics, *extra]
    env = dict(os.environ)
    env.pop("FSDP_TEST_SPIKE_POSITION", None)
    if spike:
        env["FSDP_TEST_SPIKE_POSITION"] = "41"  # step 6 diverges, goes back to step 4
    if not wait:
        return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL)
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if not check(p.returncode == 0, f"fsdptrain {' '.join(extra) or 'fresh'}: exit {p.returncode}"):
        print(p.stdout[-2000:], p.stderr[-2000:])
        sys.exit(1)


def caught_up(metrics, state):
    """Waits until a follower has saved the whole file as done."""
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            with open(state) as f:
                if json.load(f)["offset"] == os.path.getsize(metrics):
                    return True
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.1)
    return False


class Follower:
    """follow_metrics.py running live, stopped as a batch script stops it."""

    def __init__(self, *args):
        self.p = subprocess.Popen([sys.executable, FOLLOW, *args, "--poll", "0.2"], env=env_offline(),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def stop(self):
        self.p.send_signal(signal.SIGTERM)
        out, err = self.p.communicate(timeout=60)
        check(self.p.returncode == 0 and not err.strip(),
              f"the follower stops on SIGTERM with status 0 ({self.p.returncode}; {err.strip()[-300:]})")


# --- what the dashboards must show -----------------------------------------

def expected(metrics):
    """tag -> {step: value}, by plot_metrics' reading (later processes win)."""
    run = plot_metrics.read_run(metrics, "x")
    out = {"train/loss": {}, "train/grad_norm": {}, "perf/tokens_per_s": {}, "val/loss": {}}
    for r in run.steps:
        for tag, key in (("train/loss", "loss"), ("train/grad_norm", "grad_norm"),
                         ("perf/tokens_per_s", "tokens_per_s")):
            if key in r:
                out[tag][r["step"]] = r[key]
    for s, v in run.vals:
        out["val/loss"][s] = v  # a step validated twice: the later value
    return out, run.rollbacks


def first_values(metrics, tag, key):
    """{step: value} of a step-record key as W&B keeps it: each step's first
    value (a rollback's repeated steps read other data, so these differ
    from the later ones), for the steps the run kept."""
    kept = expected(metrics)[0][tag]
    out = {}
    for line in open(metrics):
        r = json.loads(line)
        if key in r and "step" in r and not r.get("diverged") and not r.get("eval_only"):
            out.setdefault(r["step"], r[key])
    return {s: v for s, v in out.items() if s in kept}


def close(a, b):
    return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-6)  # written as float32


def same(got, want):
    return sorted(got) == sorted(want) and all(close(got[s], want[s]) for s in want)


# --- TensorBoard's readers -------------------------------------------------

def tb_python(run_dir):
    """tag -> {step: value} from TensorBoard's Python loader, and the tags
    where it holds a step twice."""
    acc = pea.EventAccumulator(run_dir, size_guidance={pea.TENSORS: 0})
    acc.Reload()
    out, twice = {}, []
    for tag in acc.Tags()["tensors"]:
        if tag.startswith("_hparams_"):
            continue
        events = acc.Tensors(tag)
        steps = [e.step for e in events]
        if len(set(steps)) != len(steps):
            twice.append(tag)
        out[tag] = {e.step: float(e.tensor_proto.float_val[0]) for e in events}
    hp = {}
    if "_hparams_/session_start_info" in acc.Tags()["tensors"]:
        meta = acc.SummaryMetadata("_hparams_/session_start_info")
        data = plugin_data_pb2.HParamsPluginData.FromString(meta.plugin_data.content)
        for k, v in data.session_start_info.hparams.items():
            hp[k] = v.number_value if v.HasField("number_value") else (
                v.string_value if v.HasField("string_value") else v.bool_value)
    return out, twice, hp


class TensorBoardServer:
    """`tensorboard --logdir DIR` with its data server, asked over HTTP."""

    def __init__(self, logdir):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.log = tempfile.TemporaryFile()
        self.p = subprocess.Popen(
            [sys.executable, "-m", "tensorboard.main", "--logdir", logdir, "--host", "127.0.0.1",
             "--port", str(self.port), "--load_fast", "true", "--reload_interval", "1"],
            stdout=self.log, stderr=subprocess.STDOUT)

    def get(self, path):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=10) as r:
            return json.load(r)

    def wait(self):
        deadline = time.time() + 60
        while time.time() < deadline:
            if self.p.poll() is not None:
                self.log.seek(0)
                return self.log.read().decode(errors="replace")[-600:]
            try:
                self.get("/data/runs")
                return ""
            except OSError:
                time.sleep(0.3)
        return "no answer in 60 s"

    def scalars(self, run, tag, want_points):
        """[(step, value)], once the server has loaded want_points of them
        (it loads in the background) or stopped changing."""
        q = urllib.parse.urlencode({"run": run, "tag": tag})
        last, deadline = None, time.time() + 30
        while time.time() < deadline:
            try:
                got = [(p[1], p[2]) for p in self.get(f"/data/plugin/scalars/scalars?{q}")]
            except OSError:  # not loaded yet: 400
                got = []
            if len(got) >= want_points and got == last:
                return got
            last = got
            time.sleep(1.2)
        return last or []

    def close(self):
        self.p.terminate()
        self.p.wait(timeout=30)


# --- W&B's offline files -----------------------------------------------------

def wandb_records(path):
    """Every wandb Record of a run-*.wandb file: wandb's header (':W&B', a
    magic number, a version) then LevelDB's log layout, 32 KiB blocks of
    chunks with a 7-byte header (crc, length, type: 1 whole, 2 first,
    3 middle, 4 last)."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b":W&B":
        raise ValueError(f"{path}: not a wandb file")
    pos, block, parts = 7, 32768, b""
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if kind == 0 and length == 0:  # zero padding to the block's end
            pos += left
            continue
        chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(parts + chunk)
            parts = b""
            yield record
        else:
            parts = (parts if kind == 3 else b"") + chunk


def wandb_runs(wandb_dir):
    """run id -> {"rows": [(step, {key: value})], "config": {...}} over every
    offline run folder (one per follower process)."""
    runs = {}
    for path in sorted(glob.glob(os.path.join(wandb_dir, "wandb", "offline-run-*", "run-*.wandb"))):
        run_id = None
        for r in wandb_records(path):
            kind = r.WhichOneof("record_type")
            if kind == "run":
                run_id = r.run.run_id
                run = runs.setdefault(run_id, {"rows": [], "config": {}})
                for item in r.run.config.update:
                    run["config"][item.key] = json.loads(item.value_json)
            elif kind == "config" and run_id:
                for item in r.config.update:
                    runs[run_id]["config"][item.key] = json.loads(item.value_json)
            elif kind == "history" and run_id:
                row = {(i.key or "/".join(i.nested_key)): json.loads(i.value_json) for i in r.history.item}
                runs[run_id]["rows"].append((r.history.step.num, row))
    return runs


def wandb_series(run, tag):
    """{step: value} of one metric, and the steps it was logged at twice."""
    seen, twice = {}, []
    for step, row in run["rows"]:
        if tag in row:
            if step in seen:
                twice.append(step)
            seen[step] = row[tag]
    return seen, twice


# --- the cases ---------------------------------------------------------------

def check_tensorboard(tb_dir, run_dir, want, rollbacks, server, label):
    got, twice, hp = tb_python(os.path.join(tb_dir, run_dir))
    check(not twice, f"{label}: TensorBoard's Python loader holds no step twice ({twice})")
    for tag, series in want.items():
        check(same(got.get(tag, {}), series),
              f"{label}: Python loader, {tag}: steps {sorted(got.get(tag, {}))[:4]}... "
              f"equal the later process's {len(series)} points")
    check(got.get("train/rollbacks", {}) == {s: float(i + 1) for i, (s, _) in enumerate(rollbacks)},
          f"{label}: train/rollbacks {got.get('train/rollbacks')} = the run's {rollbacks}")
    if server is not None:
        for tag, series in want.items():
            pts = server.scalars(run_dir, tag, len(series))
            steps = [s for s, _ in pts]
            check(len(set(steps)) == len(steps) and same(dict(pts), series),
                  f"{label}: tensorboard --logdir's data server, {tag}: {len(pts)} points, "
                  f"none twice, equal the later process's")
        pts = server.scalars(run_dir, "train/rollbacks", len(rollbacks))
        check([s for s, _ in pts] == [s for s, _ in rollbacks],
              f"{label}: data server, train/rollbacks at {[s for s, _ in pts]}")
    return hp


def main():
    work = tempfile.mkdtemp(prefix="follow_metrics_")
    try:
        run_cases(work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if failures:
        print(f"{len(failures)} check(s) failed")
        sys.exit(1)
    print("all checks passed")


def run_cases(work):
    metrics = os.path.join(work, "run", "metrics.jsonl")
    tb, wb = os.path.join(work, "tb"), os.path.join(work, "wb")
    tb_state = os.path.join(tb, "follow_metrics.json")
    wb_state = os.path.join(wb, "wandb", "follow_metrics_metrics.jsonl.json")
    dashboards = [metrics, "--tensorboard", tb, "--wandb", "fsdptrain-test", "--wandb-dir", wb]

    # 1. Started before the trainer has made the file; live through a run
    # with a rollback at step 6 (back to 4), then stopped.
    f = Follower(*dashboards)
    train(metrics, os.path.join(work, "ck"), 12)
    check(caught_up(metrics, tb_state) and caught_up(metrics, wb_state),
          "started before the file existed, the follower reads the whole run")
    f.stop()

    # 2. A requeue: the run resumes from step 4, before the rollback, with
    # a follower started again; steps 5-12, the rollback and the
    # evaluations are written twice, then steps 13-15 are new.
    ck2 = os.path.join(work, "ck2")
    os.makedirs(ck2)
    shutil.copy(os.path.join(work, "ck", "step_00000004.h5"), ck2)
    f = Follower(*dashboards)
    train(metrics, ck2, 15, extra=["--resume", "auto"])
    check(caught_up(metrics, tb_state) and caught_up(metrics, wb_state),
          "requeued: the follower started again reads the resumed run")
    f.stop()

    want, rollbacks = expected(metrics)
    records = [json.loads(line) for line in open(metrics)]
    repeated = sum(1 for r in records if "loss" in r and not r.get("diverged")) - len(want["train/loss"])
    check(repeated >= 8 and rollbacks == [(6, 4)],
          f"the metrics file repeats {repeated} steps and holds the rollback {rollbacks}")
    runs_tb = sorted(d for d in os.listdir(tb) if os.path.isdir(os.path.join(tb, d)))
    check(len(runs_tb) == 1, f"one TensorBoard run for one fsdptrain run: {runs_tb}")

    server = TensorBoardServer(tb)
    why = server.wait()
    if why:
        print(f"skipped: tensorboard --logdir's data server did not start here ({why.strip()})")
        server.close()
        server = None
    data_server = server is not None
    try:
        hp = check_tensorboard(tb, runs_tb[0], want, rollbacks, server, "resumed run")
        first = records[0]["config"]
        check(first["steps"] == 12 and all(hp.get(k) == first[k] for k in ("lr", "model", "steps", "seed"))
              and hp.get("ranks") == 1 and hp.get("on-divergence") == "rollback",
              f"TensorBoard hparams hold the run's options: lr {hp.get('lr')}, steps {hp.get('steps')}")

        # W&B: one run id over both follower processes, each point once;
        # a repeated step keeps its first value, the same number here.
        # Offline, the second follower wrote the whole run into its folder
        # and moved the first one's aside: one complete folder to sync.
        runs = wandb_runs(wb)
        folders = glob.glob(os.path.join(wb, "wandb", "offline-run-*"))
        aside = glob.glob(os.path.join(wb, "wandb", "superseded", "offline-run-*"))
        check(len(runs) == 1 and len(folders) == 1 and len(aside) == 1
              and aside[0].endswith("-" + next(iter(runs), "?")),
              f"W&B offline: one run, one folder to sync, the first follower's moved aside: "
              f"{sorted(runs)}, {len(folders)} folder(s), {len(aside)} aside")
        run_id, run = next(iter(runs.items())) if runs else (None, {"rows": [], "config": {}})
        keys = {"train/loss": "loss", "train/grad_norm": "grad_norm",
                "perf/tokens_per_s": "tokens_per_s", "val/loss": "val_loss"}
        for tag, series in want.items():
            got, twice = wandb_series(run, tag)
            firsts = first_values(metrics, tag, keys[tag])
            check(not twice and sorted(got) == sorted(series) and same(got, firsts),
                  f"W&B {tag}: {len(got)} points, none twice ({twice}), each step's first value")
        check(wandb_series(run, "train/loss")[0].get(5) != want["train/loss"][5],
              "W&B keeps step 5 from before the rollback (its data was skipped after it)")
        got, twice = wandb_series(run, "train/rollbacks")
        check(sorted(got) == [6] and not twice, f"W&B train/rollbacks at steps {sorted(got)}")
        cfg = run["config"]
        check(cfg.get("lr") == first["lr"] and cfg.get("model") == "tiny" and cfg.get("steps") == 15
              and cfg.get("ranks") == 1 and cfg.get("tie-embeddings") is True and cfg.get("seed") == 1337,
              f"W&B config: the options, a resumed process's where they changed (steps {cfg.get('steps')})")

        # 3. A follower that stopped after writing but before saving where
        # it was (killed): it goes back to its saved place and writes on,
        # and nothing shows twice. The lines it wrote unsaved are the last
        # process's plain steps (no restart among them, whose own START
        # would hide a missing one).
        m2 = os.path.join(work, "m2", "metrics.jsonl")
        os.makedirs(os.path.dirname(m2))
        lines = open(metrics).readlines()
        tb2 = os.path.join(work, "tb2")
        st2 = os.path.join(tb2, "follow_metrics.json")
        once = [sys.executable, FOLLOW, m2, "--tensorboard", tb2, "--once"]
        saved, written = len(lines) - 8, len(lines) - 2
        window = [json.loads(x).get("step") for x in lines[saved:written]]
        check(window == sorted(window) and window[0] > max(want["train/loss"]) - 8,
              f"killed follower: the unsaved lines are steps {window}, in order")
        for n in (saved, written):
            with open(m2, "w") as out:
                out.writelines(lines[:n])
            subprocess.run(once, check=True)
            if n == saved:
                shutil.copy(st2, st2 + ".saved")
        shutil.copy(st2 + ".saved", st2)  # as if killed before saving the lines after `saved`
        with open(m2, "w") as out:
            out.writelines(lines)
        subprocess.run(once, check=True)
        (run2,) = [d for d in os.listdir(tb2) if os.path.isdir(os.path.join(tb2, d))]
        check_tensorboard(tb2, run2, want, rollbacks, None, "killed follower")

        # 4. Fresh runs over the same metrics file (each starts it anew):
        # one followed live (--pid: the follower ends with the trainer),
        # one while no follower ran. Each is a TensorBoard run and a W&B
        # run of its own.
        for n, live in ((5, True), (4, False)):
            ck = os.path.join(work, f"ck_fresh{n}")
            label = "fresh run, " + ("followed live" if live else "followed later")
            if live:
                # A job's shell stands for --pid; a line no dashboard shows,
                # once the follower has read it, says it follows the old file.
                job = subprocess.Popen(["sleep", "600"])
                p = subprocess.Popen([sys.executable, FOLLOW, *dashboards, "--pid", str(job.pid),
                                      "--poll", "0.2"], env=env_offline(), stderr=subprocess.PIPE,
                                     text=True)
                with open(metrics, "a") as out:
                    out.write('{"note": "read by the follower"}\n')
                check(caught_up(metrics, tb_state), f"{label}: the follower is ready")
                train(metrics, ck, n, spike=False)
                check(caught_up(metrics, tb_state) and
                      caught_up(metrics, wb_state), f"{label}: the follower read it")
                job.kill()
                job.wait()
                err = p.communicate(timeout=60)[1]
                check(p.returncode == 0, f"--pid: the follower ends after the job, status 0 "
                                         f"({p.returncode} {err.strip()[-300:]})")
            else:
                train(metrics, ck, n, spike=False)
                p = subprocess.run([sys.executable, FOLLOW, *dashboards, "--once"], env=env_offline(),
                                   capture_output=True, text=True)
                check(p.returncode == 0, f"--once after a fresh run: exit {p.returncode} "
                                         f"{p.stderr.strip()[-300:]}")
            runs_tb = sorted(d for d in os.listdir(tb) if os.path.isdir(os.path.join(tb, d)))
            want_n, _ = expected(metrics)
            if check(len(runs_tb) == (3 if live else 4) - 1,
                     f"{label}: a TensorBoard run of its own: {runs_tb}"):
                check_tensorboard(tb, runs_tb[-1], want_n, [], server, label)
            runs = wandb_runs(wb)
            mine = [r for r in runs.values() if sorted(wandb_series(r, "train/loss")[0]) == list(range(1, n + 1))]
            check(len(runs) == (2 if live else 3) and len(mine) == 1
                  and same(wandb_series(mine[0], "train/loss")[0], want_n["train/loss"]),
                  f"{label}: a W&B run of its own ({len(runs)} runs)")
    finally:
        if server is not None:
            server.close()

    # 5. Restarts the real run above does not make, written by hand (the
    # later process's losses are 100 + step): an evaluation repeated at
    # the same step; a resumed process that evaluates at its checkpoint's
    # step first; a resume after a rollback, which keeps the rollback.
    def run_record(step):
        return {"run_start_unix_s": 1.8e9, "start_step": step, "resumed_from": None, "ranks": 1,
                "config": {"lr": 0.001}}

    def steps(a, b, later=False):
        return [{"step": i, "loss": (100 if later else 0) + i, "elapsed_s": i} for i in range(a, b + 1)]

    cases = {
        "eval_twice": [run_record(0), *steps(1, 5), {"step": 5, "val_loss": 1.0},
                       {"step": 5, "val_loss": 2.0}],
        "eval_at_resume": [run_record(0), {"step": 0, "val_loss": 9.0}, *steps(1, 10),
                           {"step": 5, "val_loss": 5.0}, {"step": 10, "val_loss": 4.0}, run_record(5),
                           {"step": 5, "val_loss": 105.0}, *steps(6, 10, True),
                           {"step": 10, "val_loss": 104.0}, *steps(11, 12, True)],
        # Evaluated less often after the resume: the old evaluation at 8
        # is written again by no one, yet must go.
        "fewer_evals_after_resume": [run_record(0), {"step": 0, "val_loss": 9.0}, *steps(1, 4),
                                     {"step": 4, "val_loss": 4.0}, *steps(5, 8),
                                     {"step": 8, "val_loss": 3.0}, run_record(5), *steps(6, 10, True),
                                     {"step": 10, "val_loss": 100.0}],
        "resume_after_rollback": [run_record(0), *steps(1, 5),
                                  {"step": 6, "loss": 50.0, "diverged": True, "rollback_to_step": 4,
                                   "rollbacks": 1}, *steps(5, 10), {"step": 8, "checkpoint": "c8"},
                                  run_record(8), *steps(9, 12, True)],
    }
    synth = os.path.join(work, "synthetic")
    for name, recs in cases.items():
        path = os.path.join(work, name + ".jsonl")
        with open(path, "w") as out:
            out.writelines(json.dumps(r) + "\n" for r in recs)
        subprocess.run([sys.executable, FOLLOW, path, "--tensorboard", os.path.join(synth, name), "--once"],
                       check=True)
    server = TensorBoardServer(synth) if data_server else None
    if server is not None and server.wait():
        server.close()
        server = None
    try:
        for name in cases:
            want, rollbacks = expected(os.path.join(work, name + ".jsonl"))
            want = {"train/loss": want["train/loss"], "val/loss": want["val/loss"]}
            (run,) = [d for d in os.listdir(os.path.join(synth, name)) if d[0].isdigit()]
            check_tensorboard(synth, f"{name}/{run}", want, rollbacks, server, name)
    finally:
        if server is not None:
            server.close()

    # 6. Errors: one line, status 1.
    def error(args, expect, env=None):
        p = subprocess.run([sys.executable, FOLLOW, *args], capture_output=True, text=True,
                           env=env or env_offline(), timeout=120)
        lines = p.stderr.strip().splitlines()
        check(p.returncode == 1 and len(lines) == 1 and lines[0].startswith("follow_metrics: error:")
              and expect in lines[0], f"error {args[1:3]}: {lines}")

    blocker = os.path.join(work, "a_file")
    open(blocker, "w").close()
    error([metrics], "name a dashboard")
    error([os.path.join(work, "none.jsonl"), "--tensorboard", tb, "--once"], "no such file")
    error([metrics, "--tensorboard", os.path.join(blocker, "tb"), "--once"], "--tensorboard")
    error([metrics, "--tensorboard", tb, "--once", "--pid", "1"], "--once and --pid")
    error([metrics, "--wandb-dir", wb, "--tensorboard", tb], "needs --wandb")
    # Online without a key: refused at once, never a login prompt.
    home = os.path.join(work, "home")
    os.makedirs(home)
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB")}
    env.update(HOME=home, WANDB_DIR=home, WANDB_CONFIG_DIR=home)
    error([metrics, "--wandb", "p", "--wandb-dir", os.path.join(work, "wb_online"), "--wandb-mode",
           "online", "--once"], "wandb login", env=env)
    # The record W&B refused is not saved as done: a follower started again
    # (logged in) logs it.
    st = os.path.join(work, "wb_online", "wandb", "follow_metrics_metrics.jsonl.json")
    offset = json.load(open(st))["offset"] if os.path.exists(st) else 0
    check(offset == 0, f"a refused record is not saved as done (offset {offset})")


if __name__ == "__main__":
    main()
