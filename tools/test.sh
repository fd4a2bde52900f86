#!/usr/bin/env bash
# README command (2): set up, build, run every test suite.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
bash "$root/tools/build.sh" test
ctest --test-dir "$build" --output-on-failure -j "$(nproc)" "$@"
