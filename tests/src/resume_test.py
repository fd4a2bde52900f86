#!/usr/bin/env python3
"""Exact resume of the real program on the built-in example:
- same ranks: 10 steps straight == 5 + --resume auto + 5, bit for bit
  (losses and every tensor of the final checkpoint);
- other ranks: saved on 4 ranks, resumed on 3, and saved on 2, resumed on 4,
  continue the uninterrupted 4-rank curve within the FSDP tolerance (1e-5);
- SIGUSR1 (through mpirun, 2 ranks) and SIGTERM end a run at a step boundary
  with a checkpoint and exit 0; --resume auto continues from it;
- a damaged newest checkpoint is skipped with a warning, falling back to the
  previous one; --resume naming it fails with one line naming it;
- --optimizer muon resumes the same ways; a checkpoint of the other optimizer
  is refused unless --reset-optimizer; a format-1 file loads as AdamW's."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import h5py
import numpy as np

exe, example, work = sys.argv[1:4]
mpiexec = os.environ.get("MPIEXEC", "mpirun")
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
GLOBAL = 12
failures = []


def args(ranks, ckpt, metrics, steps=10, extra=()):
    return [exe, "--device", "cpu", "--train-data", os.path.join(example, "kjv_train.h5"),
            "--seq-len", "32", "--batch-size", str(GLOBAL // ranks), "--steps", str(steps),
            "--lr", "1e-3", "--min-lr", "1e-4", "--warmup-steps", "2", "--log-every", "1",
            "--checkpoint-dir", os.path.join(work, ckpt),
            "--metrics", os.path.join(work, metrics), *extra]


def run(ranks, ckpt, metrics, steps=10, extra=(), expect_rc=0):
    cmd = ([mpiexec, "--oversubscribe", "-np", str(ranks)] if ranks > 1 else []) + \
        args(ranks, ckpt, metrics, steps, extra)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if r.returncode != expect_rc:
        failures.append(f"{' '.join(cmd)} exited {r.returncode}: {r.stderr.strip()}")
    return r


def losses(metrics):
    return [json.loads(l)["loss"] for l in open(os.path.join(work, metrics)) if '"loss"' in l]


def tensors(path):
    out = {}
    with h5py.File(path, "r") as f:
        f.visititems(lambda n, o: out.__setitem__(n, o[()]) if isinstance(o, h5py.Dataset) else None)
    return out


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


# Same rank count: bitwise.
run(1, "a", "a.jsonl")
run(1, "b", "b.jsonl", extra=("--stop-at-step", "5"))
check(os.path.exists(os.path.join(work, "b", "step_00000005.h5")), "--stop-at-step 5 saved step 5")
run(1, "b", "b.jsonl", extra=("--resume", "auto"))
check(losses("a.jsonl") == losses("b.jsonl"), "1 rank: 10 straight == 5 + resume + 5 (losses, bitwise)")
ta, tb = tensors(os.path.join(work, "a", "step_00000010.h5")), tensors(os.path.join(work, "b", "step_00000010.h5"))
check(ta.keys() == tb.keys() and all(np.array_equal(ta[k], tb[k]) for k in ta),
      f"1 rank: final checkpoints identical ({len(ta)} tensors, bitwise)")

# Other rank counts: within the FSDP tolerance of the uninterrupted 4-rank run.
run(4, "c", "c.jsonl")
for saved, resumed in [(4, 3), (2, 4)]:
    tag = f"r{saved}{resumed}"
    run(saved, tag, tag + ".jsonl", extra=("--stop-at-step", "5"))
    run(resumed, tag, tag + ".jsonl", extra=("--resume", "auto"))
    ref, got = losses("c.jsonl"), losses(tag + ".jsonl")
    worst = max(abs(a - b) / b for a, b in zip(got, ref)) if len(got) == len(ref) else 1.0
    check(len(got) == 10 and worst <= 1e-5,
          f"saved on {saved} ranks, resumed on {resumed}: worst loss rel. error {worst:.1e}")

# Muon (--optimizer muon): its momentum rides in optim/exp_avg, so a resume
# is exact on the same ranks and within the FSDP tolerance on others.
MUON = ("--optimizer", "muon")
run(1, "ma", "ma.jsonl", extra=MUON)
run(1, "mb", "mb.jsonl", extra=MUON + ("--stop-at-step", "5"))
run(1, "mb", "mb.jsonl", extra=MUON + ("--resume", "auto"))
check(losses("ma.jsonl") == losses("mb.jsonl") and losses("ma.jsonl") != losses("a.jsonl"),
      "muon, 1 rank: 10 straight == 5 + resume + 5 (losses, bitwise), and not AdamW's curve")
with h5py.File(os.path.join(work, "mb", "step_00000010.h5"), "r") as f:
    attrs = dict(f.attrs)
check(attrs.get("format_version") == 2 and attrs.get("optimizer") in (b"muon", "muon"),
      f"muon checkpoint: format_version {attrs.get('format_version')}, optimizer {attrs.get('optimizer')}")
run(4, "mc", "mc.jsonl", extra=MUON)
run(2, "m24", "m24.jsonl", extra=MUON + ("--stop-at-step", "5"))
run(4, "m24", "m24.jsonl", extra=MUON + ("--resume", "auto"))
ref, got = losses("mc.jsonl"), losses("m24.jsonl")
worst = max(abs(a - b) / b for a, b in zip(got, ref)) if len(got) == len(ref) else 1.0
check(len(got) == 10 and worst <= 1e-5, f"muon saved on 2 ranks, resumed on 4: worst loss rel. error {worst:.1e}")

# Another optimizer's state does not carry over: refused by name, nothing
# written; --reset-optimizer keeps the weights and starts the state afresh.
before = sorted(os.listdir(os.path.join(work, "mb")))
r = run(1, "mb", "mb2.jsonl", steps=12, extra=("--resume", "auto"), expect_rc=1)
errs = [l for l in r.stderr.splitlines() if l.startswith("fsdptrain: error:")]
check(len(errs) == 1 and "--optimizer muon" in errs[0] and "--reset-optimizer" in errs[0]
      and sorted(os.listdir(os.path.join(work, "mb"))) == before,
      "adamw resuming a muon checkpoint: one error line, nothing written")
r = run(1, "mb", "mb2.jsonl", steps=12, extra=("--resume", "auto", "--reset-optimizer"))
check(r.returncode == 0 and "starts afresh" in r.stdout and "at step 10" in r.stdout,
      "--reset-optimizer: adamw continues the muon run's weights")

# A version-1 file (before the optimizer attribute) still loads, as AdamW's.
old = os.path.join(work, "v1")
shutil.copytree(os.path.join(work, "a"), old)
for n in os.listdir(old):
    if n.endswith(".h5"):
        with h5py.File(os.path.join(old, n), "r+") as f:
            f.attrs["format_version"] = np.int64(1)
            del f.attrs["optimizer"]
r = run(1, "v1", "v1.jsonl", steps=12, extra=("--resume", "auto"))
check(r.returncode == 0 and "at step 10" in r.stdout, "a format-1 checkpoint resumes (as adamw)")

# A tensor stored compact (inside its dataset header) loads; one whose header
# states the wrong size is refused by name (HDF5 1.10 would read through the
# stated size and crash).
cpt = os.path.join(work, "compact")
shutil.copytree(os.path.join(work, "a"), cpt)
ckpt = os.path.join(cpt, "step_00000010.h5")
with h5py.File(ckpt, "r+") as f:
    values = f["model/final_norm"][()]
    del f["model/final_norm"]
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_layout(h5py.h5d.COMPACT)
    d = h5py.h5d.create(f.id, b"model/final_norm", h5py.h5t.IEEE_F32LE,
                        h5py.h5s.create_simple(values.shape), dcpl=dcpl)
    d.write(h5py.h5s.ALL, h5py.h5s.ALL, values)
r = run(1, "compact", "compact.jsonl", steps=12, extra=("--resume", ckpt))
check(r.returncode == 0 and "at step 10" in r.stdout, "a compact dataset of the right size loads")
# Values found nowhere else in the file mark where the compact data sits.
marker = (np.arange(values.size, dtype="<f4") + np.float32(1234.5)).reshape(values.shape)
with h5py.File(ckpt, "r+") as f:
    f["model/final_norm"][...] = marker
raw = bytearray(open(ckpt, "rb").read())
at = raw.find(marker.tobytes())
check(at > 2 and raw[at - 2:at] == (values.size * 4).to_bytes(2, "little"), "found the compact size field")
raw[at - 2:at] = b"\0\0"
open(ckpt, "wb").write(bytes(raw))
r = run(1, "compact", "compact2.jsonl", steps=12, extra=("--resume", ckpt), expect_rc=1)
errs = [l for l in r.stderr.splitlines() if l.startswith("fsdptrain: error:")]
check(len(errs) == 1 and "model/final_norm" in errs[0] and "stores 0 bytes" in errs[0],
      f"a compact dataset stating 0 bytes is refused by name: {errs}")

# Signals: the run stops at a step boundary, checkpoints, exits 0.
for sig, ranks in [(signal.SIGUSR1, 2), (signal.SIGTERM, 1)]:
    tag = f"sig{int(sig)}"
    cmd = ([mpiexec, "--oversubscribe", "-np", str(ranks)] if ranks > 1 else []) + \
        args(ranks, tag, tag + ".jsonl", steps=100000)
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    metrics = os.path.join(work, tag + ".jsonl")
    deadline = time.time() + 120
    while time.time() < deadline and (not os.path.exists(metrics) or len(losses(tag + ".jsonl")) < 3):
        time.sleep(0.2)
    p.send_signal(sig)
    out, err = p.communicate(timeout=120)
    saved = [json.loads(l) for l in open(metrics) if '"checkpoint"' in l]
    check(p.returncode == 0 and len(saved) == 1 and f"({sig.name})" in out,
          f"{sig.name} on {ranks} rank(s): exit {p.returncode}, checkpoints {len(saved)}")
    if saved:
        stopped = saved[0]["step"]
        r = run(ranks, tag, tag + ".jsonl", steps=stopped + 2, extra=("--resume", "auto"))
        check(f"at step {stopped}" in r.stdout, f"{sig.name}: resumed at step {stopped}")

# kill -9 in the middle of writing a checkpoint: the previous one still loads.
run(1, "k", "k.jsonl", steps=10, extra=("--stop-at-step", "4"))
env = dict(os.environ, FSDP_TEST_CHECKPOINT_PAUSE_S="60")
p = subprocess.Popen(args(1, "k", "k.jsonl", steps=10, extra=("--resume", "auto", "--checkpoint-every", "2")),
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
deadline = time.time() + 120
while time.time() < deadline and not any(n.endswith(".tmp") for n in os.listdir(os.path.join(work, "k"))):
    time.sleep(0.1)
time.sleep(0.5)
p.kill()
p.communicate()
r = run(1, "k", "k2.jsonl", steps=10, extra=("--resume", "auto"))
check("at step 4" in r.stdout, "kill -9 while writing step 6: --resume auto continues from step 4")

# A damaged newest checkpoint: auto falls back, an explicit path fails clearly.
newest = os.path.join(work, "b", "step_00000010.h5")
os.truncate(newest, os.path.getsize(newest) // 3)
r = run(1, "b", "b2.jsonl", steps=12, extra=("--resume", "auto"))
check("warning" in r.stderr and "step_00000010.h5" in r.stderr and "at step 5" in r.stdout,
      "damaged newest checkpoint: auto resumes from step 5 with a warning")
r = run(1, "b", "b3.jsonl", steps=12, extra=("--resume", newest), expect_rc=1)
errs = [l for l in r.stderr.splitlines() if l.startswith("fsdptrain: error:")]
check(len(errs) == 1 and newest in errs[0], "--resume DAMAGED: one error line naming the file")
check(os.path.exists(os.path.join(work, "b", "step_00000005.h5")), "nothing older was deleted")

# Bit rot inside a tensor (structure intact): the checksum names the tensor.
rotten = os.path.join(work, "a", "step_00000010.h5")
with h5py.File(rotten, "r+") as f:
    d = f["model/blocks.0.attn.wq"]
    v = d[0, 0]
    d[0, 0] = v + 1.0
r = run(1, "a", "a2.jsonl", steps=12, extra=("--resume", rotten), expect_rc=1)
errs = [l for l in r.stderr.splitlines() if l.startswith("fsdptrain: error:")]
check(len(errs) == 1 and "blocks.0.attn.wq" in errs[0] and "checksum" in errs[0],
      "a changed tensor value is caught by its checksum, naming the tensor")

# Under --resume auto, a checksum failure falls back to the previous checkpoint.
run(1, "rot", "rot.jsonl", steps=10, extra=("--checkpoint-every", "3", "--stop-at-step", "6"))
with h5py.File(os.path.join(work, "rot", "step_00000006.h5"), "r+") as f:
    f["optim/exp_avg/final_norm"][3] += 1.0
r = run(1, "rot", "rot2.jsonl", steps=10, extra=("--resume", "auto"))
check("checksum" in r.stderr and "at step 3" in r.stdout,
      "--resume auto skips a checkpoint that fails its checksums and resumes from step 3")

# Damaged metadata is damage too: auto skips it; a sound checkpoint of another
# model is the user's mistake and stays an error.
run(1, "meta", "meta.jsonl", steps=10, extra=("--checkpoint-every", "3", "--stop-at-step", "6"))
with h5py.File(os.path.join(work, "meta", "step_00000006.h5"), "r+") as f:
    f["sampler"].attrs["consumed"] = np.int64(-1)
r = run(1, "meta", "meta2.jsonl", steps=10, extra=("--resume", "auto"))
check("step_00000006.h5" in r.stderr and "consumed" in r.stderr and "at step 3" in r.stdout,
      "--resume auto skips a checkpoint whose sampler state is invalid and resumes from step 3")
r = run(1, "meta", "meta3.jsonl", steps=10, extra=("--resume", "auto", "--n-head", "2",
                                                   "--n-kv-head", "1"), expect_rc=1)
errs = [l for l in r.stderr.splitlines() if l.startswith("fsdptrain: error:")]
check(len(errs) == 1 and "--n-head" in errs[0] and "another model" in errs[0],
      f"a checkpoint of another model is one error naming the flag: {errs}")

print(f"{0 if failures else 1} passed, {1 if failures else 0} failed")
for f in failures:
    print("FAIL:", f)
sys.exit(1 if failures else 0)
