#!/usr/bin/env bash
# muon_vs_adamw.sh - issue 33's evidence: AdamW against Muon on the built-in
# corpus (byte-level KJV, tools/make_example.sh), equal steps, a small grid of
# learning rates each, on the CPU.
#
#   bash bench/optim/muon_vs_adamw.sh OUTDIR [PNG]
#
# The model and batches are the demo's (tools/tiny_demo.ini: `tiny`, 8 x 64
# tokens a step) for STEPS steps (default 600) with a cosine to lr/10 after 20
# warm-up steps, validated every 50 steps on 16 batches. Each of LRS (default
# 1e-3 3e-3 1e-2 3e-2) runs once with --optimizer adamw and once with
# --optimizer muon (its defaults: momentum 0.95, Nesterov, 5 Newton-Schulz
# steps, match_rms_adamw, so the same learning rates apply). Then
# bench/optim/muon_report.py prints the table (final and best validation
# loss, seconds, the steps Muon needs to reach AdamW's best final loss) and
# draws validation loss against step and against training seconds (default
# PNG docs/muon_vs_adamw.png). JOBS (default 2) runs in parallel.
set -euo pipefail
if [ $# -lt 1 ] || [ $# -gt 2 ]; then sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 2; fi
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=$1 png=${2:-$root/docs/muon_vs_adamw.png}
exe=${FSDPTRAIN:-$root/build/src/fsdptrain}
STEPS=${STEPS:-600} LRS=${LRS:-1e-3 3e-3 1e-2 3e-2} JOBS=${JOBS:-2}
mkdir -p "$out"
bash "$root/tools/make_example.sh" "$root/build/example" >/dev/null
one() {  # OPTIMIZER LR
  local name=$1_lr$2
  local min; min=$(python3 -c "print(f'{$2 / 10:g}')")
  "$exe" --config "$root/tools/tiny_demo.ini" --train-data "$root/build/example/kjv_train.h5" \
    --val-data "$root/build/example/kjv_val.h5" --steps "$STEPS" --lr "$2" --min-lr "$min" \
    --eval-every 50 --eval-batches 16 --log-every 100 --samples 0 --optimizer "$1" \
    --metrics "$out/$name.jsonl" > "$out/$name.log" 2>&1 || { echo "muon_vs_adamw: $name failed ($out/$name.log)"; return 1; }
  echo "  $name: $(grep -o 'val_loss [0-9.]*' "$out/$name.log" | tail -1)"
}
export -f one; export root out exe STEPS
echo "muon_vs_adamw: $STEPS steps, lr in {$LRS}, $JOBS at a time, into $out"
for opt in adamw muon; do for lr in $LRS; do echo "$opt $lr"; done; done |
  xargs -P "$JOBS" -L 1 bash -c 'one "$0" "$1"'
python_bin=$root/.venv/bin/python; [ -x "$python_bin" ] || python_bin=python3
"$python_bin" "$root/bench/optim/muon_report.py" "$out"/*.jsonl --png "$png"
