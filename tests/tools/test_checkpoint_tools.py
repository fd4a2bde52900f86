#!/usr/bin/env python3
"""CTest for tools/inspect_checkpoint.py and tools/export_hf.py.

  test_checkpoint_tools.py FIXTURE_DIR TOOLS_DIR

FIXTURE_DIR holds tied/ and untied/ checkpoint directories that the C++
suite wrote (CheckpointFile.WritesToolFixture, run as a CTest fixture), so
the tools are tested on the real format, not a Python imitation of it.
"""

import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

import h5py
import numpy as np
from safetensors.numpy import load_file

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL: " + what)


def run(tools, *args):
    r = subprocess.run([sys.executable, os.path.join(tools, args[0])] + list(args[1:]),
                       capture_output=True, text=True)
    check(r.returncode == 0, f"{args} exited {r.returncode}: {r.stderr}")
    return r.stdout


def test_one(ckpt, tools, tied):
    out = run(tools, "inspect_checkpoint.py", ckpt, "--stats", "--config")
    for needle in ("step: 2", "tokens_seen: 2007", "format_version: 2", "optimizer: adamw", "model/embed.weight",
                   "optim/exp_avg_sq/blocks.2.mlp.w2", "[40, 24]", "norm ", "consumed=16",
                   "lr = 0.001", f"tie_embeddings={tied}"):
        check(needle in out, f"inspect output of {ckpt} lacks '{needle}'")

    with tempfile.TemporaryDirectory() as outdir:
        run(tools, "export_hf.py", ckpt, outdir)
        st = load_file(os.path.join(outdir, "model.safetensors"))
        with open(os.path.join(outdir, "config.json")) as f:
            cfg = json.load(f)
    want_cfg = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": 61,
                "hidden_size": 24, "intermediate_size": 40, "num_hidden_layers": 3,
                "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 6,
                "max_position_embeddings": 16, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
                "tie_word_embeddings": tied, "hidden_act": "silu", "attention_bias": False,
                "torch_dtype": "float32"}
    for k, v in want_cfg.items():
        check(cfg.get(k) == v, f"config.json {k} = {cfg.get(k)!r}, want {v!r}")

    names = {"model.embed_tokens.weight": (61, 24), "model.norm.weight": (24,),
             "lm_head.weight": (61, 24)}
    for i in range(3):
        p = f"model.layers.{i}."
        names.update({p + "input_layernorm.weight": (24,), p + "post_attention_layernorm.weight": (24,),
                      p + "self_attn.q_proj.weight": (24, 24), p + "self_attn.k_proj.weight": (12, 24),
                      p + "self_attn.v_proj.weight": (12, 24), p + "self_attn.o_proj.weight": (24, 24),
                      p + "self_attn.q_norm.weight": (6,), p + "self_attn.k_norm.weight": (6,),
                      p + "mlp.gate_proj.weight": (40, 24), p + "mlp.up_proj.weight": (40, 24),
                      p + "mlp.down_proj.weight": (24, 40)})
    check(set(st) == set(names), f"exported names differ: {sorted(set(st) ^ set(names))}")
    for k, shape in names.items():
        if k in st:
            check(st[k].shape == shape and st[k].dtype == np.float32, f"{k}: {st[k].shape} {st[k].dtype}")

    # Round trip: exported tensors equal the checkpoint's, bit for bit.
    with h5py.File(ckpt, "r") as f:
        m = f["model"]
        pairs = [("embed.weight", "model.embed_tokens.weight"), ("final_norm", "model.norm.weight"),
                 ("blocks.1.attn.wk", "model.layers.1.self_attn.k_proj.weight"),
                 ("blocks.2.mlp.w1", "model.layers.2.mlp.gate_proj.weight"),
                 ("blocks.2.mlp.w2", "model.layers.2.mlp.down_proj.weight"),
                 ("blocks.0.attn.q_norm", "model.layers.0.self_attn.q_norm.weight"),
                 ("blocks.0.mlp_norm", "model.layers.0.post_attention_layernorm.weight"),
                 ("embed.weight" if tied else "head.weight", "lm_head.weight")]
        for ours, theirs in pairs:
            check(np.array_equal(m[ours][()], st.get(theirs)), f"{theirs} != model/{ours}")
        if not tied:
            check(not np.array_equal(m["head.weight"][()], m["embed.weight"][()]),
                  "untied head equals the embedding")


