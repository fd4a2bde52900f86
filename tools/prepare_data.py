#!/usr/bin/env python3
"""Makes fsdptrain token files (docs/ARCHITECTURE.md, "Token dataset") from text or token arrays.

  prepare_data.py text INPUT [INPUT ...] --out PREFIX [--tokenizer byte|bpe|hf:PATH|tiktoken:NAME]
                  [--bpe-train-bytes N] [--shard-tokens 100M [--resume]]
                  [--val-tokens N | --val-fraction F]
                  [--doc-per-line | --doc-separator TEXT] [--text-field text] [--workers N]
  prepare_data.py array INPUT.npy|INPUT.bin --out PREFIX --vocab-size V
                  [--eos-id ID] [--tokenizer-name NAME] [--val-fraction 0.05]

text: INPUTs are files or globs (sorted), each plain text, JSONL (.jsonl, .json,
  .ndjson: one object per line, the document in --text-field) or Parquet (the
  string column --text-field, as on the Hugging Face hub), optionally .gz,
  .zst, .xz or .bz2 (not Parquet). A plain text file is one document, one
  per line with --doc-per-line, or, with --doc-separator TEXT, one per piece
  between two TEXTs, each TEXT dropped (OpenWebText as CS336 hands it out
  marks its documents with <|endoftext|>); a JSONL line or Parquet row is one document;
  empty ones are skipped. The end-of-text token, where the tokenizer has one,
  follows every document. Tokenizers:
    byte           UTF-8 bytes, vocab 256, no end-of-text token: files are
                   joined as they are, lines and records each end in a newline.
    bpe            a byte-level BPE of --vocab-size trained on the inputs (on
                   their first --bpe-train-bytes of text, where given: a few GB
                   of a large corpus make the same merges at a fraction of the
                   memory and time), saved as PREFIX_tokenizer.json.
    hf:PATH        a Hugging Face tokenizer.json (or the model folder holding one,
                   as import_hf.py's HF_DIR), copied to PREFIX_tokenizer.json;
                   end of text: --eos-token, else <|endoftext|>, </s>, ...
    tiktoken:NAME  gpt2 (vocab 50257, eos 50256), cl100k_base, o200k_base...,
                   from tiktoken's cache (TIKTOKEN_CACHE_DIR) or --tiktoken-file
                   FILE.tiktoken (copied to PREFIX_tokenizer.tiktoken and named
                   in the tokenizer attribute as tiktoken:NAME:FILE).
  Output: one PREFIX_train.h5, or with --shard-tokens N, shards
  PREFIX_train_000000.h5, ... of about N tokens each (each closed at the first
  document end at or past N) that the trainer reads as one stream through
  --train-data 'PREFIX_train_*.h5'. PREFIX_val.h5 holds the END of the stream:
  --val-fraction F the last F of all tokens exactly (the default, 0.05, without
  --shard-tokens; held in memory until the end), or --val-tokens N the last
  whole documents holding at least N tokens (the default with --shard-tokens,
  10M). --val-fraction 1 writes PREFIX_val.h5 alone, from all of the input:
  a corpus's own validation file, encoded with the training split's tokenizer
  (--tokenizer hf:PREFIX_tokenizer.json). Plain text files are read in pieces of about 1 MB cut at a newline
  between two printable ASCII characters, where GPT-style tokenizers cut
  anyway; such pieces count as documents for where files and the split end.
  All cores encode (--workers), in input order, with bounded memory. Files
  are written under .tmp names and renamed when complete; with --shard-tokens,
  PREFIX_manifest.json lists the shards complete so far (rewritten after each),
  and --resume continues an interrupted run after the last listed shard with
  the same inputs and flags.

array: .npy holds any 1-D integer array; .bin is either llm.c's format (a
  256 x int32 header starting with magic 20240520, version 1 for uint16 or 2
  for uint32 tokens, then the token count) or, without that magic, raw
  little-endian uint16.

Each file holds a 1-D dataset /tokens (uint16 when vocab_size <= 65536, else
uint32) with attributes vocab_size, and eos_id and tokenizer where known.
Every file `text` writes (PREFIX_train.h5, each shard, PREFIX_val.h5) also
holds the tokenizer's decode table, so the trainer can print generated ids as
text without Python:
  /token_offsets  int64, 1-D, vocab_size + 1 entries, non-decreasing, from 0
  /token_bytes    uint8, 1-D, token_offsets[vocab_size] bytes
Token id i is the raw bytes token_bytes[token_offsets[i]:token_offsets[i+1]]
(a piece of a UTF-8 character, possibly: join a sequence's bytes, then decode
with replacement). byte: id i is the byte i. Byte-level BPE (bpe, GPT-2 style
hf:): each vocabulary character mapped back through GPT-2's byte alphabet.
tiktoken: each id's bytes. Special and added tokens (<|endoftext|>, </s>) are
their literal text; ids the tokenizer lacks are empty. Other hf: tokenizers
(WordPiece, SentencePiece-like): each id decoded alone, an approximation
(word-initial spaces, byte-fallback pieces). `array` files have no table.
"""

