#!/usr/bin/env python3
"""Exports an fsdptrain checkpoint's weights for Hugging Face-style loaders.

  export_hf.py CKPT.h5 OUTDIR [--tokenizer TOKENS.h5|tokenizer.json]

Writes OUTDIR/model.safetensors (float32) and OUTDIR/config.json, and the
run's tokenizer as transformers reads it (tokenizer.json,
tokenizer_config.json, eos/bos ids in config.json; tools/hf_tokenizer.py)
where the run's token file or --tokenizer gives one. The
optimizer moments are not exported. As the trainer does, it checks every
model tensor against the checksum saved with it first: a damaged or
truncated checkpoint is one error line and nothing is written.

Our model is a Llama-style pre-norm decoder plus QK-norm: an RMSNorm over
head_dim, with gains of shape [head_dim], applied to q and k per head before
RoPE. Plain Llama has no such gains; Qwen3 has exactly these, so the export
uses the Qwen3 layout (architectures ["Qwen3ForCausalLM"], model_type "qwen3"),
and a model trained with --qk-norm false Llama's ("LlamaForCausalLM", "llama").
Our RoPE already rotates the two halves of each head (the "rotate_half"
convention of these checkpoints), so q and k need no permutation. Linear
weights are [out, in] in both.

Names: tools/hf_names.py. With tied embeddings lm_head.weight is a copy of the embedding, so loaders
that ignore tie_word_embeddings (true in config.json) still find it.

config.json fields: vocab_size, hidden_size (d_model), intermediate_size
(d_ff), num_hidden_layers, num_attention_heads, num_key_value_heads,
head_dim, max_position_embeddings (max_seq_len), rms_norm_eps, rope_theta,
tie_word_embeddings, hidden_act "silu", attention_bias false, torch_dtype
"float32". A model trained with --logit-softcap, --relu2-mlp,
--value-residual, --unet-skips or --value-embeds is refused: these layouts
have no cap on the logits, a SwiGLU MLP only, attention over each layer's
own values (from its input alone), and layers that read only the layer
below. --z-loss and --document-mask shaped only the training and export.
"""

import argparse
import json
import os
import sys

import h5py
import numpy as np
from safetensors.numpy import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_names import hf_name  # noqa: E402
import hf_tokenizer  # noqa: E402
from checkpoint_writer import GROUPS, checksum, units  # noqa: E402
from inspect_checkpoint import read_meta  # noqa: E402


def hf_config(model):
    d, heads = model["d_model"], model["n_head"]
    qk_norm = bool(model.get("qk_norm", 1))
    cfg = {
        # With QK-norm the Qwen3 layout; without it, plain Llama's.
        "architectures": ["Qwen3ForCausalLM" if qk_norm else "LlamaForCausalLM"],
        "model_type": "qwen3" if qk_norm else "llama",
        "vocab_size": model["vocab_size"],
        "hidden_size": d,
        "intermediate_size": model["d_ff"],
        "num_hidden_layers": model["n_layer"],
        "num_attention_heads": heads,
        "num_key_value_heads": model["n_kv_head"],
        "head_dim": model.get("head_dim") or d // heads,
        "max_position_embeddings": model["max_seq_len"],
        "rms_norm_eps": model["norm_eps"],
        "rope_theta": model["rope_theta"],
        "tie_word_embeddings": bool(model["tie_embeddings"]),
        "hidden_act": "silu",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "torch_dtype": "float32",
    }
    cfg.update({"use_sliding_window": False} if qk_norm else {"mlp_bias": False})
    if model.get("rope_scaling_factor", 0) > 0:  # Llama 3.1's, in the form most configs carry
        cfg["rope_scaling"] = {"rope_type": "llama3", "factor": model["rope_scaling_factor"],
                               "low_freq_factor": model["rope_low_freq_factor"],
                               "high_freq_factor": model["rope_high_freq_factor"],
                               "original_max_position_embeddings": model["rope_original_context"]}
    return cfg


def fail(msg):
    sys.exit(f"export_hf: error: {msg}")


def verified(f, checkpoint, model, tensors):
    """The trainer's standard on every read of a checkpoint: each model tensor
    against its stored checksum (tools/checkpoint_writer.py's, the order the
    trainer stores them in), so a changed byte is refused, not exported."""
    if "tensor_checksums" not in f.attrs:
        fail(f"checkpoint '{checkpoint}' has no tensor checksums (not written by fsdptrain, or damaged); "
             "export a checkpoint the trainer saved")
    stored = [int(x) for x in f.attrs["tensor_checksums"]]
    order = [(g, n) for u in units(model) for g in GROUPS for n, _ in u]
    if len(stored) != len(order):
        fail(f"checkpoint '{checkpoint}' is damaged: it lists {len(stored)} tensor checksums "
             f"for {len(order)} tensors")
    for (g, n), want in zip(order, stored):
        if g == "model" and checksum(tensors[n]) != want:
            fail(f"checkpoint '{checkpoint}' is damaged: tensor model/{n} does not match its checksum "
                 "(its bytes changed after the save); export an earlier checkpoint")


