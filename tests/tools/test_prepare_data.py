#!/usr/bin/env python3
"""CTest for tools/prepare_data.py's `text` command (the C++ test
tests/data/test_prepare_data.cpp checks that its files open in the trainer).

  test_prepare_data.py PREPARE_DATA_PY

Every input format and compression, every tokenizer kind, sharding with 1
and 4 workers, resume after an interruption or Ctrl-C, the one-line errors.
Inputs and tokenizers are made here in a temporary directory (a tiktoken
encoding from ranks written here, a tokenizer.json trained here): no download.
Exits 77 (skipped) when a needed python package is missing.
"""

import base64
import glob
import gzip
import json
import lzma
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

try:
    import h5py
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    import tiktoken
    import tokenizers
    import zstandard
    from tiktoken_ext.openai_public import r50k_pat_str
except ImportError as e:
    print(f"SKIP: {e} (tools/setup.sh installs the packages)")
    sys.exit(77)

SCRIPT = None
WORDS = ("the quick brown fox jumps over a lazy dog and then the cat sat on the mat "
         "while héllo wörld naïve café 東京 données ünïcode 123 4567 it's we'll").split()


def make_docs(n, seed=0, max_words=80):
    rnd = random.Random(seed)
    docs = []
    for _ in range(n):
        lines = []
        for _ in range(rnd.randint(1, 4)):
            lines.append(" ".join(rnd.choice(WORDS) for _ in range(rnd.randint(1, max_words))))
        docs.append("\n".join(lines))
    return docs


def test_ranks():
    """A small tiktoken vocabulary: the 256 bytes, then a few merges."""
    ranks = {bytes([b]): b for b in range(256)}
    for m in ["th", "he", "the", " t", " the", "an", "and", " a", " and", "in", "ing", "er",
              " o", "ov", "over", " over", "ow", "own", "br", "bro", "brown", " brown"]:
        ranks.setdefault(m.encode(), len(ranks))
    return ranks


def read_tokens(paths):
    parts = []
    for p in paths:
        with h5py.File(p, "r") as f:
            parts.append(f["tokens"][:])
    return np.concatenate(parts) if parts else np.empty(0, np.int64)


def decode_table(path):
    """A file's decode table as a list of each id's bytes, after checking its
    layout: int64 offsets, vocab_size + 1 of them, from 0, non-decreasing, to
    the length of the uint8 bytes."""
    with h5py.File(path, "r") as f:
        off, data = f["token_offsets"], f["token_bytes"]
        vocab = int(f["tokens"].attrs["vocab_size"])
        assert (off.dtype, data.dtype, off.shape, data.ndim) == \
            (np.int64, np.uint8, (vocab + 1,), 1), (path, off.dtype, data.dtype, off.shape)
        off, data = off[:], data[:].tobytes()
    assert off[0] == 0 and off[-1] == len(data), (path, off[0], off[-1], len(data))
    assert np.all(np.diff(off) >= 0), path
    return [data[off[i]:off[i + 1]] for i in range(vocab)]


def same_table(paths):
    """The table of the first file, after checking that every file has it."""
    tables = [decode_table(p) for p in paths]
    for p, t in zip(paths[1:], tables[1:]):
        assert t == tables[0], p
    return tables[0]


def detok(table, ids):
    return b"".join(table[i] for i in ids)


def attrs(path):
    with h5py.File(path, "r") as f:
        a = dict(f["tokens"].attrs)
        dtype = f["tokens"].dtype
    return {k: (v.decode() if isinstance(v, bytes) else v) for k, v in a.items()}, dtype


