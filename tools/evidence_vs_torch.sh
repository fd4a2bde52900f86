#!/usr/bin/env bash
# Evidence for docs/CHECKING.md (issue 11): fsdptrain's CPU fp32 training curve on
# the example corpus beside PyTorch's, trained from the same checkpoint on the
# same batches.
#
#   tools/evidence_vs_torch.sh OUTDIR [PNG]
#
# 1. the King James Bible (bible-kjv) -> BPE tokens, vocab 4096, last 5% for
#    validation (OUTDIR/kjv_bpe_{train,val}.h5);
# 2. fsdptrain, 2.41M parameters (4 layers, d_model 192, 4/2 heads, SwiGLU
#    512, tied embeddings, context 128), 4 x 128 tokens a step, $STEPS steps
#    (default 2000), validation every 100 steps. fsdptrain cannot save before
#    its first step, so the run stops after step 1 with a checkpoint and goes
#    on with --resume auto: the curve is one run, and its state after step 1
#    is the file both continue from;
# 3. tools/torch_reference.py continues that checkpoint for the remaining
#    steps in fp32 on the CPU (same batches, schedule, clipping, AdamW
#    moments) and writes its curve (OUTDIR/torch.jsonl);
# 4. a rounding baseline: the same replay with every starting weight
#    multiplied by 1 + 1e-7 N(0,1) (about one fp32 rounding), $BASELINE_STEPS
#    steps (default 300, past where the gap stops growing; 0: skip),
#    OUTDIR/torch_perturbed.jsonl; and fsdptrain on 2 ranks x 2 sequences
#    (same batches, another summation order) as long, fsdptrain_np2.jsonl;
# 5. the gaps (worst per-step relative loss gap, worst gap of 50-step means,
#    per phase, validation), and the overlay PNG (default
#    docs/example_vs_torch.png) drawn by tools/plot_metrics.py.
#
# Environment: FSDPTRAIN (default build/src/fsdptrain), TORCH_PYTHON (a python
# with torch, h5py, numpy; default python3), STEPS, BASELINE_STEPS, and FROM=N
# to start at stage N (3: reuse OUTDIR's data and fsdptrain run; 5: only the
# gaps and the picture).
# CPU only, one process at a time (2 cores: ~9 min fsdptrain, ~15 min each
# PyTorch replay).
set -euo pipefail

if [ $# -lt 1 ] || [ $# -gt 2 ] || [ "$1" = -h ] || [ "$1" = --help ]; then
  sed -n '2,34p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=$(mkdir -p "$1" && cd "$1" && pwd)
png=${2:-$root/docs/example_vs_torch.png}
exe=${FSDPTRAIN:-$root/build/src/fsdptrain}
py=${TORCH_PYTHON:-python3}
steps=${STEPS:-2000}
baseline_steps=${BASELINE_STEPS:-300}
from=${FROM:-1}
x() { echo "+ $*"; "$@"; }

"$py" -c 'import torch, h5py, numpy' || {
  echo "evidence_vs_torch: error: '$py' lacks torch/h5py/numpy; set TORCH_PYTHON" >&2
  exit 1
}
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "torch $("$py" -c 'import torch; print(torch.__version__, "threads", torch.get_num_threads())')"
echo "fsdptrain: $exe (commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?'))"

# 1. data
if [ "$from" -le 1 ] && { [ ! -s "$out/kjv_bpe_train.h5" ] || [ ! -s "$out/kjv_bpe_val.h5" ]; }; then
  bible "Gen1:1-Rev22:21" >"$out/kjv.txt"
  x python3 "$root/tools/prepare_data.py" text "$out/kjv.txt" --out "$out/kjv_bpe" \
    --tokenizer bpe --vocab-size 4096 --val-fraction 0.05 --workers 1
fi

# 2. fsdptrain
run=(--device cpu --model tiny --vocab-size 4096 --n-layer 4 --d-model 192 --n-head 4 --n-kv-head 2
     --d-ff 512 --max-seq-len 128 --seq-len 128 --batch-size 4
     --train-data "$out/kjv_bpe_train.h5" --val-data "$out/kjv_bpe_val.h5"
     --steps "$steps" --lr 1e-3 --min-lr 1e-4 --warmup-steps 50 --eval-every 100 --log-every 100
     --checkpoint-dir "$out/ck" --metrics "$out/fsdptrain.jsonl")
ck=$out/ck/step_00000001.h5
if [ "$from" -le 2 ]; then
  rm -rf "$out/ck" "$out/fsdptrain.jsonl" "$out/torch.jsonl" "$out/torch_perturbed.jsonl"
  x "$exe" "${run[@]}" --stop-at-step 1
  x "$exe" "${run[@]}" --resume auto
fi

# 3. PyTorch from the same checkpoint (tolerance 1: report, do not stop)
if [ "$from" -le 3 ]; then
  x "$py" "$root/tools/torch_reference.py" "$ck" --steps $((steps - 1)) --metrics "$out/fsdptrain.jsonl" \
    --write-metrics "$out/torch.jsonl" --tolerance 1 --log-every 100
fi

# 4. rounding baseline: PyTorch against itself, perturbed by ~1 fp32 rounding
if [ "$from" -le 4 ] && [ "$baseline_steps" -gt 0 ]; then
  x "$py" "$root/tools/torch_reference.py" "$ck" --steps "$baseline_steps" --perturb 1e-7 \
    --write-metrics "$out/torch_perturbed.jsonl" --log-every 100
  # and fsdptrain against itself on 2 ranks (same batches, gradients summed in
  # another order), the same $BASELINE_STEPS steps
  rm -rf "$out/np2_ck" "$out/fsdptrain_np2.jsonl"
  np2=("${run[@]}")
  for i in "${!np2[@]}"; do
    case ${np2[$i]} in --batch-size) np2[$((i + 1))]=2 ;; --checkpoint-dir) np2[$((i + 1))]=$out/np2_ck ;;
      --metrics) np2[$((i + 1))]=$out/fsdptrain_np2.jsonl ;; --eval-every) np2[$((i + 1))]=0 ;; esac
  done
  x "${MPIEXEC:-mpirun}" --allow-run-as-root --oversubscribe -np 2 "$exe" "${np2[@]}" --stop-at-step "$baseline_steps"
