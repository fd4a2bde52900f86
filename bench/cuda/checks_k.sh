# checks_k.sh - group k of run_gpu_checks.sh (sourced by it; issue 64): a
# speed lever's before and after, from one call. prepare_carry.sh BASELINE=REV
# builds fsdptrain at REV (the tree before the lever) and bundles it as
# fsdptrain-base; each check runs it and this tree's fsdptrain with
# --profile-ops on one shape, one right after the other on the same card, and
# bench/cuda/profile_ab.py sets the two op tables side by side (profile_ab.txt).
#   k1  bf16, PROF_MODEL at micro-batch PROF_BATCH (INFO: a measurement)
#   k2  the same with --precision fp8 (INFO)
# The verdict on a lever's numbers is the op table's parity (check a1) and the
# whole model (a2); these say what it bought. Without fsdptrain-base in the
# bundle both are skipped, saying how to bundle one.
# Each check returns 0 (PASS), 1 (FAIL), 77 (skipped), 78 (INFO); its note is the summary line.

k_run() {  # WHO(base|new) PRECISION: one profiled run, its output in runs/k_WHO_PRECISION.txt
  local prog=fsdptrain out=$RUNS/k_$1_$2.txt rc
  [ "$1" = base ] && prog=$BUNDLE/bin/fsdptrain-base
  x "$prog" --device "$DEV" --model "$PROF_MODEL" --train-data "$DATA" --seq-len "$SPEED_SEQ" \
    --batch-size "$PROF_BATCH" --steps "${PROF_STEPS:-6}" --warmup-steps 1 --log-every 1 --profile-ops \
    --precision "$2" 2>&1 | tee "$out"; rc=${PIPESTATUS[0]}
  [ "$rc" = 0 ] || { note "$1 fsdptrain exited $rc: $(grep -m1 'error' "$out" | head -c 150)"; return 1; }
}
k_ab() {  # PRECISION
  [ -x "$BUNDLE/bin/fsdptrain-base" ] ||
    { note "no fsdptrain-base in the bundle (prepare_carry.sh BASELINE=REV bundles one)"; return 77; }
  k_run base "$1" || return 1
  k_run new "$1" || return 1
  local out=$RUNS/k_ab_$1.txt
  python3 "$ROOT/bench/cuda/profile_ab.py" "$RUNS/k_base_$1.txt" "$RUNS/k_new_$1.txt" --label "$1" \
    > "$out" 2>&1 || { cat "$out"; note "profile_ab.py: $(tail -1 "$out" | head -c 150)"; return 1; }
  cat "$out"
  { echo "# $1, $PROF_MODEL micro-batch $PROF_BATCH x $SPEED_SEQ on $GPU_NAME; baseline: $BASE_INFO"
    cat "$out"; echo; } >> "$OUT/profile_ab.txt"
  note "$(tail -1 "$out" | head -c 200)"
  return 78
}
chk_k1() { k_ab "$PRECISION"; }
chk_k2() { k_ab fp8; }

export BASE_INFO
BASE_INFO=$(sed -n 's/^baseline: //p' "$CARRY/BUILD_INFO.txt" 2>/dev/null | head -1)
BASE_INFO=${BASE_INFO:-none}
K_CHECKS=(
  "k1|45|150|chk_k1|the baseline's fsdptrain and this tree's, --profile-ops $PROF_MODEL $PRECISION: per-op before and after (INFO)"
  "k2|45|150|chk_k2|the same with --precision fp8 (INFO)"
)
