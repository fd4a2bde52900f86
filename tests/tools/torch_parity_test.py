#!/usr/bin/env python3
"""fsdptrain's CPU reference against PyTorch (tools/torch_reference.py): 40
steps continued from an fsdptrain checkpoint must match fsdptrain's own
losses to 1e-4 relative in fp32 (measured ~3e-6), and on 1 rank its
validation losses at another context (--eval-seq-len) too. Runs 1 rank and 4 ranks
with hybrid sharding, an untied head, block recomputation and a vocabulary of
300 (stored padded to 384 rows inside fsdptrain; PyTorch sees only 300); and
--optimizer muon against torch.optim.Muon on 3 ranks (with --lr-schedule wsd
decaying over the compared steps) and, with its other settings and the linear
schedule, on 1; --logit-softcap with --z-loss on 2 ranks; --relu2-mlp
under Muon on 2 ranks; --value-residual with block recomputation on 2;
--unet-skips under Muon on 3; --value-embeds with the value residual on 2; the learned
value residual (--value-residual-learned) before a value table on 2;
--seq-warmup-steps' short contexts under Muon on 2; --batch-warmup-steps'
growing batches on 2; --document-mask over
the Bible's verses (each line a document) with block recomputation on 2;
Muon's Polar Express table (--muon-ns-coefficients polar_express) on 2; and
NorMuon (--muon-normuon) on 3.

PyTorch is not part of the project's set-up (it is large), so this exits 77
(CTest: skipped) unless $FSDP_TORCH_PYTHON names a python that has torch."""
import os
import subprocess
import sys

exe, example, work, tool = sys.argv[1:5]
py = os.environ.get("FSDP_TORCH_PYTHON", sys.executable)
if subprocess.run([py, "-c", "import torch, h5py"], capture_output=True).returncode != 0:
    print("skipped: no PyTorch (set FSDP_TORCH_PYTHON to a python with torch and h5py)")
    sys.exit(77)
mpiexec = os.environ.get("MPIEXEC", "mpirun")
data = os.path.join(example, "kjv_train.h5")


def with_eos(name, eos):
    """A copy of an example file that says `eos` ends its documents."""
    import h5py
    import shutil
    os.makedirs(work, exist_ok=True)
    path = os.path.join(work, name)
    shutil.copyfile(os.path.join(example, name), path)
    with h5py.File(path, "r+") as f:
        f["tokens"].attrs["eos_id"] = eos
    return path


