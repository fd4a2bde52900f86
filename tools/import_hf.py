#!/usr/bin/env python3
"""Imports a Hugging Face Qwen3 or Llama model as an fsdptrain checkpoint.

  import_hf.py HF_DIR OUT.h5

HF_DIR is a downloaded model folder: config.json and model.safetensors, or
shards listed by model.safetensors.index.json (bf16, fp16 or fp32). Writes
OUT.h5, a step-0 checkpoint (the weights in float32, zero optimizer state)
that loads on any rank count, and OUT.ini, the model's flags for --config:

  fsdptrain --config OUT.ini --init-from OUT.h5 --eval-only --val-data V.h5
  fsdptrain --config OUT.ini --init-from OUT.h5 --train-data T.h5 --lr 3e-5 ...

The token files must be encoded with the model's own tokenizer
(tools/prepare_data.py --tokenizer hf:HF_DIR, or hf:HF_DIR/tokenizer.json).

What fsdptrain's model holds, and so what imports: a pre-norm decoder with
RMSNorm, SwiGLU, grouped-query attention, RoPE (rotate_half, no scaling),
QK-norm or none, heads of any even width up to 512 (head_dim, also apart
from hidden_size / num_attention_heads as in Qwen3-0.6B), tied or untied
embeddings, RoPE plain or with Llama 3.1's scaling (rope_type llama3):
Qwen3ForCausalLM (QK-norm) and LlamaForCausalLM (none; SmolLM2 and Llama
3.2 are such). Anything else (other rope scalings such as yarn, attention
or MLP biases, sliding windows, MoE) is refused with one line naming the
config.json field, and nothing is written.
Names: tools/hf_names.py.
"""

import argparse
import json
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checkpoint_writer import units, write_checkpoint  # noqa: E402
from hf_names import fsdp_name, hf_name  # noqa: E402

# architecture -> (model_type, QK-norm)
ARCHITECTURES = {"Qwen3ForCausalLM": ("qwen3", True), "LlamaForCausalLM": ("llama", False)}
# Buffers some checkpoints carry that are recomputed, not weights.
IGNORED_SUFFIXES = (".rotary_emb.inv_freq",)


class Refused(Exception):
    """Why this model cannot be imported: one line for the user."""


# ---- config.json -> fsdptrain's model fields --------------------------------------------

def rope_of(cfg):
    """(theta, scaling dict or None) from transformers 5's rope_parameters or the
    top-level rope_theta / rope_scaling of older configs."""
    params = cfg.get("rope_parameters")
    if isinstance(params, dict) and "rope_theta" in params:
        return float(params["rope_theta"]), params
    return float(cfg.get("rope_theta", 10000.0)), cfg.get("rope_scaling")


INT_MAX = 2 ** 31 - 1  # the trainer's fields are 32-bit ints


def int_field(cfg, key, default=None, low=1):
    """cfg[key] (default where missing or null) as an int in [low, INT_MAX]
    (bool is not one), or Refused naming it."""
    v = default if cfg.get(key) is None else cfg[key]
    if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= INT_MAX:
        raise Refused(f"{key} is {v!r}; it must be an integer from {low} to {INT_MAX}")
    return v


def float_field(cfg, key, default, positive=True):
    """cfg[key] as a finite float (> 0 where positive), or Refused naming it."""
    v = cfg.get(key, default)
    # the trainer keeps it as a float32: finite and (where positive) above 0 there too
    with np.errstate(over="ignore"):
        ok = not isinstance(v, bool) and isinstance(v, (int, float)) and np.isfinite(np.float32(v)) and \
            (not positive or np.float32(v) > 0)
    if not ok:
        raise Refused(f"{key} is {v!r}; it must be a finite number{' above 0' if positive else ''} "
                      "(as a float32)")
    return float(v)


