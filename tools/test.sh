#!/usr/bin/env bash
# README command (2): set up, build, run every test suite.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
bash "$root/tools/build.sh" test
status=0
ctest --test-dir "$build" --output-on-failure -j "$(nproc)" "$@" || status=$?
# CTest has one verdict an entry: a GoogleTest binary whose cases skipped in
# part passed, and printed which (tests/gtest_verdict.h); say so here, as
# CTest's own list says the entries that skipped whole.
log=$build/Testing/Temporary/LastTest.log
if [ -f "$log" ] && grep -q '^fsdp-test: skipped' "$log"; then
  echo "Cases skipped inside entries that passed:"
  grep '^fsdp-test: skipped' "$log" | sed 's/^fsdp-test: skipped /  /' | sort -u
fi
exit "$status"
