#!/usr/bin/env bash
# nccl_rank.sh - run one launcher rank as an NCCL "node" of its own, so that
# several real NCCL ranks can share one GPU (GPU check group n):
#
#   mpirun -np 4 bash bench/cuda/nccl_rank.sh fsdptrain --device cuda ...
#
# NCCL refuses two ranks of a communicator on one GPU only when they also
# share a host hash, and it builds that hash from NCCL_HOSTID when it is set
# (src/misc/utils.cc, releases 2.18-2.30). A value of its own per rank makes
# every rank a one-GPU node; with NCCL_NET=Socket on loopback all traffic then
# takes NCCL's network path (P2P and SHM are refused across host hashes; NVLS
# and MNNVL are turned off, as they would look through the disguise). It is
# correct and slow (~4 ms a small collective): it proves the NCCL calls as
# fsdptrain makes them, not NVLink, P2P, InfiniBand or any timing.
# mpirun hands every rank the same environment, hence a wrapper that reads
# the rank the launcher gave this process. The values are set whatever the
# caller had: the disguise needs all of them. Other NCCL_* settings
# (NCCL_DEBUG, NCCL_ALGO) pass through. ../shared/PLATFORM-NOTES.md, "NCCL:
# several real ranks on one GPU".
set -uo pipefail

rank=${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-${SLURM_PROCID:-}}}
if [ -z "$rank" ] || [ $# -lt 1 ]; then
  echo "usage: mpirun -np N bash nccl_rank.sh PROGRAM [ARGS...] (no launcher rank found in" \
       "OMPI_COMM_WORLD_RANK, PMI_RANK or SLURM_PROCID, or no program)" >&2
  exit 2
fi
# The Socket path is known to hang under blocking launches (PLATFORM-NOTES):
# refuse at once rather than hang until a watchdog fires.
if [ -n "${CUDA_LAUNCH_BLOCKING:-}" ] && [ "$CUDA_LAUNCH_BLOCKING" != 0 ]; then
  echo "nccl_rank.sh: error: CUDA_LAUNCH_BLOCKING=$CUDA_LAUNCH_BLOCKING hangs NCCL's Socket" \
       "transport with several ranks on one GPU; unset it" >&2
  exit 2
fi
# The host's name in the value keeps it distinct if a job spans real nodes too.
export NCCL_HOSTID="${NCCL_HOSTID_PREFIX:-$(hostname)}-rank$rank"
export NCCL_NET=Socket NCCL_SOCKET_IFNAME=lo NCCL_MNNVL_ENABLE=0 NCCL_NVLS_ENABLE=0
exec "$@"
