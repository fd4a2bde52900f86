#!/usr/bin/env bash
# README command (1): set up, build, make the built-in example (the King James
# Bible, byte-level) and train the `tiny` model on it on the CPU.
# Extra arguments go to fsdptrain, e.g. `bash tools/demo.sh --steps 50`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
bash "$root/tools/build.sh" run
bash "$root/tools/make_example.sh" "$build/example"
exec "$build/src/fsdptrain" --config "$root/tools/tiny_demo.ini" \
  --train-data "$build/example/kjv_train.h5" --val-data "$build/example/kjv_val.h5" \
  --metrics "$build/demo_metrics.jsonl" "$@"
