#!/usr/bin/env python3
"""The rerun check (issue 35): a diverged step is computed once more from the
same state before it is acted on; a rank whose own result changed had a
transient fault, and the run ends with exit status 4 naming it.

The test-only FSDP_TEST_TRANSIENT_FAULT=WHO:POSITION[:grad] makes the
computation of the step that reads global sequence POSITION go wrong once
on rank WHO (or the first rank of node WHO): its loss and gradients 10x, or
(:grad) its gradients Inf with the loss untouched. WHO = exchange corrupts
the reduced loss on every rank instead. With 8 sequences a step, 41 falls in
step 6; checkpoints every 4 steps; the spike test judges against the last 3.
  * On 1, 2 and 4 ranks, a fault of each kind on each rank in turn: exit 4,
    one error line naming that rank and this node, the metrics' record
    naming them, FSDP_FAULTY_NODES_FILE holding the node, and nothing saved
    after step 4 (`latest` still step 4).
  * Resumed without the fault (--resume auto), the run ends bit for bit as
    one that never had it.
  * A fault of the exchange names no rank and no node, exit 4.
  * SLURMD_NODENAME is the name given; a node name as WHO picks its first rank.
  * A reproducible spike (FSDP_TEST_SPIKE_POSITION, which the rerun sees
    too) on 1, 2 and 4 ranks is never called transient: rolled back, its
    rerun's loss equal to the first. So is NaN at --lr 1e5: refused, exit 1."""
import os
import re
import shutil
import socket
import sys

from program_checks import (check, checkpoint_state, error_lines, finish, records,
                            run as run_program, state_difference)

exe, example, work = sys.argv[1:4]
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
HOST = socket.gethostname()
TRANSIENT = 4  # kExitTransientFault, src/trainer/trainer.h