fi

# 5. gaps and picture
x python3 - "$out/fsdptrain.jsonl" "$out/torch.jsonl" "$out/torch_perturbed.jsonl" "$out/fsdptrain_np2.jsonl" <<'EOF'
import json, os, sys

def curve(path, key):
    d = {}
    if os.path.exists(path):
        for line in open(path):
            r = json.loads(line)
            if key in r:
                d[r["step"]] = r[key]  # a resumed file: the later record wins
    return d

def gaps(a, b, name):
    steps = sorted(set(a) & set(b))
    if not steps:
        return
    rel = {s: abs(a[s] - b[s]) / abs(a[s]) for s in steps}
    s_max = max(rel, key=rel.get)
    print(f"{name}: steps {steps[0]}..{steps[-1]} ({len(steps)}): worst per-step relative loss gap "
          f"{rel[s_max]:.2e} at step {s_max} ({a[s_max]:.6f} vs {b[s_max]:.6f}); "
          f"median {sorted(rel.values())[len(rel) // 2]:.2e}")
    worst_w = (0.0, None)
    for i in range(0, len(steps) - 49, 50):
        w = steps[i:i + 50]
        ma, mb = sum(a[s] for s in w) / 50, sum(b[s] for s in w) / 50
        worst_w = max(worst_w, (abs(ma - mb) / ma, (w[0], w[-1], ma, mb)), key=lambda z: z[0])
    if worst_w[1]:
        lo, hi, ma, mb = worst_w[1]
        print(f"{name}: worst relative gap of 50-step means {worst_w[0]:.2e} (steps {lo}..{hi}: "
              f"{ma:.6f} vs {mb:.6f})")
    for lo, hi in [(2, 10), (11, 50), (51, 100), (101, 200), (201, 500), (501, 1000), (1001, 10**9)]:
        r = [rel[s] for s in steps if lo <= s <= hi]
        if r:
            print(f"  steps {lo}..{min(hi, steps[-1])}: worst {max(r):.2e}, mean {sum(r) / len(r):.2e}")

f, t, p, n2 = sys.argv[1:5]
gaps(curve(f, "loss"), curve(t, "loss"), "fsdptrain vs torch")
gaps(curve(t, "loss"), curve(p, "loss"), "torch vs torch perturbed 1e-7 (rounding baseline)")
gaps(curve(f, "loss"), curve(n2, "loss"), "fsdptrain 1 rank vs 2 ranks (reduction-order baseline)")
vf, vt = curve(f, "val_loss"), curve(t, "val_loss")
common = sorted(set(vf) & set(vt))
if common:
    worst = max(common, key=lambda s: abs(vf[s] - vt[s]) / vf[s])
    print(f"validation: {len(common)} evaluations, worst relative gap {abs(vf[worst] - vt[worst]) / vf[worst]:.2e} "
          f"at step {worst} ({vf[worst]:.5f} vs {vt[worst]:.5f}); last (step {common[-1]}): "
          f"{vf[common[-1]]:.5f} vs {vt[common[-1]]:.5f}")
EOF
x python3 "$root/tools/plot_metrics.py" "$out/fsdptrain.jsonl" "$out/torch.jsonl" --labels fsdptrain,pytorch \
  --title "example corpus (KJV, BPE 4096), 2.41M params, CPU fp32: fsdptrain vs PyTorch from the step-1 checkpoint" \
  --dpi 70 -o "$png" --summary
ls -l "$png"
