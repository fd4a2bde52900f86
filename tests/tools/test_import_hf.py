#!/usr/bin/env python3
"""CTest for tools/import_hf.py (and tools/checkpoint_writer.py under it).

  test_import_hf.py formats      FSDPTRAIN EXAMPLE_DIR WORK TOOLS_DIR
  test_import_hf.py transformers FSDPTRAIN EXAMPLE_DIR WORK TOOLS_DIR

formats (no PyTorch): checkpoints fsdptrain trained (tied; untied with
--head-dim apart from d_model / n_head; --qk-norm false, a Llama) are
exported with tools/export_hf.py and imported back: every tensor returns bit
for bit, --eval-only of the import equals --eval-only of the original
exactly on 1 and 3 ranks, the writer's checksums are the trainer's, bf16
shards behind an index and an fp16 file import as their values, both
config.json forms of RoPE read the same, and each config fsdptrain cannot
hold is one error line naming its field, with nothing written.

transformers (skipped, exit 77, unless $FSDP_TORCH_PYTHON has torch and
transformers): random Qwen3 and Llama models built and saved by transformers
(GQA, tied and untied, fp32 and bf16, heads of hidden_size / heads and
wider, one with llama3 RoPE scaling) import, and fsdptrain --eval-only gives
transformers' mean loss on the same windows within 1e-5 relative on 1, 2 and
3 ranks; exporting the import gives back transformers' tensors bit for bit;
and fsdptrain's own runs, exported, load in transformers with the same loss.
"""

import json
import os
import shutil
import struct
import subprocess
import sys

import h5py
import numpy as np
from safetensors.numpy import load_file, save_file

mode, exe, example, work, tools = sys.argv[1:6]
sys.path.insert(0, tools)
from checkpoint_writer import GROUPS, checksum, units  # noqa: E402

failures = []
SEQ = 64


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)


def run(cmd, ranks=1):
    if ranks > 1:
        cmd = [os.environ.get("MPIEXEC", "mpirun"), "--oversubscribe", "-np", str(ranks)] + cmd
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def tool(name, *args):
    return run([sys.executable, os.path.join(tools, name), *args])


def val_file(windows):
    """The first `windows` windows of the example's validation split."""
    path = os.path.join(work, f"val{windows}.h5")
    with h5py.File(os.path.join(example, "kjv_val.h5"), "r") as f, h5py.File(path, "w") as g:
        for name, d in f.items():
            g.create_dataset(name, data=d[: windows * SEQ + 1] if name == "tokens" else d[()])
            g[name].attrs.update(dict(d.attrs))
    return path


def eval_loss(weights, val, ranks=1, config=None, tag="eval", model=("--model", "tiny")):
    """fsdptrain --eval-only's loss over the whole of `val` (from its metrics)."""
    m = os.path.join(work, f"{tag}.jsonl")
    if os.path.exists(m):
        os.remove(m)
    src = ["--init-from", weights] if config else ["--resume", weights]
    model = ["--config", config] if config else list(model)
    p = run([exe, "--device", "cpu", *model, *src, "--eval-only", "--val-data", val, "--seq-len",
             str(SEQ), "--batch-size", "1", "--eval-batches", "0", "--metrics", m], ranks)
    check(p.returncode == 0, f"{tag}: fsdptrain --eval-only exits 0 ({p.stderr.strip()[-300:]})")
    rec = [json.loads(l) for l in open(m)] if os.path.exists(m) else []
    return rec[0]["val_loss"] if rec else float("nan")


def model_tensors(path):
    with h5py.File(path, "r") as f:
        return {k: d[()] for k, d in f["model"].items()}


def write_safetensors(path, tensors, dtype):
    """A safetensors file of `tensors` in bf16 (truncated from fp32) or f32:
    written here, as numpy's writer has no bf16."""
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name], dtype=np.float32)
        raw = (a.view(np.uint32) >> 16).astype("<u2").tobytes() if dtype == "BF16" else a.tobytes()
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    text = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def import_ok(hf_dir, out, tag):
    p = tool("import_hf.py", hf_dir, out)
    check(p.returncode == 0 and os.path.exists(out), f"{tag}: import_hf exits 0 ({p.stderr.strip()[-300:]})")
    return os.path.splitext(out)[0] + ".ini"


