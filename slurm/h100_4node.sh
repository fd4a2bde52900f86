#!/usr/bin/env bash
# fsdptrain on 4 nodes x 8 H100: one rank per GPU, FSDP within each node
# (NVLink), replicas across nodes (hybrid sharding), requeued on preemption,
# and requeued without the node to blame on a transient GPU fault (exit 4).
#
#   sbatch slurm/h100_4node.sh --train-data /data/owt_train.h5 --val-data /data/owt_val.h5
#   sbatch --nodes=2 slurm/h100_4node.sh --model gpt-125m ...   # sbatch options, then flags
#   FSDP_LAUNCHER=mpirun sbatch slurm/h100_4node.sh ...          # Open MPI without PMIx
#   ASYNC_CHECKPOINT=0 sbatch slurm/h100_4node.sh ...            # saves that stop the steps
#   FSDP_TENSORBOARD_DIR=runs/tb FSDP_WANDB_PROJECT=owt sbatch ...  # dashboards, live
#   scancel JOB    # cancels: ranks checkpoint first, no requeue
#
# Flags after the script name go to fsdptrain and replace the defaults below.
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
#SBATCH --open-mode=append
set -euo pipefail
# A signal before the ranks start is acted on once they do (see stop below).
early=
trap 'early=USR1' USR1
trap 'early=TERM' TERM

# Not --gpus-per-task=1: with cgroup isolation ranks could not see their
# peers' GPUs and NCCL would lose NVLink peer-to-peer (docs/ARCHITECTURE.md,
# "Platform facts").
BIN=${FSDPTRAIN:-$SLURM_SUBMIT_DIR/build/src/fsdptrain}
CKPT=${CHECKPOINT_DIR:-$SLURM_SUBMIT_DIR/checkpoints/$SLURM_JOB_NAME}
LAUNCHER=${FSDP_LAUNCHER:-srun}
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
export HDF5_USE_FILE_LOCKING=FALSE  # locks hang or fail on Lustre/NFS
# A rank that waits longer than this for its peers aborts the whole job.
export FSDP_COLLECTIVE_TIMEOUT_S=${FSDP_COLLECTIVE_TIMEOUT_S:-600}

