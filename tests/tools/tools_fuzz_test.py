#!/usr/bin/env python3
"""Fuzz test of the Python tools' untrusted inputs (issue 65), in the style of
tests/src/fuzz_test.py: seeded mutants of a real Hugging Face folder for
tools/import_hf.py and of a real checkpoint for tools/export_hf.py.

A short fsdptrain run writes a checkpoint; export_hf.py turns it into a
Hugging Face folder (config.json, model.safetensors). Mutants of that folder
(config.json not JSON, not an object, a field deleted or given a value of
the wrong type or out of range; model.safetensors truncated, extended, its
header length or bytes changed) go through import_hf.py; mutants of the
checkpoint (truncated, bytes changed anywhere) go through export_hf.py.
Every run must either
- exit 0, and then what it wrote must be sound: an import's checkpoint
  loads in fsdptrain (--eval-only with its OUT.ini exits 0); an export's
  tensors equal the unmutated export's bit for bit; or
- exit non-zero with exactly one line on stderr, `import_hf: error: ...` or
  `export_hf: error: ...`, no traceback, and nothing written (no OUT.h5,
  OUT.ini or .tmp; no export folder).

usage: tools_fuzz_test.py FSDPTRAIN EXAMPLE_DIR TOOLS_DIR WORK_DIR
env:   FSDP_TOOLS_FUZZ_SEED (default 65), FSDP_TOOLS_FUZZ_IMPORTS (80),
       FSDP_TOOLS_FUZZ_EXPORTS (40), FSDP_TOOLS_FUZZ_JOBS (2).
Failing mutants stay in WORK_DIR with a .txt naming their mutation and the
command that shows the failure."""
import concurrent.futures
import json
import os
import random
import shutil
import subprocess
import sys

import numpy as np
from safetensors.numpy import load_file

exe, example, tools, work = sys.argv[1:5]
SEED = int(os.environ.get("FSDP_TOOLS_FUZZ_SEED", "65"))
N_IMPORT = int(os.environ.get("FSDP_TOOLS_FUZZ_IMPORTS", "80"))
N_EXPORT = int(os.environ.get("FSDP_TOOLS_FUZZ_EXPORTS", "40"))
JOBS = int(os.environ.get("FSDP_TOOLS_FUZZ_JOBS", "2"))
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
MODEL = ["--model", "tiny", "--n-layer", "1", "--d-model", "32", "--n-head", "2", "--n-kv-head", "1",
         "--d-ff", "64"]
VAL = os.path.join(example, "kjv_val.h5")


def run(cmd, timeout=120):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def tool(name, *args):
    return run([sys.executable, os.path.join(tools, name), *args])


# ---- the originals ------------------------------------------------------------------------
ck = os.path.join(work, "ck")
p = run([exe, "--device", "cpu", *MODEL, "--train-data", os.path.join(example, "kjv_train.h5"), "--seq-len", "16",
         "--batch-size", "2", "--steps", "2", "--checkpoint-dir", ck, "--checkpoint-every", "2"])
if p.returncode != 0:
    sys.exit(f"the source run failed: {p.stderr[-500:]}")
CKPT = os.path.join(ck, "step_00000002.h5")
HF = os.path.join(work, "hf")
p = tool("export_hf.py", CKPT, HF)
if p.returncode != 0:
    sys.exit(f"the source export failed: {p.stderr[-500:]}")
WANT = load_file(os.path.join(HF, "model.safetensors"))
CONFIG = json.load(open(os.path.join(HF, "config.json")))
ST = open(os.path.join(HF, "model.safetensors"), "rb").read()

# values a config.json field may be given: wrong types, out of range, extremes
VALUES = [None, -1, 0, 1, 2, 3, 7, 2.5, -0.5, 1e-50, 1e39, 2 ** 40, float("nan"), float("inf"), "4", "", True,
          False, [], [4], {}, {"rope_type": "yarn"}, {"rope_type": "llama3", "factor": "x"}]


def mutate_config(rng):
    """(config.json text, what was done)."""
    cfg = dict(CONFIG)
    kind = rng.choice(["value", "value", "value", "delete", "notjson", "notobject"])
    if kind == "notjson":
        text = json.dumps(cfg)
        cut = rng.randrange(1, len(text))
        return text[:cut] + rng.choice(["", "}", "\x00", "\xff"]), f"config.json cut at {cut}"
    if kind == "notobject":
        v = rng.choice([[], 3, "x", None])
        return json.dumps(v), f"config.json is {v!r}"
    key = rng.choice(sorted(cfg) + ["rope_scaling", "head_dim", "num_key_value_heads"])
    if kind == "delete":
        cfg.pop(key, None)
        return json.dumps(cfg), f"config.json without {key}"
    v = rng.choice(VALUES)
    cfg[key] = v
    return json.dumps(cfg), f"config.json {key} = {v!r}"


