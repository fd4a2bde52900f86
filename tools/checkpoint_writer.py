"""Writes an fsdptrain checkpoint file from whole tensors, for tools that make
weights outside the trainer (tools/import_hf.py).

The layout is checkpoint/'s (file_meta.cpp and file_tensors.cpp), and the
trainer checks every part of a file it loads: attribute types and ranges,
each dataset's shape and storage, and one checksum per tensor. A file this
module writes is therefore loaded whole or refused by name, never half
understood; tests/tools/test_import_hf.py loads its files with fsdptrain,
and checks the checksums below against files the trainer wrote.

What the file holds: the weights in /model (float32, their logical shapes),
zero AdamW moments in /optim, step 0, and a data-sampler state at step 0, so
`--init-from FILE` (weights only) and `--resume FILE` both accept it.
"""

import os

import h5py
import numpy as np

FORMAT_VERSION = 2  # checkpoint/meta.h kCheckpointFormatVersion
GROUPS = ("model", "optim/exp_avg", "optim/exp_avg_sq")  # file_format.h kGroups, in that order
CHUNK = 1 << 22  # elements hashed at a time

# /model attributes: (name, numpy type); ModelConfig's fields.
MODEL_ATTRS = (("vocab_size", np.int64), ("n_layer", np.int64), ("d_model", np.int64),
               ("n_head", np.int64), ("n_kv_head", np.int64), ("d_ff", np.int64),
               ("max_seq_len", np.int64), ("rope_theta", np.float32), ("norm_eps", np.float32),
               ("init_std", np.float32), ("tie_embeddings", np.int64))
# Written only where the RoPE is scaled, as the trainer writes them.
ROPE_SCALING_ATTRS = (("rope_scaling_factor", np.float32), ("rope_low_freq_factor", np.float32),
                      ("rope_high_freq_factor", np.float32), ("rope_original_context", np.int64))


def head_dim(model):
    """Each head's width: /model's head_dim where the file has one, else
    d_model / n_head (ModelConfig::head_dim())."""
    return model.get("head_dim") or model["d_model"] // model["n_head"]


def has_qk_norm(model):
    """/model's qk_norm where the file has one (written only when 0), else on."""
    return bool(model.get("qk_norm", 1))


def units(model):
    """The model's units, each a list of (dataset name, shape), in the order
    the trainer moves them (model/params.cpp model_units): the checksums are
    stored in that order."""
    d, ff, v = model["d_model"], model["d_ff"], model["vocab_size"]
    hd = head_dim(model)
    q, kv = model["n_head"] * hd, model["n_kv_head"] * hd
    K = model.get("value_embeds", 0)  # --value-embeds: the tables, in the embedding's unit
    out = [[("embed.weight", (v, d)), *[(f"embed.value.{j}", (v, kv)) for j in range(K)]]]
    for i in range(model["n_layer"]):
        b = f"blocks.{i}."
        qk_norm = [(b + "attn.q_norm", (hd,)), (b + "attn.k_norm", (hd,))] if has_qk_norm(model) else []
        w3 = [] if model.get("relu2_mlp", 0) else [(b + "mlp.w3", (ff, d))]  # --relu2-mlp: none
        out.append([(b + "attn_norm", (d,)), (b + "attn.wq", (q, d)), (b + "attn.wk", (kv, d)),
                    (b + "attn.wv", (kv, d)), *qk_norm, (b + "attn.wo", (d, q)), (b + "mlp_norm", (d,)),
                    (b + "mlp.w1", (ff, d)), *w3, (b + "mlp.w2", (d, ff)),
                    *([(b + "unet_skip", (1,))] if model.get("unet_skips", 0) else []),
                    *([(b + "value_mix", (2,))] if K else []),
                    *([(b + "value_residual_mix", (2,))] if model.get("value_residual_learned", 0)
                      else [])])
    head = [("final_norm", (d,))]
    if not model["tie_embeddings"]:
        head.append(("head.weight", (v, d)))
    out.append(head)
    return out