# The example's bytes with the newline (10) as the end of text: each verse a
# document of ~120 tokens, so most windows of 48 hold a document's end.
lines_train, lines_val = with_eos("kjv_train.h5", 10), with_eos("kjv_val.h5", 10)
runs = {
    # validating at context 64 in 3 rows (the micro-batch's 4 x 48 tokens):
    # PyTorch's validation losses at steps 25 and 50 are compared too
    "np1": ([], ["--batch-size", "4", "--grad-accum", "2", "--val-data", os.path.join(example, "kjv_val.h5"),
                 "--eval-every", "25", "--eval-batches", "3", "--eval-seq-len", "64"]),
    "np4": ([mpiexec, "--oversubscribe", "-np", "4"],
            ["--batch-size", "2", "--grad-accum", "1", "--shard-group-size", "2", "--tie-embeddings", "false",
             "--recompute", "block", "--n-layer", "3", "--d-model", "96", "--n-head", "6", "--n-kv-head", "3",
             "--d-ff", "160", "--grad-clip", "0.5", "--vocab-size", "300"]),
    # Muon for the block matrices (torch.optim.Muon, its Newton-Schulz in fp32),
    # on 3 ranks: matrices split over ranks, each orthogonalised by its owner.
    "muon_np3": ([mpiexec, "--oversubscribe", "-np", "3"],
                 ["--batch-size", "2", "--grad-accum", "2", "--optimizer", "muon",
                  "--muon-lr-adjust", "match_rms_adamw", "--lr-schedule", "wsd", "--decay-fraction", "0.5"]),
    # --logit-softcap (a cap of 2 bends this model's logits from the start)
    # and --z-loss, on 2 ranks: the training losses compared include z's term,
    # the validation losses (steps 25 and 50) are the cross-entropy alone.
    "capz_np2": ([mpiexec, "--oversubscribe", "-np", "2"],
                 ["--batch-size", "2", "--grad-accum", "2", "--logit-softcap", "2", "--z-loss", "1e-2",
                  "--val-data", os.path.join(example, "kjv_val.h5"), "--eval-every", "25",
                  "--eval-batches", "2"]),
    # --relu2-mlp at SwiGLU's parameter count (d_ff 1.5 x tiny's 192), its
    # W1 and W2 under Muon, on 2 ranks.
    "relu2_np2": ([mpiexec, "--oversubscribe", "-np", "2"],
                  ["--batch-size", "2", "--grad-accum", "2", "--relu2-mlp", "true", "--d-ff", "288",
                   "--optimizer", "muon"]),
    # --value-residual over 3 blocks with whole blocks recomputed, on 2
    # ranks; validation (steps 25 and 50) too.
    "vres_np2": ([mpiexec, "--oversubscribe", "-np", "2"],
                 ["--batch-size", "2", "--grad-accum", "2", "--value-residual", "true", "--n-layer", "3",
                  "--recompute", "block", "--val-data", os.path.join(example, "kjv_val.h5"),
                  "--eval-every", "25", "--eval-batches", "2"]),
    # --unet-skips over 5 blocks (two skips, the middle block none) with
    # whole blocks recomputed, under Muon (the scalars AdamW's), on 3 ranks
    # (each scalar on one of them); validation (steps 25 and 50) too.
    "unet_np3": ([mpiexec, "--oversubscribe", "-np", "3"],
                 ["--batch-size", "2", "--grad-accum", "2", "--unet-skips", "true", "--n-layer", "5",
                  "--recompute", "block", "--optimizer", "muon", "--val-data",
                  os.path.join(example, "kjv_val.h5"), "--eval-every", "25", "--eval-batches", "2"]),
    # --value-embeds 2 over 5 blocks (tables in blocks 0 and 3, 1 and 4; the
    # middle block none) after --value-residual's mean, with whole blocks
    # recomputed, under Muon (tables and pairs AdamW's), on 2 ranks;
    # validation (steps 25 and 50) too. The checkpoint at step 10 has
    # trained the tables away from their zero start.
    "ve_np2": ([mpiexec, "--oversubscribe", "-np", "2"],
               ["--batch-size", "2", "--grad-accum", "2", "--value-embeds", "2", "--value-residual",
                "true", "--n-layer", "5", "--recompute", "block", "--optimizer", "muon", "--val-data",
                os.path.join(example, "kjv_val.h5"), "--eval-every", "25", "--eval-batches", "2"]),
    # --value-residual-learned over 4 blocks before a value table's mix, under
    # Muon (the pairs AdamW's), on 2 ranks; validation (steps 25 and 50)
    # too. The checkpoint at step 10 has moved the pairs from (0.5, 0.5).
    "vresl_np2": ([mpiexec, "--oversubscribe", "-np", "2"],
                  ["--batch-size", "2", "--grad-accum", "2", "--value-residual", "true",
                   "--value-residual-learned", "true", "--value-embeds", "1", "--n-layer", "4",
                   "--optimizer", "muon", "--val-data", os.path.join(example, "kjv_val.h5"),
                   "--eval-every", "25", "--eval-batches", "2"]),
    # --seq-warmup-steps from context 6 over 40 steps: the compared steps
    # 11-50 run at contexts 16, 24 and 48 (each sequence of 48 cut into
    # 3 and 2 pieces, then whole), under Muon on 2 ranks; validation at 48.
    "seqwarm_np2": ([mpiexec, "--oversubscribe", "-np", "2"],
                    ["--batch-size", "2", "--grad-accum", "2", "--seq-warmup-steps", "40",
                     "--seq-warmup-start", "6", "--optimizer", "muon", "--val-data",
                     os.path.join(example, "kjv_val.h5"), "--eval-every", "25", "--eval-batches", "2"]),
    # --batch-warmup-steps from 1 of 4 micro-batches over 40 steps: the compared
    # steps 11-50 read 2 to 8 sequences (1 to 4 micro-batches of 1 on each of
    # 2 ranks), each step the positions after the last; validation too.
    "batchwarm_np2": ([mpiexec, "--oversubscribe", "-np", "2"],
                      ["--batch-size", "1", "--grad-accum", "4", "--batch-warmup-steps", "40",
                       "--val-data", os.path.join(example, "kjv_val.h5"), "--eval-every", "25",
                       "--eval-batches", "2"]),
    # --document-mask over verses, whole blocks recomputed, on 2 ranks;
    # validation (steps 25 and 50) under the mask too.
    "docmask_np2": ([mpiexec, "--oversubscribe", "-np", "2"],
                    ["--batch-size", "2", "--grad-accum", "2", "--document-mask", "true",
                     "--train-data", lines_train, "--recompute", "block", "--val-data", lines_val,
                     "--eval-every", "25", "--eval-batches", "2"]),
    # --muon-ns-coefficients polar_express, one step past its table, on 2 ranks.
    "polar_np2": ([mpiexec, "--oversubscribe", "-np", "2"],
                  ["--batch-size", "2", "--grad-accum", "2", "--optimizer", "muon",
                   "--muon-ns-coefficients", "polar_express", "--muon-ns-steps", "6"]),
    # NorMuon (--muon-normuon): its row moments continued from the
    # checkpoint's optim/exp_avg_sq, matrices split over 3 ranks.
    "normuon_np3": ([mpiexec, "--oversubscribe", "-np", "3"],
                    ["--batch-size", "2", "--grad-accum", "2", "--optimizer", "muon",
                     "--muon-normuon", "true", "--muon-normuon-beta2", "0.9"]),
    "muon_original_np1": ([], ["--batch-size", "4", "--grad-accum", "1", "--optimizer", "muon",
                               "--muon-lr-adjust", "original", "--muon-nesterov", "false",
                               "--lr-schedule", "linear"]),
}
failed = 0
for name, (launcher, extra) in runs.items():
    d = os.path.join(work, name)
    subprocess.run(["rm", "-rf", d])
    os.makedirs(d)
    train = [] if "--train-data" in extra else ["--train-data", data]  # a case's own, or the example
    cmd = launcher + [exe, "--device", "cpu", *train, "--seq-len", "48", "--steps", "50",
                      "--lr", "3e-3", "--min-lr", "3e-4", "--warmup-steps", "5", "--log-every", "50",
                      "--checkpoint-dir", os.path.join(d, "ck"), "--checkpoint-every", "10",
                      "--metrics", os.path.join(d, "m.jsonl"), *extra]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        print(f"FAIL {name}: fsdptrain exited {r.returncode}: {r.stderr}")
        failed += 1
        continue
    r = subprocess.run([py, tool, os.path.join(d, "ck", "step_00000010.h5"), "--metrics",
                        os.path.join(d, "m.jsonl"), "--steps", "40", "--tolerance", "1e-4"],
                       capture_output=True, text=True, timeout=600)
    print(f"{name}: {r.stdout.strip().splitlines()[-1] if r.stdout.strip() else r.stderr}")
    failed += r.returncode != 0
print(f"{len(runs) - failed} passed, {failed} failed")
sys.exit(1 if failed else 0)
