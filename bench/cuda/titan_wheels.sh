#!/usr/bin/env bash
# titan_wheels.sh - torchtitan for the GPU machine, as wheels in the TTL carry.
#
# The GPU image has Python 3.12 with torch 2.11.0+cu130, tensorboard, pyarrow,
# pandas, huggingface-hub, einops, pillow, fsspec, tokenizers and h5py, and no
# network (.library/device/KINDS.md). torchtitan needs more; this downloads,
# here, the wheels of what the image lacks, pinned, into
# .ttl_carry/titan_wheels/ (~6 MB). ttl_run.sh unpacks them there with
# `pip install --no-index --no-deps --target` and puts the folder on PYTHONPATH
# for the torchtitan runs only, leaving the image's Python as it is.
#
# The pins (issue 63):
#   torchtitan 0.2.2  0.3.0 imports DataParallelMeshDims from torch.distributed.fsdp,
#                     which torch 2.11 lacks; 0.2.2 imports with 2.11 and has Qwen3
#   torchao 0.17.0    the release built against torch 2.11 (its __init__ loads its
#                     extensions only for torch >= 2.11); float8 training
#   torchdata 0.11.0  torchtitan's StatefulDataLoader
#   datasets 5.2.0 + dill, multiprocess   imported by torchtitan at start-up
#                     (its Hugging Face text data sets), never used by the race
#   tyro 1.0.17 + docstring-parser, typeguard   torchtitan's command line
# Left out: wandb (imported only when metrics.enable_wandb is set), tomli
# (Python 3.12 has tomllib).
#
#   bash bench/cuda/titan_wheels.sh                    # for the GPU image (CPython 3.12)
#   PY_VERSION=3.11 OUT_DIR=/tmp/w bash bench/cuda/titan_wheels.sh   # this machine's, to rehearse
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=${OUT_DIR:-${TTL_CARRY:-$root/.ttl_carry}/titan_wheels}
py_version=${PY_VERSION:-3.12}
pins=(torchtitan==0.2.2 torchao==0.17.0 torchdata==0.11.0 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19
      tyro==1.0.17 docstring-parser==0.18.0 typeguard==4.6.1)
rm -rf "$out" && mkdir -p "$out"
python3 -m pip download --quiet --no-deps --only-binary=:all: --implementation cp \
  --python-version "$py_version" --platform manylinux_2_28_x86_64 -d "$out" "${pins[@]}" ||
  { echo "titan_wheels: error: pip download failed (PyPI reachable? pins above)" >&2; exit 1; }
n=$(ls "$out"/*.whl | wc -l)
[ "$n" -eq "${#pins[@]}" ] || { echo "titan_wheels: error: $n wheels for ${#pins[@]} pins in $out" >&2; exit 1; }
echo "titan_wheels: $n wheels for CPython $py_version, $(du -sh "$out" | cut -f1), in $out"
