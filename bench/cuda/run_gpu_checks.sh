#!/usr/bin/env bash
# One command for a GPU session, from the repository root on the GPU machine:
#   bash bench/cuda/prepare_carry.sh            # first, HERE (build machine)
#   run(command="bash bench/cuda/run_gpu_checks.sh", carry=[".gpu_carry"])
# Builds the CUDA backend, its parity tests and the benchmark standalone (the
# GPU machine has no MPI, HDF5 or Boost), runs the tests, the benchmark and the
# PyTorch reference, and leaves logs in $OUT: build.log, tests.log, bench.log,
# torch.log, torch_compile.log.
set -uo pipefail
OUT=${OUT:-/tmp/gpu_checks}
mkdir -p "$OUT"
CARRY=${CARRY:-.gpu_carry}
BUILD=${BUILD:-/tmp/build-gpu}
nv=$(python3 -c "import nvidia, os; print(list(nvidia.__path__)[0])" 2>/dev/null || true)
args=(-G Ninja -DCMAKE_BUILD_TYPE=Release)
if [ ! -e /usr/local/cuda/include/cudnn.h ] && [ -n "$nv" ] && [ -d "$nv/cudnn" ]; then
  lib=$(ls "$nv"/cudnn/lib/libcudnn.so* | head -1)
  args+=(-DCUDNN_LIBRARY="$lib" -DCUDNN_INCLUDE_DIR="$nv/cudnn/include")
  export LD_LIBRARY_PATH="$nv/cudnn/lib:${LD_LIBRARY_PATH:-}"
fi
if [ ! -e /usr/local/cuda/include/nccl.h ] && [ -n "$nv" ] && [ -d "$nv/nccl/include" ]; then
  args+=(-DNCCL_INCLUDE_DIR="$nv/nccl/include")
fi
[ -d "$CARRY/cudnn_frontend_include" ] && args+=(-DCUDNN_FRONTEND_INCLUDE_DIR="$PWD/$CARRY/cudnn_frontend_include")
[ -d "$CARRY/googletest" ] && args+=(-DGTEST_SOURCE_DIR="$PWD/$CARRY/googletest")
{
  nvidia-smi; nvcc --version; cmake --version
  cmake -S bench/cuda -B "$BUILD" "${args[@]}" && cmake --build "$BUILD" -j 16
} > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
(cd "$BUILD" && ctest --output-on-failure --timeout 900 -V) > "$OUT/tests.log" 2>&1
grep -E "rel L2|loss:|PASSED|FAILED|tests passed" "$OUT/tests.log" | tail -60
"$BUILD/bench_cuda_ops" --export-init /tmp/fsdp_init 2>&1 | tee "$OUT/bench.log"
export PYTHONUNBUFFERED=1
python3 bench/cuda/torch_reference.py --init /tmp/fsdp_init 2>&1 | tee "$OUT/torch.log"
python3 bench/cuda/torch_reference.py --compile 2>&1 | tail -5 | tee "$OUT/torch_compile.log"