import argparse
import os
import re
import sys

INTERRUPTED = "prepare_data: error: interrupted; with --shard-tokens, --resume continues"

try:
    import numpy as np

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from prep import UsageError, fail
except KeyboardInterrupt:
    # Ctrl-C as it starts: the same one line as later, not an import's traceback.
    print(INTERRUPTED, file=sys.stderr)
    sys.exit(130)

LLMC_MAGIC = 20240520
LLMC_HEADER_INTS = 256
# Elements per HDF5 chunk and per conversion pass: bounded memory for big arrays.
CHUNK = 1 << 20


def token_dtype(vocab_size):
    return np.uint16 if vocab_size <= 1 << 16 else np.uint32


def check_range(tokens, vocab_size, what):
    """The first out-of-range token, reported the way the trainer would."""
    for start in range(0, len(tokens), CHUNK):
        part = np.asarray(tokens[start:start + CHUNK]).astype(np.int64, copy=False)
        bad = np.flatnonzero((part < 0) | (part >= vocab_size))
        if bad.size:
            i = int(bad[0])
            fail(f"token {int(part[i])} at offset {start + i} of {what} "
                 f"is outside [0, vocab_size {vocab_size})")


def write_h5(path, tokens, vocab_size, eos_id, tokenizer):
    import h5py

    dtype = token_dtype(vocab_size)
    n = len(tokens)
    tmp = path + ".tmp"
    # Written under a temporary name so an interrupted run never leaves a
    # file that looks complete.
    with h5py.File(tmp, "w") as f:
        dset = f.create_dataset("tokens", shape=(n,), dtype=dtype,
                                chunks=(min(n, CHUNK),))
        for start in range(0, n, CHUNK):
            dset[start:start + CHUNK] = np.asarray(tokens[start:start + CHUNK]).astype(dtype)
        dset.attrs["vocab_size"] = np.int64(vocab_size)
        if eos_id is not None:
            dset.attrs["eos_id"] = np.int64(eos_id)
        if tokenizer:
            dset.attrs["tokenizer"] = tokenizer
    os.replace(tmp, path)


def write_splits(prefix, tokens, vocab_size, val_fraction, eos_id=None, tokenizer=None):
    n = len(tokens)
    n_val = int(round(n * val_fraction))
    if val_fraction > 0 and n_val < 2:
        fail(f"{n} tokens give a validation split of {n_val}; it needs at least 2 "
             f"(use more data or a larger --val-fraction)")
    if n - n_val < 2:
        fail(f"{n} tokens leave {n - n_val} for training; it needs at least 2")
    outputs = [(prefix + "_train.h5", tokens[:n - n_val])]
    if n_val:
        outputs.append((prefix + "_val.h5", tokens[n - n_val:]))
    for path, part in outputs:
        write_h5(path, part, vocab_size, eos_id, tokenizer)
        print(f"prepare_data: wrote {path}: {len(part)} tokens, vocab_size {vocab_size}")