def model_fields(cfg):
    """fsdptrain's model fields for `cfg`, or Refused naming the field."""
    archs = cfg.get("architectures")
    if archs is not None and (not isinstance(archs, list) or not all(isinstance(a, str) for a in archs)):
        raise Refused(f"architectures is {archs!r}; it must be a list of names")
    arch = (archs or ["(none)"])[0]
    if arch not in ARCHITECTURES:
        raise Refused(f"architectures is {arch}; fsdptrain imports {', '.join(ARCHITECTURES)}")
    model_type, qk_norm = ARCHITECTURES[arch]
    if cfg.get("model_type") != model_type:
        raise Refused(f"model_type is {cfg.get('model_type')!r}, not {model_type!r} for {arch}")
    if cfg.get("pretraining_tp", 1) != 1:
        raise Refused(f"pretraining_tp is {cfg['pretraining_tp']}; fsdptrain reads unsplit weights only")
    required = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                "num_attention_heads")
    for k in required:
        int_field(cfg, k, low=2 if k in ("vocab_size", "hidden_size") else 1)
    d, heads = cfg["hidden_size"], cfg["num_attention_heads"]
    kv = int_field(cfg, "num_key_value_heads", heads)
    if cfg.get("head_dim") is not None:
        int_field(cfg, "head_dim")
    if cfg.get("hidden_act", "silu") != "silu":
        raise Refused(f"hidden_act is {cfg['hidden_act']!r}; fsdptrain's MLP is SwiGLU (silu)")
    for k in ("attention_bias", "mlp_bias"):
        if cfg.get(k):
            raise Refused(f"{k} is true; fsdptrain's linear layers have no biases")
    if cfg.get("use_sliding_window") or any(t != "full_attention" for t in cfg.get("layer_types") or []):
        raise Refused("use_sliding_window / layer_types: sliding-window attention is not supported")
    for k in ("num_experts", "num_local_experts", "moe_intermediate_size"):
        if cfg.get(k):
            raise Refused(f"{k} is {cfg[k]}: mixture-of-experts models are not supported")
    head_dim = cfg.get("head_dim") or (d // heads if d % heads == 0 else None)
    if not isinstance(head_dim, int) or head_dim % 2 or not 2 <= head_dim <= 512:
        raise Refused(f"head_dim is {head_dim!r} (hidden_size {d}, num_attention_heads {heads}); "
                      "fsdptrain's heads are 2 to 512 wide, an even number")
    if heads % kv:
        raise Refused(f"num_key_value_heads {kv} does not divide num_attention_heads {heads}")
    try:
        theta, scaling = rope_of(cfg)
    except (TypeError, ValueError) as e:
        raise Refused(f"rope_theta (top level or in rope_parameters) is not a number ({e})")
    if not np.isfinite(theta) or theta <= 0:
        raise Refused(f"rope_theta is {theta}; it must be a finite number above 0")
    if scaling is not None and not isinstance(scaling, dict):
        raise Refused(f"rope_scaling is {scaling!r}; it must be an object or null")
    rope_type = (scaling or {}).get("rope_type", (scaling or {}).get("type", "default"))
    if rope_type not in ("default", "llama3"):
        raise Refused(f"rope scaling of type {rope_type!r} (rope_parameters / rope_scaling) is not supported; "
                      "fsdptrain has llama3's")
    rope = {"rope_scaling_factor": 0.0}
    if rope_type == "llama3":
        try:
            rope = {"rope_scaling_factor": float(scaling["factor"]),
                    "rope_low_freq_factor": float(scaling["low_freq_factor"]),
                    "rope_high_freq_factor": float(scaling["high_freq_factor"]),
                    "rope_original_context": int(scaling["original_max_position_embeddings"])}
        except (KeyError, TypeError, ValueError) as e:
            raise Refused(f"llama3 rope scaling without a usable {e} (factor, low_freq_factor, "
                          "high_freq_factor, original_max_position_embeddings)")
        if not (1 <= rope["rope_scaling_factor"] < np.finfo(np.float32).max
                and 0 < rope["rope_low_freq_factor"] < rope["rope_high_freq_factor"] < np.finfo(np.float32).max
                and 1 <= rope["rope_original_context"] <= INT_MAX):
            raise Refused(f"llama3 rope scaling {scaling} is out of range (factor >= 1, "
                          "0 < low_freq_factor < high_freq_factor, original_max_position_embeddings >= 1)")
    if (scaling or {}).get("partial_rotary_factor", cfg.get("partial_rotary_factor", 1.0)) != 1.0:
        raise Refused("partial_rotary_factor is not 1: fsdptrain rotates every dimension")
    with np.errstate(over="ignore"):  # 1e39 is inf in float32: refused below, not warned about
        exact = float(np.float32(theta)) == theta
    if not exact:
        raise Refused(f"rope_theta {theta} is not exact in float32")
    return {
        "name": model_type,
        "qk_norm": qk_norm,
        "vocab_size": cfg["vocab_size"],
        "n_layer": cfg["num_hidden_layers"],
        "d_model": d,
        "n_head": heads,
        "n_kv_head": kv,
        "head_dim": head_dim,
        "d_ff": cfg["intermediate_size"],
        "max_seq_len": int_field(cfg, "max_position_embeddings", 2048),
        "rope_theta": theta,
        "norm_eps": float_field(cfg, "rms_norm_eps", 1e-6),
        "init_std": float_field(cfg, "initializer_range", 0.02),
        "tie_embeddings": tie_of(cfg),
        **rope,
    }


def tie_of(cfg):
    v = cfg.get("tie_word_embeddings", False)
    if not isinstance(v, bool):
        raise Refused(f"tie_word_embeddings is {v!r}; it must be true or false")
    return v


def ini_text(model, source):
    def num(x):
        return str(np.float32(x)) if isinstance(x, float) else str(x)
    lines = [f"# {source}, imported by tools/import_hf.py: its model's flags"]
    for flag, key in (("vocab-size", "vocab_size"), ("n-layer", "n_layer"), ("d-model", "d_model"),
                      ("n-head", "n_head"), ("n-kv-head", "n_kv_head"), ("head-dim", "head_dim"),
                      ("d-ff", "d_ff"),
                      ("max-seq-len", "max_seq_len"), ("rope-theta", "rope_theta"),
                      ("norm-eps", "norm_eps"), ("init-std", "init_std")):
        lines.append(f"{flag} = {num(model[key])}")
    lines.append(f"tie-embeddings = {'true' if model['tie_embeddings'] else 'false'}")
    lines.append(f"qk-norm = {'true' if model['qk_norm'] else 'false'}")
    if model["rope_scaling_factor"] > 0:
        for flag, key in (("rope-scaling-factor", "rope_scaling_factor"),
                          ("rope-low-freq-factor", "rope_low_freq_factor"),
                          ("rope-high-freq-factor", "rope_high_freq_factor"),
                          ("rope-original-context", "rope_original_context")):
            lines.append(f"{flag} = {num(model[key])}")
    return "\n".join(lines) + "\n"


# ---- safetensors (read here: numpy's loader has no bf16) --------------------------------

def safetensors_index(folder):
    """{tensor name: file} for the single file or the sharded index."""
    index = os.path.join(folder, "model.safetensors.index.json")
    if os.path.exists(index):
        try:
            with open(index, encoding="utf-8") as f:
                weight_map = json.load(f)["weight_map"]
            where = {str(k): os.path.join(folder, v) for k, v in weight_map.items()}
        except (ValueError, UnicodeDecodeError, KeyError, TypeError, AttributeError) as e:
            raise Refused(f"model.safetensors.index.json is not an index with a weight_map ({e!r})")
        for path in sorted(set(where.values())):
            if not os.path.isfile(path):
                raise Refused(f"{os.path.basename(path)}, named in model.safetensors.index.json, is missing")
            read_header(path)  # every shard's header checked before anything is read
        return where
    single = os.path.join(folder, "model.safetensors")
    if not os.path.exists(single):
        raise Refused("neither model.safetensors nor model.safetensors.index.json here")
    return {k: single for k in read_header(single)[0] if k != "__metadata__"}


WIDTH = {"F32": 4, "F16": 2, "BF16": 2}
MAX_HEADER = 100 << 20  # safetensors' own limit on a header


def read_header(path):
    """A safetensors file's header, checked against the file: every entry a
    dtype, a shape and offsets that lie inside the data and match the shape,
    so a damaged or truncated file is refused here, not read past its end."""
    name, size = os.path.basename(path), os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise Refused(f"{name} is {size} bytes, shorter than a safetensors header: truncated")
        n = struct.unpack("<Q", head)[0]
        if n > min(size - 8, MAX_HEADER):
            raise Refused(f"{name}: its header claims {n} bytes, past the file's {size}: damaged or truncated")
        try:
            header = json.loads(f.read(n))
        except (ValueError, UnicodeDecodeError) as e:
            raise Refused(f"{name}: its header is not JSON ({e}): damaged")
    if not isinstance(header, dict):
        raise Refused(f"{name}: its header is not an object of tensors: damaged")
    data = size - 8 - n
    for k, info in header.items():
        if k == "__metadata__":
            continue
        try:
            lo, hi = info["data_offsets"]
            kind, shape = info["dtype"], [int(x) for x in info["shape"]]
            ok = all(isinstance(x, int) and not isinstance(x, bool) for x in (lo, hi)) and min(shape, default=0) >= 0
        except (KeyError, TypeError, ValueError):
            ok = False
        if not ok:
            raise Refused(f"{name}: tensor {k}'s entry {info!r} is not a dtype, a shape and two offsets: damaged")
        if not 0 <= lo <= hi <= data:
            raise Refused(f"{name}: tensor {k} lies at bytes {lo}-{hi} of {data}: truncated or damaged")
        if kind in WIDTH and hi - lo != WIDTH[kind] * int(np.prod(shape, dtype=np.int64)):
            raise Refused(f"{name}: tensor {k} has {hi - lo} bytes for {kind} of shape {shape}: damaged")
    return header, 8 + n


def read_tensor(path, name, cache):
    if path not in cache:
        cache[path] = read_header(path) + (np.memmap(path, dtype=np.uint8, mode="r"),)
    header, base, data = cache[path]
    if name not in header:
        raise Refused(f"tensor {name}, which the index places in {os.path.basename(path)}, is not in it")
    info = header[name]
    lo, hi = info["data_offsets"]
    raw = data[base + lo:base + hi]
    kind = info["dtype"]
    if kind == "F32":
        a = raw.view("<f4")
    elif kind == "F16":
        a = raw.view("<f2").astype(np.float32)
    elif kind == "BF16":
        a = (raw.view("<u2").astype(np.uint32) << 16).view(np.float32)
    else:
        raise Refused(f"tensor {name} is {kind}; fsdptrain imports F32, F16 and BF16 weights")
    return a.reshape(info["shape"])


# ---- the import ---------------------------------------------------------------------------

def load_tensors(folder, model):
    where = safetensors_index(folder)
    wanted = {n: shape for u in units(model) for n, shape in u}
    tensors, cache = {}, {}
    for hf, path in sorted(where.items()):
        if hf.endswith(IGNORED_SUFFIXES):
            continue
        if hf == "lm_head.weight" and model["tie_embeddings"]:
            continue  # a copy of the embedding some exports write
        name = fsdp_name(hf)
        if name is None or name not in wanted:
            raise Refused(f"tensor {hf} has no place in fsdptrain's model (a bias, or a "
                          "layer config.json does not describe)")
        t = read_tensor(path, hf, cache)
        if tuple(t.shape) != wanted[name]:
            raise Refused(f"tensor {hf} has shape {list(t.shape)}; config.json implies {list(wanted[name])}")
        tensors[name] = t
    missing = [n for n in wanted if n not in tensors]
    if missing:
        raise Refused(f"the safetensors lack {len(missing)} tensor(s) the model needs, e.g. "
                      f"{hf_name(missing[0])}")
    bad = [n for n, t in tensors.items() if not np.isfinite(t).all()]
    if bad:
        raise Refused(f"tensor {bad[0]} holds NaN or Inf")
    return tensors


def import_hf(folder, out):
    cfg_path = os.path.join(folder, "config.json")
    if not os.path.isfile(cfg_path):
        raise Refused("no config.json here (pass the downloaded model's folder)")
    try:
        with open(cfg_path, encoding="utf-8") as f:
            cfg = json.load(f)
    except (ValueError, UnicodeDecodeError) as e:
        raise Refused(f"config.json is not JSON ({e})")
    if not isinstance(cfg, dict):
        raise Refused(f"config.json holds a {type(cfg).__name__}, not an object of fields")
    model = model_fields(cfg)
    tensors = load_tensors(folder, model)
    ini = ini_text(model, os.path.abspath(folder))
    write_checkpoint(out, model, tensors, ini)
    ini_path = os.path.splitext(out)[0] + ".ini"
    with open(ini_path + ".tmp", "w") as f:
        f.write(ini)
    os.replace(ini_path + ".tmp", ini_path)
    return model, tensors, ini_path


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("hf_dir", help="the model's folder (config.json, *.safetensors)")
    ap.add_argument("out", help="the checkpoint to write (OUT.h5; OUT.ini beside it)")
    a = ap.parse_args(argv)
    if not a.out.endswith(".h5"):
        sys.exit(f"import_hf: error: '{a.out}': name the checkpoint OUT.h5")
    if os.path.exists(a.out):
        sys.exit(f"import_hf: error: '{a.out}' exists; remove it or choose another name (nothing was written)")
    try:
        model, tensors, ini_path = import_hf(a.hf_dir, a.out)
    except Refused as e:
        sys.exit(f"import_hf: error: '{a.hf_dir}': {e}; nothing was written")
    except OSError as e:  # unreadable input, or OUT's folder unwritable
        sys.exit(f"import_hf: error: '{a.hf_dir}' -> '{a.out}': {e.strerror or e} ({e.filename}); "
                 "nothing was written")
    n = sum(t.size for t in tensors.values())
    print(f"import_hf: wrote {a.out} ({len(tensors)} tensors, {n:,} parameters: {model['n_layer']} layers, "
          f"d_model {model['d_model']}, {model['n_head']}/{model['n_kv_head']} heads of {model['head_dim']}, vocab "
          f"{model['vocab_size']}, {'tied' if model['tie_embeddings'] else 'untied'}) and {ini_path}")


if __name__ == "__main__":
    main()