def mutate_safetensors(rng):
    """(model.safetensors bytes, what was done)."""
    data = bytearray(ST)
    n = int.from_bytes(ST[:8], "little")
    kind = rng.choice(["truncate", "extend", "length", "header", "anywhere"])
    if kind == "truncate":
        cut = rng.randrange(0, len(data))
        return bytes(data[:cut]), f"model.safetensors cut at {cut} of {len(data)}"
    if kind == "extend":
        return bytes(data) + bytes(rng.randrange(1, 64)), "model.safetensors extended"
    if kind == "length":
        v = rng.choice([0, 1, n - 1, n + 1, len(data), 2 ** 63, rng.randrange(0, 2 ** 64)])
        data[:8] = v.to_bytes(8, "little")
        return bytes(data), f"header length {v} (was {n})"
    lo, hi = (8, 8 + n) if kind == "header" else (0, len(data))
    where = sorted(rng.sample(range(lo, hi), rng.randint(1, 4)))
    for i in where:
        data[i] = rng.randrange(256)
    return bytes(data), f"model.safetensors bytes {where} changed ({kind})"


def one_line(p, prefix):
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    return p.returncode > 0 and len(lines) == 1 and lines[0].startswith(prefix)


def import_case(i):
    rng = random.Random(SEED * 1000 + i)
    d = os.path.join(work, f"imp{i:03d}")
    src = os.path.join(d, "hf")
    shutil.copytree(HF, src)
    what = []
    if rng.random() < 0.6:
        text, w = mutate_config(rng)
        open(os.path.join(src, "config.json"), "w").write(text)
        what.append(w)
    if not what or rng.random() < 0.5:
        data, w = mutate_safetensors(rng)
        open(os.path.join(src, "model.safetensors"), "wb").write(data)
        what.append(w)
    out = os.path.join(d, "out.h5")
    p = tool("import_hf.py", src, out)
    if p.returncode == 0:
        ini = os.path.join(d, "out.ini")
        flags = dict(l.split(" = ", 1) for l in open(ini).read().splitlines() if " = " in l)
        seq = str(min(16, int(flags.get("max-seq-len", "16"))))
        e = run([exe, "--device", "cpu", "--config", ini, "--init-from", out, "--eval-only", "--val-data", VAL,
                 "--seq-len", seq, "--batch-size", "1", "--eval-batches", "1"])
        ok = e.returncode == 0
        why = "" if ok else f"imported, then refused by fsdptrain: {e.stderr.strip()[-300:]}"
    else:
        left = [f for f in os.listdir(d) if f.startswith("out")]
        ok = one_line(p, "import_hf: error:") and not left
        why = "" if ok else f"exit {p.returncode}, stderr {p.stderr.strip()[-400:]!r}, left {left}"
    if ok:
        shutil.rmtree(d)
    else:
        open(os.path.join(d, "case.txt"), "w").write(
            f"{'; '.join(what)}\n{why}\n{sys.executable} {tools}/import_hf.py {src} {out}\n")
    return ok, f"import {i}: {'; '.join(what)}: {why or 'ok'}"


def export_case(i):
    rng = random.Random(SEED * 2000 + i)
    d = os.path.join(work, f"exp{i:03d}")
    os.makedirs(d)
    data = bytearray(open(CKPT, "rb").read())
    if rng.random() < 0.3:
        cut = rng.randrange(0, len(data))
        data, what = data[:cut], f"checkpoint cut at {cut} of {len(data)}"
    else:
        where = sorted(rng.sample(range(len(data)), rng.randint(1, 8)))
        for j in where:
            data[j] = rng.randrange(256)
        what = f"checkpoint bytes {where[:8]} changed"
    mut = os.path.join(d, "mut.h5")
    open(mut, "wb").write(bytes(data))
    out = os.path.join(d, "out")
    p = tool("export_hf.py", mut, out)
    if p.returncode == 0:
        got = load_file(os.path.join(out, "model.safetensors"))
        ok = set(got) == set(WANT) and all(np.array_equal(got[k].view(np.uint32), WANT[k].view(np.uint32))
                                           for k in WANT)
        why = "" if ok else "exported tensors that differ from the original's"
    else:
        ok = one_line(p, "export_hf: error:") and not os.path.exists(out)
        why = "" if ok else f"exit {p.returncode}, stderr {p.stderr.strip()[-400:]!r}, out left: {os.path.exists(out)}"
    if ok:
        shutil.rmtree(d)
    else:
        open(os.path.join(d, "case.txt"), "w").write(f"{what}\n{why}\n{sys.executable} {tools}/export_hf.py {mut} {out}\n")
    return ok, f"export {i}: {what}: {why or 'ok'}"


with concurrent.futures.ThreadPoolExecutor(JOBS) as pool:
    results = list(pool.map(import_case, range(N_IMPORT))) + list(pool.map(export_case, range(N_EXPORT)))
bad = [r for ok, r in results if not ok]
for r in bad:
    print("FAIL " + r[:600])
print(f"tools fuzz (seed {SEED}): {len(results) - len(bad)} of {len(results)} mutants handled "
      f"({N_IMPORT} import_hf, {N_EXPORT} export_hf)")
sys.exit(1 if bad else 0)