def main():
    fixture, tools = sys.argv[1], sys.argv[2]
    for tied, sub in ((True, "tied"), (False, "untied")):
        files = sorted(glob.glob(os.path.join(fixture, sub, "step_*.h5")))
        check(len(files) == 1, f"expected one checkpoint in {fixture}/{sub}, found {files}")
        if files:
            test_one(files[-1], tools, tied)
    r = subprocess.run([sys.executable, os.path.join(tools, "export_hf.py"), "/nonexistent.h5", "/tmp/x"],
                       capture_output=True, text=True)
    check(r.returncode != 0 and "/nonexistent.h5" in r.stderr, "missing checkpoint is not a clear error")
    damaged_inputs(sorted(glob.glob(os.path.join(fixture, "tied", "step_*.h5")))[-1], tools)
    print("checkpoint tools: " + ("FAILED" if failures else "all checks passed"))
    sys.exit(1 if failures else 0)


def refused(tools, ckpt, needle, what):
    """export_hf.py on a damaged file: one error line naming it and `needle`,
    a non-zero exit, nothing written."""
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "out")
        r = subprocess.run([sys.executable, os.path.join(tools, "export_hf.py"), ckpt, out],
                           capture_output=True, text=True)
        lines = [l for l in r.stderr.splitlines() if l.strip()]
        check(r.returncode != 0 and len(lines) == 1 and lines[0].startswith("export_hf: error:")
              and ckpt in lines[0] and needle in lines[0] and not os.path.exists(out),
              f"{what}: one error line, nothing written ({r.stderr.strip()[-300:]})")


