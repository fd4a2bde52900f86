#!/usr/bin/env bash
# ttl_run.sh - issue 30's time-to-loss runs: PyTorch (torch.compile,
# bench/cuda/torch_ttl.py), fsdptrain bf16, fsdptrain fp8 and fsdptrain with
# Muon (SYSTEMS=muon, not in the default set; MUON_PRECISION bf16 or fp8)
# train the same model on the same batches of English text with the same
# recipe, each for about 95 s of training, validating every EVAL_EVERY steps
# on the whole validation file.
#
#   here:    bash bench/cuda/prepare_carry.sh; bash bench/cuda/ttl_data.sh   (.ttl_carry/)
#   device:  run(command="SYSTEMS='torch_compile muon bf16' FSDP_LIMIT_S=170 \
#                FSDP_EXTRA='--time-budget 150s' bash bench/cuda/ttl_run.sh",
#                carry=[".gpu_carry", ".ttl_carry"]) (about 450 s on an H100), then
#                SYSTEMS=fp8 and SYSTEMS=muon MUON_PRECISION=fp8 on the warm machine
#   here:    python3 bench/cuda/ttl_report.py <files_at>/ttl_*.jsonl --device NAME \
#                --expected-steps torch_compile=950,fsdptrain_bf16=1250,fsdptrain_fp8=1300,\
#                fsdptrain_bf16_muon=950,fsdptrain_fp8_muon=980 --png docs/time_to_loss.png
#
# Each system's step count is its budget times its speed at this shape on an
# H100 (bench/results/h100_2026-11-26b: 100.8, 74.1, 70.8, 96.5 and 94.6 ms a
# step), so each cosine schedule ends near the budget; on another GPU, set
# STEPS_* from its speeds. torch_ttl.py also stops at the first evaluation past
# TTL_GUARD_S. Output in $OUT: ttl_<system>.jsonl (the --metrics format, with
# train_s on every validation line) and ttl_log.txt.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
OUT=${OUT:-/tmp/ttl_out}
WORK=${WORK:-/tmp/ttl_work}
CARRY=${CARRY:-$ROOT/.gpu_carry}
TTL_CARRY=${TTL_CARRY:-$ROOT/.ttl_carry}
MODEL=${MODEL:-gpt-350m} VOCAB=${VOCAB:-8192} BATCH=${BATCH:-16} SEQ=${SEQ:-1024}
STEPS_TORCH=${STEPS_TORCH:-950} STEPS_BF16=${STEPS_BF16:-1250} STEPS_FP8=${STEPS_FP8:-1300}
STEPS_MUON=${STEPS_MUON:-950}   # 980 with MUON_PRECISION=fp8
# Muon scales its update to AdamW's RMS, so the recipe's lr carries over; the
# tiny model's sweep (bench/results/muon_vs_adamw_cpu_2026-11-26.txt) liked 3x
# AdamW's best, which MUON_LR=3e-3 tries.
MUON_LR=${MUON_LR:-1e-3} MUON_PRECISION=${MUON_PRECISION:-bf16}   # fp32 rehearses it on a CPU
# FSDP_EXTRA: more fsdptrain flags for the bf16/fp8/muon runs, e.g. '--time-budget 150s'
# (with --steps a cap, the run is bit for bit the --steps one while the budget holds).
FSDP_EXTRA=${FSDP_EXTRA:-}
TTL_GUARD_S=${TTL_GUARD_S:-125} EVAL_EVERY=${EVAL_EVERY:-100} SYSTEMS=${SYSTEMS:-torch_compile bf16 fp8}
# Wall-clock limits per system. The first H100 run (2026-11-25) measured torch.compile's
# warm-up at 95 s and its eager evaluations at ~3.6 s each, so 1100 steps with 12
# evaluations need ~275 s: 220 s cut it at step 800. On 2026-11-26 (H100) the warm-up
# took 70 s and 950 steps 208 s wall; each fsdptrain system 113-116 s.
TORCH_LIMIT_S=${TORCH_LIMIT_S:-330} FSDP_LIMIT_S=${FSDP_LIMIT_S:-170}
export PYTHONUNBUFFERED=1
mkdir -p "$OUT" "$WORK"
log=$OUT/ttl_log.txt
: > "$log"
say() { echo "$*" | tee -a "$log"; }