def load_bin(path):
    size = os.path.getsize(path)
    header_bytes = LLMC_HEADER_INTS * 4
    header = np.fromfile(path, dtype="<i4", count=LLMC_HEADER_INTS) if size >= header_bytes else []
    if len(header) and header[0] == LLMC_MAGIC:
        version, count = int(header[1]), int(header[2])
        dtypes = {1: "<u2", 2: "<u4"}
        if version not in dtypes:
            fail(f"'{path}' has llm.c magic but version {version}; expected 1 (uint16) "
                 f"or 2 (uint32)")
        itemsize = np.dtype(dtypes[version]).itemsize
        if size != header_bytes + count * itemsize:
            fail(f"'{path}' header says {count} tokens ({header_bytes + count * itemsize} "
                 f"bytes) but the file has {size} bytes; is it truncated?")
        return np.memmap(path, dtype=dtypes[version], mode="r", offset=header_bytes,
                         shape=(count,))
    if size % 2:
        fail(f"'{path}' has no llm.c header and an odd size ({size} bytes), so it is not "
             f"raw uint16 tokens")
    if size == 0:
        fail(f"'{path}' is empty")
    return np.memmap(path, dtype="<u2", mode="r")


def load_npy(path):
    try:
        arr = np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError) as e:
        fail(f"cannot read '{path}' as .npy: {e}")
    if arr.ndim != 1:
        fail(f"'{path}' holds a {arr.ndim}-D array of shape {arr.shape}; expected 1-D tokens")
    if arr.dtype.kind not in "iu":
        fail(f"'{path}' holds {arr.dtype} values; expected integer token ids")
    return arr


def cmd_array(args):
    path = args.input
    if not os.path.isfile(path):
        fail(f"cannot open '{path}': no such file")
    if args.vocab_size < 1 or args.vocab_size >= 1 << 31:
        fail(f"--vocab-size {args.vocab_size} must be in [1, 2^31)")
    if args.eos_id is not None and not 0 <= args.eos_id < args.vocab_size:
        fail(f"--eos-id {args.eos_id} is outside [0, --vocab-size {args.vocab_size})")
    if path.endswith(".npy"):
        tokens = load_npy(path)
    elif path.endswith(".bin"):
        tokens = load_bin(path)
    else:
        fail(f"'{path}': expected a .npy or .bin file")
    check_range(tokens, args.vocab_size, f"'{path}'")
    write_splits(args.out, tokens, args.vocab_size, args.val_fraction,
                 eos_id=args.eos_id, tokenizer=args.tokenizer_name)


class Parser(argparse.ArgumentParser):
    """argparse, but its errors are our one-line format too."""

    def error(self, message):
        print(f"prepare_data: error: {message} (see --help)", file=sys.stderr)
        sys.exit(2)


def fraction(s):
    v = float(s)
    if not 0 <= v < 1:
        raise argparse.ArgumentTypeError(f"{s} is not in [0, 1)")
    return v


def val_fraction(s):
    """text's --val-fraction: 1 makes all of it validation (a separate validation file)."""
    v = float(s)
    if not 0 <= v <= 1:
        raise argparse.ArgumentTypeError(f"{s} is not in [0, 1]")
    return v


