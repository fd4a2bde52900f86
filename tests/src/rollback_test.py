#!/usr/bin/env python3
"""--on-divergence rollback (issue 35): a spike tied to the data is undone
exactly, on 1, 2 and 4 ranks.

The test-only FSDP_TEST_SPIKE_POSITION=P makes the step that reads global
sequence position P report ten times its loss, as a bad batch would. With 8
sequences a step, P = 41 falls in step 6; checkpoints every 4 steps; the
spike test judges against the last 3 steps. The run must go back to step 4,
skip positions [32, 48) (steps 5 and 6's data) and train on to step 12, and:
  * its metrics and final checkpoint record that one rollback and range;
  * its step-12 weights and optimizer state equal, bit for bit, those of a
    run resumed from its own step-4 checkpoint with the data position set
    to 48 by hand (a data order without those windows), with no spike;
  * a run resumed from the step-4 checkpoint with the same fault makes the
    same choice and ends bitwise the same; one resumed from step 8 (after
    the rollback) too, the record carried along.
On one rank: a run resumed from step 4 with --optimizer muon
--reset-optimizer rolls back to that AdamW checkpoint and resets the state
again (bitwise the run given the shorter data order); --on-divergence stop
refuses the spike with one error line;
NaN at --lr 1e5 is rolled back --max-rollbacks times, then refused."""
import os
import re
import shutil
import sys

import h5py
import numpy as np

from program_checks import (check, checkpoint_state as state, error_lines, finish, records,
                            run as run_program, state_difference)

exe, example, work = sys.argv[1:4]
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
SPIKE = "41"