def _mix64(x):
    """splitmix64's finaliser (common/mix64.h) on a uint64 array, wrapping."""
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def checksum(values, count=None):
    """A tensor's checksum (checkpoint/checksum.cpp): over its
    elements in row-major order, mix64(index << 32 | float32 bits), mod 2^64.
    values=None with `count` is a tensor of zeros."""
    n = count if values is None else values.size
    flat = None if values is None else np.ascontiguousarray(values, dtype=np.float32).reshape(-1)
    total = np.uint64(0)
    with np.errstate(over="ignore"):
        for lo in range(0, n, CHUNK):
            hi = min(n, lo + CHUNK)
            key = np.arange(lo, hi, dtype=np.uint64) << np.uint64(32)
            if flat is not None:
                key |= flat[lo:hi].view(np.uint32).astype(np.uint64)
            total += np.sum(_mix64(key), dtype=np.uint64)
    return int(total)


def _fixed_str(text):
    # The trainer reads fixed-length strings only (h5py's str is variable-length).
    return np.bytes_(text.encode())


def write_checkpoint(path, model, tensors, config_text, seed=1337):
    """Writes `tensors` ({dataset name: float32 array}, every one of the
    model's) as a step-0 checkpoint at `path`, through PATH.tmp and a rename,
    so a failure leaves no partial file under the name."""
    expected = [p for u in units(model) for p in u]
    names = {n for n, _ in expected}
    if set(tensors) != names:
        missing, extra = sorted(names - set(tensors)), sorted(set(tensors) - names)
        raise ValueError(f"tensors do not match the model: missing {missing[:4]}, extra {extra[:4]}")
    for n, shape in expected:
        if tuple(tensors[n].shape) != shape:
            raise ValueError(f"tensor {n} has shape {tuple(tensors[n].shape)}, the model {shape}")
    tmp = path + ".tmp"
    sums = []
    try:
        with h5py.File(tmp, "w") as f:
            for k, v in (("format_version", FORMAT_VERSION), ("step", 0), ("tokens_seen", 0),
                         ("optimizer_steps", 0), ("seed", seed), ("world_size", 1),
                         ("shard_group_size", 1)):
                f.attrs[k] = np.int64(v)
            f.attrs["config"] = _fixed_str(config_text)
            f.attrs["optimizer"] = _fixed_str("adamw")
            g = f.create_group("model")
            g.attrs["name"] = _fixed_str(model.get("name", "imported"))
            for k, t in MODEL_ATTRS:
                g.attrs[k] = t(model[k])
            # As the trainer writes it: only where it is not d_model / n_head.
            if head_dim(model) * model["n_head"] != model["d_model"]:
                g.attrs["head_dim"] = np.int64(head_dim(model))
            if not has_qk_norm(model):
                g.attrs["qk_norm"] = np.int64(0)
            if model.get("rope_scaling_factor", 0) > 0:  # Llama 3.1's RoPE scaling
                for k, t in ROPE_SCALING_ATTRS:
                    g.attrs[k] = t(model[k])
            f.create_group("optim/exp_avg")
            f.create_group("optim/exp_avg_sq")
            # The trainer lists the sampler state in creation order.
            s = f.create_group("sampler", track_order=True)
            for k in ("seed", "step", "consumed"):
                s.attrs[k] = np.int64(seed if k == "seed" else 0)
            for unit in units(model):
                for group in GROUPS:
                    for n, shape in unit:
                        d = f.create_dataset(f"{group}/{n}", shape=shape, dtype="<f4")
                        if group == "model":
                            a = np.ascontiguousarray(tensors[n], dtype=np.float32)
                            d[...] = a
                            sums.append(checksum(a))
                        else:  # zero moments, written so the storage exists
                            rows = max(1, CHUNK // max(1, int(np.prod(shape[1:]))))
                            for r in range(0, shape[0], rows):
                                d[r:r + rows] = 0
                            sums.append(checksum(None, int(np.prod(shape))))
            f.attrs.create("tensor_checksums", np.array(sums, dtype=np.uint64))
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
