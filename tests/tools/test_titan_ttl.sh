#!/usr/bin/env bash
# CTest: issue 63's torchtitan race, rehearsed on the CPU through the path the GPU
# call takes: bench/cuda/titan_wheels.sh's wheels installed by bench/cuda/ttl_run.sh
# (--no-index --target), torchtitan's Trainer through bench/cuda/titan_ttl.py at the
# tiny shape (bf16 compiled; float8 tensorwise emulated, eager), then
# bench/cuda/ttl_report.py --ref best:torchtitan.
#
#   test_titan_ttl.sh REPO EXAMPLE_DIR WORK
#
# Skipped (exit 77) unless FSDP_TORCH_PYTHON names a Python with torch 2.11 (as the
# GPU image's) and h5py, as the other torch tests. TITAN_WHEELS names a folder of
# titan_wheels.sh's wheels for that Python; without it they are downloaded (PyPI).
# Checks: torchtitan's data loader gives fsdptrain's batches; both runs end with exit 0 and validate at steps 0, 10 and 20; the loss falls
# by more than 1 nat from step 0 to 20 (a model that learns: 5.5 from 256-way chance);
# the float8 run has 14 of 15 linears in float8 (the tied head stays bf16), the bf16
# run none; a count --plan-budget fixed gives the run of that --steps bit for bit; the
# report names the better run as its reference; the profile system (profile_bf16)
# gives both programs' step profiles side by side. About 3 minutes.
set -uo pipefail
repo=$1 example=$2 work=$3
py=${FSDP_TORCH_PYTHON:-}
if [ -z "$py" ] || ! "$py" -c 'import torch, h5py' 2> /dev/null; then
  echo "skipped: FSDP_TORCH_PYTHON does not name a Python with torch and h5py"
  exit 77
fi
ver=$("$py" -c 'import torch; print(torch.__version__.split("+")[0])')
case $ver in 2.11.*) ;; *) echo "skipped: torch $ver; the pins are for 2.11 (the GPU image's)"; exit 77 ;; esac
fails=0
check() { if eval "$1"; then echo "ok: $2"; else echo "FAIL: $2"; fails=$((fails + 1)); fi; }

rm -rf "$work" && mkdir -p "$work/carry"
cp "$example/kjv_train.h5" "$work/carry/english_train.h5"
# a validation file of 128 windows: the CPU evaluates it in about a second
"$py" - "$example/kjv_val.h5" "$work/carry/english_val.h5" <<'EOF'
import sys, h5py
with h5py.File(sys.argv[1], "r") as f, h5py.File(sys.argv[2], "w") as g:
    g["tokens"] = f["tokens"][:128 * 64 + 1]
EOF
if [ -n "${TITAN_WHEELS:-}" ]; then
  cp -r "$TITAN_WHEELS" "$work/carry/titan_wheels"
