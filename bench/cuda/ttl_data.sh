#!/usr/bin/env bash
# ttl_data.sh - the English text of issue 30's time-to-loss runs, into .ttl_carry/.
#
# Two Debian packages of real prose, public and fetched by apt: dict-gcide
# (the GNU Collaborative International Dictionary of English, ~40 MB of
# dictionary text) and linux-doc-6.1 (the kernel's reStructuredText
# documentation, ~24 MB). Both are cut into ~256 KiB pieces at paragraph
# breaks and interleaved by position, so that every stretch of the stream,
# the validation tail too, mixes the two in proportion; then
# tools/prepare_data.py trains a byte-level BPE of 8192 tokens on them and
# writes the last 2% of tokens as the validation file. The training file is
# xz-compressed for the device tool's 64 MiB carry (ttl_run.sh unpacks it).
#
#   bash bench/cuda/ttl_data.sh          # ~1 minute; needs apt and the project's .venv
# Knobs: TTL_CARRY (default ./.ttl_carry), WORK (default /tmp/ttl_data).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=${TTL_CARRY:-$root/.ttl_carry}
work=${WORK:-/tmp/ttl_data}
python=$root/.venv/bin/python
[ -x "$python" ] || { echo "ttl_data: error: no $python (run tools/setup.sh)"; exit 1; }
rm -rf "$work" && mkdir -p "$work/pieces" "$work/data" && cd "$work"

apt-get download dict-gcide linux-doc-6.1 >/dev/null 2>&1 ||
  { echo "ttl_data: error: apt-get download dict-gcide linux-doc-6.1 failed (apt-get update?)"; exit 1; }
for deb in dict-gcide_*.deb linux-doc-6.1_*.deb; do dpkg -x "$deb" x; done
zcat x/usr/share/dictd/gcide.dict.dz > gcide.txt
find x/usr/share/doc/linux-doc-6.1/Documentation -name '*.rst.gz' | LC_ALL=C sort | xargs zcat > linux_doc.txt

"$python" - "$root/bench/cuda" <<'EOF'
import sys
sys.path.insert(0, sys.argv[1])
from text_pieces import cut, interleave
a, b = (cut(open(f, "rb").read(), 256 * 1024) for f in ("gcide.txt", "linux_doc.txt"))
for n, (which, x) in enumerate(interleave(a, b)):
    open(f"pieces/{n:04d}_{('gcide', 'linux')[which]}.txt", "wb").write(x)
print(f"ttl_data: {len(a)} dictionary and {len(b)} documentation pieces")
EOF
# gcide holds a few bytes that are not UTF-8 (Latin-1 in old entries): replaced
"$python" "$root/tools/prepare_data.py" text 'pieces/*.txt' --out data/english --tokenizer bpe \
  --vocab-size 8192 --val-fraction 0.02 --utf8-errors replace | tail -2
mkdir -p "$out"
xz -9 -T0 -c data/english_train.h5 > "$out/english_train.h5.xz"
cp data/english_val.h5 data/english_tokenizer.json "$out/"
# .gitignore lists /.ttl_carry/
du -sh "$out"/* | sed 's/^/  /'
