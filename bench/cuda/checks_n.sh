# checks_n.sh - group n of run_gpu_checks.sh (sourced by it; issue 62): several
# real NCCL ranks on one GPU. fsdptrain's NCCL path had only run with one rank;
# bench/cuda/nccl_rank.sh gives each rank its own NCCL_HOSTID, so NCCL treats it
# as a one-GPU node and carries all traffic over its Socket transport on
# loopback: the unique-id exchange, non-blocking init, ncclCommSplit into shard
# and replicate groups, grouped all-gathers and reduce-scatters, the watchdog
# and the abort all run for real; NVLink, P2P, NVLS and any timing do not.
#   n1a  bring-up: NCCL_DEBUG=INFO shows nNodes 2 localRanks 1 and NET/Socket
#   n1b  test_comm_nccl_communicator on 2 NCCL ranks
#   n2a  1-rank references, each run twice: the run-to-run spread that
#        justifies N_TOL (--debug) and N_FREE_TOL (without)
#   n2b-e  2 and 4 NCCL ranks train 30 steps to 1 rank's and to the staged
#        communicator's losses and gradient norms (tiny, gpt-125m's widths,
#        hybrid sharding + Muon + accumulation, fp8 gathers + recompute,
#        NCCL_ALGO=Ring), all with --debug's repeatable kernels
#   n2f  the same without --debug (the production path), within the bar
#        its own noise allows
#   n3   checkpoints saved by 4 NCCL ranks (ordinary and background) resumed on
#        2 NCCL ranks, on 1 and on the CPU continue the straight run's curve
#   n4a-d  faults: a rank killed, a rank that stops calling collectives
#        (FSDP_TEST_STALL=1:5), the rerun check's exit 4, an init that cannot
#        complete (FSDP_TEST_STALL=1:init)
# Each check returns 0 (PASS), 1 (FAIL), 77 (skipped), 78 (INFO); its note is
# the summary line. A rehearsal (CHECK_DEVICE=cpu) runs the same commands with
# --device cpu (MPI collectives), still through the wrapper.
#
# Bars. The equivalence runs (n2b-e, n3) use --debug: the first-ranked GEMM
# algorithm and cuDNN's deterministic attention backward, so that two identical
# runs are bitwise equal (n2a measures it, and fails when that spread reaches a
# fifth of N_TOL) and every difference left is arithmetic: NCCL and the staged
# communicator at the same rank count move the same bytes and differ only in
# the order of fp32 sums (--reduce-dtype fp32; a sum of two is the same in
# either order, so 2 ranks stay bitwise equal); N ranks and 1 differ also in
# the GEMM shapes of the split micro-batch. Once one last bit differs, bf16
# weights round differently from the next step on and the runs drift apart.
# The H100 call of bench/results/h100_2026-11-27b measured that drift over 30
# steps with the staged path, proven on the CPU: 4 staged ranks against 1
# moved tiny's gradient norm by up to 1.6e-2 (a single step) and gpt-125m's
# widths' by 3.1e-3, losses by at most 3.7e-4, while 4 NCCL ranks and 4
# staged ranks were equal at step 1 at both shapes. So each of n2b, n2c and
# n2e (and n2f's gradient norms) holds N NCCL ranks to three bars:
#   step 1 (same weights, same batch): NCCL and staged within N_STEP1_TOL
#     (1e-6; measured 0 on that call: another order of fp32 sums moves a
#     norm over millions of terms by far less) - the exchange itself, before any drift;
#   every step's loss within N_TOL (2e-3 on a GPU, ten times tighter than
#     check d's 2e-2), against 1 rank and against staged;
#   every step's gradient norm within N_FLOOR_X (3) times the staged-vs-1-rank
#     floor of the same shape and rank count, measured in the same call, and
#     at least N_TOL: the NCCL run and the staged one are two draws of the
#     same rounding drift (on that call NCCL was 0.2-1.1x the floor from 1
#     rank and 0.7-0.9x it from staged), while a stale, missing or mis-scaled
#     shard shows at step 1 or moves the loss past N_TOL within a few steps.
# Without --debug a run need not repeat on a GPU (the first H100 call,
# bench/results/h100_2026-11-27/run1_725aab3, measured two identical 1-rank
# runs of gpt-125m's widths 3.3e-4 apart in loss and 4.1e-3 in gradient norm:
# GEMM algorithms chosen by timing, atomics in attention's backward; the
# second measured 0), and FP8's timed GEMM choice moved single steps' gradient
# norms by 1-4% between NCCL and staged twins. n2f holds that production path
# (no per-op syncs: collectives overlap compute on their own streams) to the
# bar its noise allows, N_FREE_TOL: 3x the no-debug spread n2a measured, at
# least N_TOL and at most check d's 2e-2 (a stale or missing exchange moves
# the loss by far more within 30 steps).

