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
# torchtitan (issue 63; bench/cuda/titan_ttl.py): SYSTEMS titan (bf16 + compile),
# titan_fp8_tensorwise and titan_fp8_rowwise (float8 through torchao), from the wheels
# that bench/cuda/titan_wheels.sh put in .ttl_carry/titan_wheels (installed under WORK,
# on PYTHONPATH for those runs alone). Each fixes its step count as fsdptrain's
# --time-budget does: timed warmup steps, then the count that fills TITAN_BUDGET_S
# seconds of training (default 95; STEPS_TITAN and STEPS_TITAN_FP8 are caps, or the
# count itself with TITAN_BUDGET_S=0).
# TTL_DEVICE=cpu rehearses the torch and torchtitan systems here (MODEL=tiny,
# TTL_PYTHON a Python with torch; float8 rowwise needs a GPU):
#   TTL_DEVICE=cpu TTL_PYTHON=<python with torch> SYSTEMS='titan titan_fp8_tensorwise' MODEL=tiny \
#     VOCAB=256 BATCH=4 SEQ=64 TITAN_BUDGET_S=0 STEPS_TITAN=20 STEPS_TITAN_FP8=20 EVAL_EVERY=10 WARMUP=5 \
#     TTL_CARRY=<folder with english_*.h5 and titan_wheels/> bash bench/cuda/ttl_run.sh
# (tests/tools/test_titan_ttl.sh does this; the fsdptrain systems alone need the bundle)
#
# Issue 63's race in one session's 15 device minutes: six systems at ~95 s each do not
# fit, so each gets ~50 s of training, in two calls on one warm machine (measured on the
# first H100 race, bench/results/h100_2026-11-27/ttl_725aab3: a torchtitan run ~100 s wall
# with its compilation and evaluations, an fsdptrain run ~60 s):
#   here:    bash bench/cuda/prepare_carry.sh; bash bench/cuda/ttl_data.sh;
#            bash bench/cuda/titan_wheels.sh; du -shc .gpu_carry .ttl_carry  (< 60 MiB)
#   call 1:  SYSTEMS='titan titan_fp8_rowwise titan_fp8_tensorwise' TITAN_BUDGET_S=50 \
#            TTL_GUARD_S=60 TORCH_LIMIT_S=150 bash bench/cuda/ttl_run.sh    (timeout_s 400)
#   call 2:  SYSTEMS='bf16 fp8 muon profile_bf16' MUON_PRECISION=fp8 STEPS_BF16=3000 STEPS_FP8=3000 \
#            STEPS_MUON=3000 FSDP_EXTRA='--time-budget 72s' FSDP_LIMIT_S=95 bash bench/cuda/ttl_run.sh
#            (timeout_s 360; profile_bf16 ~70 s: both programs' step profiles side by side,
#            $OUT/profile_compare_bf16.txt). fsdptrain's --time-budget holds its whole wall clock: on
#            that H100 its set-up, warm-up and first 10 steps took 19.3 s and each of 5
#            validations 0.6 s, so 72 s leaves ~50 s of training, torchtitan's budget
#            (whose clock starts after its compilation and stops for evaluations)
#   here:    ttl_report.py <both calls' ttl_*.jsonl> --ref best:torchtitan --device NAME --png ...
#            (compare the train_s of the last validation lines: equal within a few %)
#   Reach times are read at validations: at EVAL_EVERY=100 fsdptrain's Muon steps ~9 s apart
#   (h100_2026-11-27b: its crossing fell between 27.7 and 36.9 s). EVAL_EVERY=50 in both calls
#   halves that, costing fsdptrain ~3 s of its 72 (0.5 s a validation, inside --time-budget)
#   and torchtitan ~10 s of wall time (1.6 s each, outside its training clock).

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
STEPS_TITAN=${STEPS_TITAN:-3000} STEPS_TITAN_FP8=${STEPS_TITAN_FP8:-3000} TITAN_BUDGET_S=${TITAN_BUDGET_S:-95}
TTL_DEVICE=${TTL_DEVICE:-cuda} TTL_PYTHON=${TTL_PYTHON:-python3} WARMUP=${WARMUP:-100}
# Muon scales its update to AdamW's RMS, so the recipe's lr carries over; the
# tiny model's sweep (bench/results/muon_vs_adamw_cpu_2026-11-26.txt) liked 3x
# AdamW's best, which MUON_LR=3e-3 tries.
MUON_LR=${MUON_LR:-1e-3} MUON_PRECISION=${MUON_PRECISION:-bf16}   # fp32 rehearses it on a CPU
# FSDP_EXTRA: more fsdptrain flags for the bf16/fp8/muon runs, e.g. '--time-budget 150s'
# (with --steps a cap, the run is bit for bit the --steps one while the budget holds).
FSDP_EXTRA=${FSDP_EXTRA:-}
# SYSTEMS profile_bf16, profile_fp8: fsdptrain --profile-ops and torchtitan under
# torch.profiler (steps PROFILE_WINDOW of PROFILE_STEPS; titan_ttl.py times the 10
# unprofiled steps before the window), side by side by bench/cuda/profile_compare.py
# in $OUT/profile_compare_<precision>.txt; torchtitan's FP8 is PROFILE_TITAN_FP8's float8
PROFILE_STEPS=${PROFILE_STEPS:-45} PROFILE_WINDOW=${PROFILE_WINDOW:-41:45} PROFILE_TITAN_FP8=${PROFILE_TITAN_FP8:-rowwise}
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

