"""The tokenizer of an exported model, as the files transformers reads
(tokenizer.json, tokenizer_config.json, and the ids in config.json), so that
AutoTokenizer.from_pretrained and pipeline("text-generation") work on
tools/export_hf.py's folder (issue 65: the export carried none).

Where it comes from: the token file the run trained on (the checkpoint's
`train-data`, its first file) or one named with export_hf.py --tokenizer
(a token file, or a tokenizer.json). A token file names its tokenizer in
the `tokenizer` attribute that tools/prepare_data.py writes:
- PREFIX_tokenizer.json (bpe, hf:): that file, beside the token file;
- byte: a byte-level tokenizer.json made here, each byte its own id (the
  GPT-2 byte alphabet, no merges), which is what the byte tokenizer is;
- tiktoken:NAME: not exported (no tokenizer.json of it here): the export
  says so and names --tokenizer.
The end-of-text id (`eos_id`) becomes eos_token_id and bos_token_id in
config.json and eos_token in tokenizer_config.json.
"""
import glob
import json
import os

import h5py


class NoTokenizer(Exception):
    """Why no tokenizer is exported: one line for the user."""


def train_data_of(config_text):
    """The first token file of the checkpoint's --train-data (a list or glob, each
    FILE[:/dataset]), or None."""
    for line in (config_text or "").splitlines():
        key, _, value = line.partition(" = ")
        if key.strip() == "train-data" and value.strip():
            first = value.strip().split(",")[0].split(":/")[0]
            matches = sorted(glob.glob(first))
            return matches[0] if matches else first
    return None


def byte_level_json():
    """The byte tokenizer as a tokenizer.json: byte b is id b."""
    from prep.encoders import gpt2_byte_to_unicode
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    b2u = gpt2_byte_to_unicode()
    tok = Tokenizer(models.BPE(vocab={b2u[b]: b for b in range(256)}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    return tok.to_str()


def from_token_file(path):
    """(tokenizer.json text, eos id or None) for the tokenizer a token file names."""
    try:
        with h5py.File(path, "r") as f:
            attrs = f["tokens"].attrs
            name = attrs.get("tokenizer")
            eos = int(attrs["eos_id"]) if "eos_id" in attrs else None
    except (OSError, KeyError, ValueError, TypeError, RuntimeError) as e:
        raise NoTokenizer(f"the token file '{path}' cannot be read ({e})")
    name = name.decode() if isinstance(name, bytes) else str(name or "")
    if name == "byte":
        return byte_level_json(), eos
    if name.endswith(".json"):
        beside = os.path.join(os.path.dirname(path), name)
        if not os.path.isfile(beside):
            raise NoTokenizer(f"the token file '{path}' names {name}, which is not beside it")
        with open(beside, encoding="utf-8") as f:
            return f.read(), eos
    raise NoTokenizer(f"the token file '{path}' was made with tokenizer '{name or '(none named)'}', "
                      "which has no tokenizer.json here")


def find(config_text, explicit=None):
    """(tokenizer.json text, eos id or None) from --tokenizer or the run's data."""
    if explicit and explicit.endswith(".json"):
        if not os.path.isfile(explicit):
            raise NoTokenizer("no such file")
        with open(explicit, encoding="utf-8") as f:
            return f.read(), None
    path = explicit or train_data_of(config_text)
    if not path:
        raise NoTokenizer("the checkpoint names no --train-data")
    if not os.path.isfile(path):
        raise NoTokenizer(f"the run's token file '{path}' is not here")
    return from_token_file(path)


def plan(text, eos_id, vocab_size, max_len):
    """Checks the tokenizer against the model before anything is written:
    (tokenizer_config.json's fields, config.json's ids, a line saying what)."""
    from tokenizers import Tokenizer
    try:
        tok = Tokenizer.from_str(text)
    except Exception as e:  # tokenizers raises a bare Exception for a bad file
        raise NoTokenizer(f"not a Hugging Face tokenizer.json ({e})")
    n = tok.get_vocab_size(with_added_tokens=True)
    if n > vocab_size:
        raise NoTokenizer(f"the tokenizer has {n} tokens, the model {vocab_size}")
    tcfg = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": max_len,
            "clean_up_tokenization_spaces": False}
    ids = {}
    if eos_id is not None:
        eos = tok.id_to_token(eos_id)
        if eos is None:
            raise NoTokenizer(f"the data's end-of-text id {eos_id} is not in the tokenizer")
        tcfg.update({"eos_token": eos, "bos_token": eos})
        ids = {"eos_token_id": eos_id, "bos_token_id": eos_id}
    said = f"tokenizer.json ({n} tokens{', end of text ' + repr(tcfg['eos_token']) if ids else ''})"
    return tcfg, ids, said


def save(outdir, text, tcfg):
    with open(os.path.join(outdir, "tokenizer.json"), "w", encoding="utf-8") as f:
        f.write(text)
    with open(os.path.join(outdir, "tokenizer_config.json"), "w") as f:
        json.dump(tcfg, f, indent=2)
        f.write("\n")
