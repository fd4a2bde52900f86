"""Reads corpora as users hold them into batches of records, always in the
same order, so that a run can be resumed by skipping a count of records.

A record is one unit of input: a line (JSONL, or text with --doc-per-line), a
Parquet row, or a piece of a plain text file (a file is one document, read in
pieces so that a huge file never has to fit in memory). Output files and the
validation split are cut only between records.

A batch is a tuple (kind, records, eos, where):
  "text"  records are bytes pieces; eos[i] says piece i ends its document;
          where[i] = (path, byte offset).
  "lines" records are lines (bytes, newline removed); where = (path, first line).
  "json"  records are raw JSONL lines; where = (path, first line).
  "rows"  records are str or None; where = (path, first row).
"""

import bz2
import glob
import gzip
import io
import lzma
import os
import re

from . import VENV_HINT, fail

COMPRESSIONS = (".gz", ".zst", ".xz", ".bz2")
JSONL_SUFFIXES = (".jsonl", ".json", ".ndjson")

# A piece of a plain text file ends after a newline that has a printable ASCII
# character on both sides: GPT-style pre-tokenizers (tiktoken's gpt2, cl100k,
# o200k patterns, byte-level BPE) never join tokens across such a newline, so
# encoding the pieces gives the tokens of the whole file.
SAFE_CUT = re.compile(rb"[\x21-\x7e]\n(?=[\x21-\x7e])")


def resolve(patterns):
    """Input paths in order: each argument as given, a glob's matches sorted."""
    paths = []
    for p in patterns:
        if glob.has_magic(p):
            hits = sorted(h for h in glob.glob(p, recursive=True) if os.path.isfile(h))
            if not hits:
                fail(f"'{p}' matches no file")
            paths.extend(hits)
        elif os.path.isdir(p):
            fail(f"'{p}' is a directory; pass its files or a glob such as '{p}/*.txt'")
        elif not os.path.isfile(p):
            fail(f"cannot read '{p}': no such file")
        else:
            paths.append(p)
    return paths


def compression(path):
    ext = os.path.splitext(path)[1].lower()
    return ext if ext in COMPRESSIONS else None


def detect_format(path, forced):
    if forced != "auto":
        return forced
    base = path[:-len(compression(path))] if compression(path) else path
    ext = os.path.splitext(base)[1].lower()
    if ext in JSONL_SUFFIXES:
        return "jsonl"
    if ext == ".parquet":
        if compression(path):
            fail(f"'{path}': Parquet compresses internally; decompress the file first")
        return "parquet"
    return "text"


class Reader(io.RawIOBase):
    """A file's decompressed bytes, with read errors as one clear message."""

    def __init__(self, path):
        self.path = path
        comp = compression(path)
        try:
            if comp == ".zst":
                try:
                    import zstandard
                except ImportError:
                    fail(f"'{path}': reading .zst needs the python package zstandard "
                         + VENV_HINT)
                # Files made by pzstd or by concatenation hold several frames.
                self.f = zstandard.ZstdDecompressor().stream_reader(
                    open(path, "rb"), read_across_frames=True, closefd=True)
            else:
                opener = {".gz": gzip.open, ".xz": lzma.open, ".bz2": bz2.open}.get(comp, open)
                self.f = opener(path, "rb")
        except OSError as e:
            fail(f"cannot read '{path}': {e.strerror or e}")

    def read(self, n=-1):
        try:
            return self.f.read(n)
        except Exception as e:  # gzip, lzma, bz2 and zstandard each raise their own
            fail(f"'{self.path}': cannot read or decompress it ({type(e).__name__}: {e}); "
                 f"is the file complete?")

    def close(self):
        self.f.close()


def text_pieces(path, piece_bytes, separator=None):
    """(bytes, offset, ends_document) for a plain text file, pieces of about piece_bytes.

    separator (bytes, --doc-separator): each occurrence ends a document and is
    dropped, as a corpus that marks its documents with <|endoftext|> means it
    (the tokenizer's own end-of-text token then follows each); empty documents
    between two separators are skipped. Pieces never straddle a separator."""
    r = Reader(path)
    sep_len = len(separator) if separator else 0
    try:
        buf, offset, pending, eof = b"", 0, None, False
        while not eof:
            block = r.read(piece_bytes)
            eof = not block
            buf += block
            while buf and (eof or len(buf) >= 2 * piece_bytes):
                at = buf.find(separator) if separator else -1
                m = None
                if at < 0 or at > 2 * piece_bytes:
                    # Cut inside the document, before any separator, and never in the
                    # last sep_len - 1 bytes, where a separator may be starting.
                    end = at if at >= 0 else len(buf) if eof else len(buf) - max(sep_len - 1, 0)
                    m = SAFE_CUT.search(buf, piece_bytes - 1, end)
                if at >= 0 and not m:  # the document ends here: whatever is pending with it
                    if at:
                        if pending:
                            yield pending + (False,)
                        pending = (buf[:at], offset)
                    if pending:
                        yield pending + (True,)
                    pending = None
                    offset += at + sep_len
                    buf = buf[at + sep_len:]
                    continue
                if m:
                    cut = m.end()
                elif eof:
                    cut = len(buf)
                elif len(buf) < 8 * piece_bytes:
                    break  # read on: a safe place is probably near
                else:
                    # No safe newline in 8 pieces (minified or binary data): cut at
                    # a UTF-8 character boundary; tokens near the cut may differ.
                    cut = piece_bytes
                    while cut and (buf[cut] & 0xC0) == 0x80:
                        cut -= 1
                    cut = cut or piece_bytes
                if pending:
                    yield pending + (False,)
                pending = (buf[:cut], offset)
                offset += cut
                buf = buf[cut:]
        if pending:
            yield pending + (True,)
    finally:
        r.close()


