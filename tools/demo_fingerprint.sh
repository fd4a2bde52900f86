#!/usr/bin/env bash
# The CPU demo's fingerprint, for a refactor that must keep the default path
# bitwise: run it before and after the change, on the same machine (OpenBLAS
# picks its kernels by CPU), and compare the output line for line.
#
# Prints one digest of the demo's metrics (every step's loss, grad norm and
# learning rate, the validation losses, the samples' text) and one of its
# final checkpoint's content: every dataset's bytes and every attribute, by
# name, but for the data files' paths in its config. The checkpoint file
# itself differs run to run in HDF5's object timestamps, which the content
# digest leaves out.
#
# Usage: tools/demo_fingerprint.sh [extra fsdptrain flags, e.g. --precision fp8]
set -euo pipefail
source "$(dirname "$0")/python_env.sh"
build=${BUILD_DIR:-$fsdp_root/build}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if ! "$build/src/fsdptrain" --config "$fsdp_root/tools/tiny_demo.ini" \
  --train-data "$build/example/kjv_train.h5" --val-data "$build/example/kjv_val.h5" \
  --metrics "$work/metrics.jsonl" --checkpoint-dir "$work/ck" "$@" >"$work/log" 2>&1; then
  cat "$work/log" >&2
  echo "demo_fingerprint: error: the demo failed (log above)" >&2
  exit 1
fi
"$fsdp_python" - "$work" <<'PY'
import hashlib, json, sys, h5py, numpy as np
work = sys.argv[1]
keys = ("step", "loss", "val_loss", "grad_norm", "lr", "text")
m = hashlib.sha256()
lines = 0
for line in open(f"{work}/metrics.jsonl"):
    d = json.loads(line)
    if "step" not in d:  # the run record: when and how the run started, not its result
        continue
    m.update(json.dumps({k: d[k] for k in keys if k in d}, sort_keys=True).encode())
    lines += 1
print(f"metrics     {m.hexdigest()}  ({lines} lines)")
latest = open(f"{work}/ck/latest").read().strip()
c = hashlib.sha256()
def visit(name, obj):
    c.update(name.encode())
    for k in sorted(obj.attrs):
        v = obj.attrs[k]
        if name == "/" and k == "config":  # where the data files lie is not the run's result
            v = b"\n".join(l for l in v.split(b"\n") if not l.startswith((b"train-data", b"val-data")))
        c.update(k.encode() + np.asarray(v).tobytes())
    if isinstance(obj, h5py.Dataset):
        c.update(np.ascontiguousarray(obj[()]).tobytes())
with h5py.File(f"{work}/ck/{latest}", "r") as f:
    visit("/", f)
    f.visititems(visit)
print(f"checkpoint  {c.hexdigest()}  ({latest})")
PY