# ---- the bundle (as run_gpu_checks.sh unpacks it; fsdptrain's systems only) and the data --
case " $SYSTEMS " in
  *" bf16 "*|*" fp8 "*|*" muon "*|*" profile_"*)
    if [ ! -x "$WORK/bundle/fsdp-bundle/bin/fsdptrain" ]; then
      mkdir -p "$WORK/bundle" && tar -xJf "$CARRY/fsdp-bundle.tar.xz" -C "$WORK/bundle" ||
        { say "ttl_run: error: cannot unpack $CARRY/fsdp-bundle.tar.xz"; exit 1; }
    fi
    # shellcheck disable=SC1091
    source "$WORK/bundle/fsdp-bundle/env.sh" 2>> "$log" ;;
esac
# Python runs with the libraries it came with (torch's nvidia-* wheels), not the bundle's
export _FSDP_ORIG_LD_LIBRARY_PATH=${_FSDP_ORIG_LD_LIBRARY_PATH-${LD_LIBRARY_PATH:-}}
py() { LD_LIBRARY_PATH="${_FSDP_ORIG_LD_LIBRARY_PATH:-}" "$TTL_PYTHON" "$@"; }
# torchtitan and what the image lacks (bench/cuda/titan_wheels.sh), once per WORK
titan_site() {
  local site=$WORK/titan_site
  [ -f "$site/.installed" ] && return 0
  ls "$TTL_CARRY"/titan_wheels/*.whl > /dev/null 2>&1 ||
    { say "ttl_run: error: no wheels in $TTL_CARRY/titan_wheels (run bench/cuda/titan_wheels.sh here)"; return 1; }
  rm -rf "$site"
  # what the wheels were installed over (--no-deps: datasets' pins are not checked), for the log
  py -c 'import importlib.metadata as m
print("titan_site over:", *(f"{p} {m.version(p)}" for p in ("torch", "pyarrow", "fsspec", "huggingface_hub",
      "pandas", "typing_extensions") if any(d.metadata["Name"].lower().replace("-", "_") == p for d in m.distributions())))' \
    >> "$log" 2>&1
  py -m pip install --quiet --no-index --no-deps --target "$site" "$TTL_CARRY"/titan_wheels/*.whl >> "$log" 2>&1 &&
    PYTHONPATH=$site py -c 'import torchtitan.train, torchao.float8, torchdata, tyro, datasets' >> "$log" 2>&1 ||
    { say "ttl_run: error: torchtitan's wheels did not install or import (see $log)"; return 1; }
  touch "$site/.installed"
}
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
SHAPE=(--vocab-size "$VOCAB" --batch-size "$BATCH" --seq-len "$SEQ" --min-lr 1e-4
       --weight-decay 0.1 --beta1 0.9 --beta2 0.95 --adam-eps 1e-8 --grad-clip 1.0 --init-std 0.02 --seed 1337)
RECIPE=("${SHAPE[@]}" --warmup-steps "$WARMUP" --eval-every "$EVAL_EVERY")
LR=1e-3   # every system's, Muon's too unless MUON_LR
DATA=(--train-data "$D/english_train.h5" --val-data "$D/english_val.h5")

for s in $SYSTEMS; do
  t=$SECONDS rc=0
  case $s in
    torch_compile)  # PyTorch with its own CUDA libraries (torch's nvidia-* wheels), not the bundle's
      say "== torch.compile: $STEPS_TORCH steps"
      timeout -k 10 "$TORCH_LIMIT_S" env LD_LIBRARY_PATH="$_FSDP_ORIG_LD_LIBRARY_PATH" "$TTL_PYTHON" bench/cuda/torch_ttl.py \
        --model "$MODEL" "${RECIPE[@]}" "${DATA[@]}" --steps "$STEPS_TORCH" --lr "$LR" --time-budget "$TTL_GUARD_S" \
        --compile --device "$TTL_DEVICE" --metrics "$OUT/ttl_torch_compile.jsonl" >> "$log" 2>&1 || rc=$? ;;
    titan|titan_fp8_tensorwise|titan_fp8_rowwise)  # torchtitan's Trainer, compiled, its own CUDA libraries
      f8=none n=$STEPS_TITAN name=torchtitan_bf16
      case $s in titan_fp8_*) f8=${s#titan_fp8_} n=$STEPS_TITAN_FP8 name=torchtitan_fp8_${s#titan_fp8_} ;; esac
      say "== $name: $([ "$TITAN_BUDGET_S" = 0 ] && echo "$n steps" || echo "${TITAN_BUDGET_S} s of training, at most $n steps")"
      if titan_site; then
        timeout -k 10 "$TORCH_LIMIT_S" env LD_LIBRARY_PATH="$_FSDP_ORIG_LD_LIBRARY_PATH" PYTHONPATH="$WORK/titan_site" \
          "$TTL_PYTHON" bench/cuda/titan_ttl.py --model "$MODEL" "${RECIPE[@]}" "${DATA[@]}" --steps "$n" --lr "$LR" \
          --plan-budget "$TITAN_BUDGET_S" --time-budget "$TTL_GUARD_S" --compile --float8 "$f8" --device "$TTL_DEVICE" \
          --dump-folder "$WORK/titan_dump" --metrics "$OUT/ttl_$name.jsonl" >> "$log" 2>&1 || rc=$?
      else rc=1; fi ;;
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
    profile_bf16|profile_fp8)  # where a step's time goes, both programs (issue 63's "short of the goals")
      p=${s#profile_} f8=none fp=${s#profile_}; [ "$p" = fp8 ] && f8=$PROFILE_TITAN_FP8
      [ "$TTL_DEVICE" = cpu ] && [ "$p" = bf16 ] && fp=fp32   # a rehearsal: the CPU computes in fp32
      say "== profile $p: fsdptrain --profile-ops and torchtitan (float8 $f8) steps $PROFILE_WINDOW of $PROFILE_STEPS"
      timeout -k 10 "$FSDP_LIMIT_S" fsdptrain --model "$MODEL" "${SHAPE[@]}" --warmup-steps 10 --train-data "$D/english_train.h5" \
        --steps "$PROFILE_STEPS" --lr "$LR" --log-every 10 --precision "$fp" --profile-ops \
        > "$OUT/profile_fsdptrain_$p.txt" 2>&1 || rc=$?
      tail -3 "$OUT/profile_fsdptrain_$p.txt" >> "$log"
      if [ "$rc" = 0 ] && titan_site; then
        timeout -k 10 "$TORCH_LIMIT_S" env LD_LIBRARY_PATH="$_FSDP_ORIG_LD_LIBRARY_PATH" PYTHONPATH="$WORK/titan_site" \
          "$TTL_PYTHON" bench/cuda/titan_ttl.py --model "$MODEL" "${SHAPE[@]}" --warmup-steps 10 --eval-every 0 "${DATA[@]}" \
          --steps "$PROFILE_STEPS" --lr "$LR" --compile --float8 "$f8" --device "$TTL_DEVICE" \
          --profile-steps "$PROFILE_WINDOW" --profile-out "$OUT/profile_titan_$p.json" \
          --dump-folder "$WORK/titan_dump" --metrics "$WORK/profile_titan_$p.jsonl" >> "$log" 2>&1 || rc=$?
      else [ "$rc" = 0 ] && rc=1; fi
      [ "$rc" = 0 ] && { python3 bench/cuda/profile_compare.py --fsdp "$OUT/profile_fsdptrain_$p.txt" \
        --tokens-per-step $((BATCH * SEQ)) --titan "$OUT/profile_titan_$p.json" > "$OUT/profile_compare_$p.txt" 2>&1 || rc=$?
        head -12 "$OUT/profile_compare_$p.txt" >> "$log"; } ;;
    *) say "ttl_run: error: unknown system '$s' in SYSTEMS (torch_compile, bf16, fp8, muon, titan, titan_fp8_tensorwise, titan_fp8_rowwise, profile_bf16, profile_fp8)"; rc=2 ;;
  esac
  tail -2 "$log"
  say "   ($s: $((SECONDS - t)) s wall, exit $rc)"
done