# fsdptrain refuses a repeated flag, so a default is passed only when the
# user's arguments do not name that flag (as --flag value or --flag=value).
declare -A given=()
prev=
METRICS=
for a in "$@"; do
  [[ $prev == --checkpoint-dir ]] && CKPT=$a
  [[ $a == --checkpoint-dir=* ]] && CKPT=${a#*=}
  [[ $prev == --metrics ]] && METRICS=$a
  [[ $a == --metrics=* ]] && METRICS=${a#*=}
  [[ $a == --* ]] && given[${a%%=*}]=1
  prev=$a
done
defaults=(--model gpt-350m --device cuda --precision bf16
          --checkpoint-dir "$CKPT" --checkpoint-every 1000 --resume auto
          --metrics "$CKPT/metrics.jsonl")
args=()
for ((i = 0; i < ${#defaults[@]}; i += 2)); do
  [[ -v given[${defaults[i]}] ]] || args+=("${defaults[i]}" "${defaults[i + 1]}")
done
# Saves written on a thread of their own (--async-checkpoint): a step pays
# only the copy of its rank's shards to host memory (gpt-350m's 3.3 GB on
# one H200: 0.2 s against 3.6 s for an ordinary save; bench/results/h200_2026-11-26b).
if [[ ${ASYNC_CHECKPOINT:-1} != 0 && ! -v given[--async-checkpoint] ]]; then
  args+=(--async-checkpoint)
fi
args+=("$@")
METRICS=${METRICS:-$CKPT/metrics.jsonl}
# The first submission must be able to claim the folder (and its metrics).
mkdir -p "$CKPT"
# Where fsdptrain names the nodes of a transient fault (exit status 4, below).
export FSDP_FAULTY_NODES_FILE=$CKPT/faulty_nodes.$SLURM_JOB_ID.${SLURM_RESTART_COUNT:-0}

# --open-mode=append keeps every run of a requeued job in one log.
echo "fsdptrain.sh: job $SLURM_JOB_ID restart ${SLURM_RESTART_COUNT:-0} at $(date -Is)" \
     "on $SLURM_JOB_NODELIST ($SLURM_NTASKS tasks, $LAUNCHER)"

# Slurm sends USR1 300 s before the time limit, SIGTERM on scancel and on
# preemption (to this shell and to every rank, SIGKILL after KillWait or the
# partition's GraceTime: make that longer than a checkpoint takes). Bash runs
# traps only while waiting, so the job runs in the background. Either way the
# ranks get USR1 (srun forwards it; mpirun forwards USR1 at once but turns
# SIGTERM into SIGKILL after 1 s), checkpoint at the next step boundary and
# exit 0. Only USR1 requeues: after scancel the job must end, and a
# preempted --requeue job is requeued by Slurm itself. Exit status 3 means
# the ranks stopped before their first step and saved nothing new: a
# --signal lead longer than the run would otherwise requeue forever.
stop() {
  echo "fsdptrain.sh: SIG$1 received, asking ranks to checkpoint"
  kill -USR1 "$pid" 2>/dev/null || true
  local rc=0
  wait "$pid" || rc=$?
  if [[ $1 == USR1 && $rc == 0 ]]; then
    trap '' USR1 TERM  # requeueing signals this shell; the job is already safe
    echo "fsdptrain.sh: checkpoint saved, requeueing job $SLURM_JOB_ID"
    scontrol requeue "$SLURM_JOB_ID"
  elif [[ $1 == USR1 && $rc == 3 ]]; then
    echo "fsdptrain.sh: not requeued: stopped before the first step (is --signal's lead" \
         "longer than the run?)"
  elif [[ $1 == USR1 && $rc == 4 ]]; then
    requeue_without_faulty_nodes
  elif [[ $1 == USR1 ]]; then
    echo "fsdptrain.sh: not requeued: fsdptrain exited with status $rc"
  fi
  exit "$rc"
}

# Exit status 4: a diverged step whose rerun from the same state changed on
# some rank, a transient device or node fault (fsdptrain's docs/CHECKPOINTS.md,
# "Loss spikes and rollback"). Nothing of that step was saved, and the
# ranks wrote the nodes to blame to FSDP_FAULTY_NODES_FILE: the job is
# requeued without them (added to its ExcNodeList, which only a pending job
# may change: hence requeuehold, update, release) and resumes from its newest
# checkpoint on other nodes. No node named (a fault in the exchange between
# ranks): requeued as it is. A job that asks for every node of its partition
# then waits until an administrator adds one.
requeue_without_faulty_nodes() {
  local bad excluded
  bad=$(paste -sd, "$FSDP_FAULTY_NODES_FILE" 2>/dev/null || true)
  excluded=$(scontrol show job "$SLURM_JOB_ID" | sed -n 's/.*ExcNodeList=\([^ ]*\).*/\1/p' || true)
  [[ $excluded != "(null)" ]] || excluded=
  trap '' USR1 TERM  # requeueing signals this shell
  if [[ -z $bad ]]; then
    echo "fsdptrain.sh: transient fault, no node named: requeueing job $SLURM_JOB_ID"
    scontrol requeue "$SLURM_JOB_ID"
    return
  fi
  echo "fsdptrain.sh: transient fault on $bad: requeueing job $SLURM_JOB_ID without it"
  scontrol requeuehold "$SLURM_JOB_ID"
  # Held until released: whatever the update does, the release must come.
  scontrol update JobId="$SLURM_JOB_ID" ExcNodeList="${excluded:+$excluded,}$bad" ||
    echo "fsdptrain.sh: could not exclude $bad; the job may run there again"
  scontrol release "$SLURM_JOB_ID"
}

# srun needs PMIx in both Slurm and Open MPI; fsdptrain checks the MPI world
# against Slurm's tasks and stops with a clear error if PMIx is missing. Then
# FSDP_LAUNCHER=mpirun starts the same ranks, packed by node as srun does, so
# the default shard group (the ranks of one node) stays the same.
if [[ $LAUNCHER == mpirun ]]; then
  per_node=${SLURM_NTASKS_PER_NODE:-$((SLURM_NTASKS / SLURM_JOB_NUM_NODES))}
  mpirun -np "$SLURM_NTASKS" --map-by "ppr:$per_node:node" "$BIN" "${args[@]}" &
else
  srun --mpi=pmix --kill-on-bad-exit=1 "$BIN" "${args[@]}" &
fi
pid=$!
# Dashboards (docs/RUNNING.md): FSDP_TENSORBOARD_DIR=DIR writes TensorBoard
# runs there, FSDP_WANDB_PROJECT=NAME logs to W&B (WANDB_MODE=offline where
# nodes have no network; `wandb sync` later). tools/follow_metrics.py reads
# the metrics in a process of its own, so no step waits for a dashboard,
# and a requeued job's follower goes on where the last one stopped. It ends
# after the ranks; the job waits up to a minute for its last points.
# FSDP_PYTHON: the Python with tensorboard and wandb (tools/setup.sh's .venv).
dashboards=()
[[ -z ${FSDP_TENSORBOARD_DIR:-} ]] || dashboards+=(--tensorboard "$FSDP_TENSORBOARD_DIR")
[[ -z ${FSDP_WANDB_PROJECT:-} ]] || dashboards+=(--wandb "$FSDP_WANDB_PROJECT")
follower=
if ((${#dashboards[@]})); then
  "${FSDP_PYTHON:-$SLURM_SUBMIT_DIR/.venv/bin/python}" "$SLURM_SUBMIT_DIR/tools/follow_metrics.py" \
    "$METRICS" "${dashboards[@]}" --pid "$pid" &
  follower=$!
fi
finish_dashboards() {
  [[ -n $follower ]] || return 0
  local i
  for ((i = 0; i < 60; i++)); do kill -0 "$follower" 2>/dev/null || break; sleep 1; done
  kill -TERM "$follower" 2>/dev/null || true
  wait "$follower" || echo "fsdptrain.sh: the dashboards' follower failed (above); the run is unaffected"
}
trap finish_dashboards EXIT
trap 'stop USR1' USR1
trap 'stop TERM' TERM
[[ -z $early ]] || stop "$early"
rc=0
wait "$pid" || rc=$?
[[ $rc != 4 ]] || requeue_without_faulty_nodes
exit "$rc"
