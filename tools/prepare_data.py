#!/usr/bin/env python3
"""Makes fsdptrain token files (DESIGN.md, "Token dataset") from text or token arrays.

  prepare_data.py text INPUT.txt [INPUT2.txt ...] --out PREFIX
                  [--tokenizer byte|bpe] [--vocab-size 4096] [--val-fraction 0.05]
  prepare_data.py array INPUT.npy|INPUT.bin --out PREFIX --vocab-size V
                  [--eos-id ID] [--tokenizer-name NAME] [--val-fraction 0.05]

Writes PREFIX_train.h5 and PREFIX_val.h5 (the last --val-fraction of the tokens,
contiguous; no val file when it is 0), each holding a chunked 1-D dataset
/tokens (uint16 when vocab_size <= 65536, else uint32) with attributes
vocab_size, and eos_id and tokenizer where known.

text, byte: tokens are the UTF-8 bytes of the files, vocab_size 256.
text, bpe:  trains a byte-level BPE on the files themselves (package
            `tokenizers`), saves it as PREFIX_tokenizer.json and appends the
            end-of-text token <|endoftext|> (eos_id) after each file.
array:      .npy holds any 1-D integer array; .bin is either llm.c's format
            (a 256 x int32 header starting with magic 20240520, version 1 for
            uint16 or 2 for uint32 tokens, then the token count) or, without
            that magic, raw little-endian uint16.
"""

import argparse
import os
import sys

import numpy as np

LLMC_MAGIC = 20240520
LLMC_HEADER_INTS = 256
EOT = "<|endoftext|>"
# Elements per HDF5 chunk and per conversion pass: bounded memory for big arrays.
CHUNK = 1 << 20


class UsageError(Exception):
    pass


def fail(msg):
    raise UsageError(msg)


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


def read_text(paths):
    out = []
    for p in paths:
        try:
            with open(p, "rb") as f:
                out.append(f.read())
        except OSError as e:
            fail(f"cannot read '{p}': {e.strerror}")
    if not any(out):
        fail("the input text is empty")
    return out


def bpe_tokens(docs, vocab_size, prefix):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    texts = []
    for raw in docs:
        try:
            texts.append(raw.decode("utf-8"))
        except UnicodeDecodeError as e:
            fail(f"BPE needs UTF-8 text; byte {e.start} is not UTF-8 ({e.reason})")
    tok = Tokenizer(models.BPE())
    # No prefix space: encoding must give back exactly the input bytes.
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOT],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)

    def lines():
        for t in texts:
            yield from t.splitlines(keepends=True)

    tok.train_from_iterator(lines(), trainer=trainer)
    eos_id = tok.token_to_id(EOT)
    ids = []
    for t in texts:
        doc = []
        for enc in tok.encode_batch(t.splitlines(keepends=True), add_special_tokens=False):
            doc.extend(enc.ids)
        if tok.decode(doc) != t:
            fail("BPE encoding does not give back the input text; please report this")
        ids.extend(doc)
        ids.append(eos_id)
    path = prefix + "_tokenizer.json"
    tok.save(path)
    print(f"prepare_data: wrote {path}: vocab_size {tok.get_vocab_size()}")
    return np.asarray(ids, dtype=np.int64), tok.get_vocab_size(), eos_id, os.path.basename(path)


def cmd_text(args):
    docs = read_text(args.inputs)
    if args.tokenizer == "byte":
        tokens = np.frombuffer(b"".join(docs), dtype=np.uint8)
        write_splits(args.out, tokens, 256, args.val_fraction, tokenizer="byte")
        return
    if not 257 <= args.vocab_size <= 1 << 20:
        fail(f"--vocab-size {args.vocab_size} must be in [257, 2^20] for BPE "
             f"(256 bytes plus end-of-text)")
    tokens, vocab, eos_id, name = bpe_tokens(docs, args.vocab_size, args.out)
    write_splits(args.out, tokens, vocab, args.val_fraction, eos_id=eos_id, tokenizer=name)


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


def parse_args(argv):
    p = Parser(prog="prepare_data", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("text", help="tokenize text files (byte-level or trained BPE)")
    t.add_argument("inputs", nargs="+", metavar="INPUT.txt")
    t.add_argument("--out", required=True, metavar="PREFIX")
    t.add_argument("--tokenizer", choices=["byte", "bpe"], default="byte")
    t.add_argument("--vocab-size", type=int, default=4096, help="BPE only (default 4096)")
    t.add_argument("--val-fraction", type=fraction, default=0.05)
    a = sub.add_parser("array", help="convert a .npy or llm.c .bin token array")
    a.add_argument("input", metavar="INPUT")
    a.add_argument("--out", required=True, metavar="PREFIX")
    a.add_argument("--vocab-size", type=int, required=True)
    a.add_argument("--eos-id", type=int)
    a.add_argument("--tokenizer-name", help="stored as the tokenizer attribute, e.g. gpt2")
    a.add_argument("--val-fraction", type=fraction, default=0.05)
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    try:
        out_dir = os.path.dirname(args.out) or "."
        if not os.path.isdir(out_dir):
            fail(f"--out {args.out}: directory '{out_dir}' does not exist")
        (cmd_text if args.cmd == "text" else cmd_array)(args)
    except UsageError as e:
        print(f"prepare_data: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