def run(ranks, ckpt, metrics, spike=True, extra=(), action="rollback", every="4"):
    cmd = [
        exe, "--device", "cpu", "--model", "tiny", "--train-data",
        os.path.join(example, "kjv_train.h5"), "--seq-len", "32", "--batch-size", str(8 // ranks),
        "--steps", "12", "--checkpoint-dir", ckpt, "--checkpoint-every", every,
        "--on-divergence", action, "--spike-window", "3", "--metrics", metrics, *extra]
    env = dict(os.environ)
    env.pop("FSDP_TEST_SPIKE_POSITION", None)
    if spike:
        env["FSDP_TEST_SPIKE_POSITION"] = SPIKE
    return run_program(cmd, ranks, env=env)


def losses(path, first):
    return {r["step"]: r["loss"] for r in records(path)
            if "loss" in r and not r.get("diverged") and r["step"] >= first}


def resumed_from(ranks, tag, ckpt_file, spike, edit=None, extra=()):
    """A run resumed in a fresh directory that holds only `ckpt_file`."""
    d = os.path.join(work, tag)
    os.makedirs(d)
    dst = os.path.join(d, os.path.basename(ckpt_file))
    shutil.copy(ckpt_file, dst)
    if edit:
        with h5py.File(dst, "r+") as f:
            edit(f)
    m = os.path.join(work, tag + ".jsonl")
    p = run(ranks, d, m, spike=spike, extra=["--resume", "auto", *extra])
    check(p.returncode == 0, f"{tag}: exit {p.returncode} {p.stderr.strip()[-300:]}")
    return d, m


for ranks in (1, 2, 4):
    tag = f"np{ranks}"
    ckpt, metrics = os.path.join(work, tag), os.path.join(work, tag + ".jsonl")
    p = run(ranks, ckpt, metrics)
    check(p.returncode == 0, f"{tag}: the run with a spike ends well: {p.stderr.strip()[-300:]}")
    if p.returncode != 0:
        continue
    diverged = [r for r in records(metrics) if r.get("diverged")]
    check(len(diverged) == 1, f"{tag}: one diverged step in the metrics: {diverged}")
    if diverged:
        r = diverged[0]
        check(r["step"] == 6 and r.get("rollback_to_step") == 4 and r.get("skipped_sequences") == [32, 48]
              and r.get("rollbacks") == 1 and "median" in r.get("reason", ""),
              f"{tag}: step 6 rolled back to 4, skipping [32, 48): {r}")
    check(re.search(r"step +6/12 \| loss \S+ \| norm \S+ \| diverged: .*rolled back to step 4 .*"
                    r"skipping sequences \[32, 48\) \(rollback 1 of at most 3\)", p.stdout) is not None,
          f"{tag}: the log line says what happened")
    saved = sorted(f for f in os.listdir(ckpt) if f.endswith(".h5"))
    check(saved == [f"step_{s:08d}.h5" for s in (0, 4, 8, 12)],
          f"{tag}: a fresh rollback run saves step 0 first: {saved}")
    final = state(os.path.join(ckpt, "step_00000012.h5"))
    check(final["@rollbacks"] == 1 and final["@skipped"] == [32, 48] and final["@consumed"] == 12 * 8 + 16,
          f"{tag}: the final checkpoint records the rollback: {final['@rollbacks']}, "
          f"{final['@skipped']}, consumed {final['@consumed']}")
    step4 = os.path.join(ckpt, "step_00000004.h5")

    def to_48(f):
        f["sampler"].attrs.modify("consumed", np.int64(48))
    ref, ref_m = resumed_from(ranks, tag + "_reference", step4, spike=False, edit=to_48)
    if os.path.exists(os.path.join(ref, "step_00000012.h5")):
        why = state_difference(final, state(os.path.join(ref, "step_00000012.h5")),
                               records_too=False)
        check(why == "", f"{tag}: weights and optimizer state equal the run that never saw "
                         f"positions [32, 48) ({why or 'bitwise'})")
        check(losses(ref_m, 5) == losses(metrics, 5), f"{tag}: steps 5-12 have the same losses")

    again, _ = resumed_from(ranks, tag + "_again", step4, spike=True)
    if os.path.exists(os.path.join(again, "step_00000012.h5")):
        why = state_difference(final, state(os.path.join(again, "step_00000012.h5")))
        check(why == "", f"{tag}: resumed before the spike, the same rollback, the same end ({why or 'bitwise'})")
    after, _ = resumed_from(ranks, tag + "_after", os.path.join(ckpt, "step_00000008.h5"), spike=True)
    if os.path.exists(os.path.join(after, "step_00000012.h5")):
        why = state_difference(final, state(os.path.join(after, "step_00000012.h5")))
        check(why == "", f"{tag}: resumed after the rollback, the same end, record included "
                         f"({why or 'bitwise'})")

# A run that switched optimizers at its resume (--reset-optimizer) and rolls
# back to the checkpoint it resumed from must reset that state again, not
# take the other optimizer's moments as Muon's momentum: it ends as the run
# given the data order without [32, 48) from the start of its resume.
step4 = os.path.join(work, "np1", "step_00000004.h5")
if os.path.exists(step4):
    muon = ["--optimizer", "muon", "--reset-optimizer"]
    switched, _ = resumed_from(1, "muon_switch", step4, spike=True, extra=muon)
    ref, _ = resumed_from(1, "muon_reference", step4, spike=False, extra=muon,
                          edit=lambda f: f["sampler"].attrs.modify("consumed", np.int64(48)))
    a, b = (os.path.join(d, "step_00000012.h5") for d in (switched, ref))
    if os.path.exists(a) and os.path.exists(b):
        why = state_difference(state(a), state(b), records_too=False)
        check(why == "", f"muon after --reset-optimizer: the rollback resets the optimizer state "
                         f"again ({why or 'bitwise'})")

# --on-divergence stop: the spike ends the run, nothing of it saved.
ckpt = os.path.join(work, "stop")
p = run(1, ckpt, os.path.join(work, "stop.jsonl"), action="stop")
errors = error_lines(p)
check(p.returncode != 0 and len(errors) == 1
      and re.search(r"diverged at step 6: loss \S+, gradient norm \S+ \(its loss is \S+ times", errors[0])
      and "--on-divergence rollback" in errors[0], f"stop: one error line naming the spike: {errors}")
check(sorted(f for f in os.listdir(ckpt) if f.endswith(".h5")) == ["step_00000004.h5"],
      f"stop: only step 4 saved: {sorted(os.listdir(ckpt))}")

# --max-rollbacks 0: rollback mode that may not roll back stops as stop does.
p = run(1, os.path.join(work, "none"), os.path.join(work, "none.jsonl"),
        extra=["--max-rollbacks", "0"])
errors = error_lines(p)
check(p.returncode != 0 and len(errors) == 1 and "diverged at step 6:" in errors[0]
      and "--max-rollbacks 0 allows no rollback" in errors[0],
      f"--max-rollbacks 0: the spike is refused, saying why: {errors}")

# NaN at --lr 1e5 after one step: rolled back twice, then refused, naming
# the limit.
ckpt, m = os.path.join(work, "nan"), os.path.join(work, "nan.jsonl")
p = run(1, ckpt, m, spike=False, every="1",
        extra=["--lr", "1e5", "--warmup-steps", "0", "--max-rollbacks", "2"])
errors = error_lines(p)
rolls = [r for r in records(m) if r.get("rollback_to_step") is not None]
check(p.returncode != 0 and len(errors) == 1 and "2 rollback(s) did not help (--max-rollbacks 2)" in errors[0],
      f"nan: refused after two rollbacks: {errors}")
check([r["rollbacks"] for r in rolls] == [1, 2] and all("not finite" in r["reason"] for r in rolls),
      f"nan: two rollbacks in the metrics, for a non-finite value: {rolls}")
if len(rolls) == 2:
    # Both go back to step 1 (the newest checkpoint, saved before each bad
    # step 2) and skip from its position to the bad step's end, the second
    # range covering the first.
    a, b = rolls
    check([r["rollback_to_step"] for r in rolls] == [1, 1] and a["skipped_sequences"] == [8, 16]
          and b["skipped_sequences"] == [8, 24], f"nan: the ranges skipped: {rolls}")

finish("rollback")