class Base(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="prepare_data_test_")
        self.ranks = self.path("ranks.tiktoken")
        with open(self.ranks, "wb") as f:
            for tok, rank in test_ranks().items():
                f.write(base64.b64encode(tok) + b" %d\n" % rank)
        self.enc = tiktoken.Encoding("test", pat_str=r50k_pat_str, mergeable_ranks=test_ranks(),
                                     special_tokens={"<|endoftext|>": 50256})

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def path(self, name):
        return os.path.join(self.dir, name)

    def write(self, name, data):
        p = self.path(name)
        if isinstance(data, str):
            data = data.encode()
        opener = {".gz": gzip.open, ".xz": lzma.open}.get(os.path.splitext(p)[1], open)
        if p.endswith(".zst"):
            data = zstandard.ZstdCompressor().compress(data)
        with opener(p, "wb") as f:
            f.write(data)
        return p

    def prepare(self, *args, ok=True):
        r = subprocess.run([sys.executable, SCRIPT, "text", *map(str, args)],
                           capture_output=True, text=True)
        if ok:
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        return r

    def tik(self, *args):
        """Arguments for the test tiktoken encoding under gpt2's name."""
        return ["--tokenizer", "tiktoken:gpt2", "--tiktoken-file", self.ranks, *args]

    def expected(self, docs):
        out = []
        for d in docs:
            if d:
                out += self.enc.encode_ordinary(d) + [50256]
        return out

    def stream(self, prefix):
        """All tokens, train files in name order then val, and the train files."""
        train = sorted(glob.glob(prefix + "_train*.h5"))
        val = [prefix + "_val.h5"] if os.path.exists(prefix + "_val.h5") else []
        return read_tokens(train + val).tolist(), train


class Formats(Base):
    """The same documents in every input layout give the same tokens."""

    def check(self, inputs, docs, *extra):
        prefix = self.path("out")
        for p in glob.glob(prefix + "*"):
            os.remove(p)
        self.prepare(*inputs, "--out", prefix, *self.tik("--val-fraction", "0", *extra))
        got, _ = self.stream(prefix)
        self.assertEqual(got, self.expected(docs), inputs)

    def test_text_one_document_per_file_and_globs(self):
        docs = make_docs(12, seed=1)
        for i, d in enumerate(docs):
            self.write(f"doc_{i:02d}.txt", d + "\n")
        files = [self.path(f"doc_{i:02d}.txt") for i in range(12)]
        self.check([self.path("doc_*.txt")], [d + "\n" for d in docs])
        # Several arguments keep their order; a glob is sorted.
        self.check([files[3], self.path("doc_0[01].txt")], [docs[3] + "\n", docs[0] + "\n",
                                                            docs[1] + "\n"])

    def test_text_one_document_per_line(self):
        docs = [d.replace("\n", " ") for d in make_docs(50, seed=2)]
        text = "\n".join(docs[:20]) + "\n\n   \n" + "\r\n".join(docs[20:])  # blank lines skipped
        self.check([self.write("lines.txt", text)], docs, "--doc-per-line")

    def test_jsonl_with_a_text_field(self):
        docs = make_docs(40, seed=3)
        lines = [json.dumps({"id": i, "body": d}) for i, d in enumerate(docs)]
        self.check([self.write("c.jsonl", "\n".join(lines) + "\n\n")], docs,
                   "--text-field", "body")

    def test_parquet_like_the_hub(self):
        docs = make_docs(300, seed=4)
        table = pa.table({"text": docs + [None, ""], "id": list(range(302))})
        pq.write_table(table, self.path("train-00000-of-00001.parquet"), row_group_size=64)
        self.check([self.path("train-*.parquet")], docs, "--batch-bytes", "3000")

    def test_compressed_inputs(self):
        docs = make_docs(30, seed=5)
        jsonl = "\n".join(json.dumps({"text": d}) for d in docs) + "\n"
        for ext in (".gz", ".zst", ".xz"):
            self.check([self.write("c.jsonl" + ext, jsonl)], docs)
            self.check([self.write("c.txt" + ext, docs[0])], docs[:1])
        # zstd files made by concatenation hold several frames.
        c = zstandard.ZstdCompressor()
        with open(self.path("multi.txt.zst"), "wb") as f:
            f.write(c.compress(docs[0].encode()) + c.compress(docs[1].encode()))
        self.check([self.path("multi.txt.zst")], [docs[0] + docs[1]])

    def test_big_text_file_in_pieces_encodes_like_the_whole(self):
        docs = make_docs(400, seed=6)
        text = "\n".join(docs) + "\n"
        p = self.write("big.txt.gz", text)
        self.check([p], [text], "--piece-bytes", "700", "--batch-bytes", "1500")
        self.check([p], [text], "--piece-bytes", "700", "--workers", "3")


    def test_text_documents_between_separators(self):
        """--doc-separator: OpenWebText's <|endoftext|> ends a document and is
        dropped; the tokenizer's own end-of-text follows each document, wherever
        the reads and pieces fall (reads of 13 bytes split most separators; short
        lines keep every cut inside a document at a newline)."""
        docs = make_docs(60, seed=8, max_words=8)
        sep = "<|endoftext|>"
        text = sep + sep.join(docs[:30]) + sep + sep + sep.join(docs[30:]) + sep + "tail <|endof"
        p = self.write("owt.txt.gz", text)
        want = docs + ["tail <|endof"]  # empty documents skipped; a partial separator is text
        for piece in ("13", "64", "700"):
            self.check([p], want, "--doc-separator", sep, "--piece-bytes", piece,
                       "--batch-bytes", "300")
        self.check([p], want, "--doc-separator", sep, "--piece-bytes", "64", "--workers", "3")
        # without the flag the separators are text of the one document
        self.check([p], [text], "--piece-bytes", "64")