def count(s):
    """A token or byte count: 100000, 100K, 100M, 1.5G."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMgG]?)", s.strip())
    if not m:
        raise argparse.ArgumentTypeError(f"{s} is not a count like 100000 or 100M")
    return int(float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2).lower()])


def positive(s):
    v = count(s)
    if v < 1:
        raise argparse.ArgumentTypeError(f"{s} is not at least 1")
    return v


def parse_args(argv):
    p = Parser(prog="prepare_data", description=__doc__.split("\n")[0],
               epilog="See the module docstring (tools/prepare_data.py) for details.")
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("text", help="tokenize text, JSONL or Parquet files")
    t.add_argument("inputs", nargs="+", metavar="INPUT", help="files or quoted globs")
    t.add_argument("--out", required=True, metavar="PREFIX")
    t.add_argument("--tokenizer", default="byte",
                   help="byte (default), bpe, hf:PATH (a tokenizer.json or its folder) or tiktoken:NAME")
    t.add_argument("--vocab-size", type=int, default=4096, help="bpe only (default 4096)")
    t.add_argument("--tiktoken-file", metavar="FILE.tiktoken",
                   help="the encoding's ranks, instead of tiktoken's cache")
    t.add_argument("--eos-token", help="hf: the end-of-text token's text")
    t.add_argument("--format", choices=["auto", "text", "jsonl", "parquet"], default="auto",
                   help="default: from the suffix (.jsonl/.json/.ndjson, .parquet, else text)")
    t.add_argument("--doc-per-line", action="store_true",
                   help="plain text: each line is a document (default: each file)")
    t.add_argument("--doc-separator", metavar="TEXT",
                   help="plain text: TEXT ends a document and is dropped (e.g. '<|endoftext|>')")
    t.add_argument("--text-field", default="text", help="JSONL field / Parquet column")
    t.add_argument("--utf8-errors", choices=["strict", "replace"], default="strict",
                   help="invalid UTF-8: stop with an error (default) or replace it")
    t.add_argument("--shard-tokens", type=positive, metavar="N",
                   help="write PREFIX_train_NNNNNN.h5 of about N tokens (e.g. 100M)")
    t.add_argument("--resume", action="store_true",
                   help="continue an interrupted --shard-tokens run")
    t.add_argument("--val-tokens", type=count, metavar="N",
                   help="validation: the last whole documents holding >= N tokens")
    t.add_argument("--val-fraction", type=val_fraction,
                   help="validation: the last fraction of the tokens (default 0.05 "
                        "without --shard-tokens; 1: all, only PREFIX_val.h5)")
    t.add_argument("--bpe-train-bytes", type=positive, metavar="N",
                   help="bpe: train on the first N bytes of text (e.g. 2G; default all)")
    t.add_argument("--workers", type=positive, help="processes (default: all cores)")
    # For tests: small batches and pieces exercise the cuts with small files.
    t.add_argument("--batch-bytes", type=positive, default=1 << 20, help=argparse.SUPPRESS)
    t.add_argument("--piece-bytes", type=positive, default=1 << 20, help=argparse.SUPPRESS)
    a = sub.add_parser("array", help="convert a .npy or llm.c .bin token array")
    a.add_argument("input", metavar="INPUT")
    a.add_argument("--out", required=True, metavar="PREFIX")
    a.add_argument("--vocab-size", type=int, required=True)
    a.add_argument("--eos-id", type=int)
    a.add_argument("--tokenizer-name", help="stored as the tokenizer attribute, e.g. gpt2")
    a.add_argument("--val-fraction", type=fraction, default=0.05)
    return p.parse_args(argv)


def main(argv=None):
    try:
        args = parse_args(argv)
        # the documentation's commands write under tokens/ without making it first
        out_dir = os.path.dirname(args.out) or "."
        try:
            os.makedirs(out_dir, exist_ok=True)
        except OSError as e:
            fail(f"--out {args.out}: cannot make the directory '{out_dir}' ({e.strerror or e}); "
                 f"name a PREFIX in a directory you can write")
        if not os.access(out_dir, os.W_OK | os.X_OK):
            fail(f"--out {args.out}: the directory '{out_dir}' is not writable; "
                 f"name a PREFIX in a directory you can write")
        if args.cmd == "text":
            from prep import pipeline
            pipeline.run(args)
        else:
            cmd_array(args)
    except UsageError as e:
        print(f"prepare_data: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(INTERRUPTED, file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