def file_lines(path, block_bytes):
    """Lists of lines (no newline, no trailing CR), about block_bytes at a time."""
    r = Reader(path)
    try:
        rest = b""
        while True:
            block = r.read(block_bytes)
            if not block:
                if rest:
                    yield [rest.rstrip(b"\r")]
                return
            lines = (rest + block).split(b"\n")
            rest = lines.pop()
            if lines:
                yield [ln[:-1] if ln.endswith(b"\r") else ln for ln in lines]
    finally:
        r.close()


def parquet_rows(path, field, batch_bytes):
    """(texts, nbytes) for the string column `field` of a Parquet file."""
    try:
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.parquet as pq
    except ImportError:
        fail(f"'{path}': reading Parquet needs the python package pyarrow "
             + VENV_HINT)
    try:
        pf = pq.ParquetFile(path)
    except (OSError, pa.ArrowException) as e:
        fail(f"cannot read '{path}' as Parquet: {e}")
    schema = pf.schema_arrow
    if field not in schema.names:
        fail(f"'{path}' has no column '{field}' (it has {', '.join(schema.names)}); "
             f"name the text column with --text-field")
    kind = schema.field(field).type
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        fail(f"'{path}': column '{field}' holds {kind}, not strings; "
             f"name the text column with --text-field")
    try:
        for rb in pf.iter_batches(batch_size=1024, columns=[field]):
            col = rb.column(0)
            lengths = pc.binary_length(col).fill_null(0).to_numpy()
            texts = col.to_pylist()
            start = 0
            while start < len(texts):
                # About batch_bytes of text per batch, whatever the documents' sizes.
                end, size = start, 0
                while end < len(texts) and (end == start or size < batch_bytes):
                    size += int(lengths[end])
                    end += 1
                yield texts[start:end], size
                start = end
    except (OSError, pa.ArrowException) as e:
        fail(f"cannot read '{path}' as Parquet: {e}")


def batches(paths, fmt, per_line, field, batch_bytes, piece_bytes, separator=None):
    """(batch, input bytes) over all inputs in order; per_line: --doc-per-line;
    separator: --doc-separator's bytes (plain text files only)."""
    text_batch, text_size = None, 0
    for path in paths:
        kind = detect_format(path, fmt)
        if kind == "text" and not per_line:
            for data, offset, ends in text_pieces(path, piece_bytes, separator):
                if text_batch is None:
                    text_batch, text_size = ("text", [], [], []), 0
                text_batch[1].append(data)
                text_batch[2].append(ends)
                text_batch[3].append((path, offset))
                text_size += len(data)
                # Small files share a batch: one task per file would cost more
                # than encoding it.
                if text_size >= batch_bytes:
                    yield text_batch, text_size
                    text_batch = None
            continue
        if text_batch is not None:
            yield text_batch, text_size
            text_batch = None
        if kind == "parquet":
            row = 0
            for texts, size in parquet_rows(path, field, batch_bytes):
                yield ("rows", texts, None, (path, row)), size
                row += len(texts)
        else:
            kind = "json" if kind == "jsonl" else "lines"
            line = 1
            for lines in file_lines(path, batch_bytes):
                yield (kind, lines, None, (path, line)), sum(map(len, lines)) + len(lines)
                line += len(lines)
    if text_batch is not None:
        yield text_batch, text_size


def skip_records(stream, n):
    """The batches after the first n records (a resumed run's starting point)."""
    for batch, size in stream:
        kind, records, eos, where = batch
        if n >= len(records):
            n -= len(records)
            continue
        if n:
            records = records[n:]
            size = sum(len(r) for r in records if r is not None)
            if kind == "text":
                eos, where = eos[n:], where[n:]
            else:
                where = (where[0], where[1] + n)
            batch, n = (kind, records, eos, where), 0
        yield batch, size
