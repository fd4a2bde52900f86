"""Token files other trainers write, read as they lie on disk: the readers of
the `import` command (tools/prep/importer.py).

  raw       nanoGPT's and CS336's train.bin/val.bin: bare little-endian
            integers, uint16 unless --dtype says otherwise (np.memmap/tofile)
  npy       numpy's .npy (np.save), any 1-D integer array, either byte order
  llmc      llm.c's .bin: 256 int32 of header (magic 20240520, version 1 for
            uint16 or 2 for uint32 tokens, the token count), then the tokens
  megatron  Megatron-LM's indexed dataset (also NeMo's, GPT-NeoX's, OLMo's):
            PREFIX.bin holds the tokens of every sequence back to back, PREFIX.idx
            says where each sequence and each document ends (layout below)

Megatron's .idx (megatron/core/datasets/indexed_dataset.py, _IndexWriter), all
little-endian: the 9 bytes b"MMIDIDX\\x00\\x00"; version uint64 = 1; dtype code
uint8 (1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 6 float64, 7 float32,
8 uint16); sequence count S uint64; document count D uint64 (documents + 1);
then int32 sequence lengths [S], int64 byte pointers into .bin [S], int64
document indices [D] (sequence index where each document starts, from 0 to S),
and, only for multimodal data, int8 modes [S].

Each reader knows its token count before reading and reads in order, in
chunks (readinto: no copy through Python bytes), so a file of any size passes
in bounded memory at the speed of the disk.
"""

import os
import struct

import numpy as np

from . import fail

LLMC_MAGIC = 20240520
LLMC_HEADER_INTS = 256
MEGATRON_MAGIC = b"MMIDIDX\x00\x00"
MEGATRON_DTYPES = {1: "u1", 2: "i1", 3: "<i2", 4: "<i4", 5: "<i8", 6: "<f8", 7: "<f4", 8: "<u2"}
RAW_DTYPES = {"uint16": "<u2", "uint32": "<u4", "int32": "<i4", "int64": "<i8"}
FORMATS = ("raw", "npy", "llmc", "megatron")


class TokenFile:
    """One input: where its tokens start (offset, bytes), their dtype and
    count, and for Megatron the document ends (token offsets, int64)."""

    def __init__(self, path, dtype, offset, count, doc_ends=None):
        self.path, self.dtype, self.offset, self.count = path, np.dtype(dtype), offset, count
        self.doc_ends = doc_ends

    def chunks(self, start, chunk_tokens):
        """(first token's index in this file, array) from token `start` on, each
        array its own: the caller may keep it (the validation tail does)."""
        with open(self.path, "rb", buffering=0) as f:
            f.seek(self.offset + start * self.dtype.itemsize)
            pos = start
            while pos < self.count:
                buf = np.empty(min(chunk_tokens, self.count - pos), self.dtype)
                view, got = memoryview(buf.view(np.uint8)), 0
                while got < len(view):
                    n = f.readinto(view[got:])
                    if not n:
                        fail(f"'{self.path}' ended {(self.count - pos) * self.dtype.itemsize - got}"
                             f" bytes early; did it shrink while being read?")
                    got += n
                yield pos, buf
                pos += len(buf)


def _size(path):
    try:
        return os.path.getsize(path)
    except OSError as e:
        fail(f"cannot read '{path}': {e.strerror or e}")


def _check_integer(path, dtype, what):
    if np.dtype(dtype).kind not in "iu":
        fail(f"'{path}' holds {np.dtype(dtype)} {what}; expected integer token ids")


def open_raw(path, dtype_name):
    dtype = np.dtype(RAW_DTYPES[dtype_name])
    size = _size(path)
    if size == 0:
        fail(f"'{path}' is empty")
    if size % dtype.itemsize:
        fail(f"'{path}' has {size} bytes, not a whole number of {dtype_name} tokens; "
             f"is --dtype right, or is the file truncated?")
    with open(path, "rb") as f:
        head = f.read(12)
    if len(head) >= 4 and struct.unpack("<i", head[:4])[0] == LLMC_MAGIC:
        fail(f"'{path}' starts with llm.c's header (magic {LLMC_MAGIC}); import it as llmc")
    if head.startswith(b"\x93NUMPY"):
        fail(f"'{path}' is a .npy file; import it as npy")
    return TokenFile(path, dtype, 0, size // dtype.itemsize)


def open_npy(path):
    try:
        with open(path, "rb") as f:
            version = np.lib.format.read_magic(f)
            read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                           else np.lib.format.read_array_header_2_0)
            shape, fortran, dtype = read_header(f)
            offset = f.tell()
    except (ValueError, OSError) as e:
        fail(f"cannot read '{path}' as .npy: {e}")
    if len(shape) != 1:
        fail(f"'{path}' holds a {len(shape)}-D array of shape {shape}; expected 1-D tokens")
    _check_integer(path, dtype, "values")
    count = shape[0]
    if _size(path) < offset + count * dtype.itemsize:
        fail(f"'{path}' is truncated: its header says {count} tokens "
             f"({offset + count * dtype.itemsize} bytes) but it has {_size(path)} bytes")
    return TokenFile(path, dtype, offset, count)


