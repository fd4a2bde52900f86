"""fsdptrain's parameter names and their Hugging Face names (the Llama and
Qwen3 layout), both ways; tools/export_hf.py and tools/import_hf.py share it.

  embed.weight              <-> model.embed_tokens.weight
  blocks.i.attn_norm        <-> model.layers.i.input_layernorm.weight
  blocks.i.attn.wq/wk/wv/wo <-> model.layers.i.self_attn.{q,k,v,o}_proj.weight
  blocks.i.attn.q_norm      <-> model.layers.i.self_attn.q_norm.weight   (Qwen3)
  blocks.i.attn.k_norm      <-> model.layers.i.self_attn.k_norm.weight   (Qwen3)
  blocks.i.mlp_norm         <-> model.layers.i.post_attention_layernorm.weight
  blocks.i.mlp.w1           <-> model.layers.i.mlp.gate_proj.weight
  blocks.i.mlp.w3           <-> model.layers.i.mlp.up_proj.weight
  blocks.i.mlp.w2           <-> model.layers.i.mlp.down_proj.weight
  final_norm                <-> model.norm.weight
  head.weight               <-> lm_head.weight (untied models)

Both use rotate_half RoPE (the two halves of each head) and [out, in] linear
weights, so no tensor is permuted or transposed.
"""

import re

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
_BLOCK_BACK = {v: k for k, v in BLOCK.items()}
_TOP_BACK = {v: k for k, v in TOP.items()}


def _map(name, top, block, layer_from, layer_to):
    """One direction of the mapping: a top-level name, or a layer's prefix and
    its block-local name; None if `name` has no counterpart."""
    if name in top:
        return top[name]
    m = re.fullmatch(re.escape(layer_from) + r"(\d+)\.(.+)", name)
    if m and m.group(2) in block:
        return f"{layer_to}{m.group(1)}.{block[m.group(2)]}"
    return None


def hf_name(name):
    """fsdptrain's dataset name -> the Hugging Face name, or None if it has none."""
    return _map(name, TOP, BLOCK, "blocks.", "model.layers.")


def fsdp_name(name):
    """A Hugging Face tensor name -> fsdptrain's, or None if it has none."""
    return _map(name, _TOP_BACK, _BLOCK_BACK, "model.layers.", "blocks.")
