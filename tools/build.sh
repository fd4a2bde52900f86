#!/usr/bin/env bash
# Set-up plus an incremental build into ./build (or $BUILD_DIR).
#
#   tools/build.sh         the program and its tools (fsdptrain, fsdp_memory_plan)
#   tools/build.sh test    everything, the test suites included
#
# CMAKE_ARGS are passed to the first configure of a build directory.
set -euo pipefail
source "$(dirname "$0")/python_env.sh"
mode=${1:-run}
bash "$fsdp_root/tools/setup.sh" "$mode"
build=${BUILD_DIR:-$fsdp_root/build}

# The CUDA toolkit installs to /usr/local/cuda without touching PATH.
if ! command -v nvcc >/dev/null && [ -z "${CUDACXX:-}" ] && [ -x /usr/local/cuda/bin/nvcc ]; then
  export CUDACXX=/usr/local/cuda/bin/nvcc
fi

# The configure output goes to $build/configure.log; what matters is said below.
configure() {
  mkdir -p "$build"
  cmake "$@" >"$build/configure.log" 2>&1 || { cat "$build/configure.log" >&2; exit 1; }
}
if [ ! -f "$build/build.ninja" ]; then
  # shellcheck disable=SC2086  # CMAKE_ARGS is a list of arguments
  configure -S "$fsdp_root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DPython3_EXECUTABLE:FILEPATH="$fsdp_python" ${CMAKE_ARGS:-}
elif ! grep -qxF "Python3_EXECUTABLE:FILEPATH=$fsdp_python" "$build/CMakeCache.txt" ||
     { [ "$mode" = test ] && [ ! -f "$build/tests/CTestTestfile.cmake" ]; }; then
  # Configured with another Python (before the venv existed) or without GoogleTest.
  configure -B "$build" -DPython3_EXECUTABLE:FILEPATH="$fsdp_python"
fi
if grep -q "nvcc not found" "$build/configure.log" 2>/dev/null; then
  echo "build: no CUDA toolkit (nvcc) found, so this is the CPU-only program;" \
       "README's 'GPU quick start' says how to build for a GPU"
fi

if [ "$mode" = test ]; then
  cmake --build "$build" -j "$(nproc)"
else
  cmake --build "$build" -j "$(nproc)" --target fsdptrain fsdp_memory_plan
fi