def run(ranks, tag, fault=None, spike=None, extra=(), env_extra=None):
    ckpt, metrics = os.path.join(work, tag), os.path.join(work, tag + ".jsonl")
    cmd = [
        exe, "--device", "cpu", "--model", "tiny", "--train-data",
        os.path.join(example, "kjv_train.h5"), "--seq-len", "32", "--batch-size", str(8 // ranks),
        "--steps", "12", "--checkpoint-dir", ckpt, "--checkpoint-every", "4",
        "--on-divergence", "rollback", "--spike-window", "3", "--metrics", metrics, *extra]
    env = {k: v for k, v in os.environ.items()
           if k not in ("FSDP_TEST_SPIKE_POSITION", "FSDP_TEST_TRANSIENT_FAULT", "SLURMD_NODENAME")}
    env["FSDP_FAULTY_NODES_FILE"] = os.path.join(work, tag + ".faulty")
    if fault:
        env["FSDP_TEST_TRANSIENT_FAULT"] = fault
    if spike:
        env["FSDP_TEST_SPIKE_POSITION"] = spike
    env.update(env_extra or {})
    p = run_program(cmd, ranks, env=env)
    errors = error_lines(p)
    return p, errors, ckpt, metrics


def transient(p, errors, ckpt, metrics, tag, ranks_named, node):
    """The run stopped on a transient fault naming `ranks_named` on `node`."""
    who = ", ".join(f"rank {r} on node {node}" for r in ranks_named)
    said = re.escape(who) + " computed another result" if who else "every rank repeated"
    check(p.returncode == TRANSIENT and len(errors) == 1
          and re.search(r"transient fault at step 6: " + said, errors[0]) is not None,
          f"{tag}: exit {TRANSIENT}, one error line naming {who or 'no rank'}: "
          f"exit {p.returncode} {errors or p.stderr[-300:]}")
    faults = [r for r in records(metrics) if r.get("transient_fault")]
    nodes = [node] if ranks_named else []
    check(len(faults) == 1 and faults[0]["step"] == 6 and faults[0]["fault_ranks"] == ranks_named
          and faults[0]["fault_nodes"] == nodes and faults[0].get("rollback_to_step") is None,
          f"{tag}: the metrics record names {ranks_named} on {nodes}: {faults}")
    faulty = os.path.join(work, tag + ".faulty")
    listed = open(faulty).read().split() if os.path.exists(faulty) else None
    check(listed == nodes, f"{tag}: FSDP_FAULTY_NODES_FILE lists {nodes}: {listed}")
    saved = sorted(f for f in os.listdir(ckpt) if f.endswith(".h5"))
    latest = open(os.path.join(ckpt, "latest")).read().strip()
    check(saved == ["step_00000000.h5", "step_00000004.h5"] and latest == "step_00000004.h5",
          f"{tag}: nothing saved after step 4: {saved}, latest {latest}")


for ranks in (1, 2, 4):
    p, errors, ref, _ = run(ranks, f"np{ranks}_reference")
    check(p.returncode == 0, f"np{ranks}: the run without a fault ends well: {errors}")
    for rank in range(ranks):
        for kind in ("loss", "grad"):
            tag = f"np{ranks}_rank{rank}_{kind}"
            fault = f"{rank}:41" + (":grad" if kind == "grad" else "")
            p, errors, ckpt, metrics = run(ranks, tag, fault=fault)
            transient(p, errors, ckpt, metrics, tag, [rank], HOST)
            if rank != ranks - 1 or kind != "loss":
                continue
            # Resumed where it stopped, without the fault: as if it never was.
            p, errors, _, _ = run(ranks, tag, extra=["--resume", "auto"])
            a, b = (os.path.join(d, "step_00000012.h5") for d in (ckpt, ref))
            if check(p.returncode == 0 and os.path.exists(a) and os.path.exists(b),
                     f"{tag}: resumed, it ends: {errors}"):
                why = state_difference(checkpoint_state(a), checkpoint_state(b))
                check(why == "", f"{tag}: resumed, it ends as the run without the fault "
                                 f"({why or 'bitwise'})")

p, errors, ckpt, metrics = run(2, "exchange", fault="exchange:41")
transient(p, errors, ckpt, metrics, "exchange", [], HOST)
check(len(errors) == 1 and "their reduction did not" in errors[0],
      f"exchange: the error says the ranks' own parts repeated: {errors}")

p, errors, ckpt, metrics = run(1, "slurm_name", fault="0:41",
                               env_extra={"SLURMD_NODENAME": "gpu-node-17"})
transient(p, errors, ckpt, metrics, "slurm_name", [0], "gpu-node-17")
p, errors, ckpt, metrics = run(4, "by_node", fault=f"{HOST}:41")
transient(p, errors, ckpt, metrics, "by_node", [0], HOST)

# Reproducible: the spike is the data's, the rerun sees it again.
for ranks in (1, 2, 4):
    tag = f"np{ranks}_spike"
    p, errors, ckpt, metrics = run(ranks, tag, spike="41")
    diverged = [r for r in records(metrics) if r.get("diverged")]
    check(p.returncode == 0 and len(diverged) == 1 and not diverged[0].get("transient_fault")
          and diverged[0].get("rollback_to_step") == 4
          and diverged[0].get("rerun_loss") == diverged[0]["loss"]
          and diverged[0].get("rerun_grad_norm") == diverged[0]["grad_norm"],
          f"{tag}: a reproducible spike is rolled back, its rerun bitwise the same: "
          f"exit {p.returncode} {errors} {diverged}")

p, errors, ckpt, metrics = run(2, "nan", extra=["--lr", "1e5", "--warmup-steps", "0",
                                                "--max-rollbacks", "0"])
diverged = [r for r in records(metrics) if r.get("diverged")]
check(p.returncode == 1 and len(errors) == 1 and "training diverged at step 2" in errors[0]
      and "its rerun from the same state did the same" in errors[0]
      and len(diverged) == 1 and not diverged[0].get("transient_fault"),
      f"nan: a non-finite step is reproduced, refused with exit 1: {p.returncode} {errors} {diverged}")

finish("rerun")
