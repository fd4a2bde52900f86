#!/usr/bin/env python3
"""One tokenizer under two prefixes is one tokenizer (issue 31, papercut 1).
prepare_data.py names a BPE or Hugging Face tokenizer after its per-prefix
copy (owt_tokenizer.json, web_tokenizer.json), and training once compared
those names: it refused validation data and multi-file training data made
with the very same tokenizer.json, and accepted two different BPEs that
happened to share a prefix. Now the content decides, through the
tokenizer_sha256 attribute and, for files without it, the decode tables.
Skipped (77) without the python package tokenizers."""
import os
import shutil
import subprocess
import sys

import h5py

exe, prepare_data, work = sys.argv[1:4]
try:
    import tokenizers  # noqa: F401  (prepare_data's bpe needs it)
except ImportError:
    print("skipped: the python package tokenizers is missing (tools/setup.sh installs it)")
    sys.exit(77)
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
failures = []


def check(cond, what, detail=""):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what + (f"\n  {detail}" if detail else ""))


def corpus(name, words):
    path = os.path.join(work, name)
    with open(path, "w") as f:
        for i in range(3000):
            f.write(" ".join(words[(i * 7 + k) % len(words)] for k in range(12)) + "\n")
    return path


def prepare(text, prefix, *tokenizer):
    out = os.path.join(work, prefix)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    r = subprocess.run([sys.executable, prepare_data, "text", text, "--out", out, "--doc-per-line",
                        "--val-fraction", "0.1", *tokenizer], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"prepare_data failed: {r.stderr}")
    return out


def train(train_data, val_data=None):
    cmd = [exe, "--device", "cpu", "--model", "tiny", "--vocab-size", "300", "--seq-len", "16",
           "--batch-size", "2", "--steps", "1", "--train-data", train_data]
    if val_data:
        cmd += ["--val-data", val_data, "--eval-batches", "1"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


english = corpus("english.txt", "the quick brown fox jumps over lazy dogs and then sleeps in warm sun".split())
latin = corpus("latin.txt", "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor".split())

owt = prepare(english, "A/owt", "--tokenizer", "bpe", "--vocab-size", "300")
web = prepare(latin, "B/web", "--tokenizer", f"hf:{owt}_tokenizer.json")
other = prepare(latin, "C/owt", "--tokenizer", "bpe", "--vocab-size", "300")
with h5py.File(f"{web}_val.h5") as f:
    names = f["tokens"].attrs["tokenizer"], f["tokens"].attrs.get("tokenizer_sha256")
check(names[0] == "web_tokenizer.json" and names[1] is not None,
      "prepare_data names the copy after its prefix and stores the table's hash", str(names))

r = train(f"{owt}_train.h5", f"{web}_val.h5")
check(r.returncode == 0 and "val_loss" in r.stdout,
      "validation data made with the same tokenizer.json under another prefix is accepted", r.stderr)
r = train(f"{owt}_train.h5,{web}_train.h5")
check(r.returncode == 0, "training files of one tokenizer under two prefixes form one stream", r.stderr)

r = train(f"{owt}_train.h5", f"{other}_val.h5")
errs = [l for l in r.stderr.splitlines() if l.strip()]
check(r.returncode != 0 and len(errs) == 1 and errs[0].startswith("fsdptrain: error: --val-data")
      and f"{other}_val.h5" in errs[0] and f"{owt}_train.h5" in errs[0],
      "two different BPEs that share the name owt_tokenizer.json are refused, naming both files",
      r.stderr)
r = train(f"{owt}_train.h5,{other}_train.h5")
check(r.returncode != 0 and "tokenizer" in r.stderr,
      "and cannot be mixed in one training stream", r.stderr)

# Files made before the hash: the decode tables decide where the names differ.
for path in (f"{owt}_train.h5", f"{web}_val.h5"):
    old = path.replace(".h5", "_old.h5")
    shutil.copyfile(path, old)
    with h5py.File(old, "a") as f:
        del f["tokens"].attrs["tokenizer_sha256"]
r = train(f"{owt}_train_old.h5", f"{web}_val_old.h5")
check(r.returncode == 0, "without the hash, equal decode tables under two names are accepted", r.stderr)

if failures:
    print("\n".join(failures), file=sys.stderr)
    sys.exit(1)