def open_llmc(path):
    size, header_bytes = _size(path), LLMC_HEADER_INTS * 4
    header = np.fromfile(path, dtype="<i4", count=LLMC_HEADER_INTS)
    if size < header_bytes or header[0] != LLMC_MAGIC:
        fail(f"'{path}' has no llm.c header (its first int32 is not {LLMC_MAGIC}); "
             f"import it as raw or npy")
    version, count = int(header[1]), int(header[2])
    dtypes = {1: "<u2", 2: "<u4"}
    if version not in dtypes:
        fail(f"'{path}' has llm.c magic but version {version}; expected 1 (uint16) or 2 (uint32)")
    itemsize = np.dtype(dtypes[version]).itemsize
    if count < 0 or size != header_bytes + count * itemsize:
        fail(f"'{path}' header says {count} tokens ({header_bytes + count * itemsize} "
             f"bytes) but the file has {size} bytes; is it truncated?")
    return TokenFile(path, dtypes[version], header_bytes, count)


def megatron_prefix(path):
    """A Megatron dataset's prefix from its prefix, .bin or .idx path."""
    for suffix in (".bin", ".idx"):
        if path.endswith(suffix):
            return path[:-len(suffix)]
    return path


def open_megatron(prefix):
    idx, bin_path = prefix + ".idx", prefix + ".bin"
    for p in (idx, bin_path):
        if not os.path.isfile(p):
            fail(f"Megatron dataset '{prefix}': no {p}; give the prefix of a .bin/.idx pair")
    size = _size(idx)
    with open(idx, "rb") as f:
        head = f.read(34)
    if len(head) < 34 or head[:9] != MEGATRON_MAGIC:
        fail(f"'{idx}' is not a Megatron index (it does not start with MMIDIDX)")
    version, code, seqs, docs = struct.unpack("<QBQQ", head[9:34])
    if version != 1:
        fail(f"'{idx}' is Megatron index version {version}; only version 1 exists")
    if code not in MEGATRON_DTYPES:
        fail(f"'{idx}' names token dtype code {code}; Megatron's are 1 to 8")
    dtype = np.dtype(MEGATRON_DTYPES[code])
    _check_integer(idx, dtype, "tokens")
    body = 34 + 12 * seqs + 8 * docs
    if size == body + seqs:
        fail(f"'{idx}' is a multimodal index (it has sequence modes); only text tokens import")
    if size != body or docs < 1:
        fail(f"'{idx}' has {size} bytes where its counts ({seqs} sequences, {docs} document "
             f"indices) make {body}; is it truncated or damaged?")
    lengths = np.fromfile(idx, "<i4", seqs, offset=34).astype(np.int64)
    pointers = np.fromfile(idx, "<i8", seqs, offset=34 + 4 * seqs)
    doc_index = np.fromfile(idx, "<i8", docs, offset=34 + 12 * seqs)
    ends = np.cumsum(lengths)
    starts = ends - lengths
    if np.any(lengths < 0) or not np.array_equal(pointers, starts * dtype.itemsize):
        fail(f"'{idx}': its sequences do not lie back to back in '{bin_path}' (lengths or "
             f"pointers damaged); fsdptrain reads a dataset as Megatron's builder writes it")
    if doc_index[0] != 0 or doc_index[-1] != seqs or np.any(np.diff(doc_index) < 0):
        fail(f"'{idx}': its document indices do not run from 0 to its {seqs} sequences in order")
    count = int(ends[-1]) if seqs else 0
    if _size(bin_path) != count * dtype.itemsize:
        fail(f"'{bin_path}' has {_size(bin_path)} bytes but its index says {count} tokens "
             f"of {dtype.itemsize} bytes; is it truncated?")
    # Where each document ends, in tokens (empty documents included, as repeats).
    doc_ends = np.concatenate(([0], ends))[doc_index[1:]]
    return TokenFile(bin_path, dtype, 0, count, doc_ends)


def open_input(path, fmt, raw_dtype="uint16"):
    if fmt == "raw":
        return open_raw(path, raw_dtype)
    if fmt == "npy":
        return open_npy(path)
    if fmt == "llmc":
        return open_llmc(path)
    return open_megatron(megatron_prefix(path))


def guess_format(path):
    """The old `array` command's rule: .npy, llm.c's header, else raw uint16."""
    if path.endswith(".npy"):
        return "npy"
    if path.endswith(".bin") and os.path.isfile(path[:-4] + ".idx"):
        return "megatron"
    header = np.fromfile(path, dtype="<i4", count=1) if _size(path) >= 4 else []
    return "llmc" if len(header) and header[0] == LLMC_MAGIC else "raw"
