"""The `import` command: token files written by other trainers (token_files)
into fsdptrain's, in one streaming pass, without tokenizing again.

A reader thread reads the inputs in order, checks every id against the
vocabulary, converts the dtype and finds where records end; the main thread
writes them through the same train shards, validation tail and manifest as
the `text` command (shards). Reading and checking overlap with HDF5's writes,
which are the slow part (bench/data/import_bench.py).

Records are where files and the validation split may be cut: Megatron's
documents; else, with an end-of-text id (--eos-id or the tokenizer's), the
position after each end-of-text token (nanoGPT puts it after a document,
llm.c before one: either way a document boundary); else blocks of 65,536
tokens. --append-eos gives every Megatron document that lacks it an
end-of-text token of its own, the only change to the tokens ever made.
"""

import queue
import threading

import numpy as np

from . import encoders, fail, inputs, pipeline, shards, token_files

# Tokens per read (16 MB of uint16): large enough that HDF5's per-write cost vanishes.
CHUNK_TOKENS = 1 << 23
# A record (document) longer than this many chunks: cut at a chunk end, except
# Megatron's, whose documents the index gives (held whole: memory their size).
MAX_RECORD_CHUNKS = 8
# Without document ends, a file or the validation split may be cut every BLOCK tokens.
BLOCK = 1 << 16


def resolve(args):
    """The inputs in order: globs sorted; a Megatron dataset by its prefix,
    .bin or .idx (a glob over both names each prefix once)."""
    if args.format != "megatron":
        return inputs.resolve(args.inputs)
    prefixes = []
    for p in args.inputs:
        if any(c in p for c in "*?["):
            hits = [token_files.megatron_prefix(h) for h in inputs.resolve([p])]
        else:
            hits = [token_files.megatron_prefix(p)]
        prefixes += [h for h in dict.fromkeys(hits) if h not in prefixes]
    return prefixes


def load_tokenizer(args):
    """(vocab_size, eos_id, name, attrs and datasets for every file)."""
    if not args.tokenizer:
        if args.vocab_size is None:
            fail("give --vocab-size V (or --tokenizer hf:PATH|tiktoken:NAME, whose size it is)")
        if not 1 <= args.vocab_size < 1 << 31:
            fail(f"--vocab-size {args.vocab_size} must be in [1, 2^31)")
        return args.vocab_size, args.eos_id, args.tokenizer_name, {}, {}
    if args.tokenizer_name:
        fail("--tokenizer-name names a tokenizer that is not at hand; with --tokenizer leave it out")
    kind, arg = encoders.parse(args.tokenizer)
    if kind == "hf":
        tok = encoders.load_hf(arg, args.out, args.eos_token)
    elif kind == "tiktoken":
        tok = encoders.load_tiktoken(arg, args.tiktoken_file, args.out)
    else:
        fail(f"--tokenizer {args.tokenizer}: import records the tokenizer that made the tokens: "
             f"hf:PATH or tiktoken:NAME")
    if args.vocab_size is not None and args.vocab_size != tok.vocab_size:
        fail(f"--vocab-size {args.vocab_size} is not --tokenizer {args.tokenizer}'s "
             f"{tok.vocab_size}; leave --vocab-size out (the trainer pads the vocabulary itself)")
    offsets, data = encoders.decode_table(tok)
    encoder, merges = encoders.text_encoder(tok)
    attrs = {"tokenizer_sha256": encoders.table_sha256(offsets, data), "text_encoder": encoder}
    extra = {"token_offsets": offsets, "token_bytes": data}
    if merges is not None:
        extra["token_merges"] = merges
    eos = args.eos_id if args.eos_id is not None else tok.eos_id
    return tok.vocab_size, eos, tok.name, attrs, extra


