#!/usr/bin/env python3
"""Makes fsdptrain token files (docs/ARCHITECTURE.md, "Token dataset") from text or token arrays.

  prepare_data.py text INPUT [INPUT ...] --out PREFIX [--tokenizer byte|bpe|hf:PATH|tiktoken:NAME]
                  [--bpe-train-bytes N] [--shard-tokens 100M [--resume]]
                  [--val-tokens N | --val-fraction F]
                  [--doc-per-line | --doc-separator TEXT] [--text-field text] [--workers N]
  prepare_data.py import raw|npy|llmc|megatron INPUT [INPUT ...] --out PREFIX
                  (--vocab-size V [--tokenizer-name NAME] | --tokenizer hf:PATH|tiktoken:NAME)
                  [--eos-id ID] [--append-eos] [--dtype uint16|uint32|int32|int64]
                  [--shard-tokens 100M [--resume]] [--val-tokens N | --val-fraction F]

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

import: token files other trainers wrote, converted in one streaming pass
  without tokenizing again (tools/prep/token_files.py has the layouts):
    raw       nanoGPT's and CS336's train.bin/val.bin: bare little-endian
              uint16 (--dtype for others)
    npy       numpy's .npy, a 1-D integer array
    llmc      llm.c's .bin (a 256 x int32 header, magic 20240520)
    megatron  Megatron-LM's indexed dataset (NeMo, GPT-NeoX, OLMo): INPUT is
              the PREFIX of PREFIX.bin and PREFIX.idx (or either file)
  INPUTs (globs sorted) form one stream. The vocabulary comes from --vocab-size,
  or from --tokenizer, which also puts its decode table into every file as
  `text` does (--tokenizer-name only stores a name). Files and the validation
  split (the same flags and defaults as `text`) are cut where documents end:
  Megatron's own document index, else after an end-of-text token (--eos-id,
  or the tokenizer's), else every 65,536 tokens. --append-eos gives each
  Megatron document that lacks one an end-of-text token, so that the trainer
  sees where documents end. Every id is checked against the vocabulary.
  (`array INPUT`, the older form, guesses the format from the file.)

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
(word-initial spaces, byte-fallback pieces). `import` files have the table
of --tokenizer, none without it.
"""

import argparse
import os
import re
import sys

INTERRUPTED = "prepare_data: error: interrupted; with --shard-tokens, --resume continues"

try:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from prep import UsageError, fail, inputs, token_files
    from prep.token_files import FORMATS, RAW_DTYPES
except KeyboardInterrupt:
    # Ctrl-C as it starts: the same one line as later, not an import's traceback.
    print(INTERRUPTED, file=sys.stderr)
    sys.exit(130)


class Parser(argparse.ArgumentParser):
    """argparse, but its errors are our one-line format too."""

    def error(self, message):
        print(f"prepare_data: error: {message} (see --help)", file=sys.stderr)
        sys.exit(2)


def val_fraction(s):
    """--val-fraction: 1 makes all of it validation (a separate validation file)."""
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


def add_output_args(p):
    """Shards and the validation split: the same for text and import."""
    p.add_argument("--shard-tokens", type=positive, metavar="N",
                   help="write PREFIX_train_NNNNNN.h5 of about N tokens (e.g. 100M)")
    p.add_argument("--resume", action="store_true",
                   help="continue an interrupted --shard-tokens run")
    p.add_argument("--val-tokens", type=count, metavar="N",
                   help="validation: the last whole documents holding >= N tokens")
    p.add_argument("--val-fraction", type=val_fraction,
                   help="validation: the last fraction of the tokens (default 0.05 "
                        "without --shard-tokens; 1: all, only PREFIX_val.h5)")


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
    add_output_args(t)
    t.add_argument("--bpe-train-bytes", type=positive, metavar="N",
                   help="bpe: train on the first N bytes of text (e.g. 2G; default all)")
    t.add_argument("--workers", type=positive, help="processes (default: all cores)")
    # For tests: small batches and pieces exercise the cuts with small files.
    t.add_argument("--batch-bytes", type=positive, default=1 << 20, help=argparse.SUPPRESS)
    t.add_argument("--piece-bytes", type=positive, default=1 << 20, help=argparse.SUPPRESS)
    for name in ("import", "array"):
        # array: the older form, one file, its format guessed (no help of its own).
        i = sub.add_parser(name, **({"help": "convert token files of nanoGPT, llm.c, Megatron"}
                                    if name == "import" else {}))
        if name == "import":
            i.add_argument("format", choices=FORMATS, metavar="FORMAT",
                           help="raw, npy, llmc or megatron")
            i.add_argument("inputs", nargs="+", metavar="INPUT", help="files or quoted globs")
        else:
            i.add_argument("inputs", nargs=1, metavar="INPUT")
        i.add_argument("--out", required=True, metavar="PREFIX")
        i.add_argument("--vocab-size", type=int, help="without --tokenizer: ids are below it")
        i.add_argument("--tokenizer", help="hf:PATH or tiktoken:NAME: the tokenizer that made them")
        i.add_argument("--tiktoken-file", metavar="FILE.tiktoken",
                       help="the encoding's ranks, instead of tiktoken's cache")
        i.add_argument("--eos-token", help="hf: the end-of-text token's text")
        i.add_argument("--tokenizer-name", help="without --tokenizer: stored as its name")
        i.add_argument("--eos-id", type=int, help="the end-of-text id (default: the tokenizer's)")
        i.add_argument("--append-eos", action="store_true",
                       help="megatron: end every document with --eos-id where it does not")
        i.add_argument("--dtype", choices=sorted(RAW_DTYPES), default="uint16",
                       help="raw: the integer type (default uint16)")
        add_output_args(i)
        # For tests: small chunks put document ends at chunk edges.
        i.add_argument("--chunk-tokens", type=positive, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.cmd == "array":
        args.cmd, args.format = "import", None
    return args


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
            from prep import importer
            if args.format is None:
                args.format = token_files.guess_format(inputs.resolve(args.inputs)[0])
            importer.run(args)
    except UsageError as e:
        print(f"prepare_data: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(INTERRUPTED, file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