# ---- the bundle (as run_gpu_checks.sh unpacks it) and the data ---------------------------
if [ ! -x "$WORK/bundle/fsdp-bundle/bin/fsdptrain" ]; then
  mkdir -p "$WORK/bundle" && tar -xJf "$CARRY/fsdp-bundle.tar.xz" -C "$WORK/bundle" ||
    { say "ttl_run: error: cannot unpack $CARRY/fsdp-bundle.tar.xz"; exit 1; }
fi
# shellcheck disable=SC1091
source "$WORK/bundle/fsdp-bundle/env.sh" 2>> "$log"
py() { LD_LIBRARY_PATH="${_FSDP_ORIG_LD_LIBRARY_PATH:-}" python3 "$@"; }
D=$WORK/data
mkdir -p "$D"
for f in english_train.h5 english_val.h5; do
  if [ -f "$TTL_CARRY/$f.xz" ]; then xz -dc "$TTL_CARRY/$f.xz" > "$D/$f"; else cp "$TTL_CARRY/$f" "$D/$f"; fi ||
    { say "ttl_run: error: no $f in $TTL_CARRY (run bench/cuda/ttl_data.sh here)"; exit 1; }
done
{
  echo "# ttl_run.sh $(date -u +%FT%TZ): $MODEL vocab $VOCAB, $BATCH x $SEQ tokens a step"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  head -3 "$CARRY/BUILD_INFO.txt" 2>/dev/null
  py -c 'import torch; print("torch", torch.__version__)'
} >> "$log" 2>&1

# The recipe, the same for every system (fsdptrain's flags; torch_ttl.py takes the same names).
RECIPE=(--vocab-size "$VOCAB" --batch-size "$BATCH" --seq-len "$SEQ" --min-lr 1e-4
        --warmup-steps 100 --weight-decay 0.1 --beta1 0.9 --beta2 0.95 --adam-eps 1e-8 --grad-clip 1.0
        --init-std 0.02 --seed 1337 --eval-every "$EVAL_EVERY")
LR=1e-3   # every system's, Muon's too unless MUON_LR
DATA=(--train-data "$D/english_train.h5" --val-data "$D/english_val.h5")

export _FSDP_ORIG_LD_LIBRARY_PATH=${_FSDP_ORIG_LD_LIBRARY_PATH:-}
for s in $SYSTEMS; do
  t=$SECONDS rc=0
  case $s in
    torch_compile)  # PyTorch with its own CUDA libraries (torch's nvidia-* wheels), not the bundle's
      say "== torch.compile: $STEPS_TORCH steps"
      timeout -k 10 "$TORCH_LIMIT_S" env LD_LIBRARY_PATH="$_FSDP_ORIG_LD_LIBRARY_PATH" python3 bench/cuda/torch_ttl.py \
        --model "$MODEL" "${RECIPE[@]}" "${DATA[@]}" --steps "$STEPS_TORCH" --lr "$LR" --time-budget "$TTL_GUARD_S" \
        --compile --metrics "$OUT/ttl_torch_compile.jsonl" >> "$log" 2>&1 || rc=$? ;;
    bf16|fp8)
      n=$STEPS_BF16; [ "$s" = fp8 ] && n=$STEPS_FP8
      say "== fsdptrain $s: $n steps"
      timeout -k 10 "$FSDP_LIMIT_S" fsdptrain --model "$MODEL" "${RECIPE[@]}" "${DATA[@]}" --steps "$n" --lr "$LR" \
        --eval-batches 0 --log-every 100 --precision "$s" $FSDP_EXTRA --metrics "$OUT/ttl_fsdptrain_$s.jsonl" >> "$log" 2>&1 || rc=$? ;;
    muon)  # the same recipe, the block matrices on Muon (the rest keeps AdamW)
      say "== fsdptrain $MUON_PRECISION muon (lr $MUON_LR): $STEPS_MUON steps"
      timeout -k 10 "$FSDP_LIMIT_S" fsdptrain --model "$MODEL" "${RECIPE[@]}" "${DATA[@]}" --steps "$STEPS_MUON" \
        --eval-batches 0 --log-every 100 --precision "$MUON_PRECISION" --optimizer muon --lr "$MUON_LR" $FSDP_EXTRA \
        --metrics "$OUT/ttl_fsdptrain_${MUON_PRECISION}_muon.jsonl" >> "$log" 2>&1 || rc=$? ;;
    *) say "ttl_run: error: unknown system '$s' in SYSTEMS (torch_compile, bf16, fp8, muon)"; rc=2 ;;
  esac
  tail -2 "$log"
  say "   ($s: $((SECONDS - t)) s wall, exit $rc)"
done