class Reader:
    """The inputs as pieces (tokens, record ends, input bytes), read, checked
    and converted on a thread of its own; errors come out of the iteration."""

    def __init__(self, files, start, vocab, eos, append_eos, chunk_tokens, stream_pos):
        self.files, self.start, self.vocab, self.eos = files, start, vocab, eos
        self.append_eos, self.chunk_tokens, self.stream_pos = append_eos, chunk_tokens, stream_pos
        self.dtype = encoders.token_dtype(vocab)
        self.lacking = 0  # Megatron documents without the end-of-text token
        self.queue, self.stop = queue.Queue(maxsize=3), threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def __iter__(self):
        while True:
            kind, item = self.queue.get()
            if kind == "done":
                return
            if kind == "error":
                raise item
            yield item

    def close(self):
        self.stop.set()
        while self.thread.is_alive():
            try:
                self.queue.get(timeout=0.1)
            except queue.Empty:
                pass

    def _put(self, kind, item):
        while not self.stop.is_set():
            try:
                self.queue.put((kind, item), timeout=0.1)
                return
            except queue.Full:
                pass

    def _run(self):
        try:
            file_index, offset = self.start
            carry, carried, nbytes = [], 0, 0  # the record begun in earlier chunks
            for tf in self.files[file_index:]:
                for pos, raw in tf.chunks(offset, self.chunk_tokens):
                    if self.stop.is_set():
                        return
                    tokens, ends = self._convert(tf, pos, raw)
                    nbytes += raw.nbytes
                    if (not len(ends) and tf.doc_ends is None
                            and carried + len(tokens) >= MAX_RECORD_CHUNKS * self.chunk_tokens):
                        # No end-of-text for this long (a wrong --eos-id, or none in the
                        # file): a cut here, as in a file without one, bounds the memory.
                        ends = np.array([len(tokens)], np.int64)
                    for piece in self._split(carry, tokens, ends):
                        self._put("chunk", (*piece, nbytes))
                        nbytes = 0
                    if len(ends):
                        carry = [tokens[ends[-1]:]]
                    else:
                        carry.append(tokens)
                    carried = sum(len(c) for c in carry)
                offset = 0
            if carried:
                self._put("chunk", (np.concatenate(carry), np.empty(0, np.int64), nbytes))
            self._put("done", None)
        except BaseException as e:  # UsageError, OSError, MemoryError: the main thread reports
            self._put("error", e)

    @staticmethod
    def _split(carry, tokens, ends):
        """Pieces that begin and end where records end (the validation tail
        releases whole pieces): the record begun in earlier chunks (carry, a
        list of arrays) joined to its end here, then this chunk up to its last
        record end."""
        if not len(ends):
            return []
        pieces, first = [], int(ends[0])
        if sum(len(c) for c in carry):
            head = np.concatenate(carry + [tokens[:first]])
            pieces.append((head, np.array([len(head)], np.int64)))
            tokens, ends = tokens[first:], ends[1:] - first
        if len(ends):
            pieces.append((tokens[:ends[-1]], ends))
        return pieces

    def _check(self, tf, pos, raw):
        """The first id outside the vocabulary, reported the way the trainer would."""
        if raw.dtype.itemsize <= 2 and raw.dtype.kind == "u" and self.vocab >= 1 << 16:
            return
        hi = raw.max()
        lo = raw.min() if raw.dtype.kind == "i" else 0
        if lo < 0 or hi >= self.vocab:
            i = int(np.flatnonzero((raw < 0) | (raw >= self.vocab))[0])
            fail(f"token {int(raw[i])} at offset {pos + i} of '{tf.path}' is outside "
                 f"[0, vocab_size {self.vocab})")

    def _convert(self, tf, pos, raw):
        self._check(tf, pos, raw)
        tokens = raw.astype(self.dtype, copy=False)
        if tf.doc_ends is not None:
            a, b = np.searchsorted(tf.doc_ends, [pos, pos + len(raw)], side="right")
            ends = tf.doc_ends[a:b] - pos
            if self.eos is not None and len(ends):
                before = tf.doc_ends[a - 1] - pos if a else -pos
                prev = np.concatenate(([before], ends[:-1]))
                lacking = (ends > prev) & (tokens[ends - 1] != self.eos)
                self.lacking += int(lacking.sum())
                if self.append_eos and lacking.any():
                    tokens = np.insert(tokens, ends[lacking], self.eos)
                    ends = ends + np.cumsum(lacking)
        elif self.eos is not None:
            ends = np.flatnonzero(tokens == self.eos) + 1
        else:
            ends = np.arange(BLOCK - self.stream_pos % BLOCK, len(tokens) + 1, BLOCK)
        self.stream_pos += len(tokens)
        return tokens, ends.astype(np.int64, copy=False)