def export(checkpoint, outdir, tokenizer=None):
    try:
        with h5py.File(checkpoint, "r") as f:
            meta = read_meta(f)
            model = meta["model"]
            raw = {name: np.ascontiguousarray(d[()], dtype=np.float32) for name, d in f["model"].items()}
            want = {n for u in units(model) for n, _ in u}
            if set(raw) != want:
                fail(f"checkpoint '{checkpoint}' does not hold its model's tensors: missing "
                     f"{sorted(want - set(raw))[:3]}, unknown {sorted(set(raw) - want)[:3]}")
            verified(f, checkpoint, model, raw)
    except (OSError, KeyError, ValueError, TypeError, RuntimeError, IndexError) as e:  # truncated, damaged, not HDF5
        fail(f"checkpoint '{checkpoint}' cannot be read ({e}): damaged or truncated; "
             "export an earlier checkpoint")
    # A cap on the logits changes what the model predicts, and neither Qwen3's
    # nor Llama's config can say so (Gemma 2's can, in a model unlike ours).
    # --z-loss only shaped training, and --document-mask only kept training's
    # documents apart (one document attends the same either way): such a model
    # exports as any other.
    if model.get("logit_softcap", 0) > 0:
        fail(f"checkpoint '{checkpoint}' was trained with --logit-softcap {model['logit_softcap']:g}, "
             "which Qwen3 and Llama cannot express (their logits are uncapped); nothing was written")
    # Their MLP is SwiGLU's (gate, up, down), not relu(x W1^T)^2 W2^T.
    if model.get("relu2_mlp", 0):
        fail(f"checkpoint '{checkpoint}' was trained with --relu2-mlp, which Qwen3 and Llama "
             "cannot express (their MLP is SwiGLU's); nothing was written")
    # Their attention reads each layer's own values only.
    if model.get("value_residual", 0):
        fail(f"checkpoint '{checkpoint}' was trained with --value-residual, which Qwen3 and Llama "
             "cannot express (each of their layers attends over its own values); nothing was written")
    # Their layers read only the layer below.
    if model.get("unet_skips", 0):
        fail(f"checkpoint '{checkpoint}' was trained with --unet-skips, which Qwen3 and Llama "
             "cannot express (each of their layers reads only the one below); nothing was written")
    # Their attention's values come from the layer's input alone.
    if model.get("value_embeds", 0):
        fail(f"checkpoint '{checkpoint}' was trained with --value-embeds {model['value_embeds']}, "
             "which Qwen3 and Llama cannot express (their values come from each layer's input "
             "alone); nothing was written")
    tensors = {}
    for name, t in raw.items():
        target = hf_name(name)
        if target is None:
            fail(f"'{checkpoint}' has tensor model/{name}, which has no Hugging Face name; "
                 "update tools/export_hf.py")
        tensors[target] = t
    if "lm_head.weight" not in tensors:
        tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"].copy()
    # The run's tokenizer (tools/hf_tokenizer.py), found and checked before
    # anything is written: one named with --tokenizer must be there and fit,
    # the run's own may be missing (said on the last line).
    cfg = hf_config(model)
    tok = None
    try:
        text, eos_id = hf_tokenizer.find(meta.get("config"), tokenizer)
        tcfg, ids, said = hf_tokenizer.plan(text, eos_id, model["vocab_size"], model["max_seq_len"])
        tok = (text, tcfg)
        cfg.update(ids)
        note = f"and {said}"
    except (hf_tokenizer.NoTokenizer, ImportError) as e:
        if tokenizer:
            fail(f"--tokenizer {tokenizer}: {e}; nothing was written")
        note = f"and no tokenizer: {e} (name one with --tokenizer TOKENS.h5 or tokenizer.json)"
    os.makedirs(outdir, exist_ok=True)
    save_file(tensors, os.path.join(outdir, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(outdir, "config.json"), "w") as out:
        json.dump(cfg, out, indent=2)
        out.write("\n")
    if tok:
        hf_tokenizer.save(outdir, *tok)
    return tensors, note


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkpoint")
    ap.add_argument("outdir")
    ap.add_argument("--tokenizer", metavar="PATH",
                    help="the tokenizer to export: a token file (its tokenizer, as prepare_data.py "
                    "wrote it) or a tokenizer.json; default: the run's --train-data's")
    args = ap.parse_args(argv)
    if not os.path.isfile(args.checkpoint):
        fail(f"no checkpoint file '{args.checkpoint}'")
    tensors, note = export(args.checkpoint, args.outdir, args.tokenizer)
    n = sum(t.size for k, t in tensors.items())
    print(f"wrote {len(tensors)} tensors ({n:,} values), config.json {note} to {args.outdir}")


if __name__ == "__main__":
    main()
