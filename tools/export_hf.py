#!/usr/bin/env python3
"""Exports an fsdptrain checkpoint's weights for Hugging Face-style loaders.

  export_hf.py CKPT.h5 OUTDIR

Writes OUTDIR/model.safetensors (float32) and OUTDIR/config.json. The
optimizer moments are not exported.

Our model is a Llama-style pre-norm decoder plus QK-norm: an RMSNorm over
head_dim, with gains of shape [head_dim], applied to q and k per head before
RoPE. Plain Llama has no such gains; Qwen3 has exactly these, so the export
uses the Qwen3 layout (architectures ["Qwen3ForCausalLM"], model_type "qwen3").
Our RoPE already rotates the two halves of each head (the "rotate_half"
convention of these checkpoints), so q and k need no permutation. Linear
weights are [out, in] in both.

Name mapping (i = block index):
  embed.weight              -> model.embed_tokens.weight
  blocks.i.attn_norm        -> model.layers.i.input_layernorm.weight
  blocks.i.attn.wq/wk/wv/wo -> model.layers.i.self_attn.{q,k,v,o}_proj.weight
  blocks.i.attn.q_norm      -> model.layers.i.self_attn.q_norm.weight
  blocks.i.attn.k_norm      -> model.layers.i.self_attn.k_norm.weight
  blocks.i.mlp_norm         -> model.layers.i.post_attention_layernorm.weight
  blocks.i.mlp.w1           -> model.layers.i.mlp.gate_proj.weight
  blocks.i.mlp.w3           -> model.layers.i.mlp.up_proj.weight
  blocks.i.mlp.w2           -> model.layers.i.mlp.down_proj.weight
  final_norm                -> model.norm.weight
  head.weight               -> lm_head.weight (untied models)
With tied embeddings lm_head.weight is a copy of the embedding, so loaders
that ignore tie_word_embeddings (true in config.json) still find it.

config.json fields: vocab_size, hidden_size (d_model), intermediate_size
(d_ff), num_hidden_layers, num_attention_heads, num_key_value_heads,
head_dim, max_position_embeddings (max_seq_len), rms_norm_eps, rope_theta,
tie_word_embeddings, hidden_act "silu", attention_bias false, torch_dtype
"float32".
"""

import argparse
import json
import os
import re
import sys

import h5py
import numpy as np
from safetensors.numpy import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from inspect_checkpoint import read_meta  # noqa: E402

BLOCK = {
    "attn_norm": "input_layernorm.weight",
    "attn.wq": "self_attn.q_proj.weight",
    "attn.wk": "self_attn.k_proj.weight",
    "attn.wv": "self_attn.v_proj.weight",
    "attn.wo": "self_attn.o_proj.weight",
    "attn.q_norm": "self_attn.q_norm.weight",
    "attn.k_norm": "self_attn.k_norm.weight",
    "mlp_norm": "post_attention_layernorm.weight",
    "mlp.w1": "mlp.gate_proj.weight",
    "mlp.w3": "mlp.up_proj.weight",
    "mlp.w2": "mlp.down_proj.weight",
}
TOP = {"embed.weight": "model.embed_tokens.weight", "final_norm": "model.norm.weight",
       "head.weight": "lm_head.weight"}


def hf_name(name):
    """Our dataset name -> the Hugging Face name, or None if it has none."""
    if name in TOP:
        return TOP[name]
    m = re.fullmatch(r"blocks\.(\d+)\.(.+)", name)
    if m and m.group(2) in BLOCK:
        return f"model.layers.{m.group(1)}.{BLOCK[m.group(2)]}"
    return None


def hf_config(model):
    d, heads = model["d_model"], model["n_head"]
    return {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "vocab_size": model["vocab_size"],
        "hidden_size": d,
        "intermediate_size": model["d_ff"],
        "num_hidden_layers": model["n_layer"],
        "num_attention_heads": heads,
        "num_key_value_heads": model["n_kv_head"],
        "head_dim": d // heads,
        "max_position_embeddings": model["max_seq_len"],
        "rms_norm_eps": model["norm_eps"],
        "rope_theta": model["rope_theta"],
        "tie_word_embeddings": bool(model["tie_embeddings"]),
        "hidden_act": "silu",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "use_sliding_window": False,
        "torch_dtype": "float32",
    }


def export(checkpoint, outdir):
    with h5py.File(checkpoint, "r") as f:
        model = read_meta(f)["model"]
        tensors = {}
        for name, d in f["model"].items():
            target = hf_name(name)
            if target is None:
                sys.exit(f"export_hf: error: '{checkpoint}' has tensor model/{name}, "
                         "which has no Hugging Face name; update tools/export_hf.py")
            tensors[target] = np.ascontiguousarray(d[()], dtype=np.float32)
    if "lm_head.weight" not in tensors:
        tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"].copy()
    os.makedirs(outdir, exist_ok=True)
    save_file(tensors, os.path.join(outdir, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(outdir, "config.json"), "w") as out:
        json.dump(hf_config(model), out, indent=2)
        out.write("\n")
    return tensors


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkpoint")
    ap.add_argument("outdir")
    args = ap.parse_args(argv)
    if not os.path.isfile(args.checkpoint):
        sys.exit(f"export_hf: error: no checkpoint file '{args.checkpoint}'")
    tensors = export(args.checkpoint, args.outdir)
    n = sum(t.size for k, t in tensors.items())
    print(f"wrote {len(tensors)} tensors ({n:,} values) and config.json to {args.outdir}")


if __name__ == "__main__":
    main()
