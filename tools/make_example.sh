#!/usr/bin/env bash
# Builds the built-in example dataset from real English text that Debian ships:
# the King James Bible (package bible-kjv, 4.3 MB), byte-level tokens,
# the last 5% held out for validation.
#
#   tools/make_example.sh OUTDIR   ->  OUTDIR/kjv_train.h5, OUTDIR/kjv_val.h5
#
# Idempotent: does nothing when both files exist and are newer than this script.
set -euo pipefail

if [ $# -ne 1 ] || [ "$1" = -h ] || [ "$1" = --help ]; then
  echo "usage: $0 OUTDIR" >&2
  exit 2
fi
out=$1
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
train=$out/kjv_train.h5
val=$out/kjv_val.h5

if [ "$train" -nt "$here/make_example.sh" ] && [ "$val" -nt "$here/make_example.sh" ] &&
   [ "$train" -nt "$here/prepare_data.py" ] && [ "$val" -nt "$here/prepare_data.py" ]; then
  echo "make_example: $train and $val are up to date"
  exit 0
fi
if ! command -v bible >/dev/null; then
  echo "make_example: error: the 'bible' program is missing; install bible-kjv (tools/setup.sh)" >&2
  exit 1
fi

mkdir -p "$out"
text=$(mktemp "${TMPDIR:-/tmp}/kjv.XXXXXX")
trap 'rm -f "$text"' EXIT
bible "Gen1:1-Rev22:21" >"$text"
# A partial bible-kjv install prints little or nothing; the full text is ~4.3 MB.
size=$(stat -c %s "$text")
if [ "$size" -lt 4000000 ]; then
  echo "make_example: error: 'bible' printed only $size bytes; is bible-kjv-text installed?" >&2
  exit 1
fi
source "$here/python_env.sh"
# Before tools/setup.sh has made the venv, a python3 that has numpy and h5py will do.
[ -x "$fsdp_python" ] || fsdp_python=python3
"$fsdp_python" "$here/prepare_data.py" text "$text" --out "$out/kjv" \
  --tokenizer byte --val-fraction 0.05
