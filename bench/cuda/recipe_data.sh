#!/usr/bin/env bash
# recipe_data.sh - the token files of the leaderboard recipe's dress rehearsal
# (issue 64), made HERE with the recipe's own two prepare_data.py commands, into
# .recipe_carry/ for bench/cuda/recipe_run.sh on the GPU machine.
#
# OpenWebText (12 GB) cannot travel to the GPU machine (64 MiB a call), so the
# rehearsal stands the time-to-loss runs' English corpus in for it (the
# packages dict-gcide and linux-doc-6.1, as bench/cuda/ttl_data.sh): cut into
# documents (each kernel .rst file; the dictionary in pieces of about 8 KB at
# blank lines), interleaved by position, written as CS336 hands OWT out (each
# document followed by <|endoftext|>), every 50th document into owt_valid.txt
# (OWT's validation file is likewise a sample of its documents). Then the recipe's
# commands, through bench/cuda/recipe_commands.py, tokenize them as written:
# a 32K BPE, 200M-token shards (one, here), the validation file with the
# training files' tokenizer.
#
#   bash bench/cuda/recipe_data.sh       # ~1 minute on 2 cores; apt and the project's .venv
#
# Knobs: RECIPE_CARRY (default ./.recipe_carry), WORK (default /tmp/recipe_data),
# RECIPE_TEXT=FILE (documents cut from this text instead: tests/tools uses the
# KJV), PROFILE=cpu (recipe_commands.py's CPU shapes: a 512-token BPE).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=${RECIPE_CARRY:-$root/.recipe_carry}
work=${WORK:-/tmp/recipe_data}
profile=${PROFILE:-gpu}
python=${PYTHON:-$root/.venv/bin/python}
[ -x "$python" ] || { echo "recipe_data: error: no $python (run tools/setup.sh)"; exit 1; }
rm -rf "$work" && mkdir -p "$work/src" "$work/text" "$work/tokens" && cd "$work"

if [ -n "${RECIPE_TEXT:-}" ]; then
  [ -s "$RECIPE_TEXT" ] || { echo "recipe_data: error: RECIPE_TEXT '$RECIPE_TEXT' is missing or empty"; exit 1; }
  cp "$RECIPE_TEXT" src/dict.txt
else
  apt-get download dict-gcide linux-doc-6.1 >/dev/null 2>&1 ||
    { echo "recipe_data: error: apt-get download dict-gcide linux-doc-6.1 failed (apt-get update?)"; exit 1; }
  for deb in dict-gcide_*.deb linux-doc-6.1_*.deb; do dpkg -x "$deb" x; done
  zcat x/usr/share/dictd/gcide.dict.dz > src/dict.txt
  find x/usr/share/doc/linux-doc-6.1/Documentation -name '*.rst.gz' | LC_ALL=C sort > src/rst_files.txt
fi

"$python" - "$root/bench/cuda" <<'EOF'
import gzip, os, sys
sys.path.insert(0, sys.argv[1])
from text_pieces import cut, interleave
a = cut(open("src/dict.txt", "rb").read(), 8 * 1024)
b = []
if os.path.exists("src/rst_files.txt"):
    b = [gzip.open(f.strip(), "rb").read() for f in open("src/rst_files.txt")]
docs = [x for _, x in interleave(a, b)]
# gcide holds a few bytes that are not UTF-8 (Latin-1 in old entries); OWT is UTF-8
docs = [d.decode("utf-8", "replace").strip() for d in docs]
docs = [d for d in docs if d]
sep = "<|endoftext|>"
for name, keep in (("owt_train.txt", lambda i: i % 50 != 49), ("owt_valid.txt", lambda i: i % 50 == 49)):
    with open(f"text/{name}", "w", encoding="utf-8") as f:
        for i, d in enumerate(docs):
            if keep(i):
                f.write(d + sep)
print(f"recipe_data: {len(a)} dictionary pieces and {len(b)} documentation files: {len(docs)} documents, "
      f"every 50th for validation; {os.path.getsize('text/owt_train.txt') / 1e6:.1f} MB of training text")
EOF

# the recipe's commands, as written but for the folders (and PROFILE=cpu's shapes)
"$python" "$root/bench/cuda/recipe_commands.py" data --profile "$profile" --python "$python" \
  --text "$work/text" --tokens "$work/tokens" --run "$work" > commands.sh
cat commands.sh
bash -euo pipefail commands.sh 2>&1 | grep -v '^\s*$' | tail -6

rm -rf "$out" && mkdir -p "$out"
for f in tokens/owt_train_*.h5; do xz -9 -T0 -c "$f" > "$out/$(basename "$f").xz"; done
cp tokens/owt_valid_val.h5 tokens/owt_tokenizer.json "$out/"
"$python" - "$out" "$profile" "${RECIPE_TEXT:-dict-gcide + linux-doc-6.1}" tokens/owt_train_*.h5 <<'EOF' > "$out/DATA_INFO.txt"
import sys, h5py
out, profile, source, shards = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
n = sum(h5py.File(s, "r")["tokens"].shape[0] for s in shards)
v = h5py.File(f"{out}/owt_valid_val.h5", "r")["tokens"].shape[0]
print(f"source={source} profile={profile} train_tokens={n} shards={len(shards)} val_tokens={v}")
EOF
cat "$out/DATA_INFO.txt"
# .gitignore lists /.recipe_carry/
du -sh "$out"/* | sed 's/^/  /'