def damaged_inputs(good, tools):
    """Issue 65: a truncated checkpoint was a traceback, a changed tensor
    exported silently (the trainer refuses both). Also a sound checkpoint of
    a model the Hugging Face layouts cannot express (--logit-softcap,
    --relu2-mlp, --value-residual, --unet-skips, --value-embeds)."""
    with tempfile.TemporaryDirectory() as d:
        cut = os.path.join(d, "cut.h5")
        with open(good, "rb") as f, open(cut, "wb") as g:
            g.write(f.read()[: os.path.getsize(good) * 2 // 3])
        refused(tools, cut, "damaged or truncated", "a truncated checkpoint")
        changed = os.path.join(d, "changed.h5")
        shutil.copyfile(good, changed)
        with h5py.File(changed, "r+") as f:
            w = f["model/blocks.0.mlp.w1"]
            v = w[()]
            v.flat[7] += 1.0
            w[...] = v
        refused(tools, changed, "model/blocks.0.mlp.w1 does not match its checksum", "a changed tensor")
        nosums = os.path.join(d, "nosums.h5")
        shutil.copyfile(good, nosums)
        with h5py.File(nosums, "r+") as f:
            del f.attrs["tensor_checksums"]
        refused(tools, nosums, "no tensor checksums", "a file without checksums")
        notfile = os.path.join(d, "text.h5")
        with open(notfile, "w") as f:
            f.write("not hdf5\n")
        refused(tools, notfile, "cannot be read", "a file that is not HDF5")
        capped = os.path.join(d, "capped.h5")
        shutil.copyfile(good, capped)
        with h5py.File(capped, "r+") as f:
            f["model"].attrs["logit_softcap"] = np.float32(30)
        refused(tools, capped, "--logit-softcap 30", "a model whose logits are capped")
        with h5py.File(capped, "r+") as f:  # z-loss and the document mask shaped only the training
            del f["model"].attrs["logit_softcap"]
            f["model"].attrs["z_loss"] = np.float32(1e-4)
            f["model"].attrs["document_mask"] = np.int64(1)
        with tempfile.TemporaryDirectory() as out:
            run(tools, "export_hf.py", capped, out)
            check(os.path.exists(os.path.join(out, "model.safetensors")),
                  "a z-loss, document-masked model is not exported")
        # A ReLU² MLP: the file as the trainer writes it (no W3 in any group,
        # nor its checksums), so the refusal is not a damage report.
        sys.path.insert(0, tools)
        from checkpoint_writer import GROUPS, units
        from inspect_checkpoint import read_meta
        relu2 = os.path.join(d, "relu2.h5")
        shutil.copyfile(good, relu2)
        with h5py.File(relu2, "r+") as f:
            order = [(g, n) for u in units(read_meta(f)["model"]) for g in GROUPS for n, _ in u]
            sums = list(f.attrs["tensor_checksums"])
            check(len(sums) == len(order), "the fixture's checksums follow checkpoint_writer.units")
            kept = [x for (g, n), x in zip(order, sums) if not n.endswith(".mlp.w3")]
            f.attrs["tensor_checksums"] = np.array(kept, dtype=sums[0].dtype)
            for g, n in order:
                if n.endswith(".mlp.w3") and n in f[g]:
                    del f[g][n]
            f["model"].attrs["relu2_mlp"] = np.int64(1)
        refused(tools, relu2, "--relu2-mlp", "a ReLU² model")
        vres = os.path.join(d, "vres.h5")  # the same tensors as the fixture's
        shutil.copyfile(good, vres)
        with h5py.File(vres, "r+") as f:
            f["model"].attrs["value_residual"] = np.int64(1)
        refused(tools, vres, "--value-residual", "a value-residual model")
        # U-net skips and value embeddings: the files as the trainer writes
        # them, the tensors they add and their checksums in their places, so
        # the refusal is not a damage report either.
        unet = os.path.join(d, "unet.h5")
        grown(good, unet, {"unet_skips": 1})
        refused(tools, unet, "--unet-skips", "a U-net model")
        ve = os.path.join(d, "ve.h5")
        grown(good, ve, {"value_embeds": 2})
        refused(tools, ve, "--value-embeds 2", "a model with value embeddings")
        vrl = os.path.join(d, "vrl.h5")  # and the learned value residual's pairs
        grown(good, vrl, {"value_residual": 1, "value_residual_learned": 1})
        refused(tools, vrl, "--value-residual", "a learned value-residual model")


def grown(good, path, attrs):
    """A copy of the checkpoint `good` with `attrs` set in /model and the
    tensors they add (in every group: weights as the trainer starts them, 1
    for vectors and 0 for matrices; optimizer state 0), with the checksums of
    all in checkpoint_writer.units' order."""
    from checkpoint_writer import GROUPS, checksum, units
    from inspect_checkpoint import read_meta
    shutil.copyfile(good, path)
    with h5py.File(path, "r+") as f:
        old = dict(zip([(g, n) for u in units(read_meta(f)["model"]) for g in GROUPS for n, _ in u],
                       f.attrs["tensor_checksums"]))
        for k, v in attrs.items():
            f["model"].attrs[k] = np.int64(v)
        sums = []
        for u in units(read_meta(f)["model"]):
            for g in GROUPS:
                for n, shape in u:
                    if (g, n) not in old:
                        one = g == "model" and len(shape) == 1
                        value = np.full(shape, 1.0 if one else 0.0, np.float32)
                        f[g].create_dataset(n, data=value)
                        old[(g, n)] = checksum(value)
                    sums.append(old[(g, n)])
        check(len(sums) > len(f.attrs["tensor_checksums"]), f"{path} has the tensors {attrs} add")
        f.attrs["tensor_checksums"] = np.array(sums, dtype=f.attrs["tensor_checksums"].dtype)


if __name__ == "__main__":
    main()
