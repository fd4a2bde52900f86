#!/usr/bin/env bash
# corpora.sh - the two corpora of issue 68's lever sweep (bench/levers/levers.py).
#
#   bash bench/levers/corpora.sh DIR      # ~2 minutes; needs apt, bible-kjv and .venv
#
# ttl: the time-to-loss runs' English text (bench/cuda/ttl_data.sh: a
#   dictionary and the kernel's documentation, an 8192-token BPE, 2% held out),
#   the corpus the recipe is tuned on.
# kjv: the King James Bible (tools/make_example.sh's text) with a BPE of its
#   own of 8192 tokens, 2% held out: the second corpus, never tuned on.
# Prints the two --corpus arguments for levers.py run.
set -euo pipefail
if [ $# -ne 1 ]; then sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 2; fi
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
dir=$(mkdir -p "$1" && cd "$1" && pwd)
python=$root/.venv/bin/python
command -v bible >/dev/null || { echo "corpora: error: no 'bible' program; install bible-kjv (tools/setup.sh)"; exit 1; }
log=$dir/corpora.log
failed() { tail -5 "$log"; echo "corpora: error: $1 failed (the whole log: $log)"; exit 1; }
WORK=$dir/ttl TTL_CARRY=$dir/ttl/carry bash "$root/bench/cuda/ttl_data.sh" > "$log" 2>&1 ||
  failed bench/cuda/ttl_data.sh
mkdir -p "$dir/kjv"
bible "Gen1:1-Rev22:21" > "$dir/kjv/kjv.txt"
"$python" "$root/tools/prepare_data.py" text "$dir/kjv/kjv.txt" --out "$dir/kjv/kjv" --tokenizer bpe \
  --vocab-size 8192 --val-fraction 0.02 >> "$log" 2>&1 || failed prepare_data.py
# Validation: 16 micro-batches of the ttl file (of its 3,150 windows), all of kjv's (166).
echo "--corpus ttl=$dir/ttl/data/english_train.h5,$dir/ttl/data/english_val.h5,16" \
  "--corpus kjv=$dir/kjv/kjv_train.h5,$dir/kjv/kjv_val.h5,0"