export NCCL_RANK="$ROOT/bench/cuda/nccl_rank.sh"
# The second shape: gpt-125m's widths (768, 12/4 heads, SwiGLU 2048) on the
# byte data. 4 of its 12 blocks: over loopback sockets (~2.6 GB/s) the whole
# model's ~700 MB of gathers and reductions per step and rank would cost ~0.3 s
# a step; the block shapes are what the collectives and kernels see.
if [ "$DEV" = cuda ]; then
  export N_TOL=${N_TOL:-2e-3} N_CPU_TOL=${N_CPU_TOL:-2e-2}
  export N_STEP1_TOL=${N_STEP1_TOL:-1e-6} N_FLOOR_X=${N_FLOOR_X:-3}
  export N_BIG=${N_BIG:---model gpt-125m --vocab-size 256 --n-layer 4}
else
  export N_TOL=${N_TOL:-1e-4} N_CPU_TOL=${N_CPU_TOL:-1e-4}
  export N_STEP1_TOL=${N_STEP1_TOL:-1e-6} N_FLOOR_X=${N_FLOOR_X:-3}
  export N_BIG=${N_BIG:---model tiny --n-layer 3}
fi
# 30 steps, global batch 8 x 64 tokens (--batch-size 8/ranks)
# (--debug: repeatable kernels, see above; N_BIGF is the same run without it)
export N_TINY="$TINY --steps 30 --debug"
export N_BIGF="$N_BIG --train-data $DATA --seq-len 64 --lr 6e-4 --min-lr 6e-5 --warmup-steps 5 --log-every 10 --steps 30"
export N_BIGA="$N_BIGF --debug"

# Watchdogs below the check's own limit, so that a hang is named by fsdptrain
# rather than killed by the script: NCCL_TIMEOUT INIT_TIMEOUT COLLECTIVE_TIMEOUT
n_env() {
  export FSDP_NCCL_TIMEOUT_S=$1 FSDP_NCCL_INIT_TIMEOUT_S=$2 FSDP_COLLECTIVE_TIMEOUT_S=$3
  export NCCL_DEBUG=${NCCL_DEBUG:-WARN}   # NCCL's own warnings into the logs
  unset CUDA_LAUNCH_BLOCKING              # hangs the Socket transport
}

# n_run KIND RANKS NAME [fsdptrain args]: KIND one (no mpirun), cpu, nccl (each
# rank through nccl_rank.sh) or staged; metrics $RUNS/n_NAME.jsonl (a resumed
# run appends), output $RUNS/n_NAME.txt
n_run() {
  local kind=$1 n=$2 name=$3 rc; shift 3
  local m=$RUNS/n_$name.jsonl
  case $kind in
    one)    x fsdptrain --device "$DEV" "$@" --metrics "$m" ;;
    cpu)    x fsdptrain --device cpu "$@" --metrics "$m" ;;
    nccl)   mpi "$n" bash "$NCCL_RANK" fsdptrain --device "$DEV" "$@" --metrics "$m" ;;
    staged) mpi "$n" fsdptrain --device "$DEV" $STAGED "$@" --metrics "$m" ;;
  esac 2>&1 | tee "$RUNS/n_$name.txt"; rc=${PIPESTATUS[0]}
  [ "$rc" = 0 ] && return 0
  note "$name ($kind, $n rank(s)) exited $rc: $(grep -m1 -E 'error|Error' "$RUNS/n_$name.txt" | head -c 150)"
  return "$rc"
}
n_need() {  # the same, unless an earlier check of the group left its metrics
  [ -s "$RUNS/n_$3.jsonl" ] && return 0
  n_run "$@"
}

