#!/usr/bin/env python3
"""CTest for tools/prepare_data.py's `import` command: token files of other
trainers into fsdptrain's (tests/data/test_prepare_data.cpp checks that the
trainer opens them).

  test_prepare_import.py PREPARE_DATA_PY

Inputs are written here the way each project writes them: numpy's memmap,
tofile and np.save (nanoGPT, CS336, llm.c's data_common.py all use numpy);
Megatron's .bin/.idx by its documented layout and, when $FSDP_TORCH_PYTHON
names a python with torch and megatron-core, by megatron-core's own
IndexedDatasetBuilder (else that case says skipped). Every case compares
the whole token stream and checks where files are cut.
Exits 77 (skipped) when h5py or numpy is missing.
"""

import base64
import glob
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest

try:
    import h5py
    import numpy as np
except ImportError as e:
    print(f"SKIP: {e} (tools/setup.sh installs the packages)")
    sys.exit(77)

SCRIPT = None
EOT = 50256


def gpt2_like_docs(n, seed, vocab=EOT, max_len=300):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, vocab, int(rng.integers(1, max_len))) for _ in range(n)]


def megatron_write(prefix, docs, dtype):
    """A Megatron indexed dataset by its layout (token_files.py's docstring):
    each document a list of sequences."""
    seqs = [s for d in docs for s in d]
    lengths = np.array([len(s) for s in seqs], np.int32)
    pointers = np.concatenate(([0], np.cumsum(lengths)[:-1])).astype(np.int64) * \
        np.dtype(dtype).itemsize
    doc_index = np.concatenate(([0], np.cumsum([len(d) for d in docs]))).astype(np.int64)
    code = {np.uint16: 8, np.int32: 4, np.int64: 5}[dtype]
    with open(prefix + ".bin", "wb") as f:
        for s in seqs:
            f.write(np.asarray(s, dtype).tobytes())
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, code, len(seqs), len(doc_index)))
        f.write(lengths.tobytes() + pointers.astype("<i8").tobytes() + doc_index.tobytes())


class Base(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="prepare_import_test_")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def path(self, name):
        return os.path.join(self.dir, name)

    def run_import(self, *args, ok=True):
        r = subprocess.run([sys.executable, SCRIPT, "import", *map(str, args)],
                           capture_output=True, text=True)
        if ok:
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        return r

    def files(self, prefix):
        train = sorted(glob.glob(prefix + "_train*.h5"))
        val = [prefix + "_val.h5"] if os.path.exists(prefix + "_val.h5") else []
        return train, val

    def read(self, paths):
        out = []
        for p in paths:
            with h5py.File(p, "r") as f:
                out.append(f["tokens"][:])
        return out

    def stream(self, prefix):
        train, val = self.files(prefix)
        return np.concatenate(self.read(train + val)).astype(np.int64)

    def attrs(self, path):
        with h5py.File(path, "r") as f:
            a = {k: (v.decode() if isinstance(v, bytes) else v)
                 for k, v in f["tokens"].attrs.items()}
            return a, f["tokens"].dtype, sorted(f.keys())

    def assert_cut_at(self, prefix, ends):
        """Every file but the last ends at one of `ends` (stream positions)."""
        train, val = self.files(prefix)
        sizes = [len(t) for t in self.read(train + val)]
        cuts = np.cumsum(sizes)[:-1]
        self.assertTrue(set(cuts.tolist()) <= set(np.asarray(ends).tolist()),
                        (sizes, sorted(set(cuts.tolist()) - set(np.asarray(ends).tolist()))))
        return sizes