def resume_point(files, done, fmt):
    """(file index, token in it) after the complete shards. The train shards
    are the start of the stream: their tokens count from the start, except
    that --append-eos adds tokens, so Megatron's count in documents."""
    if not done:
        return (0, 0), 0
    if fmt == "megatron":
        docs = done[-1]["records_end"]
        for i, tf in enumerate(files):
            if docs <= len(tf.doc_ends):
                return (i, int(tf.doc_ends[docs - 1]) if docs else 0), done[-1]["records_end"]
            docs -= len(tf.doc_ends)
    else:
        skip = sum(s["tokens"] for s in done)
        for i, tf in enumerate(files):
            if skip <= tf.count:
                return (i, skip), done[-1]["records_end"]
            skip -= tf.count
    fail("--resume: the manifest lists more than the inputs hold; remove the outputs")


def run(args):
    ctrl_c = pipeline.CtrlC()
    if args.append_eos and args.format != "megatron":
        fail(f"--append-eos adds end-of-text at Megatron's document ends; {args.format} files "
             f"keep none (their documents are where the end-of-text tokens are)")
    if args.dtype != "uint16" and args.format != "raw":
        fail(f"--dtype is for raw files; {args.format} files say their own")
    paths = resolve(args)
    files = [token_files.open_input(p, args.format, args.dtype) for p in paths]
    vocab, eos, name, tok_attrs, extra = load_tokenizer(args)
    if eos is not None and not 0 <= eos < vocab:
        fail(f"--eos-id {eos} is outside [0, vocab_size {vocab})")
    if args.append_eos and eos is None:
        fail("--append-eos needs the end-of-text id: --eos-id ID or a --tokenizer that has one")
    val_tokens, val_fraction, sharded = pipeline.val_split(args)

    manifest, done = None, []
    if sharded:
        config = dict(inputs=[pipeline.fingerprint(tf.path) for tf in files], format=args.format,
                      dtype=args.dtype, vocab_size=vocab, eos_id=eos, tokenizer=name,
                      append_eos=args.append_eos, shard_tokens=args.shard_tokens,
                      val_tokens=val_tokens, val_fraction=val_fraction)
        if args.format == "megatron":
            config["indexes"] = [pipeline.fingerprint(p + ".idx") for p in paths]
        if args.tokenizer and args.tokenizer.startswith("hf:"):
            config["tokenizer_file"] = pipeline.fingerprint(args.tokenizer[3:])
        if args.tiktoken_file:
            config["tiktoken_file"] = pipeline.fingerprint(args.tiktoken_file)
        manifest = shards.Manifest(args.out, config)
        done = manifest.start(args.resume)
        if manifest.data["done"]:
            print(f"prepare_data: {args.out} is complete ({len(done)} shards); nothing to do")
            return
    start, records = resume_point(files, done, args.format)
    if done:
        print(f"prepare_data: resuming after {len(done)} complete shards "
              f"({records:,} records)", flush=True)

    attrs = {"vocab_size": vocab, "eos_id": eos, "tokenizer": name, **tok_attrs}
    train = shards.Train(args.out, encoders.token_dtype(vocab), attrs, args.shard_tokens, done,
                         manifest.add if manifest else None, extra)
    tail = shards.ValTail(val_tokens, val_fraction or 0.0, seen=train.tokens)
    reader = Reader(files, start, vocab, eos, args.append_eos, args.chunk_tokens or CHUNK_TOKENS,
                    train.tokens)
    docs = args.format == "megatron" or eos is not None
    progress = pipeline.Progress(docs=docs)
    try:
        for tokens, ends, nbytes in reader:
            for chunk in tail.push(tokens, ends, records):
                train.push(*chunk)
            records += len(ends)
            progress.add(len(ends), len(tokens), nbytes)
            ctrl_c.check()
        reader.close()
        val = pipeline.finish_stream(args, train, tail, records, progress, val_tokens,
                                     val_fraction, encoders.token_dtype(vocab), attrs, extra,
                                     manifest)
    except BaseException:
        progress.end()
        reader.close()
        train.abort()
        raise
    n_train = tail.seen - len(val) - sum(s["tokens"] for s in done)
    print(f"prepare_data: done: {progress.line()}; train {n_train:,} tokens in "
          f"{train.index - len(done)} file{'s' * (train.index - len(done) != 1)}, "
          f"val {len(val):,}; vocab_size {vocab}, tokenizer {name or 'not recorded'}")
    if reader.lacking:
        what = ("got an end-of-text token (--append-eos)" if args.append_eos else
                f"do not end in end-of-text ({eos}): the trainer cannot see where they end; "
                f"--append-eos adds it")
        print(f"prepare_data: {reader.lacking:,} documents {what}")
