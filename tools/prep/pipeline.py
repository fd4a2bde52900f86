"""The `text` command: inputs -> worker processes -> token files, streaming.

The parent reads and batches records; a pool of processes encodes batches;
results come back in input order (a bounded queue of pending batches keeps
memory flat however large the input); the parent appends them to the current
train file and holds back the validation tail. The parent also makes the
tokenizer's decode table once and writes it into every file.
"""

import collections
import contextlib
import gc
import multiprocessing
import os
import signal
import sys
import time

from . import encoders, fail, inputs, shards

DEFAULT_SHARDED_VAL_TOKENS = 10_000_000


class Progress:
    """Documents, tokens, MB and rates on stderr: one line rewritten in place
    on a terminal, a new line every few seconds in a log."""

    def __init__(self, stream=sys.stderr, docs=True):
        """docs: whether the records counted are documents (else not shown)."""
        self.stream, self.tty, self.show_docs = stream, stream.isatty(), docs
        self.start = self.last = time.monotonic()
        self.docs = self.tokens = self.bytes = 0
        self.shown = False

    def add(self, docs, tokens, nbytes):
        self.docs += docs
        self.tokens += tokens
        self.bytes += nbytes
        now = time.monotonic()
        if now - self.last >= (0.5 if self.tty else 5.0):
            self.last = now
            self.stream.write(("\r" if self.tty else "") + "prepare_data: " + self.line() +
                              ("\033[K" if self.tty else "\n"))
            self.stream.flush()
            self.shown = True

    def line(self):
        s = max(time.monotonic() - self.start, 1e-9)
        docs = f"{self.docs:,} documents, " if self.show_docs else ""
        return (f"{docs}{self.tokens:,} tokens, {self.bytes / 1e6:,.1f} MB "
                f"in {s:.1f} s ({self.bytes / 1e6 / s:.1f} MB/s, {self.tokens / s:,.0f} tokens/s)")

    def end(self):
        if self.tty and self.shown:
            self.stream.write("\n")
            self.shown = False


def encode_all(stream, spec, workers):
    """(encoded batch, input bytes) in input order."""
    if workers <= 1:
        enc = encoders.Encoder(spec)
        for batch, n in stream:
            yield enc.encode(batch), n
        return
    # A fresh interpreter per worker (not fork): the parent may already run
    # tokenizer threads, which do not survive a fork.
    ctx = multiprocessing.get_context("forkserver")
    pool = pending = r = None
    try:
        # A Ctrl-C while the pool starts waits until it is whole: dropped half
        # made, a worker still starting prints a traceback.
        with sigint_held():
            start_forkserver()
            pool = ctx.Pool(workers, encoders.init_worker, (spec,))
        pending = collections.deque()
        for batch, n in stream:
            pending.append((pool.apply_async(encoders.encode_batch, (batch,)), n))
            if len(pending) > 2 * workers:
                r, m = pending.popleft()
                yield r.get(), m
        while pending:
            r, m = pending.popleft()
            yield r.get(), m
    finally:
        # Held while the pool stops and its locks are freed (they are in
        # reference cycles, hence the collect): raised in a finalizer, a
        # Ctrl-C is printed as "Exception ignored" and lost.
        with sigint_held():
            if pool is not None:
                pool.terminate()
            pool = pending = r = None
            gc.collect()


class CtrlC:
    """SIGINT as KeyboardInterrupt, but never lost. Raised inside a finalizer
    (h5py frees object ids all the time), Python prints it as "Exception
    ignored" with a traceback and carries on; here that print is dropped and
    check() raises it again."""

    def __init__(self):
        self.pressed = False
        signal.signal(signal.SIGINT, self.handler)
        self.hook, sys.unraisablehook = sys.unraisablehook, self.unraisable

    def handler(self, signum, frame):
        self.pressed = True
        raise KeyboardInterrupt

    def unraisable(self, u):
        if not issubclass(u.exc_type, KeyboardInterrupt):
            self.hook(u)

    def check(self):
        if self.pressed:
            raise KeyboardInterrupt


@contextlib.contextmanager
def sigint_held():
    """A Ctrl-C during the block raised as KeyboardInterrupt when it ends.
    (Not by blocking the signal: blocking is per thread, and the parent has
    threads of its own, numpy's for one, that would take it instead.)"""
    caught = []
    handler = signal.signal(signal.SIGINT, lambda *_: caught.append(True))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, handler)
        if caught:
            raise KeyboardInterrupt


def start_forkserver():
    """Starts multiprocessing's fork server (and its resource tracker) with
    SIGINT ignored, which they and every worker forked from them inherit.

    Ctrl-C reaches the whole process group, and only the parent may act on
    it: a worker stopped by KeyboardInterrupt prints a traceback, and one
    stopped holding the pool's task-queue lock hangs the parent's pool
    shutdown for good. (A Ctrl-C in the few milliseconds this takes is lost.)"""
    from multiprocessing import forkserver

    handler = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        forkserver.ensure_running()
    finally:
        signal.signal(signal.SIGINT, handler)


