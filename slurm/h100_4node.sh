#!/usr/bin/env bash
# fsdptrain on 4 nodes x 8 H100: one rank per GPU, FSDP within each node
# (NVLink), replicas across nodes (hybrid sharding), requeued on preemption.
#
#   sbatch slurm/h100_4node.sh --train-data /data/owt_train.h5 --val-data /data/owt_val.h5
#
#SBATCH --job-name=fsdptrain
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-node=8
#SBATCH --cpus-per-task=8
#SBATCH --exclusive
#SBATCH --time=24:00:00
#SBATCH --signal=B:USR1@300
#SBATCH --requeue
#SBATCH --output=fsdptrain-%j.out
set -euo pipefail

# Not --gpus-per-task=1: with cgroup isolation ranks could not see their
# peers' GPUs and NCCL would lose NVLink peer-to-peer (PLATFORM-NOTES.md).
BIN=${FSDPTRAIN:-$SLURM_SUBMIT_DIR/build/src/fsdptrain}
CKPT=${CHECKPOINT_DIR:-$SLURM_SUBMIT_DIR/checkpoints/$SLURM_JOB_NAME}
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
export HDF5_USE_FILE_LOCKING=FALSE  # locks hang or fail on Lustre/NFS

# Slurm sends USR1 300 s before the time limit, SIGTERM on scancel and on
# preemption (to this shell and to every rank, SIGKILL after KillWait or the
# partition's GraceTime: make that longer than a checkpoint takes). Bash runs
# traps only while waiting, so the job runs in the background. Either way the
# ranks get USR1 (srun forwards it; mpirun forwards USR1 at once but turns
# SIGTERM into SIGKILL after 1 s), checkpoint at the next step boundary and
# exit 0. Only USR1 requeues: after scancel the job must end, and a
# preempted --requeue job is requeued by Slurm itself.
stop() {
  echo "fsdptrain.sh: SIG$1 received, asking ranks to checkpoint"
  kill -USR1 "$pid" 2>/dev/null || true
  local rc=0
  wait "$pid" || rc=$?
  if [[ $1 == USR1 && $rc == 0 ]]; then scontrol requeue "$SLURM_JOB_ID"; fi
  exit "$rc"
}
trap 'stop USR1' USR1
trap 'stop TERM' TERM
# A rank that waits longer than this for its peers aborts the whole job.
export FSDP_COLLECTIVE_TIMEOUT_S=${FSDP_COLLECTIVE_TIMEOUT_S:-600}

# srun needs PMIx in both Slurm and Open MPI; fsdptrain checks SLURM_NTASKS
# against the MPI world size and stops with a clear error if they differ.
# Without PMIx, use: mpirun -np "$SLURM_NTASKS" --map-by ppr:8:node "$BIN" ...
# (the trap's USR1 reaches the ranks through mpirun the same way).
srun --mpi=pmix --kill-on-bad-exit=1 "$BIN" \
  --model gpt-350m --device cuda --precision bf16 \
  --shard-group-size 8 \
  --checkpoint-dir "$CKPT" --checkpoint-every 1000 --resume auto \
  --metrics "$CKPT/metrics.jsonl" "$@" &
pid=$!
wait "$pid"