def refused(hf_dir, needle, what):
    out = os.path.join(work, "refused.h5")
    p = tool("import_hf.py", hf_dir, out)
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    left = [f for f in os.listdir(work) if f.startswith("refused.")]
    check(p.returncode != 0 and len(lines) == 1 and lines[0].startswith("import_hf: error:")
          and needle in lines[0] and not left,
          f"{what}: one error line naming '{needle}', nothing written ({lines}, left {left})")


def formats():
    val = val_file(6)
    # The untied model's heads are 24 wide, not d_model / n_head = 16 (--head-dim);
    # the third has no QK-norm, so it leaves as a Llama.
    # The last adds Llama 3.1's RoPE scaling, as Llama 3.2 has it.
    for tag, tied, flags in (("tied", True, []), ("untied", False, ["--head-dim", "24"]),
                             ("llama", False, ["--qk-norm", "false"]),
                             ("llama3", True, ["--qk-norm", "false", "--rope-scaling-factor", "8",
                                               "--rope-original-context", "16"])):
        ck = os.path.join(work, "ck_" + tag)
        flags = ["--tie-embeddings", str(tied).lower()] + flags
        p = run([exe, "--device", "cpu", "--model", "tiny", "--train-data",
                 os.path.join(example, "kjv_train.h5"), "--seq-len", str(SEQ), "--batch-size", "4",
                 "--steps", "4", "--lr", "3e-3", *flags, "--checkpoint-dir", ck, "--checkpoint-every", "4"])
        check(p.returncode == 0, f"{tag}: the source run exits 0 ({p.stderr.strip()[-300:]})")
        orig = os.path.join(ck, "step_00000004.h5")
        want = model_tensors(orig)

        # The writer's checksums are the ones the trainer stored.
        with h5py.File(orig, "r") as f:
            model = {k: v.item() for k, v in f["model"].attrs.items() if k != "name"}
            sums = [checksum(f[g + "/" + n][()]) for u in units(model) for g in GROUPS for n, _ in u]
            check(sums == [int(x) for x in f.attrs["tensor_checksums"]],
                  f"{tag}: checkpoint_writer's checksums equal the trainer's ({len(sums)} tensors)")

        hf = os.path.join(work, "hf_" + tag)
        p = tool("export_hf.py", orig, hf)
        check(p.returncode == 0, f"{tag}: export exits 0 ({p.stderr.strip()[-300:]})")
        out = os.path.join(work, f"imp_{tag}.h5")
        ini = import_ok(hf, out, tag)
        got = model_tensors(out)
        check(set(got) == set(want) and all(np.array_equal(got[k].view(np.uint32), want[k].view(np.uint32))
                                            for k in want),
              f"{tag}: export then import gives every tensor back bit for bit")
        for ranks in (1, 3):  # the same sums in the same order: equal bit for bit
            ref = eval_loss(orig, val, ranks, tag=f"orig_{tag}_np{ranks}", model=("--model", "tiny", *flags))
            loss = eval_loss(out, val, ranks, config=ini, tag=f"imp_{tag}_np{ranks}")
            check(loss == ref, f"{tag}: --eval-only of the import on {ranks} rank(s) {loss} == the original's {ref}")

        if tag == "untied":  # issue 65, item 3: what a user of an import meets first
            base = [exe, "--device", "cpu", "--eval-only", "--val-data", val, "--seq-len", str(SEQ),
                    "--batch-size", "1"]
            p = run(base + ["--config", ini, "--init-from", out])
            check(p.returncode == 0 and "fsdptrain: model custom (the tiny preset, fields changed)" in p.stdout,
                  f"{tag}: the import is announced as a custom model, not as tiny ({p.stdout[:200]})")
            p = run(base + ["--model", "tiny", "--init-from", out])
            err = [l for l in p.stderr.splitlines() if l.strip()]
            check(p.returncode != 0 and len(err) == 1 and f"--config {ini}" in err[0],
                  f"{tag}: without --config, the error names the .ini import_hf.py wrote ({err})")
            m = os.path.join(work, "init_from_step.jsonl")
            p = run(base + ["--model", "tiny", *flags, "--init-from", orig, "--metrics", m])
            rec = [json.loads(l) for l in open(m)] if os.path.exists(m) else []
            check(p.returncode == 0 and len(rec) == 1 and rec[0]["step"] == 4 and "(step 4)" in p.stdout,
                  f"{tag}: --eval-only --init-from of a step-4 checkpoint reports and records step 4 ({rec})")

        # The other config form (transformers 5's rope_parameters) reads the same.
        with open(os.path.join(hf, "config.json")) as f:
            cfg = json.load(f)
        want_arch = "LlamaForCausalLM" if tag.startswith("llama") else "Qwen3ForCausalLM"
        check(cfg["architectures"] == [want_arch], f"{tag}: exported as {cfg['architectures']}, want {want_arch}")
        new = dict(cfg)
        new["rope_parameters"] = {**(new.pop("rope_scaling", None) or {"rope_type": "default"}),
                                  "rope_theta": new.pop("rope_theta")}
        hf2 = os.path.join(work, "hf2_" + tag)
        shutil.copytree(hf, hf2)
        json.dump(new, open(os.path.join(hf2, "config.json"), "w"))
        ini2 = import_ok(hf2, os.path.join(work, f"imp2_{tag}.h5"), tag + " rope_parameters")
        check(open(ini2).read().splitlines()[1:] == open(ini).read().splitlines()[1:],
              f"{tag}: rope_parameters and top-level rope_theta give the same flags")
        if tag == "llama3":
            check(cfg.get("rope_scaling", {}).get("rope_type") == "llama3" and
                  "rope-scaling-factor = 8.0" in open(ini).read(),
                  f"{tag}: the scaling goes out as rope_scaling llama3 and comes back as flags")

        # bf16 shards behind an index, and one fp16 file: their values, exactly.
        st = load_file(os.path.join(hf, "model.safetensors"))
        names = sorted(st)
        hf3 = os.path.join(work, "hf3_" + tag)
        os.makedirs(hf3)
        shutil.copy(os.path.join(hf, "config.json"), hf3)
        halves = (names[: len(names) // 2], names[len(names) // 2:])
        weight_map = {}
        for i, part in enumerate(halves):
            fname = f"model-{i + 1:05d}-of-00002.safetensors"
            write_safetensors(os.path.join(hf3, fname), {n: st[n] for n in part}, "BF16")
            weight_map.update({n: fname for n in part})
        json.dump({"metadata": {}, "weight_map": weight_map},
                  open(os.path.join(hf3, "model.safetensors.index.json"), "w"))
        import_ok(hf3, os.path.join(work, f"imp3_{tag}.h5"), tag + " bf16 shards")
        got = model_tensors(os.path.join(work, f"imp3_{tag}.h5"))
        bf16 = {k: ((v.view(np.uint32) >> 16) << 16).view(np.float32) for k, v in want.items()}
        check(all(np.array_equal(got[k], bf16[k]) for k in want) and
              any(not np.array_equal(got[k], want[k]) for k in want),
              f"{tag}: bf16 shards import as their bf16 values")
        hf4 = os.path.join(work, "hf4_" + tag)
        os.makedirs(hf4)
        shutil.copy(os.path.join(hf, "config.json"), hf4)
        save_file({n: st[n].astype(np.float16) for n in names}, os.path.join(hf4, "model.safetensors"))
        import_ok(hf4, os.path.join(work, f"imp4_{tag}.h5"), tag + " fp16")
        got = model_tensors(os.path.join(work, f"imp4_{tag}.h5"))
        check(all(np.array_equal(got[k], want[k].astype(np.float16).astype(np.float32)) for k in want),
              f"{tag}: an fp16 file imports as its fp16 values")

    # What the model cannot hold: one line naming the field, nothing written.
    base = os.path.join(work, "hf_untied")
    cfg = json.load(open(os.path.join(base, "config.json")))
    cases = [({"architectures": ["MistralForCausalLM"], "model_type": "mistral"}, "architectures"),
             ({"model_type": "llama"}, "model_type"),
             ({"head_dim": 7}, "head_dim"),
             ({"rope_theta": None, "rope_parameters": {"rope_theta": 1e4, "rope_type": "yarn"}}, "yarn"),
             ({"rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, "low_freq_factor"),
             ({"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 4.0,
                                "high_freq_factor": 1.0, "original_max_position_embeddings": 32}},
              "out of range"),
             ({"attention_bias": True}, "attention_bias"),
             ({"use_sliding_window": True}, "use_sliding_window"),
             ({"hidden_act": "gelu"}, "hidden_act"),
             ({"num_experts": 8}, "num_experts"),
             ({"num_key_value_heads": 3}, "num_key_value_heads"),
             ({"pretraining_tp": 2}, "pretraining_tp")]
    for change, needle in cases:
        d = os.path.join(work, "bad")
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(base, d)
        new = {k: v for k, v in {**cfg, **change}.items() if v is not None}
        json.dump(new, open(os.path.join(d, "config.json"), "w"))
        refused(d, needle, f"config {change}")
    st = load_file(os.path.join(base, "model.safetensors"))
    for what, tensors, needle in (
            ("a bias", {**st, "model.layers.0.self_attn.q_proj.bias": np.zeros(24, np.float32)},
             "model.layers.0.self_attn.q_proj.bias"),
            ("a missing tensor", {k: v for k, v in st.items() if k != "model.layers.1.mlp.up_proj.weight"},
             "model.layers.1.mlp.up_proj.weight"),
            ("a wrong shape", {**st, "model.norm.weight": np.ones(7, np.float32)}, "model.norm.weight")):
        d = os.path.join(work, "bad")
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        shutil.copy(os.path.join(base, "config.json"), d)
        save_file(tensors, os.path.join(d, "model.safetensors"))
        refused(d, needle, what)
    refused(os.path.join(work, "nowhere"), "config.json", "a folder without config.json")
    exists = os.path.join(work, "imp_tied.h5")
    p = tool("import_hf.py", base, exists)
    check(p.returncode != 0 and "exists" in p.stderr, "an existing OUT.h5 is not overwritten")
    bpe_run()


TORCH_MAKE = r"""
import sys, torch
import transformers
out, tied, dtype, head_dim, arch = sys.argv[1], sys.argv[2] == "tied", sys.argv[3], int(sys.argv[4]), sys.argv[5]
scaled = arch == "llama3"  # Llama 3.2's kind: Llama with llama3 RoPE scaling
arch = "llama" if scaled else arch
Config, Model = {"qwen3": (transformers.Qwen3Config, transformers.Qwen3ForCausalLM),
                 "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM)}[arch]
cfg = Config(vocab_size=256, hidden_size=64, intermediate_size=160, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, head_dim=head_dim, max_position_embeddings=128,
             rms_norm_eps=1e-6, tie_word_embeddings=tied, initializer_range=0.25,
             # an original context of 32 puts head_dim 16's pairs in all three bands
             rope_parameters={"rope_type": "llama3", "rope_theta": 50000.0, "factor": 8.0,
                              "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                              "original_max_position_embeddings": 32}
             if scaled else {"rope_type": "default", "rope_theta": 50000.0})
torch.manual_seed(3 if tied else 4)
m = Model(cfg)
with torch.no_grad():  # gains away from 1, so the norms' placement matters
    for n, p in m.named_parameters():
        if "norm" in n:
            p.copy_(1 + 0.3 * torch.randn_like(p))
m.to(getattr(torch, dtype)).save_pretrained(out)
"""

TORCH_LOSS = r"""
import sys, h5py, numpy as np, torch
from transformers import AutoModelForCausalLM
m = AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype=torch.float32).eval()
t = h5py.File(sys.argv[2], "r")["tokens"][()].astype(np.int64)
seq = int(sys.argv[3])
w = torch.tensor(np.stack([t[seq * i: seq * i + seq + 1] for i in range((len(t) - 1) // seq)]))
with torch.no_grad():
    logits = m(w[:, :-1]).logits.double()
print(repr(torch.nn.functional.cross_entropy(logits.flatten(0, 1), w[:, 1:].flatten()).item()))
"""


TORCH_PIPELINE = r"""
import sys
from transformers import AutoTokenizer, pipeline
hf = sys.argv[1]
tok = AutoTokenizer.from_pretrained(hf)
text = "Document 7 says hello"
ids = tok(text)["input_ids"]
assert tok.decode(ids) == text, (ids, tok.decode(ids))
print("ROUNDTRIP ok", ids)
gen = pipeline("text-generation", model=hf, tokenizer=hf, device="cpu")
out = gen("Document", max_new_tokens=5, do_sample=False)[0]["generated_text"]
print("GENERATED " + repr(out))
"""


def with_transformers():
    py = os.environ.get("FSDP_TORCH_PYTHON")
    if not py or subprocess.run([py, "-c", "import torch, transformers"], capture_output=True).returncode:
        print("skipped: set FSDP_TORCH_PYTHON to a python with torch, transformers and h5py")
        sys.exit(77)
    val = val_file(6)
    # head_dim 32 over hidden_size 64 and 4 heads: wider than 64 / 4, as
    # Qwen3-0.6B's; Llama (no QK-norm) as SmolLM2, and with llama3 RoPE scaling as Llama 3.2.
    for arch, tied, dtype, hd in (("qwen3", False, "float32", 32), ("qwen3", True, "float32", 16),
                                  ("qwen3", False, "bfloat16", 32), ("llama", True, "float32", 16),
                                  ("llama", False, "float32", 32), ("llama3", True, "float32", 16)):
        tag = f"{arch}_{'tied' if tied else 'untied'}_{dtype}_hd{hd}"
        hf = os.path.join(work, "tf_" + tag)
        p = run([py, "-c", TORCH_MAKE, hf, "tied" if tied else "untied", dtype, str(hd), arch])
        check(p.returncode == 0, f"{tag}: transformers builds and saves the model ({p.stderr.strip()[-300:]})")
        out = os.path.join(work, f"tf_{tag}.h5")
        ini = import_ok(hf, out, tag)
        p = run([py, "-c", TORCH_LOSS, hf, val, str(SEQ)])
        check(p.returncode == 0, f"{tag}: transformers' loss ({p.stderr.strip()[-300:]})")
        want = float(p.stdout.strip() or "nan")
        check(abs(want - np.log(256)) > 0.5, f"{tag}: the model is far from uniform (loss {want:.3f})")
        for ranks in (1, 2, 3):
            loss = eval_loss(out, val, ranks, config=ini, tag=f"tf_{tag}_np{ranks}")
            check(abs(loss - want) <= 1e-5 * want,
                  f"{tag}: fsdptrain on {ranks} rank(s) {loss:.7f} == transformers' {want:.7f} (1e-5)")
        if arch == "llama3":  # the scaling matters: the same weights without it miss
            plain = hf + "_plain"
            shutil.copytree(hf, plain)
            cfg = json.load(open(os.path.join(plain, "config.json")))
            cfg.pop("rope_scaling", None)
            cfg["rope_parameters"] = {"rope_type": "default", "rope_theta": 50000.0}
            json.dump(cfg, open(os.path.join(plain, "config.json"), "w"))
            plain_ini = import_ok(plain, plain + ".h5", tag + " without scaling")
            loss = eval_loss(plain + ".h5", val, 1, config=plain_ini, tag=f"tf_{tag}_plain")
            check(abs(loss - want) > 1e-3,
                  f"{tag}: without the scaling fsdptrain gives {loss:.5f}, not transformers' {want:.5f}")
        back = os.path.join(work, "back_" + tag)
        p = tool("export_hf.py", out, back)
        check(p.returncode == 0, f"{tag}: export of the import exits 0")
        if dtype == "float32":
            a, b = load_file(os.path.join(hf, "model.safetensors")), load_file(os.path.join(back, "model.safetensors"))
            keys = [k for k in a if not (tied and k == "lm_head.weight")]
            check(all(k in b and np.array_equal(a[k].view(np.uint32), b[k].view(np.uint32)) for k in keys),
                  f"{tag}: exporting the import gives transformers' {len(keys)} tensors back bit for bit")
    exports_load_in_transformers(py, val)


def bpe_run():
    """A run on BPE tokens with an end-of-text token (prepare_data.py --tokenizer
    bpe), exported with its tokenizer (checked here without transformers);
    returns the export folder. Issue 65, item 4: an export carried no tokenizer."""
    text = os.path.join(work, "docs.txt")
    with open(text, "w") as f:
        for i in range(400):
            f.write(f"Document {i} says hello to the tokenizer and the model.\n<|endoftext|>\n")
    prefix = os.path.join(work, "bpe", "tok")
    p = tool("prepare_data.py", "text", text, "--out", prefix, "--tokenizer", "bpe", "--vocab-size", "300",
             "--doc-separator", "<|endoftext|>", "--val-fraction", "0.1")
    check(p.returncode == 0, f"bpe: prepare_data exits 0 ({p.stderr.strip()[-300:]})")
    ck = os.path.join(work, "own_bpe")
    p = run([exe, "--device", "cpu", "--model", "tiny", "--vocab-size", "384", "--train-data", prefix + "_train.h5",
             "--seq-len", str(SEQ), "--batch-size", "4", "--steps", "4", "--lr", "3e-3", "--checkpoint-dir", ck,
             "--checkpoint-every", "4"])
    check(p.returncode == 0, f"bpe: the run exits 0 ({p.stderr.strip()[-300:]})")
    hf = os.path.join(work, "own_hf_bpe")
    p = tool("export_hf.py", os.path.join(ck, "step_00000004.h5"), hf)
    check(p.returncode == 0 and "tokenizer.json" in p.stdout, f"bpe: export exits 0 and says tokenizer.json ({p.stdout.strip()[-200:]})")
    with h5py.File(prefix + "_train.h5", "r") as f:
        eos = int(f["tokens"].attrs["eos_id"])
    cfg = json.load(open(os.path.join(hf, "config.json")))
    tcfg = json.load(open(os.path.join(hf, "tokenizer_config.json"))) if os.path.exists(
        os.path.join(hf, "tokenizer_config.json")) else {}
    check(open(os.path.join(hf, "tokenizer.json")).read() == open(prefix + "_tokenizer.json").read(),
          "bpe: the export's tokenizer.json is the run's")
    check(cfg.get("eos_token_id") == eos and cfg.get("bos_token_id") == eos and tcfg.get("eos_token") == "<|endoftext|>",
          f"bpe: eos/bos ids {eos} in config.json, <|endoftext|> in tokenizer_config.json ({tcfg})")
    # a tokenizer named with --tokenizer that does not fit the model: nothing written
    out = os.path.join(work, "own_hf_bad")
    p = tool("export_hf.py", os.path.join(ck, "step_00000004.h5"), out, "--tokenizer", os.path.join(work, "none.json"))
    check(p.returncode != 0 and p.stderr.startswith("export_hf: error: --tokenizer") and not os.path.exists(out),
          f"bpe: a missing --tokenizer is one line, nothing written ({p.stderr.strip()[-200:]})")
    return hf


def exports_load_in_transformers(py, val):
    """The other direction: fsdptrain's own runs, exported, load in transformers
    and give fsdptrain's --eval-only loss (Qwen3 with wider heads; a Llama with
    llama3 scaling)."""
    for tag, flags in (("qwen3_hd24", ["--tie-embeddings", "false", "--head-dim", "24"]),
                       ("llama3", ["--qk-norm", "false", "--rope-scaling-factor", "8",
                                   "--rope-original-context", "16"])):
        ck = os.path.join(work, "own_" + tag)
        p = run([exe, "--device", "cpu", "--model", "tiny", "--train-data",
                 os.path.join(example, "kjv_train.h5"), "--seq-len", str(SEQ), "--batch-size", "4",
                 "--steps", "6", "--lr", "3e-3", *flags, "--checkpoint-dir", ck, "--checkpoint-every", "6"])
        check(p.returncode == 0, f"own {tag}: the run exits 0 ({p.stderr.strip()[-300:]})")
        saved = os.path.join(ck, "step_00000006.h5")
        ours = eval_loss(saved, val, tag=f"own_{tag}", model=("--model", "tiny", *flags))
        hf = os.path.join(work, "own_hf_" + tag)
        check(tool("export_hf.py", saved, hf).returncode == 0, f"own {tag}: export exits 0")
        p = run([py, "-c", TORCH_LOSS, hf, val, str(SEQ)])
        theirs = float(p.stdout.strip() or "nan")
        check(abs(theirs - ours) <= 1e-5 * ours,
              f"own {tag}: the export in transformers {theirs:.7f} == fsdptrain's {ours:.7f} (1e-5)")
    # the exports' tokenizers in transformers: the byte run's (made by export_hf)
    # and a BPE run's; pipeline("text-generation") on the export folder alone
    for hf in (os.path.join(work, "own_hf_llama3"), bpe_run()):
        p = run([py, "-c", TORCH_PIPELINE, hf])
        check(p.returncode == 0 and "ROUNDTRIP ok" in p.stdout and "GENERATED " in p.stdout,
              f"{os.path.basename(hf)}: AutoTokenizer and pipeline('text-generation') work on the export "
              f"({(p.stdout + p.stderr).strip()[-300:]})")


shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
formats() if mode == "formats" else with_transformers()
if failures:
    sys.exit(f"{len(failures)} check(s) failed")
print(f"test_import_hf {mode}: all checks passed")