def fingerprint(path):
    st = os.stat(path)
    return [os.path.abspath(path), st.st_size, st.st_mtime_ns]


def load_tokenizer(args, paths, resuming):
    kind, arg = encoders.parse(args.tokenizer)
    if kind == "byte":
        return encoders.Tokenizer("byte", None, 256, None, "byte")
    if kind == "hf":
        return encoders.load_hf(arg, args.out, args.eos_token)
    if kind == "tiktoken":
        return encoders.load_tiktoken(arg, args.tiktoken_file, args.out)
    if not 257 <= args.vocab_size <= 1 << 20:
        fail(f"--vocab-size {args.vocab_size} must be in [257, 2^20] for BPE "
             f"(256 bytes plus end-of-text)")
    path = args.out + "_tokenizer.json"
    if not (resuming and os.path.exists(path)):
        reader = encoders.Encoder(dict(kind="bpe", tok=None, eos=None, dtype=None,
                                       errors=args.utf8_errors, field=args.text_field))
        texts = (t for batch, _ in batches(args, paths) for t, _ in reader.texts(batch) if t)
        if args.bpe_train_bytes:
            texts = first_bytes(texts, args.bpe_train_bytes)
        encoders.train_bpe(texts, args.vocab_size, args.out)
        print(f"prepare_data: wrote {path}", flush=True)
    return encoders.load_hf(path, args.out, encoders.EOT)


def first_bytes(texts, limit):
    """The texts up to the one that reaches limit bytes of UTF-8, that one included."""
    seen = 0
    for t in texts:
        yield t
        seen += len(t.encode("utf-8", "surrogatepass"))
        if seen >= limit:
            return


def batches(args, paths):
    separator = args.doc_separator.encode() if args.doc_separator else None
    return inputs.batches(paths, args.format, args.doc_per_line, args.text_field,
                          args.batch_bytes, args.piece_bytes, separator)


def val_split(args):
    """(val_tokens, val_fraction, sharded): the validation flags, checked, with
    their defaults (the last 10M tokens' documents with --shard-tokens, else 5%)."""
    sharded = args.shard_tokens is not None
    if args.resume and not sharded:
        fail("--resume needs --shard-tokens (a single output file is written in one go)")
    if args.val_tokens is not None and args.val_fraction is not None:
        fail("give --val-tokens or --val-fraction, not both")
    if args.val_fraction == 1 and sharded:
        fail("--val-fraction 1 writes one PREFIX_val.h5 of all the input; leave out --shard-tokens")
    val_tokens, val_fraction = args.val_tokens, args.val_fraction
    if val_tokens is None and val_fraction is None:
        if sharded:
            val_tokens = DEFAULT_SHARDED_VAL_TOKENS
        else:
            val_fraction = 0.05
    return val_tokens, val_fraction, sharded


def finish_stream(args, train, tail, records, progress, val_tokens, val_fraction, dtype, attrs,
                  extra, manifest):
    """After the last chunk: the split checked, the last train file closed,
    PREFIX_val.h5 written, the manifest marked done. Returns the val tokens."""
    progress.end()
    rest, val = tail.finish()
    n, n_train = tail.seen, tail.seen - len(val)
    if val_fraction and len(val) < 2:
        fail(f"{n} tokens give a validation split of {len(val)}; it needs at least 2 "
             f"(use more data or a larger --val-fraction)")
    if n_train < 2 and val_fraction != 1:
        fail(f"{n} tokens leave {n_train} for training; it needs at least 2"
             + (f" (use a smaller --val-tokens)" if val_tokens else ""))
    if rest is not None:
        train.push(*rest)
    train.finish(records)
    if len(val):
        path = args.out + "_val.h5"
        f = shards.H5File(path, dtype, attrs, extra)
        f.append(val)
        f.close()
        print(f"prepare_data: wrote {path}: {len(val)} tokens", flush=True)
    if manifest:
        manifest.save(val={"file": os.path.basename(path), "tokens": len(val)}
                      if len(val) else None, done=True)
    return val