class Tokenizers(Base):
    def setUp(self):
        super().setUp()
        self.docs = make_docs(60, seed=7)
        self.input = self.write("c.jsonl", "".join(json.dumps({"text": d}) + "\n"
                                                   for d in self.docs))

    def test_byte(self):
        prefix = self.path("byte")
        self.prepare(self.input, "--out", prefix, "--val-fraction", "0")
        got, _ = self.stream(prefix)
        self.assertEqual(bytes(got), "".join(d + "\n" for d in self.docs).encode())
        a, dtype = attrs(prefix + "_train.h5")
        self.assertEqual((a["vocab_size"], a["tokenizer"], "eos_id" in a, dtype),
                         (256, "byte", False, np.uint16))
        table = decode_table(prefix + "_train.h5")
        self.assertEqual(table, [bytes([i]) for i in range(256)])
        self.assertEqual(detok(table, got), "".join(d + "\n" for d in self.docs).encode())

    def test_bpe_trained_on_the_corpus(self):
        prefix = self.path("bpe")
        self.prepare(self.input, "--out", prefix, "--tokenizer", "bpe", "--vocab-size", "400")
        got, _ = self.stream(prefix)
        a, _ = attrs(prefix + "_val.h5")
        self.assertEqual(a["tokenizer"], "bpe_tokenizer.json")
        tok = tokenizers.Tokenizer.from_file(prefix + "_tokenizer.json")
        self.assertLessEqual(a["vocab_size"], 400)
        self.assertEqual(a["eos_id"], tok.token_to_id("<|endoftext|>"))
        docs, cur = [], []
        for t in got:
            if t == a["eos_id"]:
                docs.append(tok.decode(cur))
                cur = []
            else:
                cur.append(t)
        self.assertEqual(docs, self.docs)
        self.assertLess(len(got), sum(len(d.encode()) for d in self.docs) / 2)
        self.check_byte_level(prefix, got, tok, a["eos_id"], "<|endoftext|>")

    def test_bpe_on_the_first_bytes_and_a_separate_validation_file(self):
        """The leaderboard's way (README): a BPE trained on the start of the
        training text, then the corpus's own validation file encoded with it."""
        def merges(prefix):
            with open(prefix + "_tokenizer.json") as f:
                return json.load(f)["model"]["merges"]
        # --bpe-train-bytes stops after the document that reaches the count:
        # the first 10 documents' bytes give the merges of those 10 alone.
        first = self.docs[:10]
        limit = sum(len(d.encode()) for d in first)
        self.write("first.jsonl", "".join(json.dumps({"text": d}) + "\n" for d in first))
        self.prepare(self.path("first.jsonl"), "--out", self.path("few"), "--tokenizer", "bpe",
                     "--vocab-size", "400", "--val-fraction", "0")
        prefix = self.path("owt")
        self.prepare(self.input, "--out", prefix, "--tokenizer", "bpe", "--vocab-size", "400",
                     "--bpe-train-bytes", str(limit), "--val-fraction", "0")
        self.prepare(self.input, "--out", self.path("all"), "--tokenizer", "bpe",
                     "--vocab-size", "400", "--val-fraction", "0")
        self.assertEqual(merges(prefix), merges(self.path("few")))
        self.assertNotEqual(merges(prefix), merges(self.path("all")))
        # --val-fraction 1: every token to PREFIX_val.h5, no training file
        val_docs = make_docs(7, seed=11)
        self.write("valid.jsonl", "".join(json.dumps({"text": d}) + "\n" for d in val_docs))
        vprefix = self.path("owt_valid")
        self.prepare(self.path("valid.jsonl"), "--out", vprefix, "--tokenizer",
                     "hf:" + prefix + "_tokenizer.json", "--val-fraction", "1")
        self.assertEqual(glob.glob(vprefix + "_train*"), [])
        got = read_tokens([vprefix + "_val.h5"]).tolist()
        tok = tokenizers.Tokenizer.from_file(prefix + "_tokenizer.json")
        eos = tok.token_to_id("<|endoftext|>")
        want = []
        for d in val_docs:
            want += tok.encode(d, add_special_tokens=False).ids + [eos]
        self.assertEqual(got, want)
        # the same decode table as the training file's, so the trainer accepts the pair
        self.assertEqual(decode_table(vprefix + "_val.h5"), decode_table(prefix + "_train.h5"))
        # hf:FOLDER (a model's folder, as import_hf.py's HF_DIR) reads its tokenizer.json,
        # and --out may name a directory that does not exist yet (issue 65, item 5)
        model_dir = self.path("model")
        os.makedirs(model_dir)
        shutil.copyfile(prefix + "_tokenizer.json", os.path.join(model_dir, "tokenizer.json"))
        fprefix = self.path("new/dir/owt_valid")
        self.prepare(self.path("valid.jsonl"), "--out", fprefix, "--tokenizer", "hf:" + model_dir,
                     "--val-fraction", "1")
        self.assertEqual(read_tokens([fprefix + "_val.h5"]).tolist(), want)
        self.assertEqual(attrs(vprefix + "_val.h5")[0]["tokenizer_sha256"],
                         attrs(prefix + "_train.h5")[0]["tokenizer_sha256"])

    def check_byte_level(self, prefix, got, tok, eos, eos_text, docs=None):
        """The decode table of a byte-level BPE gives back each document's bytes."""
        table = same_table([prefix + "_train.h5", prefix + "_val.h5"])
        self.assertEqual(len(table), tok.get_vocab_size())
        self.assertEqual(table[eos], eos_text.encode())
        self.assertEqual(detok(table, got),
                         "".join(d + eos_text for d in docs or self.docs).encode())
        # The single-character tokens are the 256 bytes, each once, as the
        # tokenizer's own byte-level mapping has them (some bytes never occur
        # in UTF-8: those are checked by being the ones left).
        from tokenizers import pre_tokenizers
        alphabet = pre_tokenizers.ByteLevel.alphabet()
        single = {c: table[tok.token_to_id(c)] for c in alphabet}
        self.assertEqual(sorted(single.values()), [bytes([b]) for b in range(256)])
        text = "".join(map(chr, range(0x800))) + "東京😀\uffff"
        mapped = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False) \
            .pre_tokenize_str(text)[0][0]
        self.assertEqual(b"".join(single[c] for c in mapped), text.encode())

    def test_hf_tokenizer_json(self):
        from tokenizers import models, pre_tokenizers, trainers
        tok = tokenizers.Tokenizer(models.BPE(unk_token="<unk>"))
        tok.pre_tokenizer = pre_tokenizers.Whitespace()
        tok.train_from_iterator(self.docs, trainers.BpeTrainer(
            vocab_size=300, special_tokens=["<unk>", "<s>", "</s>"], show_progress=False))
        path = self.path("tokenizer.json")
        tok.save(path)
        # A document that spells a special token is text, not a boundary.
        docs = self.docs + ["before </s> after"]
        self.write("c.jsonl", "".join(json.dumps({"text": d}) + "\n" for d in docs))
        prefix = self.path("hf")
        self.prepare(self.input, "--out", prefix, "--tokenizer", "hf:" + path,
                     "--val-fraction", "0")
        got, _ = self.stream(prefix)
        eos = tok.token_to_id("</s>")
        tok.encode_special_tokens = True
        want = []
        for d in docs:
            want += tok.encode(d, add_special_tokens=False).ids + [eos]
        self.assertEqual(got, want)
        self.assertEqual(got.count(eos), len(docs))
        a, _ = attrs(prefix + "_train.h5")
        self.assertEqual((a["eos_id"], a["tokenizer"], a["vocab_size"]),
                         (eos, "hf_tokenizer.json", tok.get_vocab_size()))
        self.assertTrue(os.path.exists(prefix + "_tokenizer.json"))
        # Not byte-level (Whitespace drops the spaces): each id decoded alone,
        # special tokens as their text.
        table = decode_table(prefix + "_train.h5")
        self.assertEqual(table, [tok.decode([i], skip_special_tokens=False).encode()
                                 for i in range(tok.get_vocab_size())])
        self.assertEqual((table[eos], table[tok.token_to_id("<unk>")]), (b"</s>", b"<unk>"))
        r = self.prepare(self.input, "--out", prefix, "--tokenizer", "hf:" + path,
                         "--eos-token", "<|eot|>", ok=False)
        self.assertIn("--eos-token <|eot|> is not in its vocabulary", r.stderr)

    def test_hf_byte_level_like_gpt2(self):
        from tokenizers import decoders, models, pre_tokenizers, trainers
        tok = tokenizers.Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        tok.train_from_iterator(self.docs, trainers.BpeTrainer(
            vocab_size=350, special_tokens=["<pad>"], show_progress=False,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
        # Added after training, as model files often have them: the end of
        # text, and a token that is not special (matched in the text, so the
        # documents spelling it hold its id).
        tok.add_special_tokens(["</s>"])
        tok.add_tokens(["naïve café"])
        path = self.path("gpt2ish.json")
        tok.save(path)
        docs = self.docs + ["before </s> and <pad> after", "un naïve café\n"]
        self.write("c.jsonl", "".join(json.dumps({"text": d}) + "\n" for d in docs))
        prefix = self.path("hfb")
        self.prepare(self.input, "--out", prefix, "--tokenizer", "hf:" + path)
        got, _ = self.stream(prefix)
        eos, cafe = tok.token_to_id("</s>"), tok.token_to_id("naïve café")
        self.assertIn(cafe, got)
        self.assertEqual(got.count(eos), len(docs))
        self.check_byte_level(prefix, got, tok, eos, "</s>", docs)
        table = decode_table(prefix + "_val.h5")
        self.assertEqual((table[tok.token_to_id("<pad>")], table[cafe]),
                         (b"<pad>", "naïve café".encode()))

    def test_tiktoken_from_a_file(self):
        prefix = self.path("tik")
        self.prepare(self.input, "--out", prefix, *self.tik("--val-fraction", "0"))
        got, _ = self.stream(prefix)
        self.assertEqual(got, self.expected(self.docs))
        a, dtype = attrs(prefix + "_train.h5")
        self.assertEqual((a["vocab_size"], a["eos_id"], a["tokenizer"], dtype),
                         (50257, 50256, "tiktoken:gpt2:tik_tokenizer.tiktoken", np.uint16))
        table = decode_table(prefix + "_train.h5")
        ranks = test_ranks()
        self.assertEqual(table[:len(ranks)], sorted(ranks, key=ranks.get))
        # Ranks no token has are empty; the end of text is its text.
        self.assertEqual(set(table[len(ranks):50256]), {b""})
        self.assertEqual(table[50256], b"<|endoftext|>")
        self.assertEqual(detok(table, got), "".join(d + "<|endoftext|>"
                                                    for d in self.docs).encode())
        # cl100k_base's end of text is 100257: the tokens need uint32.
        prefix = self.path("cl")
        self.prepare(self.input, "--out", prefix, "--tokenizer", "tiktoken:cl100k_base",
                     "--tiktoken-file", self.ranks, "--val-fraction", "0")
        a, dtype = attrs(prefix + "_train.h5")
        self.assertEqual((a["eos_id"], dtype), (100257, np.uint32))
        got = self.stream(prefix)[0]
        self.assertEqual(got.count(100257), len(self.docs))
        table = decode_table(prefix + "_train.h5")
        self.assertEqual(len(table), a["vocab_size"])
        self.assertEqual((table[100257], table[-1]), (b"<|endoftext|>", b"<|endofprompt|>"))
        self.assertEqual(detok(table, got), "".join(d + "<|endoftext|>"
                                                    for d in self.docs).encode())


class Sharding(Base):
    def setUp(self):
        super().setUp()
        self.docs = make_docs(600, seed=8)
        for i in range(3):
            part = self.docs[i * 200:(i + 1) * 200]
            self.write(f"part{i}.jsonl.gz", "".join(json.dumps({"text": d}) + "\n" for d in part))
        self.args = [self.path("part*.jsonl.gz"), *self.tik("--shard-tokens", "5K",
                     "--val-tokens", "2000", "--batch-bytes", "4000")]

    def run_to(self, prefix, *extra):
        return self.prepare(*self.args, "--out", prefix, *extra)

    def test_shards_are_one_stream_whatever_the_workers(self):
        self.run_to(self.path("w1"), "--workers", "1")
        self.run_to(self.path("w4"), "--workers", "4")
        got1, train1 = self.stream(self.path("w1"))
        got4, train4 = self.stream(self.path("w4"))
        self.assertEqual(got1, self.expected(self.docs))
        self.assertEqual(got4, got1)
        self.assertEqual([os.path.basename(p)[3:] for p in train4],
                         [os.path.basename(p)[3:] for p in train1])
        self.assertEqual(os.path.basename(train1[0]), "w1_train_000000.h5")
        sizes = [len(read_tokens([p])) for p in train1]
        self.assertGreater(len(sizes), 3)
        self.assertTrue(all(s >= 5000 for s in sizes[:-1]), sizes)
        for p in train1 + [self.path("w1_val.h5")]:
            # Every file ends with a document.
            self.assertEqual(read_tokens([p])[-1], 50256, p)
        val = read_tokens([self.path("w1_val.h5")])
        self.assertGreaterEqual(len(val), 2000)
        # Every shard and the val file hold the same decode table, and it gives
        # back the documents.
        table = same_table(train1 + [self.path("w1_val.h5")])
        self.assertEqual(same_table(train4), table)
        self.assertEqual(detok(table, got1), "".join(d + "<|endoftext|>"
                                                     for d in self.docs).encode())
        # The smallest run of whole documents at the end: without its first one,
        # it would hold fewer than 2000 tokens.
        first_end = list(val).index(50256) + 1
        self.assertLess(len(val) - first_end, 2000)
        with open(self.path("w1_manifest.json")) as f:
            m = json.load(f)
        self.assertTrue(m["done"])
        self.assertEqual([s["file"] for s in m["shards"]], [os.path.basename(p) for p in train1])

    def test_resume_after_an_interruption(self):
        ref = self.path("ref")
        self.run_to(ref, "--workers", "1")
        want, ref_train = self.stream(ref)

        # As if killed while writing shard 3: shards 0-1 listed, shard 2 renamed
        # but not yet listed, shard 3 half written.
        prefix = self.path("cut")
        for p in glob.glob(ref + "_*"):
            shutil.copy(p, prefix + os.path.basename(p)[3:])
        with open(prefix + "_manifest.json") as f:
            m = json.load(f)
        for s in m["shards"]:
            s["file"] = "cut" + s["file"][3:]
        m["shards"], m["done"], m["val"] = m["shards"][:2], False, None
        with open(prefix + "_manifest.json", "w") as f:
            json.dump(m, f)
        self.assertGreater(len(ref_train), 4)
        for p in sorted(glob.glob(prefix + "_train_*.h5"))[4:] + [prefix + "_val.h5"]:
            os.remove(p)
        os.rename(prefix + "_train_000003.h5", prefix + "_train_000003.h5.tmp")
        with open(prefix + "_train_000002.h5", "r+b") as f:
            f.truncate(100)  # not listed: must be written again

        r = self.prepare(*self.args, "--out", prefix, ok=False)
        self.assertEqual(r.returncode, 2)
        self.assertIn("pass --resume", r.stderr)
        r = self.prepare(*self.args, "--out", prefix, "--resume", "--workers", "2")
        self.assertIn("resuming after 2 complete shards", r.stdout)
        got, train = self.stream(prefix)
        self.assertEqual(got, want)
        self.assertEqual(len(train), len(ref_train))
        self.assertEqual(same_table(train + [prefix + "_val.h5"]),
                         decode_table(ref_train[0]))
        self.assertEqual(glob.glob(prefix + "*.tmp"), [])
        r = self.prepare(*self.args, "--out", prefix, "--resume")
        self.assertIn("nothing to do", r.stdout)
        r = self.prepare(*self.args[:-2], "--batch-bytes", "4000", "--out", prefix, "--resume",
                         "--val-tokens", "3000", ok=False)
        self.assertIn("val_tokens differ", r.stderr)

    def test_resume_after_kill(self):
        # A real SIGKILL once the first shard is listed; the same result after --resume.
        docs = make_docs(4000, seed=9)
        self.write("big.jsonl", "".join(json.dumps({"text": d}) + "\n" for d in docs))
        args = [self.path("big.jsonl"), *self.tik("--shard-tokens", "20K", "--val-tokens",
                "1000", "--batch-bytes", "2000", "--workers", "1")]
        prefix = self.path("kill")
        proc = subprocess.Popen([sys.executable, SCRIPT, "text", *args, "--out", prefix],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        killed = False
        deadline = time.time() + 60
        while proc.poll() is None and time.time() < deadline:
            try:
                with open(prefix + "_manifest.json") as f:
                    if json.load(f)["shards"]:
                        proc.send_signal(signal.SIGKILL)
                        killed = True
                        break
            except (OSError, ValueError):
                pass
            time.sleep(0.005)
        proc.wait()
        r = self.prepare(*args, "--out", prefix, "--resume")
        if killed:
            self.assertIn("resuming after", r.stdout)
        got, _ = self.stream(prefix)
        self.assertEqual(got, self.expected(docs))
        if not killed:
            print("note: the run ended before it could be killed; resume checked on a whole run")

    def interrupt(self, args, prefix, group):
        """SIGINT once this run has listed a shard of its own, to the process
        group as Ctrl-C sends it or to the parent alone: (exit code, stderr),
        or None when the run ended first."""
        def listed():
            try:
                with open(prefix + "_manifest.json") as f:
                    return len(json.load(f)["shards"])
            except (OSError, ValueError):
                return 0
        start = listed()
        proc = subprocess.Popen([sys.executable, SCRIPT, "text", *args], text=True,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                start_new_session=True)
        while proc.poll() is None and listed() <= start:
            time.sleep(0.002)
        if proc.poll() is not None:
            return None
        os.killpg(proc.pid, signal.SIGINT) if group else proc.send_signal(signal.SIGINT)
        try:
            err = proc.communicate(timeout=20)[1]
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            return -9, proc.communicate()[1] + "(hung after the interrupt)"
        return proc.returncode, err

    def test_interrupt_is_one_line_and_resume_counts_this_run(self):
        docs = make_docs(6000, seed=10)
        self.write("big.jsonl", "".join(json.dumps({"text": d}) + "\n" for d in docs))
        prefix = self.path("int")
        args = [self.path("big.jsonl"), "--out", prefix, *self.tik("--shard-tokens", "50K",
                "--val-tokens", "1000", "--batch-bytes", "4000", "--workers", "2")]
        # Worker tracebacks came and went with timing: three interrupts, the
        # last two of resumed runs.
        for i, group in enumerate([True, False, True]):
            r = self.interrupt(args + ["--resume"] * (i > 0), prefix, group)
            if r is None:
                print("note: the run ended before it could be interrupted")
                return
            with self.subTest(interrupt=i, to="group" if group else "parent"):
                self.assertNotIn("Traceback", r[1])
                # Only the tool's lines (progress, if slow) and one error.
                self.assertEqual((r[0], [ln for ln in r[1].splitlines() if "error" in ln
                                         or not ln.startswith("prepare_data: ")]),
                                 (130, ["prepare_data: error: interrupted; with "
                                        "--shard-tokens, --resume continues"]), r[1])
            if r[0] == -9:
                break
        with open(prefix + "_manifest.json") as f:
            before = {s["file"]: s["tokens"] for s in json.load(f)["shards"]}
        done = self.prepare(*args, "--resume").stdout.strip().splitlines()[-1]
        new = [p for p in sorted(glob.glob(prefix + "_train_*.h5"))
               if os.path.basename(p) not in before]
        m = re.search(r"; train ([\d,]+) tokens in (\d+) files?", done)
        self.assertEqual((m[1], int(m[2])), (f"{len(read_tokens(new)):,}", len(new)), done)
        self.assertIn(f"(plus {len(before)} file{'s' * (len(before) != 1)} of "
                      f"{sum(before.values()):,} tokens from before)", done)
        self.assertEqual(self.stream(prefix)[0], self.expected(docs))


class Errors(Base):
    def fails(self, args, *needles):
        r = self.prepare(*args, ok=False)
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertEqual(r.stdout, "")
        self.assertTrue(r.stderr.startswith("prepare_data: error: "), r.stderr)
        self.assertEqual(r.stderr.count("\n"), 1, r.stderr)
        for n in needles:
            self.assertIn(n, r.stderr)

    def test_one_line_each(self):
        out = ["--out", self.path("x")]
        good = self.write("good.txt", "some text\n" * 50)
        self.fails([self.path("absent.txt"), *out], "absent.txt", "no such file")
        self.fails([self.path("none_*.txt"), *out], "none_*.txt", "matches no file")
        self.fails([self.dir, *out], "is a directory", "glob")
        self.fails([self.write("bad.jsonl", '{"text": "a"}\n{"text": \n'), *out],
                   "bad.jsonl' line 2", "not JSON")
        self.fails([self.write("field.jsonl", '{"body": "a"}\n'), *out],
                   "field.jsonl' line 1", "no field 'text'", "--text-field")
        self.fails([self.write("num.jsonl", '{"text": 5}\n'), *out], "is a int, not a string")
        pq.write_table(pa.table({"content": ["a"]}), self.path("t.parquet"))
        self.fails([self.path("t.parquet"), *out], "no column 'text'", "content", "--text-field")
        self.fails([self.write("bad.txt", b"fine\n\xff\xfe bad"), *out, *self.tik()],
                   "bad.txt' byte 0: byte 5", "--utf8-errors replace")
        self.prepare(self.path("bad.txt"), *out, *self.tik("--utf8-errors", "replace",
                     "--val-fraction", "0"))
        with open(self.write("cut.txt.gz", "x" * 10000), "r+b") as f:
            f.truncate(30)
        self.fails([self.path("cut.txt.gz"), *out], "cut.txt.gz", "decompress")
        self.fails([self.write("t.parquet.gz", "x"), *out], "decompress the file first")
        self.fails([good, *out, "--tokenizer", "sentencepiece"], "--tokenizer sentencepiece",
                   "tiktoken:NAME")
        self.fails([good, *out, "--tokenizer", "hf:" + self.path("no.json")], "no such file")
        self.fails([good, *out, "--tokenizer", "hf:" + good], "not a Hugging Face tokenizer")
        self.fails([good, *out, "--tokenizer", "tiktoken:gpt5", "--tiktoken-file", self.ranks],
                   "unknown encoding")
        self.fails([good, *out, "--tokenizer", "tiktoken:gpt2", "--tiktoken-file",
                    self.path("no.tiktoken")], "--tiktoken-file", "no such file")
        self.fails([good, *out, "--tokenizer", "tiktoken:gpt2", "--tiktoken-file", good],
                   "not a .tiktoken file")
        self.fails([good, *out, "--resume"], "--resume needs --shard-tokens")
        self.fails([good, *out, "--val-tokens", "10", "--val-fraction", "0.1"], "not both")
        self.fails([good, *out, "--val-fraction", "1", "--shard-tokens", "100"],
                   "--val-fraction 1", "leave out --shard-tokens")
        self.fails([good, *out, "--val-fraction", "1.5"], "--val-fraction", "[0, 1]")
        self.fails([good, *out, "--bpe-train-bytes", "1G"], "--bpe-train-bytes is for --tokenizer bpe")
        self.fails([good, *out, *self.tik("--doc-separator", "<|endoftext|>", "--doc-per-line")],
                   "--doc-separator", "leave out --doc-per-line")
        self.fails([good, *out, "--doc-separator", "<|endoftext|>"], "--doc-separator",
                   "--tokenizer byte has not")
        self.fails([good, *out, *self.tik("--doc-separator", "")], "--doc-separator is empty")
        self.fails([self.write("docs.jsonl", '{"text": "a"}\n'), *out, *self.tik("--doc-separator", "<|endoftext|>")],
                   "--doc-separator", "JSONL or Parquet")
        self.fails([good, *out, "--shard-tokens", "1X"], "--shard-tokens", "100M")
        self.fails([good, *out, "--val-tokens", "10K"], "--val-tokens")
        self.fails([good, "--out", os.path.join(good, "x")], "--out", "cannot make the directory")
        os.makedirs(self.path("empty_model"))
        self.fails([good, *out, "--tokenizer", "hf:" + self.path("empty_model")],
                   "a folder without tokenizer.json")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    SCRIPT = os.path.abspath(sys.argv.pop(1))
    unittest.main(verbosity=2)