class RawFormats(Base):
    def test_nanogpt_bin_cut_after_end_of_text(self):
        docs = [np.append(d, EOT) for d in gpt2_like_docs(400, 0)]
        flat = np.concatenate(docs).astype(np.uint16)
        # nanoGPT's prepare.py: a uint16 memmap filled in batches.
        m = np.memmap(self.path("train.bin"), dtype=np.uint16, mode="w+", shape=(len(flat),))
        m[:] = flat
        m.flush()
        del m
        out = self.path("nano")
        self.run_import("raw", self.path("train.bin"), "--out", out, "--vocab-size", 50257,
                        "--eos-id", EOT, "--shard-tokens", 12000, "--val-tokens", 5000,
                        "--chunk-tokens", 777)
        self.assertEqual(self.stream(out).tolist(), flat.tolist())
        sizes = self.assert_cut_at(out, np.cumsum([len(d) for d in docs]))
        self.assertGreater(len(sizes), 4)
        # The validation split: the fewest whole documents holding 5000 tokens.
        self.assertGreaterEqual(sizes[-1], 5000)
        ends = np.cumsum([len(d) for d in docs])
        first_val_doc = int(np.searchsorted(ends, len(flat) - sizes[-1], side="right"))
        self.assertLess(sizes[-1] - len(docs[first_val_doc]), 5000)
        a, dtype, keys = self.attrs(out + "_val.h5")
        self.assertEqual((a["vocab_size"], a["eos_id"], dtype, keys),
                         (50257, EOT, np.uint16, ["tokens"]))

    def test_raw_uint32_without_end_of_text_cuts_in_blocks(self):
        rng = np.random.default_rng(1)
        flat = rng.integers(0, 100_000, 300_001).astype(np.uint32)
        flat.tofile(self.path("big.bin"))
        out = self.path("u32")
        self.run_import("raw", self.path("big.bin"), "--out", out, "--vocab-size", 100_000,
                        "--dtype", "uint32", "--shard-tokens", 100_000, "--val-fraction", 0.1,
                        "--chunk-tokens", 50_000)
        self.assertEqual(self.stream(out).tolist(), flat.tolist())
        train, val = self.files(out)
        sizes = [len(t) for t in self.read(train + val)]
        self.assertEqual(sizes[-1], round(0.1 * len(flat)))  # exact, as --val-fraction says
        self.assertTrue(all(s % 65536 == 0 for s in sizes[:-2]), sizes)
        self.assertEqual(self.attrs(val[0])[1], np.uint32)
        self.assertNotIn("eos_id", self.attrs(val[0])[0])

    def test_a_wrong_eos_id_still_cuts_now_and_then(self):
        # --eos-id 7 never occurs: no document ends, so after 8 chunks without
        # one a cut is made anyway (memory stays bounded), and the stream holds.
        flat = (np.arange(50_000) % 5).astype(np.uint16)
        flat.tofile(self.path("n.bin"))
        out = self.path("n")
        self.run_import("raw", self.path("n.bin"), "--out", out, "--vocab-size", 10, "--eos-id", 7,
                        "--shard-tokens", 10_000, "--val-tokens", 5000, "--chunk-tokens", 1000)
        self.assertEqual(self.stream(out).tolist(), flat.tolist())
        train, val = self.files(out)
        sizes = [len(t) for t in self.read(train + val)]
        self.assertTrue(all(s % 1000 == 0 for s in sizes) and len(sizes) > 3, sizes)
        self.assertLessEqual(sizes[-1], 5000 + 8000)

    def test_npy_of_any_integer_type_and_byte_order(self):
        flat = np.concatenate([np.append(d, EOT) for d in gpt2_like_docs(50, 2)])
        expected = None
        for i, dtype in enumerate(["<i8", "<u2", ">i4", "<u4", "<i2"]):
            arr = flat.astype(dtype) if dtype != "<i2" else (flat % 30000).astype(dtype)
            np.save(self.path(f"a{i}.npy"), arr)
            out = self.path(f"npy{i}")
            self.run_import("npy", self.path(f"a{i}.npy"), "--out", out, "--vocab-size", 50257,
                            "--val-fraction", 0.2, "--chunk-tokens", 1000)
            got = self.stream(out)
            self.assertEqual(got.tolist(), arr.astype(np.int64).tolist(), dtype)
            if dtype != "<i2":
                expected = got if expected is None else expected
                self.assertEqual(got.tolist(), expected.tolist())

    def test_llmc_versions_and_several_shards(self):
        docs = gpt2_like_docs(300, 3)
        # llm.c's data_common.write_datafile: eot BEFORE each document, then shards.
        flat = np.concatenate([np.insert(d, 0, EOT) for d in docs])
        paths = []
        for i, part in enumerate(np.array_split(flat, 3)):
            header = np.zeros(256, np.int32)
            header[:3] = (20240520, 1, len(part))
            paths.append(self.path(f"fineweb_train_{i:06d}.bin"))
            with open(paths[-1], "wb") as f:
                f.write(header.tobytes())
                f.write(part.astype(np.uint16).tobytes())
        out = self.path("llmc")
        self.run_import("llmc", self.path("fineweb_train_*.bin"), "--out", out,
                        "--vocab-size", 50257, "--eos-id", EOT, "--shard-tokens", 10_000,
                        "--val-tokens", 3000, "--chunk-tokens", 999)
        self.assertEqual(self.stream(out).tolist(), flat.tolist())
        self.assert_cut_at(out, np.flatnonzero(flat == EOT) + 1)

        header = np.zeros(256, np.int32)
        header[:3] = (20240520, 2, 1000)
        big = np.arange(1000, dtype=np.uint32) * 97 + 60000
        with open(self.path("v2.bin"), "wb") as f:
            f.write(header.tobytes() + big.tobytes())
        self.run_import("llmc", self.path("v2.bin"), "--out", self.path("v2"),
                        "--vocab-size", 200_000)
        self.assertEqual(self.stream(self.path("v2")).tolist(), big.tolist())
        self.assertEqual(self.attrs(self.path("v2_train.h5"))[1], np.uint32)

    def test_array_the_older_form_guesses_the_format(self):
        flat = np.arange(5000, dtype=np.uint16) % 300
        np.save(self.path("t.npy"), flat)
        flat.tofile(self.path("t.bin"))
        for name in ("t.npy", "t.bin"):
            r = subprocess.run([sys.executable, SCRIPT, "array", self.path(name), "--out",
                                self.path("arr"), "--vocab-size", "300"], capture_output=True,
                               text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(self.stream(self.path("arr")).tolist(), flat.tolist())


class Megatron(Base):
    def docs(self, n, seed, vocab, eos):
        """Documents of 1-3 sequences (Megatron's --split-sentences), every
        third ending in eos (--append-eod), some empty."""
        rng = np.random.default_rng(seed)
        docs = []
        for i in range(n):
            seqs = [rng.integers(0, eos, int(rng.integers(1, 40))) for _ in range(rng.integers(1, 4))]
            if i % 3 == 0:
                seqs[-1] = np.append(seqs[-1], eos)
            docs.append(seqs if i % 17 != 5 else [])
        return docs

    def expected(self, docs, eos):
        """The stream with --append-eos, and each document's end in it."""
        out, ends = [], []
        for d in docs:
            toks = [t for s in d for t in s]
            if toks and toks[-1] != eos:
                toks.append(eos)
            out += toks
            ends.append(len(out))
        return out, ends

    def test_documents_cut_and_end_of_text_appended(self):
        for dtype, vocab in ((np.uint16, 1000), (np.int32, 100_000)):
            eos = vocab - 1
            docs = self.docs(600, 4, vocab, eos)
            prefix = self.path(f"meg_{dtype.__name__}_text_document")
            megatron_write(prefix, docs, dtype)
            plain = [int(t) for d in docs for s in d for t in s]
            out = self.path(f"plain_{dtype.__name__}")
            r = self.run_import("megatron", prefix, "--out", out, "--vocab-size", vocab,
                                "--eos-id", eos, "--val-fraction", 0.1, "--chunk-tokens", 100)
            self.assertEqual(self.stream(out).tolist(), plain)
            lacking = sum(1 for d in docs if d and d[-1][-1] != eos)
            self.assertIn(f"{lacking:,} documents do not end in end-of-text", r.stdout)

            out = self.path(f"eos_{dtype.__name__}")
            r = self.run_import("megatron", prefix + ".bin", "--out", out, "--vocab-size", vocab,
                                "--eos-id", eos, "--append-eos", "--shard-tokens", 3000,
                                "--val-tokens", 1000, "--chunk-tokens", 100)
            want, ends = self.expected(docs, eos)
            self.assertEqual(self.stream(out).tolist(), want)
            self.assertGreater(len(self.assert_cut_at(out, ends)), 3)
            self.assertIn(f"{lacking:,} documents got an end-of-text token", r.stdout)
            self.assertEqual(self.attrs(out + "_val.h5")[1],
                             np.uint16 if vocab <= 65536 else np.uint32)

    def test_with_megatron_cores_own_builder(self):
        py = os.environ.get("FSDP_TORCH_PYTHON")
        probe = py and subprocess.run(
            [py, "-c", "import megatron.core.datasets.indexed_dataset"], capture_output=True)
        if not probe or probe.returncode:
            self.skipTest("skipped: set FSDP_TORCH_PYTHON to a python with torch and "
                          "megatron-core (pip install megatron-core)")
        prefix = self.path("mc_text_document")
        # Megatron's tools/preprocess_data.py in miniature: add_item per
        # sentence, end_document per document; add_document for whole ones.
        writer = textwrap.dedent(f"""
            import json, numpy, torch
            from megatron.core.datasets.indexed_dataset import (IndexedDataset,
                IndexedDatasetBuilder)
            rng = numpy.random.default_rng(5)
            b = IndexedDatasetBuilder({prefix + '.bin'!r}, dtype=numpy.uint16)
            docs = []
            for d in range(300):
                seqs = [rng.integers(0, 999, int(rng.integers(1, 50))).tolist()
                        for _ in range(int(rng.integers(1, 4)))]
                if d % 2:
                    seqs[-1].append(999)
                if d % 5 == 0:
                    b.add_document(torch.tensor([t for s in seqs for t in s]),
                                   [len(s) for s in seqs])
                else:
                    for s in seqs:
                        b.add_item(torch.tensor(s))
                    b.end_document()
                docs.append(seqs)
            b.finalize({prefix + '.idx'!r})
            assert len(IndexedDataset({prefix!r}).document_indices) == len(docs) + 1
            print(json.dumps(docs))
        """)
        r = subprocess.run([py, "-c", writer], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        docs = json.loads(r.stdout.strip().splitlines()[-1])
        out = self.path("mc")
        self.run_import("megatron", prefix, "--out", out, "--vocab-size", 1000, "--eos-id", 999,
                        "--append-eos", "--shard-tokens", 2000, "--val-tokens", 500,
                        "--chunk-tokens", 333)
        want, ends = self.expected(docs, 999)
        self.assertEqual(self.stream(out).tolist(), want)
        self.assert_cut_at(out, ends)


class Tokenizer(Base):
    def test_tokenizer_recorded_as_text_records_it(self):
        try:
            import tiktoken  # noqa: F401
        except ImportError:
            self.skipTest("skipped: tiktoken missing")
        ranks = self.path("ranks.tiktoken")
        with open(ranks, "wb") as f:
            for b in range(256):
                f.write(base64.b64encode(bytes([b])) + b" %d\n" % b)
        with open(self.path("doc.txt"), "w") as f:
            f.write("some words to make a table\n" * 20)
        tik = ["--tokenizer", "tiktoken:gpt2", "--tiktoken-file", ranks]
        r = subprocess.run([sys.executable, SCRIPT, "text", self.path("doc.txt"), "--out",
                            self.path("txt"), *tik], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        flat = np.concatenate([np.append(d, EOT) for d in gpt2_like_docs(30, 6, vocab=256)])
        flat.astype(np.uint16).tofile(self.path("t.bin"))
        out = self.path("tok")
        self.run_import("raw", self.path("t.bin"), "--out", out, *tik, "--val-fraction", 0.2)
        a, _, keys = self.attrs(out + "_train.h5")
        b, _, keys_text = self.attrs(self.path("txt_train.h5"))
        self.assertEqual((a["vocab_size"], a["eos_id"]), (EOT + 1, EOT))
        for k in ("tokenizer_sha256", "text_encoder"):
            self.assertEqual(a[k], b[k], k)
        self.assertEqual(a["tokenizer"], "tiktoken:gpt2:tok_tokenizer.tiktoken")
        self.assertEqual(keys, keys_text)
        with h5py.File(out + "_val.h5") as f, h5py.File(self.path("txt_val.h5")) as g:
            self.assertTrue(np.array_equal(f["token_bytes"][:], g["token_bytes"][:]))
        self.assertEqual(self.stream(out).tolist(), flat.tolist())


class Resume(Base):
    def interrupt(self, prefix, keep):
        """What an interrupted run leaves: the manifest listing `keep` shards."""
        with open(prefix + "_manifest.json") as f:
            m = json.load(f)
        for s in m["shards"][keep:]:
            os.remove(os.path.join(self.dir, s["file"]))
        os.remove(prefix + "_val.h5")
        m["shards"], m["val"], m["done"] = m["shards"][:keep], None, False
        with open(prefix + "_manifest.json", "w") as f:
            json.dump(m, f)

    def check_resume(self, args, prefix):
        self.run_import(*args)
        before = [t.tolist() for t in self.read(sum(self.files(prefix), []))]
        self.interrupt(prefix, 2)
        r = self.run_import(*args, "--resume")
        self.assertIn("resuming after 2 complete shards", r.stdout)
        self.assertEqual([t.tolist() for t in self.read(sum(self.files(prefix), []))], before)
        self.assertIn("nothing to do", self.run_import(*args, "--resume").stdout)
        r = self.run_import(*args[:-2], "--vocab-size", 70000, "--resume", ok=False)
        self.assertIn("other settings (vocab_size differ)", r.stderr)

    def test_resume_counts_tokens_or_documents(self):
        flat = np.concatenate([np.append(d, EOT) for d in gpt2_like_docs(300, 7)])
        flat.astype(np.uint16).tofile(self.path("r.bin"))
        self.check_resume(["raw", self.path("r.bin"), "--out", self.path("r"), "--eos-id", EOT,
                           "--shard-tokens", 8000, "--val-tokens", 2000, "--chunk-tokens", 500,
                           "--vocab-size", 50257], self.path("r"))
        docs = Megatron.docs(self, 400, 8, 1000, 999)
        megatron_write(self.path("m_text_document"), docs, np.uint16)
        self.check_resume(["megatron", self.path("m_text_document"), "--out", self.path("m"),
                           "--eos-id", 999, "--append-eos", "--shard-tokens", 1500,
                           "--val-tokens", 500, "--chunk-tokens", 64, "--vocab-size", 1000],
                          self.path("m"))

    def test_ctrl_c_is_one_line_and_resume_finishes(self):
        flat = (np.arange(6_000_000, dtype=np.int64) * 7919 % 50257).astype(np.uint16)
        flat.tofile(self.path("c.bin"))
        args = ["raw", self.path("c.bin"), "--out", self.path("c"), "--vocab-size", "50257",
                "--eos-id", str(EOT), "--shard-tokens", "200000", "--chunk-tokens", "20000",
                "--val-tokens", "100000"]
        p = subprocess.Popen([sys.executable, SCRIPT, "import", *args], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while not glob.glob(self.path("c_train_000002.h5")) and time.monotonic() < deadline:
            time.sleep(0.01)
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=60)
        if p.returncode == 0:
            self.skipTest("skipped: the run ended before the interrupt reached it")
        self.assertEqual(p.returncode, 130, err)
        # Progress lines (every 5 s in a log; a loaded machine may show one), then the error alone.
        lines = [ln for ln in err.strip().splitlines()
                 if not re.match(r"prepare_data: [\d,]+ documents, ", ln)]
        self.assertEqual(lines, ["prepare_data: error: interrupted; with --shard-tokens, "
                                 "--resume continues"], err)
        self.assertFalse(glob.glob(self.path("c_*.tmp")))
        self.run_import(*args, "--resume")
        self.assertEqual(self.stream(self.path("c")).tolist(), flat.tolist())

    def test_interrupt_while_writing_the_manifest_leaves_the_old_one(self):
        # The Ctrl-C above can land inside Manifest.save: the old manifest must
        # stand and no .tmp stay behind (CI once found c_manifest.json.tmp).
        sys.path.insert(0, os.path.dirname(SCRIPT))
        from prep import shards
        from unittest import mock
        m = shards.Manifest(self.path("x"), {"vocab_size": 10})
        m.save()
        before = open(m.path).read()

        def interrupted(obj, f, **kw):
            f.write("{partial")
            raise KeyboardInterrupt

        with mock.patch.object(shards.json, "dump", interrupted), self.assertRaises(KeyboardInterrupt):
            m.save(done=True)
        self.assertEqual(open(m.path).read(), before)
        self.assertFalse(os.path.exists(m.path + ".tmp"))


class Errors(Base):
    def fails(self, args, *needles):
        r = self.run_import(*args, ok=False)
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertTrue(r.stderr.startswith("prepare_data: error: "), r.stderr)
        self.assertEqual(r.stderr.count("\n"), 1, r.stderr)
        for n in needles:
            self.assertIn(n, r.stderr)
        self.assertFalse([p for p in glob.glob(self.path("x*")) if p.endswith(".h5")])

    def test_one_line_each(self):
        out = ["--out", self.path("x")]
        np.array([1, 2, 3, 300, 4], np.uint16).tofile(self.path("t.bin"))
        np.save(self.path("neg.npy"), np.array([1, -2, 3]))
        np.save(self.path("f.npy"), np.array([1.0, 2.0]))
        np.save(self.path("m.npy"), np.zeros((2, 2), np.int32))
        self.fails(["raw", self.path("t.bin"), *out, "--vocab-size", 256],
                   "token 300 at offset 3 of", "t.bin", "outside [0, vocab_size 256)")
        self.fails(["npy", self.path("neg.npy"), *out, "--vocab-size", 256], "token -2 at offset 1")
        self.fails(["npy", self.path("f.npy"), *out, "--vocab-size", 256], "float64")
        self.fails(["npy", self.path("m.npy"), *out, "--vocab-size", 256], "2-D")
        self.fails(["raw", self.path("t.bin"), *out], "--vocab-size V")
        self.fails(["raw", self.path("t.bin"), *out, "--vocab-size", 500, "--append-eos"],
                   "--append-eos", "Megatron")
        self.fails(["npy", self.path("neg.npy"), *out, "--vocab-size", 500, "--dtype", "uint32"],
                   "--dtype is for raw")
        self.fails(["raw", self.path("t.bin"), *out, "--vocab-size", 500, "--eos-id", 500],
                   "--eos-id 500")
        self.fails(["raw", self.path("absent.bin"), *out, "--vocab-size", 500], "no such file")
        self.fails(["raw", self.path("t.bin"), *out, "--vocab-size", 500, "--tokenizer", "byte"],
                   "hf:PATH or tiktoken:NAME")
        with open(self.path("odd.bin"), "wb") as f:
            f.write(b"\x01\x00\x02")
        self.fails(["raw", self.path("odd.bin"), *out, "--vocab-size", 500], "3 bytes")
        header = np.zeros(256, np.int32)
        header[:3] = (20240520, 1, 10)
        with open(self.path("l.bin"), "wb") as f:
            f.write(header.tobytes() + np.arange(9, dtype=np.uint16).tobytes())
        self.fails(["llmc", self.path("l.bin"), *out, "--vocab-size", 500], "truncated")
        self.fails(["raw", self.path("l.bin"), *out, "--vocab-size", 500], "import it as llmc")
        self.fails(["llmc", self.path("t.bin"), *out, "--vocab-size", 500], "no llm.c header")

        docs = [[np.arange(5)], [np.arange(3), np.arange(4)]]
        megatron_write(self.path("g"), docs, np.uint16)
        self.fails(["megatron", self.path("g"), *out, "--vocab-size", 500, "--append-eos"],
                   "--append-eos needs the end-of-text id")
        with open(self.path("g.idx"), "ab") as f:  # sequence modes: multimodal
            f.write(b"\x00" * 3)
        self.fails(["megatron", self.path("g"), *out, "--vocab-size", 500], "multimodal")
        megatron_write(self.path("g"), docs, np.uint16)
        with open(self.path("g.bin"), "r+b") as f:
            f.truncate(20)
        self.fails(["megatron", self.path("g"), *out, "--vocab-size", 500], "g.bin", "truncated")
        megatron_write(self.path("g"), docs, np.uint16)
        with open(self.path("g.idx"), "r+b") as f:
            f.seek(34 + 4 * 3 + 8)  # the second sequence's pointer
            f.write(struct.pack("<q", 4))
        self.fails(["megatron", self.path("g"), *out, "--vocab-size", 500], "back to back")
        os.remove(self.path("g.idx"))
        self.fails(["megatron", self.path("g"), *out, "--vocab-size", 500], "no ", "g.idx")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    SCRIPT = os.path.abspath(sys.argv.pop(1))
    unittest.main(verbosity=2)