def run(args):
    ctrl_c = CtrlC()
    paths = inputs.resolve(args.inputs)
    for p in paths:
        inputs.detect_format(p, args.format)
    val_tokens, val_fraction, sharded = val_split(args)
    if args.doc_separator is not None:
        if not args.doc_separator:
            fail("--doc-separator is empty; give the text that ends each document")
        if args.doc_per_line:
            fail("--doc-separator splits plain text read whole; leave out --doc-per-line")
        if not any(inputs.detect_format(p, args.format) == "text" for p in paths):
            fail("--doc-separator splits plain text files, and every input is JSONL or "
                 "Parquet, whose records are documents already")
        if encoders.parse(args.tokenizer)[0] == "byte":
            fail("--doc-separator drops the separator for the tokenizer's end-of-text token, "
                 "which --tokenizer byte has not; use bpe, hf: or tiktoken:")
    if args.bpe_train_bytes and encoders.parse(args.tokenizer)[0] != "bpe":
        fail(f"--bpe-train-bytes is for --tokenizer bpe, not {args.tokenizer}")
    workers = args.workers
    if workers is None:
        workers = len(os.sched_getaffinity(0))
        # Starting the pool costs about a second: not worth it for small inputs.
        if sum(os.path.getsize(p) for p in paths) < 4 * args.batch_bytes:
            workers = 1

    manifest, done = None, []
    if sharded:
        config = dict(inputs=[fingerprint(p) for p in paths], format=args.format,
                      doc_per_line=args.doc_per_line, text_field=args.text_field,
                      tokenizer=args.tokenizer, utf8_errors=args.utf8_errors,
                      piece_bytes=args.piece_bytes, shard_tokens=args.shard_tokens,
                      val_tokens=val_tokens, val_fraction=val_fraction)
        if args.doc_separator:
            config["doc_separator"] = args.doc_separator
        kind = encoders.parse(args.tokenizer)[0]
        if kind == "bpe":
            config["vocab_size"] = args.vocab_size
            if args.bpe_train_bytes:
                config["bpe_train_bytes"] = args.bpe_train_bytes
        if kind == "hf":
            config["tokenizer_file"] = fingerprint(args.tokenizer[3:])
        if args.tiktoken_file:
            config["tiktoken_file"] = fingerprint(args.tiktoken_file)
        if args.eos_token:
            config["eos_token"] = args.eos_token
        manifest = shards.Manifest(args.out, config)
        done = manifest.start(args.resume)
        if manifest.data["done"]:
            print(f"prepare_data: {args.out} is complete ({len(done)} shards, "
                  f"{sum(s['tokens'] for s in done):,} train tokens); nothing to do")
            return
        if done:
            print(f"prepare_data: resuming after {len(done)} complete shards "
                  f"({done[-1]['records_end']:,} input records)", flush=True)

    tok = load_tokenizer(args, paths, resuming=bool(done))
    dtype = encoders.token_dtype(tok.vocab_size)
    spec = dict(kind=tok.kind, tok=tok.obj, eos=tok.eos_id, dtype=dtype,
                errors=args.utf8_errors, field=args.text_field)
    # Once, here: the workers only encode.
    offsets, data = encoders.decode_table(tok)
    encoder, merges = encoders.text_encoder(tok)
    attrs = {"vocab_size": tok.vocab_size, "eos_id": tok.eos_id, "tokenizer": tok.name,
             "tokenizer_sha256": encoders.table_sha256(offsets, data), "text_encoder": encoder}
    extra = {"token_offsets": offsets, "token_bytes": data}
    if merges is not None:
        extra["token_merges"] = merges
    train = shards.Train(args.out, dtype, attrs, args.shard_tokens, done,
                         manifest.add if manifest else None, extra)
    tail = shards.ValTail(val_tokens, val_fraction or 0.0, seen=train.tokens)
    records = done[-1]["records_end"] if done else 0
    stream = inputs.skip_records(batches(args, paths), records)
    progress = Progress()
    encoded = encode_all(stream, spec, workers)
    try:
        for (tokens, ends, docs), nbytes in encoded:
            for chunk in tail.push(tokens, ends, records):
                train.push(*chunk)
            records += len(ends)
            progress.add(docs, len(tokens), nbytes)
            ctrl_c.check()
        val = finish_stream(args, train, tail, records, progress, val_tokens, val_fraction,
                            dtype, attrs, extra, manifest)
    except BaseException:
        progress.end()
        # Closed here, not whenever the generator is collected: the workers
        # stop before the partial shard goes, and an error (or a second
        # Ctrl-C) in stopping them is raised, not printed as "Exception ignored".
        try:
            encoded.close()
        finally:
            train.abort()
        raise
    n_train = tail.seen - len(val)
    files, before_tokens = train.index - len(done), sum(s["tokens"] for s in done)
    before = (f" (plus {len(done)} file{'s' * (len(done) != 1)} of {before_tokens:,} tokens "
              f"from before)" if done else "")
    print(f"prepare_data: done: {progress.line()} with {workers} worker"
          f"{'s' * (workers > 1)}; train {n_train - before_tokens:,} tokens "
          f"in {files} file{'s' * (files != 1)}{before}, val {len(val):,}; "
          f"vocab_size {tok.vocab_size}, tokenizer {tok.name}")