else
  PY_VERSION=$("$py" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")') \
    OUT_DIR="$work/carry/titan_wheels" bash "$repo/bench/cuda/titan_wheels.sh" ||
    { echo "skipped: could not download the wheels (no PyPI?)"; exit 77; }
fi
# The Python must not already hold torchtitan: the rehearsal is of the carried wheels.
if "$py" -c 'import torchtitan' 2> /dev/null; then
  echo "note: $py already has torchtitan; the wheels under WORK come first on PYTHONPATH"
fi

OUT=$work/out WORK=$work/ttl TTL_CARRY=$work/carry TTL_DEVICE=cpu TTL_PYTHON=$py OMP_NUM_THREADS=2 \
  SYSTEMS='titan titan_fp8_tensorwise' MODEL=tiny VOCAB=256 BATCH=4 SEQ=64 TITAN_BUDGET_S=0 STEPS_TITAN=20 STEPS_TITAN_FP8=20 \
  EVAL_EVERY=10 WARMUP=5 bash "$repo/bench/cuda/ttl_run.sh" > "$work/ttl_run.txt" 2>&1
cat "$work/ttl_run.txt"
log=$work/out/ttl_log.txt
for run in torchtitan_bf16 torchtitan_fp8_tensorwise; do
  m=$work/out/ttl_$run.jsonl
  check "[ -s '$m' ]" "$run wrote its metrics"
  check "\"$py\" - '$m' <<'EOF'
import json, sys
vals = {l['step']: l['val_loss'] for l in map(json.loads, open(sys.argv[1])) if 'val_loss' in l}
sys.exit(0 if sorted(vals) == [0, 10, 20] and vals[0] - vals[20] > 1.0 else 1)
EOF" "$run validated at steps 0, 10, 20 and its loss fell by > 1 nat"
done
check "grep -q '(titan: .* exit 0)' '$log' && grep -q '(titan_fp8_tensorwise: .* exit 0)' '$log'" "both runs exit 0"
check "grep -q 'titan_ttl: 0 of 15 linear layers in float8' '$log'" "bf16 run: no float8 linears"
check "grep -q 'titan_ttl: 14 of 15 linear layers in float8' '$log'" "float8 run: 14 of 15 linears (head kept)"
# The same tokens as torch_ttl.py (and fsdptrain): torchtitan's first three batches
# against tools/torch_reference.py's window_of, row for row.
check "PYTHONPATH='$work/ttl/titan_site' \"$py\" - '$repo' '$work/carry' <<'EOF'
import runpy, sys
import numpy as np, torch
repo, carry = sys.argv[1], sys.argv[2]
sys.argv = ['titan_ttl.py', '--device', 'cpu', '--model', 'tiny', '--vocab-size', '256', '--batch-size', '4',
            '--seq-len', '64', '--steps', '3', '--train-data', carry + '/english_train.h5',
            '--val-data', carry + '/english_val.h5', '--metrics', '/dev/null']
ns = runpy.run_path(repo + '/bench/cuda/titan_ttl.py', run_name='batches')  # its definitions, not main()
ref, toks, T, G = ns['ref'], ns['train_tokens'], 64, 4
job = type('Job', (), {'training': type('Training', (), {'local_batch_size': G})})()
W, seed = (len(toks) - 1) // T, 1337 & ref.M64
for s, (inp, lab) in zip(range(3), ns['build_dataloader'](1, 0, None, job)):
    rows = torch.from_numpy(np.stack([toks[w * T: w * T + T + 1]
                                      for w in (ref.window_of(s * G + j, W, seed) for j in range(G))]))
    if not (torch.equal(inp['input'], rows[:, :-1]) and torch.equal(lab, rows[:, 1:])):
        sys.exit(f'step {s}: torchtitan batch differs')
EOF" "torchtitan's batches are fsdptrain's windows (steps 0-2)"
# --plan-budget: the count fixed from timed warmup steps, then a run bit for bit
# that of --steps N (eager on the CPU: deterministic).
plan=(--device cpu --model tiny --vocab-size 256 --batch-size 4 --seq-len 64 --eval-every 10 --warmup-steps 20
      --log-every 1 --train-data "$work/carry/english_train.h5" --val-data "$work/carry/english_val.h5")
PYTHONPATH=$work/ttl/titan_site OMP_NUM_THREADS=2 "$py" "$repo/bench/cuda/titan_ttl.py" "${plan[@]}" --steps 400 \
  --plan-budget 3 --metrics "$work/plan.jsonl" > "$work/plan.txt" 2>&1
n=$(grep -c '"loss"' "$work/plan.jsonl")
PYTHONPATH=$work/ttl/titan_site OMP_NUM_THREADS=2 "$py" "$repo/bench/cuda/titan_ttl.py" "${plan[@]}" --steps "$n" \
  --metrics "$work/fixed.jsonl" > "$work/fixed.txt" 2>&1
grep '^titan_ttl: --plan-budget' "$work/plan.txt"
check "grep -q '^titan_ttl: --plan-budget 3 s: .*: $n steps' '$work/plan.txt' && [ $n -gt 21 ] && [ $n -lt 400 ]" \
  "--plan-budget 3 fixed a count ($n) past the warmup, under the cap"
check "cmp -s <(sed 's/, \"train_s\": [0-9.e-]*//' '$work/plan.jsonl') <(sed 's/, \"train_s\": [0-9.e-]*//' '$work/fixed.jsonl')" \
  "the planned run's losses and rates equal --steps $n's bit for bit"
# The profile system (issue 63's "where the difference is"): fsdptrain --profile-ops
# (from this build, bundled as prepare_carry.sh's rehearsal does) and torchtitan under
# torch.profiler, side by side in profile_compare.py's categories.
build=$(cd "$example/.." && pwd)
if [ -x "$build/src/fsdptrain" ]; then
  REHEARSAL_FROM=$build CARRY=$work/fsdp_carry bash "$repo/bench/cuda/prepare_carry.sh" > "$work/prepare.txt" 2>&1
  OUT=$work/prof WORK=$work/ttl TTL_CARRY=$work/carry CARRY=$work/fsdp_carry TTL_DEVICE=cpu TTL_PYTHON=$py \
    OMP_NUM_THREADS=2 SYSTEMS=profile_bf16 MODEL=tiny VOCAB=256 BATCH=4 SEQ=64 PROFILE_STEPS=16 PROFILE_WINDOW=13:16 \
    bash "$repo/bench/cuda/ttl_run.sh" > "$work/prof_run.txt" 2>&1
  cmp=$work/prof/profile_compare_bf16.txt
  cat "$cmp" 2>/dev/null | head -12
  check "grep -q 'profiled steps 13-16: .* unprofiled steps 3-12' '$work/prof/ttl_log.txt'" \
    "torchtitan profiled steps 13-16, timed the 10 before unprofiled"
  check "awk '\$1 == \"gemm\" && \$2 > 0 && \$3 > 0 {ok = 1} \$1 == \"kernels\" && \$2 > 0 && \$3 > 0 {k = 1}
             \$1 == \"step\" && \$2 > 0 && \$3 > 0 {s = 1} END {exit !(ok && k && s)}' '$cmp'" \
    "profile_compare: both programs' GEMMs, kernel sums and step times"
else
  echo "note: no $build/src/fsdptrain: the profile system not rehearsed"
fi
"$py" "$repo/bench/cuda/ttl_report.py" "$work"/out/ttl_*.jsonl --ref best:torchtitan --device cpu --model tiny \
  --tokens-per-step 256 > "$work/report.txt" 2>&1
cat "$work/report.txt"
check "grep -q '^ttl_report: reference torchtitan_' '$work/report.txt' && [ \$(grep -c '^TTL system=torchtitan' '$work/report.txt') = 2 ]" \
  "ttl_report: two torchtitan lines and a chosen reference"
echo "$fails failure(s)"
[ "$fails" = 0 ]