# n_eq LABEL A B [TOLERANCE [compare options]]: runs A and B (names as in
# n_run) agree in losses and gradient norms (30 steps unless told); TOLERANCE
# is one bar for both or LOSS/GRAD-NORM; "LABEL loss/grad-norm" goes to
# $RUNS/n_CHECK.eq for the note
n_eq() {
  local label=$1 a=$RUNS/n_$2.jsonl b=$RUNS/n_$3.jsonl tol=${4:-$N_TOL} out rc
  shift $(($# < 4 ? $# : 4))
  out=$(python3 "$ROOT/bench/cuda/compare_metrics.py" compare "$a" "$b" --field loss --field "grad_norm=${tol#*/}" \
        --min-common 30 --tolerance "${tol%%/*}" "$@" 2>&1); rc=$?
  echo "== $label: $(basename "$a") vs $(basename "$b")"; echo "$out"
  local l g
  l=$(grep -o 'max rel loss diff [0-9.e+-]*' <<< "$out" | awk '{print $NF}')
  g=$(grep -o 'max rel grad norm diff [0-9.e+-]*' <<< "$out" | awk '{print $NF}')
  echo "$label|$rc|${l:-nan}|${g:-nan}|$tol|$(tail -1 <<< "$out" | head -c 120)" >> "$RUNS/n_$CHECK_ID.eq"
  return "$rc"
}
# the note of a check's comparisons; fails when any did
n_eq_note() {
  local f=$RUNS/n_$CHECK_ID.eq
  [ -s "$f" ] || { note "nothing compared"; return 1; }
  note "$(awk -F'|' -v tol="$N_TOL" '
    { txt = txt (NR > 1 ? ", " : "") $1 " " ($2 == 2 ? "MISSING" : sprintf("%.1e/%.1e", $3, $4))
      if ($5 != tol) txt = txt " (within " $5 ")"
      if ($2 != 0) bad = bad " " $1 }
    END { printf "%s (loss/grad-norm); tolerance %s unless said", txt, tol
          if (bad != "") printf "; OVER or missing:%s", bad }' "$f")"
  [ -s "$RUNS/n_spread.txt" ] && note "1-rank spread $(cat "$RUNS/n_spread.txt")"
  awk -F'|' '$2 != 0 {bad = 1} END {exit bad}' "$f"
}

# ---- n1: bring-up -----------------------------------------------------------------------
chk_n1a() {
  n_env 30 30 45
  # the wrapper itself: a distinct NCCL_HOSTID per rank
  local ids
  ids=$(mpi 2 bash "$NCCL_RANK" sh -c 'echo "$NCCL_HOSTID"' 2>&1 | grep -v '^+ ' | sort -u | tr '\n' ' ')
  [ "$(wc -w <<< "$ids")" = 2 ] || { note "nccl_rank.sh gave 2 ranks NCCL_HOSTID '$ids'"; return 1; }
  NCCL_DEBUG=INFO n_run nccl 2 up $TINY --batch-size 4 --steps 5 || return 1
  if [ "$DEV" != cuda ]; then
    note "nccl_rank.sh: NCCL_HOSTID $ids; NCCL's own lines need a GPU"; return 77
  fi
  local f=$RUNS/n_up.txt miss=()
  grep -q 'nNodes 2 localRanks 1' "$f" || miss+=("'nNodes 2 localRanks 1'")
  grep -q 'NET/Socket' "$f" || miss+=("'NET/Socket'")
  grep -q 'collectives nccl' "$f" || miss+=("fsdptrain's 'collectives nccl'")
  note "$(grep -m1 -o 'NCCL version [^ ]*' "$f"); NCCL_HOSTID $ids; $(grep -m1 -o 'nNodes [0-9]* localRanks [0-9]*' "$f"); $(grep -m1 -o 'NET/Socket[^,;]*' "$f" | head -c 60)"
  [ ${#miss[@]} = 0 ] && return 0
  note "missing from the log: ${miss[*]}"; return 1
}
chk_n1b() {
  n_env 30 30 45
  # gtest_run starts $BUNDLE/bin/PROGRAM: a stand-in of that name starts the
  # real one on 2 NCCL ranks (the program prints and reduces on rank 0)
  local shim=$RUNS/n1b_launch rc
  mkdir -p "$shim/bin"
  printf '#!/usr/bin/env bash\nexec mpirun --oversubscribe --bind-to none -np 2 bash %q %q "$@"\n' \
    "$NCCL_RANK" "$BUNDLE/bin/test_comm_nccl_communicator" > "$shim/bin/test_comm_nccl_communicator"
  chmod +x "$shim/bin/test_comm_nccl_communicator"
  cat "$shim/bin/test_comm_nccl_communicator"
  BUNDLE=$shim gtest_run test_comm_nccl_communicator; rc=$?
  [ "$DEV" = cuda ] && [ "$rc" != 1 ] || return "$rc"
  # On a GPU only the one-rank stress case may skip: any other skip is a gate
  # that still keeps two ranks of one GPU out (it would look like a pass)
  local other
  other=$(awk '/: Skipped$/ {getline; print}' "$RUNS/$CHECK_ID.gtest.txt" | grep -v 'one-rank' | sort -u)
  [ -z "$other" ] && return 0
  note "skipped on 2 NCCL ranks: $(head -1 <<< "$other" | head -c 120)"; return 1
}

# ---- n2: equivalence ----------------------------------------------------------------------
chk_n2a() {
  n_env 30 30 45
  n_run one 1 tiny1 $N_TINY --batch-size 8 && n_run one 1 tiny1b $N_TINY --batch-size 8 &&
    n_run one 1 big1 $N_BIGA --batch-size 8 && n_run one 1 big1b $N_BIGA --batch-size 8 &&
    n_run one 1 bigf1 $N_BIGF --batch-size 8 && n_run one 1 bigf1b $N_BIGF --batch-size 8 || return 1
  n_eq tiny tiny1b tiny1 1 && n_eq big big1b big1 1 || { n_eq_note; return 1; }
  # the spread, as every later note quotes it
  awk -F'|' '{printf "%s%s %.1e/%.1e", (NR > 1 ? ", " : ""), $1, $3, $4}' "$RUNS/n_$CHECK_ID.eq" > "$RUNS/n_spread.txt"
  local worst
  worst=$(awk -F'|' '{if ($3 + 0 > w) w = $3 + 0; if ($4 + 0 > w) w = $4 + 0} END {printf "%g", w}' "$RUNS/n_$CHECK_ID.eq")
  note "two identical 1-rank runs with --debug, 30 steps: $(cat "$RUNS/n_spread.txt") (loss/grad-norm)"
  # the production path's spread, and the bar n2f holds it to
  : > "$RUNS/n_$CHECK_ID.eq"
  n_eq "big free" bigf1b bigf1 1 || { n_eq_note; return 1; }
  local free
  free=$(awk -F'|' '{if ($3 + 0 > w) w = $3 + 0; if ($4 + 0 > w) w = $4 + 0} END {printf "%g", w}' "$RUNS/n_$CHECK_ID.eq")
  awk -v f="$free" -v t="$N_TOL" 'BEGIN {b = 3 * f; if (b < t) b = t; printf "%.1e", b}' > "$RUNS/n_free_tol.txt"
  note "without --debug: $(awk -F'|' '{printf "%.1e/%.1e", $3, $4}' "$RUNS/n_$CHECK_ID.eq"); n2f's bar N_FREE_TOL $(cat "$RUNS/n_free_tol.txt")"
  if awk -v w="$worst" -v t="$N_TOL" 'BEGIN {exit !(w * 5 <= t)}'; then
    note "N_TOL $N_TOL is at least 5x the --debug spread"; return 0
  fi
  note "the --debug spread $worst reaches a fifth of N_TOL $N_TOL: the equivalence bar is too close to the noise"
  return 1
}
# n_floor A B: the worst relative gradient-norm difference of runs A and B over
# their common steps (empty when they have none)
n_floor() {
  python3 "$ROOT/bench/cuda/compare_metrics.py" compare "$RUNS/n_$1.jsonl" "$RUNS/n_$2.jsonl" --field grad_norm \
    --min-common 30 --tolerance 1 --quiet 2>&1 | grep -o 'max rel grad norm diff [0-9.e+-]*' | awk '{print $NF}'
}
# n_grad_bar STAGED ONE [LEAST]: the gradient-norm bar for N ranks at this shape:
# N_FLOOR_X times the staged-vs-1-rank floor, at least LEAST (N_TOL)
n_grad_bar() {
  local f
  f=$(n_floor "$1" "$2")
  [ -n "$f" ] || return 1
  awk -v f="$f" -v t="${3:-$N_TOL}" -v k="$N_FLOOR_X" 'BEGIN {b = k * f; if (b < t) b = t; printf "%.1e", b}'
}
# n_judge LABEL NCCL STAGED ONE: N NCCL ranks against their staged twin and 1 rank
# (the three bars at the head: step 1, losses, gradient norms)
n_judge() {
  local bar
  bar=$(n_grad_bar "$3" "$4") || { note "$1: no staged-vs-1-rank floor ($3 vs $4)"; return 1; }
  n_eq "$1/staged step 1" "$2" "$3" "$N_STEP1_TOL" --steps 1:1 --min-common 1
  n_eq "$1/1" "$2" "$4" "$N_TOL/$bar"
  n_eq "$1/staged" "$2" "$3" "$N_TOL/$bar"
}
# 2 and 4 NCCL ranks against 1 rank and against staged at the same count
ranks_eq() {  # TAG REF_ARGS...: n_TAG1 is the 1-rank run
  local tag=$1 n; shift
  n_need one 1 "${tag}1" "$@" --batch-size 8 || return 1
  for n in 2 4; do
    n_run nccl "$n" "${tag}_nccl$n" "$@" --batch-size $((8 / n)) || return 1
    n_need staged "$n" "${tag}_staged$n" "$@" --batch-size $((8 / n)) || return 1
    n_judge "np$n" "${tag}_nccl$n" "${tag}_staged$n" "${tag}1"
  done
  n_eq_note
}
chk_n2b() { n_env 30 30 45; ranks_eq tiny $N_TINY; }
chk_n2c() { n_env 30 30 45; ranks_eq big $N_BIGA; }
# features against their staged twins: hybrid sharding 2x2 with Muon's matrix
# exchange and accumulation on 4 ranks; fp8 weight gathers (one byte a weight)
# with recompute on 2. Two ranks, because a sum of two is the same in either
# order, so the twins stay equal: FP8's per-tensor scales turn the last-bit
# differences of a 4-rank sum into 1-2% jumps of single steps' gradient norms
# (CPU rehearsal, MPI against staged), which says nothing about the exchange.
# (Without --debug the twins were not equal on the first H100 call: each
# process timed its own FP8 GEMM algorithms, and single steps' gradient norms
# moved 1-4%; with --debug both take the first-ranked one.)
chk_n2d() {
  n_env 30 30 45
  local hy="--shard-group-size 2 --optimizer muon --grad-accum 2 --batch-size 1"
  local f8="--precision fp8 --recompute block --batch-size 4"
  n_run nccl 4 hybrid $N_TINY $hy && n_run staged 4 hybrid_staged $N_TINY $hy || return 1
  n_eq "2x2+muon+accum" hybrid hybrid_staged
  n_run nccl 2 fp8 $N_TINY $f8 && n_run staged 2 fp8_staged $N_TINY $f8 || return 1
  n_eq "fp8-gather+recompute" fp8 fp8_staged
  # the features were on, as the start lines say
  local off=()
  grep -q 'shard group 2 .*replicas 2' "$RUNS/n_hybrid.txt" || off+=("hybrid sharding")
  grep -q 'optimizer muon\|Muon' "$RUNS/n_hybrid.txt" || off+=("Muon")
  grep -q 'gathered as e4m3' "$RUNS/n_fp8.txt" || off+=("fp8 gathers")
  n_eq_note || return 1
  [ ${#off[@]} = 0 ] || { note "not on, by the start lines: ${off[*]}"; return 1; }
}
# NCCL_ALGO=Ring: with one rank per node NCCL may pick PAT for all-gather and
# reduce-scatter; tiny's 4- and 2-rank cases again on ring
chk_n2e() {
  n_env 30 30 45
  local n
  n_need one 1 tiny1 $N_TINY --batch-size 8 || return 1
  for n in 4 2; do
    NCCL_ALGO=Ring n_run nccl "$n" "tiny_ring$n" $N_TINY --batch-size $((8 / n)) || return 1
    n_need staged "$n" "tiny_staged$n" $N_TINY --batch-size $((8 / n)) || return 1
    n_judge "ring np$n" "tiny_ring$n" "tiny_staged$n" tiny1
  done
  n_eq_note
}

# The production path: no --debug, so GEMMs chosen by timing, cuDNN's fastest
# attention backward and no per-op syncs (the collectives' streams and events
# alone order the gathers against the compute). Its noise is n2a's no-debug
# spread; the bar is 3x that, within [N_TOL, 2e-2] (see the file's head), and
# gradient norms also at least N_FLOOR_X times the split's floor (n2c's --debug
# staged runs against 1 rank, run here if n2c did not).
chk_n2f() {
  n_env 30 30 45
  [ -s "$RUNS/n_free_tol.txt" ] || { note "no N_FREE_TOL: n2a did not measure the no-debug spread (run n2a first)"; return 1; }
  local tol n bar
  tol=$(cat "$RUNS/n_free_tol.txt")
  if awk -v b="$tol" 'BEGIN {exit !(b > 2e-2)}'; then
    note "the no-debug spread sets a bar of $tol, above check d's 2e-2: too noisy to judge"; return 1
  fi
  n_need one 1 bigf1 $N_BIGF --batch-size 8 && n_need one 1 big1 $N_BIGA --batch-size 8 || return 1
  for n in 2 4; do
    n_run nccl "$n" "bigf_nccl$n" $N_BIGF --batch-size $((8 / n)) || return 1
    n_need staged "$n" "big_staged$n" $N_BIGA --batch-size $((8 / n)) || return 1
    bar=$(n_grad_bar "big_staged$n" big1 "$tol") || { note "no staged-vs-1-rank floor for $n ranks"; return 1; }
    n_eq "free np$n/1" "bigf_nccl$n" bigf1 "$tol/$bar"
  done
  n_eq_note
}

# ---- n3: checkpoints across rank counts and devices -----------------------------------------
# 4 NCCL ranks save at 5, 10, 15 and stop; each save resumes from step 15 on 2
# NCCL ranks, on 1 and on the CPU (the same global batch of 8), and must
# continue the straight 4-rank run over steps 16-30 (the CPU's fp32 against
# bf16 within c3's 2e-2)
chk_n3() {
  n_env 30 30 45
  n_need nccl 4 tiny_nccl4 $N_TINY --batch-size 2 || return 1
  local mode ck t args ok=0
  for mode in sync async; do
    ck=$RUNS/n3_ck_$mode; rm -rf "$ck"
    args=(); [ "$mode" = async ] && args=(--async-checkpoint)
    n_run nccl 4 "save_$mode" $N_TINY --batch-size 2 --checkpoint-dir "$ck" --checkpoint-every 5 \
      --stop-at-step 15 "${args[@]}" || return 1
    [ -f "$ck/step_00000015.h5" ] || { note "$mode: no step 15 checkpoint"; return 1; }
    for t in nccl2 one cpu; do
      cp "$RUNS/n_save_$mode.jsonl" "$RUNS/n_r_${mode}_$t.jsonl"   # the resumed run appends
      case $t in
        nccl2) n_run nccl 2 "r_${mode}_$t" $N_TINY --batch-size 4 --resume "$ck/step_00000015.h5" ;;
        *)     n_run "$t" 1 "r_${mode}_$t" $N_TINY --batch-size 8 --resume "$ck/step_00000015.h5" ;;
      esac || return 1
      resumed "$RUNS/n_r_${mode}_$t.txt" || ok=1
      n_eq "$mode->$t" "r_${mode}_$t" tiny_nccl4 "$([ "$t" = cpu ] && echo "$N_CPU_TOL" || echo "$N_TOL")" \
        --steps 16:30 --min-common 15 || ok=1
    done
  done
  n_eq_note || ok=1
  return $ok
}

# ---- n4: faults --------------------------------------------------------------------------
# n_start NAME RANKS [fsdptrain args]: an NCCL job in the background of this
# check; stdout $RUNS/n_NAME.txt, stderr $RUNS/n_NAME.err, its shell in N_JOB
n_start() {
  local name=$1 n=$2; shift 2
  mpi "$n" bash "$NCCL_RANK" fsdptrain --device "$DEV" "$@" --metrics "$RUNS/n_$name.jsonl" \
    > "$RUNS/n_$name.txt" 2> "$RUNS/n_$name.err" &
  N_JOB=$! N_T0=$EPOCHREALTIME
}
# n_until SECONDS COMMAND...: poll until COMMAND succeeds (0), the job ends (1) or time is up (2)
n_until() {
  local end=$((SECONDS + $1)); shift
  while ! "$@"; do
    kill -0 "$N_JOB" 2>/dev/null || { "$@" && return 0; return 1; }
    [ "$SECONDS" -ge "$end" ] && return 2
    sleep 0.2
  done
}
# n_end BOUND: wait up to BOUND s for the job; N_RC its exit, N_DT the seconds
# since N_T0 (set when the fault was made). A job past BOUND is ended here: FAIL.
n_end() {
  local bound=$1 end=$((SECONDS + $1)) p
  while kill -0 "$N_JOB" 2>/dev/null && [ "$SECONDS" -lt "$end" ]; do sleep 0.2; done
  if kill -0 "$N_JOB" 2>/dev/null; then
    N_DT=$(awk -v a="$N_T0" -v b="$EPOCHREALTIME" 'BEGIN {printf "%.1f", b - a}')
    echo "still running ${N_DT} s after the fault (bound ${bound} s): ending it"
    for p in $(n_pids) $(pgrep -P "$N_JOB"); do kill -KILL "$p" 2>/dev/null; done
    wait "$N_JOB" 2>/dev/null; N_RC=hung; return 1
  fi
  wait "$N_JOB"; N_RC=$?
  N_DT=$(awk -v a="$N_T0" -v b="$EPOCHREALTIME" 'BEGIN {printf "%.1f", b - a}')
}
n_pids() {  # the live fsdptrain processes of this check's session (pgrep; /proc without it)
  local p st all
  if command -v pgrep >/dev/null; then all=$(pgrep -s 0 -x fsdptrain)
  else all=$(grep -l '^fsdptrain$' /proc/[0-9]*/comm 2>/dev/null | sed 's|/proc/||; s|/comm||'); fi
  for p in $all; do
    { read -r st < "/proc/$p/stat"; } 2>/dev/null || continue
    st=${st##*) }; set -- $st   # state ppid pgrp session
    [ "$1" != Z ] && [ "$4" = "$(n_sid)" ] && printf '%s ' "$p"
  done
}
n_sid() { local st; read -r st < /proc/$$/stat; st=${st##*) }; set -- $st; echo "$4"; }
n_rank_pid() {  # RANK: its fsdptrain process (the wrapper exec'd it, so it has mpirun's environment)
  local p
  for p in $(n_pids); do
    tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$1" && { echo "$p"; return 0; }
  done
  return 1
}
n_left() {  # the fsdptrain processes still there 5 s after the job ended (mpirun may still be ending them)
  local i
  for i in 1 2 3 4 5 6 7 8 9 10; do [ -z "$(n_pids)" ] && return 0; sleep 0.5; done
  n_pids
}
# n_verdict NAME BOUND WANT [NOT]: the job has ended non-zero within BOUND s of
# the fault, with a line matching WANT (extended regex, stdout and stderr),
# no fsdptrain error line matching NOT (the rank that was at fault blaming
# itself or another), at most one error line per rank, and no process left
n_verdict() {
  local name=$1 bound=$2 want=$3 not=${4:-} bad=() all="$RUNS/n_$1.txt $RUNS/n_$1.err"
  local errs dup left line
  errs=$(cat $all | grep -c '^fsdptrain: error:')
  dup=$(cat $all | awk '/^fsdptrain: error:/ { r = "?"; if (match($0, /rank [0-9]+/)) r = substr($0, RSTART + 5, RLENGTH - 5)
                                      if (++c[r] == 2) d = d " " r } END { print d }')
  line=$(cat $all | grep -m1 -E "$want")
  left=$(n_left)
  echo "--- exit $N_RC, ${N_DT} s after the fault; error lines:"; cat $all | grep '^fsdptrain: error:'
  local how="exit $N_RC ${N_DT} s after the fault (bound ${bound} s)"
  if [ "$N_RC" = hung ]; then how="still running ${bound} s after the fault, ended by the check"; bad+=("hung")
  elif [ "$N_RC" = 0 ]; then bad+=("exit 0"); fi
  awk -v d="$N_DT" -v b="$bound" 'BEGIN {exit !(d <= b)}' || bad+=("ended ${N_DT} s after the fault")
  [ -n "$line" ] || bad+=("no line matching /$want/")
  [ -z "$dup" ] || bad+=("rank(s)$dup printed more than one error line")
  [ -z "$not" ] || ! cat $all | grep '^fsdptrain: error:' | grep -qE "$not" || bad+=("an error line matches /$not/")
  [ -z "$left" ] || bad+=("fsdptrain left running: $left")
  note "$how, $errs error line(s): $(head -c 160 <<< "${line#fsdptrain: error: }")"
  [ ${#bad[@]} = 0 ] && return 0
  note "FAILED: $(printf '%s; ' "${bad[@]}" | sed 's/; $//')"; return 1
}
# (a) a rank killed mid-step: the others end within the NCCL watchdog's limit;
# the dead rank is named with its node by fsdptrain's line or mpirun's notice
chk_n4a() {
  n_env 10 30 20
  local victim=2 pid
  n_start kill 4 $TINY --batch-size 2 --steps 5000
  n_until 90 grep -qs '"step": 3,' "$RUNS/n_kill.jsonl" || {
    n_end 5; note "no step 3 (exit $N_RC): $(grep -m1 '^fsdptrain: error:' "$RUNS/n_kill.err" | head -c 150)"; return 1; }
  pid=$(n_rank_pid "$victim") || { note "rank $victim's process not found among: $(n_pids)"; n_end 1; return 1; }
  echo "kill -9 rank $victim (pid $pid) at step $(grep -c '"loss"' "$RUNS/n_kill.jsonl")"
  N_T0=$EPOCHREALTIME; kill -KILL "$pid"
  n_end 25
  n_verdict kill 25 "(fsdptrain: error: .*rank $victim\b.*(node|host)|process rank $victim with PID [0-9]+ on node)"
}
# n_stall NAME WHERE BOUND [fsdptrain args]: rank 1 of 4 stops (FSDP_TEST_STALL=1:WHERE);
# N_T0 is when it said so
n_stall() {
  local name=$1 where=$2 bound=$3; shift 3
  FSDP_TEST_STALL=1:$where n_start "$name" 4 "$@"
  local r; n_until 90 grep -qs '^fsdptrain: test: rank 1 stalls' "$RUNS/n_$name.err"; r=$?
  N_T0=$EPOCHREALTIME
  if [ "$r" != 0 ]; then
    n_end 5
    local err; err=$(grep -m1 '^fsdptrain: error:' "$RUNS/n_$name.err" | head -c 150)
    if [ "$N_RC" = 0 ]; then
      note "no 'fsdptrain: test: rank 1 stalls' line: FSDP_TEST_STALL is not in this build (trained to the end, exit 0)"
    else
      note "no 'fsdptrain: test: rank 1 stalls' line; the run ended first: exit $N_RC ${err:-(no error line)}"
    fi
    return 1
  fi
  grep '^fsdptrain: test:' "$RUNS/n_$name.err"
  n_end "$bound"
  return 0   # a job past its bound is n_verdict's to judge (N_RC=hung)
}
# (b) rank 1 stops calling collectives at step 5: the NCCL watchdog (MPI's on
# the CPU) aborts the job and names the collective; the stalled rank blames no one
chk_n4b() {
  local want
  if [ "$DEV" = cuda ]; then
    n_env 6 30 20; want='NCCL collective [a-z_]+ #[0-9]+ on rank [0-9]+.*did not finish within 6 s'
  else
    n_env 6 30 6; want='rank [0-9]+: .* did not complete in 6 s \(FSDP_COLLECTIVE_TIMEOUT_S\)'
  fi
  n_stall stall 5 18 $TINY --batch-size 2 --steps 40 || return 1
  n_verdict stall 18 "$want" '(^fsdptrain: error: rank 1:| on rank 1 )'
}
# (c) the rerun check with real NCCL: a one-time fault on rank 2 of 4 at the
# step that reads sequence 41 (step 6): exit 4, one line naming rank 2 and its
# node (tests/src/rerun_test.py's case)
chk_n4c() {
  n_env 30 30 45
  local ck=$RUNS/n4c_ck node rc
  node=${SLURMD_NODENAME:-$(hostname)}; rm -rf "$ck"
  FSDP_TEST_TRANSIENT_FAULT=2:41 FSDP_FAULTY_NODES_FILE=$RUNS/n_rerun.faulty \
    mpi 4 bash "$NCCL_RANK" fsdptrain --device "$DEV" --model tiny --train-data "$DATA" --seq-len 32 \
    --batch-size 2 --steps 12 --log-every 1 --checkpoint-dir "$ck" --checkpoint-every 4 \
    --on-divergence rollback --spike-window 3 --metrics "$RUNS/n_rerun.jsonl" 2>&1 |
    tee "$RUNS/n_rerun.txt"; rc=${PIPESTATUS[0]}
  local errs line left bad=()
  errs=$(grep -c '^fsdptrain: error:' "$RUNS/n_rerun.txt")
  line=$(grep -m1 '^fsdptrain: error:' "$RUNS/n_rerun.txt")
  left=$(n_left)
  [ "$rc" = 4 ] || bad+=("exit $rc, not 4")
  [ "$errs" = 1 ] || bad+=("$errs error lines")
  grep -q "transient fault at step 6: rank 2 on node $node computed another result" <<< "$line" ||
    bad+=("the line does not name rank 2 on node $node at step 6")
  grep -q '"transient_fault".*"fault_ranks": \[2\]' "$RUNS/n_rerun.jsonl" 2>/dev/null || bad+=("no metrics record naming rank 2")
  [ "$(cat "$RUNS/n_rerun.faulty" 2>/dev/null)" = "$node" ] || bad+=("FSDP_FAULTY_NODES_FILE does not hold $node")
  [ -z "$left" ] || bad+=("fsdptrain left running: $left")
  note "exit $rc: $(head -c 170 <<< "${line#fsdptrain: error: }")"
  [ ${#bad[@]} = 0 ] && return 0
  note "FAILED: $(printf '%s; ' "${bad[@]}" | sed 's/; $//')"; return 1
}
# (d) rank 1 never reaches NCCL's init (it stops after the NCCL id's
# broadcast): the others' ncclCommInitRankConfig gives up after the init
# timeout, and the agreement on that error, which rank 1 never joins, waits
# at most another init timeout (NcclCommunicator::setup_limit) before the
# watchdog's line, which carries the init error, ends the job: about twice
# FSDP_NCCL_INIT_TIMEOUT_S, well inside the MPI watchdog's 30 s. On the CPU,
# with no NCCL init, the MPI watchdog's line on the MPI communicators' set-up.
chk_n4d() {
  local want bound
  if [ "$DEV" = cuda ]; then
    n_env 30 6 30
    want='ncclCommInitRankConfig .*did not finish within 6 s.*did not complete in 6 s \(FSDP_NCCL_INIT_TIMEOUT_S\)'
    bound=20
  else
    n_env 30 6 6; want='did not complete in 6 s \(FSDP_COLLECTIVE_TIMEOUT_S\)' bound=18
  fi
  n_stall init init "$bound" $TINY --batch-size 2 --steps 40 || return 1
  n_verdict init "$bound" "$want" '(^fsdptrain: error: rank 1:| on rank 1 )'
}

export -f n_env n_run n_need n_eq n_eq_note n_floor n_grad_bar n_judge ranks_eq n_start n_until n_end n_pids n_sid n_rank_pid n_left \
  n_verdict n_stall

# id | usual seconds on an H100 | limit | command | what. Usual seconds: the
# first H100 call's (bench/results/h100_2026-11-27/run1_725aab3) with a margin;
# n2a and n2f, new since, estimated from its runs (a 1-rank run ~3 s, a
# 4-rank NCCL run of gpt-125m's widths ~8 s).
N_CHECKS=(
  "n1a|10|60|chk_n1a|2 NCCL ranks on one GPU (nccl_rank.sh), NCCL_DEBUG=INFO: nNodes 2 localRanks 1, NET/Socket"
  "n1b|12|120|chk_n1b|test_comm_nccl_communicator on 2 NCCL ranks"
  "n2a|28|90|chk_n2a|1-rank tiny and $N_BIG 30 steps, twice each with --debug: the spread under N_TOL=$N_TOL; $N_BIG twice without: n2f's bar"
  "n2b|20|120|chk_n2b|tiny on 2 and 4 NCCL ranks vs staged (step 1 within $N_STEP1_TOL) and vs 1 rank: losses within $N_TOL, grad norms ${N_FLOOR_X}x the staged floor"
  "n2c|45|150|chk_n2c|$N_BIG on 2 and 4 NCCL ranks vs staged and vs 1 rank, n2b's bars"
  "n2d|20|120|chk_n2d|NCCL vs staged: 4 ranks 2x2 hybrid + Muon + grad-accum 2; 2 ranks fp8 gathers + recompute block"
  "n2e|16|90|chk_n2e|NCCL_ALGO=Ring: tiny on 4 and 2 NCCL ranks vs staged and vs 1 rank, n2b's bars"
  "n2f|20|120|chk_n2f|the production path (no --debug): $N_BIG on 2 and 4 NCCL ranks vs 1 rank within 3x the no-debug spread"
  "n3|32|150|chk_n3|4 NCCL ranks save (ordinary, --async-checkpoint); resumed on 2 NCCL ranks, 1, CPU: the curve goes on"
  "n4a|8|75|chk_n4a|kill -9 of rank 2 of 4 mid-step: the rest end within the watchdog's limit, rank named, nothing left"
  "n4b|14|75|chk_n4b|FSDP_TEST_STALL=1:5: the watchdog aborts the job naming the collective"
  "n4c|8|75|chk_n4c|FSDP_TEST_TRANSIENT_FAULT on rank 2 of 4: the rerun check exits 4 naming rank 2 and its node"
  "n4d|15|75|chk_n4d|FSDP_TEST_STALL=1:init: the others end within 2x the init timeout, its line carrying the init error"
)
