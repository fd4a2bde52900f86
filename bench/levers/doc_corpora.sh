#!/usr/bin/env bash
# doc_corpora.sh - two corpora of short, unrelated documents, for the levers
# that act where documents meet (--document-mask true).
#
#   bash bench/levers/doc_corpora.sh DIR   # after corpora.sh DIR; ~2 minutes
#
# The sweep's own corpora cannot measure such a lever: ttl's documents are
# pieces of ~83K tokens and kjv is one document, so a 128-token window almost
# never holds an end of text. OpenWebText's documents (~1K tokens) against a
# 1-2K context are what these two stand in for, at the sweep's 128:
# dict: the dictionary's entries (ttl_data.sh's gcide text, DIR/ttl/gcide.txt),
#   each entry a document (~99 tokens); pkgs: Debian's package records (this
#   machine's apt lists; checksums and file names dropped), each package a
#   document (~143 tokens). Each corpus's documents are shuffled (seed 68),
#   as a web crawl's neighbours are unrelated, and get a BPE of their own of
#   8192 tokens; 2% held out. Prints the two --corpus arguments for levers.py.
set -euo pipefail
if [ $# -ne 1 ]; then sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 2; fi
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
dir=$(mkdir -p "$1" && cd "$1" && pwd)
python=$root/.venv/bin/python
[ -f "$dir/ttl/gcide.txt" ] ||
  { echo "doc_corpora: error: no $dir/ttl/gcide.txt; run bash bench/levers/corpora.sh $dir first"; exit 1; }
lists=(/var/lib/apt/lists/*_debian_dists_bookworm_main_binary-amd64_Packages*)
[ -f "${lists[0]}" ] || { echo "doc_corpora: error: no apt package list; run apt-get update"; exit 1; }
log=$dir/doc_corpora.log
mkdir -p "$dir/dict" "$dir/pkgs"
case "${lists[0]}" in
  *.lz4) lz4cat "${lists[0]}" ;;
  *.xz) xzcat "${lists[0]}" ;;
  *.gz) zcat "${lists[0]}" ;;
  *) cat "${lists[0]}" ;;
esac > "$dir/pkgs/Packages"
# One document per piece between two separators; the separator is dropped and
# the tokenizer's end of text written in its place.
"$python" - "$dir" <<'EOF'
import random, re, sys
d = sys.argv[1]
sep = "\n@@END-OF-DOCUMENT@@\n"
text = open(f"{d}/ttl/gcide.txt", encoding="utf-8", errors="replace").read()
text = text[text.index(" Begin file 1 of 26"):]
# An entry starts at a line in column 0 after a blank line.
entries = [e.strip("\n") for e in re.split(r"\n\n(?=\S)", text)]
entries = [e for e in entries if len(e) > 40 and "Begin file" not in e and "End of file" not in e]
keep = ("Package", "Version", "Maintainer", "Depends", "Recommends", "Suggests", "Description",
        "Homepage", "Tag", "Section", "Priority")
pkgs = []
for rec in open(f"{d}/pkgs/Packages", encoding="utf-8").read().split("\n\n"):
    lines, take = [], False
    for line in rec.split("\n"):
        if not line.startswith(" "):
            take = line.split(":", 1)[0] in keep
        if take:
            lines.append(line)
    if lines:
        pkgs.append("\n".join(lines))
for name, docs in (("dict", entries), ("pkgs", pkgs)):
    random.Random(68).shuffle(docs)
    with open(f"{d}/{name}/{name}.txt", "w", encoding="utf-8") as f:
        f.write(sep.join(docs))
    print(f"doc_corpora: {name}: {len(docs)} documents, {sum(map(len, docs)):,} characters")
EOF
for c in dict pkgs; do
  "$python" "$root/tools/prepare_data.py" text "$dir/$c/$c.txt" --out "$dir/$c/$c" --tokenizer bpe \
    --vocab-size 8192 --val-fraction 0.02 --doc-separator "@@END-OF-DOCUMENT@@" >> "$log" 2>&1 ||
    { tail -5 "$log"; echo "doc_corpora: error: prepare_data.py on $c failed (the whole log: $log)"; exit 1; }
done
# Validation: 16 micro-batches of each.
echo "--corpus dict=$dir/dict/dict_train.h5,$dir/dict/dict_val.h5,16" \
  "--corpus pkgs=$dir/pkgs/pkgs_train.h5,$dir/pkgs/pkgs_val.h5,16"
