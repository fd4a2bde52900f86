#!/usr/bin/env bash
# run_gpu_checks.sh - every GPU check of fsdptrain in one device-tool call.
#
#   bash bench/cuda/prepare_carry.sh                  # first, on the build machine
#   run(command="bash bench/cuda/run_gpu_checks.sh", carry=[".gpu_carry"], timeout_s=600)
#   run(command="STEPS='g h' bash bench/cuda/run_gpu_checks.sh", ...)   # what the first left
#
# The GPU machine has the driver, nvcc and PyTorch (with the nvidia-* wheels:
# cuDNN, NCCL, cuBLAS) but no Open MPI, HDF5 or Boost, so nothing is built
# there: .gpu_carry/ holds the programs built here, bundled with their
# libraries (../shared/gpu-node/make_bundle.sh), and the example data.
#
# Each check runs in its own session under a time limit (a hang costs only its
# own limit, and nothing it started outlives it), writes its whole output to
# its own log, and prints one line: PASS, FAIL, SKIP (cannot apply here),
# INFO (a measurement, not a verdict) or CUT (stopped at the end of BUDGET_S
# past its usual time: no verdict, listed to rerun). The script goes on after failures.
# Checks run in order of importance: several real NCCL ranks on the one GPU
# (n, bench/cuda/checks_n.sh: the multi-GPU path's first proof, under 4
# minutes), the GPU test programs (a), a speed lever before and after (k,
# bench/cuda/checks_k.sh, with a baseline bundled), the demo run (b), parity
# (c-f, m), run control (t, bench/cuda/checks_t.sh), speed (g, h). A check whose usual
# duration no longer fits in BUDGET_S is left out and named at the end with
# the STEPS=... to finish it in a second call.
#
# Output ($OUT, default /tmp/gpu_checks; the tool brings back at most 8 files):
#   summary.txt   the check lines and the final summary (also on stdout)
#   results.txt   RESULT lines of the speed checks (also on stdout)
#   header.log    GPU, driver, library versions, commits, environment
#   kernels.txt   per-kernel GPU time of a few gpt-350m steps (check h2)
#   profile.txt   fsdptrain --profile-ops: device time per op and shape (check p1)
#   profile_ab.txt the baseline's op table beside this tree's (checks k1, k2)
#   logs.tar.gz   every check's log, the commands run, the metrics files;
#                 refreshed after every check, so a killed run still returns it
#
# Knobs (environment):
#   STEPS="a c g3"     letters (groups) or check ids to run (default: all)
#   FP8_RUNS, FP8_MODEL, FP8_BATCH, FP8_STEPS   group i's shapes (fp8, issue 13)
#   N_TOL, N_BIG       group n's equivalence tolerance and second shape (checks_n.sh)
#   BUDGET_S=540       seconds for the whole run (the tool's limit is 600 a call)
#   CHECK_DEVICE=cpu   rehearsal on a machine without a GPU: every "GPU" run uses
#                      --device cpu and tiny shapes, so the script's own logic
#                      (runs, comparisons, RESULT lines) can be tested anywhere
#                      (REHEARSAL_FROM=build bash bench/cuda/prepare_carry.sh
#                      makes a CARRY for it from an existing build, in seconds)
#   STAGED="--device-comm staged"   how several ranks share one GPU (check d)
#   OUT, WORK (/tmp/gpu_work: runs, checkpoints), CARRY (.gpu_carry)
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
T0=$SECONDS

export ROOT
export OUT=${OUT:-/tmp/gpu_checks}
export CARRY=${CARRY:-$ROOT/.gpu_carry}
export WORK=${WORK:-/tmp/gpu_work}
export LOGS=$WORK/logs RUNS=$WORK/runs NOTES=$WORK/notes
export BUDGET_S=${BUDGET_S:-540}
STEPS=${STEPS:-n a k b c d e m t f g h i}
export PYTHONUNBUFFERED=1
export DATA=$CARRY/example/kjv_train.h5 VAL=$CARRY/example/kjv_val.h5
export LINES=$CARRY/example/kjv_lines_train.h5 LINES_VAL=$CARRY/example/kjv_lines_val.h5

# What the checks run on. A rehearsal (CHECK_DEVICE=cpu) swaps the big shapes
# for tiny ones; every value can also be set from outside.
export DEV=${CHECK_DEVICE:-cuda}
export PRECISION=bf16   # fsdptrain's default on a GPU (--precision auto); group i runs fp8
if [ "$DEV" = cuda ]; then
  export TORCH_DEV=${TORCH_DEV:-cuda} TORCH_DTYPE=${TORCH_DTYPE:-bf16} PARITY_TOL=${PARITY_TOL:-1e-2}
  export PARITY_MODEL=${PARITY_MODEL:---model gpt-350m --vocab-size 256 --seq-len 256 --batch-size 4}
  export SPEED_SEQ=${SPEED_SEQ:-1024} SPEED_STEPS=${SPEED_STEPS:-30} TORCH_STEPS=${TORCH_STEPS:-20}
  # model:micro-batch, in order; gpt-1.3b at 8x1024 needs ~21 GiB of fp32
  # state plus ~30 GiB of activations: it fits the H100's 80 GB.
  # (model:micro-batch:collective keeps FSDP's gather/reduce-scatter on one rank)
  SPEED_RUNS=${SPEED_RUNS:-gpt-350m:8 gpt-350m:16 gpt-350m:32 gpt-350m:16:collective gpt-760m:8 gpt-1.3b:8}
  export PROF_MODEL=${PROF_MODEL:-gpt-350m} PROF_BATCH=${PROF_BATCH:-16}
  export STAGED=${STAGED---device-comm staged}
  # group i: FP8 speed runs (model:micro-batch), and the loss run's shape
  FP8_RUNS=${FP8_RUNS:-gpt-350m:16 gpt-1.3b:8}
  export FP8_MODEL=${FP8_MODEL:-gpt-350m} FP8_BATCH=${FP8_BATCH:-8} FP8_STEPS=${FP8_STEPS:-500}
else
  export TORCH_DEV=${TORCH_DEV:-cpu} TORCH_DTYPE=${TORCH_DTYPE:-fp32} PARITY_TOL=${PARITY_TOL:-1e-4}
  export PARITY_MODEL=${PARITY_MODEL:---model tiny --seq-len 64 --batch-size 4}
  export SPEED_SEQ=${SPEED_SEQ:-64} SPEED_STEPS=${SPEED_STEPS:-12} TORCH_STEPS=${TORCH_STEPS:-5}
  SPEED_RUNS=${SPEED_RUNS:-tiny:8 tiny:16 tiny:16:collective}
  export PROF_MODEL=${PROF_MODEL:-tiny} PROF_BATCH=${PROF_BATCH:-8}
  export STAGED=${STAGED---device-comm staged} PRECISION=fp32   # a host stager on the CPU
  FP8_RUNS=${FP8_RUNS:-tiny:8}
  export FP8_MODEL=${FP8_MODEL:-tiny} FP8_BATCH=${FP8_BATCH:-8} FP8_STEPS=${FP8_STEPS:-200}
fi
# the tiny-model runs of checks c and d: 20 steps of 8 x 64 tokens
export TINY="--model tiny --train-data $DATA --seq-len 64 --lr 1e-3 --min-lr 1e-4 --warmup-steps 2 --log-every 5"

mkdir -p "$OUT" "$WORK"
rm -rf "$LOGS" "$RUNS" "$NOTES"   # a second call on a warm machine starts clean
mkdir -p "$LOGS" "$RUNS" "$NOTES"
: > "$OUT/summary.txt"
: > "$OUT/results.txt"

say() { echo "$*" | tee -a "$OUT/summary.txt"; }
pack_logs() {  # everything small that helps a post-mortem; refreshed after each check
  cp -f "$OUT/summary.txt" "$OUT/results.txt" "$LOGS/" 2>/dev/null
  tar -czf "$OUT/.logs.tmp" -C "$WORK" logs $(cd "$WORK" && ls runs/*.jsonl runs/*.txt runs/*.err 2>/dev/null) \
    2>/dev/null && mv -f "$OUT/.logs.tmp" "$OUT/logs.tar.gz"
}

# ---- helpers the checks use (exported: each check runs in its own bash) ----------------
# x: print a command (into the check's log and commands.txt), then run it
x() {
  local line; line=$(printf '%q ' "$@")
  echo "+ $line"; echo "[$CHECK_ID] $line" >> "$LOGS/commands.txt"
  "$@"
}
note() { echo "$*" >> "$NOTES/$CHECK_ID"; }
py() { LD_LIBRARY_PATH="$_FSDP_ORIG_LD_LIBRARY_PATH" python3 "$@"; }   # torch's own lib path
have_torch() { py -c 'import torch, h5py, numpy' >/dev/null 2>&1; }
mpi() { local n=$1; shift; x mpirun --oversubscribe --bind-to none -np "$n" "$@"; }
# cmpm A B [compare_metrics options]: compare two metrics files, verdict into the note
cmpm() {
  local out rc
  out=$(python3 "$ROOT/bench/cuda/compare_metrics.py" compare "$@" 2>&1); rc=$?
  echo "$out"; note "$(tail -1 <<< "$out" | sed -E 's/^(PASS|FAIL): //')"
  return $rc
}
resumed() {  # the log must say it resumed, or a silent fresh start would pass
  grep -q "resumed from" "$1" && return 0
  echo "no 'resumed from' in $1"; note "did not resume"; return 1
}
# peak GPU memory of one run: nvidia-smi polled every 200 ms, minus the use before
mem_poll_start() {
  MEM_BASE=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null | head -1)
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 > "$1" 2>/dev/null &
  MEM_PID=$!
}
mem_poll_stop() {  # prints GiB, or nan
  kill "$MEM_PID" 2>/dev/null; wait "$MEM_PID" 2>/dev/null
  awk -v base="${MEM_BASE:-0}" '$1+0>m{m=$1+0} END{if (m>0) printf "%.3f", (m-base)/1024; else print "nan"}' "$1"
}
gtest_run() {  # a GoogleTest program: PASS, SKIP when it skipped everything, else FAIL
  local log=$RUNS/$CHECK_ID.gtest.txt rc
  x "$BUNDLE/bin/$1" --gtest_color=no 2>&1 | tee "$log"; rc=${PIPESTATUS[0]}
  local passed skipped failed
  passed=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$log" | tail -1)
  skipped=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' "$log" | tail -1)
  failed=$(grep '^\[  FAILED  \] [A-Za-z]' "$log" | sed 's/^\[  FAILED  \] //; s/ (.*//' | sort -u | head -5 | tr '\n' ' ')
  # 77: every case skipped (tests/gtest_verdict.h), as the counts say too
  if [ "$rc" != 0 ] && [ "$rc" != 77 ]; then note "exit $rc; failed: ${failed:-?}"; return 1; fi
  if [ "${passed:-0}" = 0 ] && [ "${skipped:-0}" != 0 ]; then
    note "all ${skipped} skipped: $(grep -m1 -iE 'skipped|no CUDA' "$log" | grep -v '^\[' | head -c 120)"
    return 77
  fi
  note "${passed:-0} passed${skipped:+, $skipped skipped}"
  # the parity numbers the tests print (rel L2, losses) stay in the log
  return 0
}

# ---- the checks -------------------------------------------------------------------------
# a: the GPU programs' own test suites (kernels vs the CPU reference, the model,
#    NCCL on one rank; two ranks of NCCL need two GPUs, so no mpirun here)
chk_a1() { gtest_run test_cuda_ops; }
chk_a2() { gtest_run test_cuda_model; }
chk_a3() { gtest_run test_comm_nccl_communicator; }

# b: the demo run on the GPU: the loss must fall, and follow the CPU's curve
train_demo() {  # DEVICE NAME
  x fsdptrain --device "$1" --model tiny --train-data "$DATA" --val-data "$VAL" --steps 300 --lr 3e-3 \
    --eval-every 100 --log-every 25 --metrics "$RUNS/b_$2.jsonl"
}
last_val() { grep -o '"val_loss": *[0-9.e+-]*' "$1" | tail -1 | sed 's/.*: *//'; }
chk_b1() {
  train_demo "$DEV" main || { note "fsdptrain exited non-zero"; return 1; }
  local out rc; out=$(python3 "$ROOT/bench/cuda/compare_metrics.py" falls "$RUNS/b_main.jsonl" --ratio 0.6)
  rc=$?; echo "$out"
  note "$(sed -E 's/^(PASS|FAIL): //' <<< "$out"); val_loss $(last_val "$RUNS/b_main.jsonl")"
  return $rc
}
chk_b2() {
  [ -s "$RUNS/b_main.jsonl" ] || { note "b1 left no metrics"; return 77; }
  train_demo cpu cpu || { note "the CPU run failed"; return 1; }
  # 300 steps of bf16 and fp32 drift apart step by step; their trend must not
  cmpm "$RUNS/b_main.jsonl" "$RUNS/b_cpu.jsonl" --window 25 --tolerance 5e-2 --min-common 250 || return 1
  note "val_loss $(last_val "$RUNS/b_main.jsonl") vs cpu $(last_val "$RUNS/b_cpu.jsonl")"
}

# c: checkpoints across devices. Tiny model, 20 steps, checkpoint at 10. GPU runs
#    use --debug (deterministic attention) so that the same-GPU resume can be
#    compared bit for bit; c6 says whether that is needed.
tiny20() {  # tiny20 DEVICE METRICS [more flags]
  local dev=$1 m=$2; shift 2
  x fsdptrain --device "$dev" $TINY --batch-size 8 --steps 20 --metrics "$m" "$@"
}
dbg() { [ "$1" = cpu ] || echo --debug; }
chk_c1() { tiny20 "$DEV" "$RUNS/c_gpu.jsonl" $(dbg "$DEV") || return 1; note "20 steps straight"; }
# --document-mask (cuDNN's ragged attention) on verses: each verse a document,
# the newline its end (prepare_carry.sh's kjv_lines_*.h5), validated under it.
docs20() {  # docs20 DEVICE METRICS [more flags]
  local dev=$1 m=$2; shift 2
  x fsdptrain --device "$dev" ${TINY/--train-data $DATA/--train-data $LINES} --batch-size 8 \
    --steps 20 --metrics "$m" --document-mask true --val-data "$LINES_VAL" --eval-every 10 \
    --eval-batches 2 "$@"
}
chk_c7() { docs20 "$DEV" "$RUNS/c_docs_gpu.jsonl" $(dbg "$DEV") || return 1; note "20 steps"; }
chk_c8() {
  docs20 cpu "$RUNS/c_docs_cpu.jsonl" || return 1
  [ -s "$RUNS/c_docs_gpu.jsonl" ] || { note "no c7 metrics to compare"; return 1; }
  cmpm "$RUNS/c_docs_gpu.jsonl" "$RUNS/c_docs_cpu.jsonl" --tolerance 2e-2 --min-common 20
}
chk_c2() {
  tiny20 cpu "$RUNS/c_cpu.jsonl" || return 1
  [ -s "$RUNS/c_gpu.jsonl" ] || { note "no c1 metrics to compare"; return 1; }
  cmpm "$RUNS/c_gpu.jsonl" "$RUNS/c_cpu.jsonl" --tolerance 2e-2 --min-common 20   # GPU vs CPU, 20 steps
}
half_and_resume() {  # DEV_SAVE DEV_RESUME NAME: 10 steps (saves at 5, 10), then --resume auto to 20
  local ck=$RUNS/ck_$3 m=$RUNS/c_$3.jsonl
  tiny20 "$1" "$m" $(dbg "$1") --checkpoint-dir "$ck" --checkpoint-every 5 --stop-at-step 10 ||
    { note "saving run failed"; return 1; }
  tiny20 "$2" "$m" $(dbg "$2") --checkpoint-dir "$ck" --checkpoint-every 5 --resume auto 2>&1 |
    tee "$RUNS/c_$3.resume.txt"
  [ "${PIPESTATUS[0]}" = 0 ] || { note "resumed run failed"; return 1; }
  resumed "$RUNS/c_$3.resume.txt"
}
chk_c3() {  # GPU save -> CPU resume: continues the GPU curve
  half_and_resume "$DEV" cpu g2c || return 1
  cmpm "$RUNS/c_g2c.jsonl" "$RUNS/c_gpu.jsonl" --steps 11:20 --tolerance 2e-2 --min-common 10
}
chk_c4() {  # CPU save -> GPU resume: continues the CPU curve
  half_and_resume cpu "$DEV" c2g || return 1
  cmpm "$RUNS/c_c2g.jsonl" "$RUNS/c_cpu.jsonl" --steps 11:20 --tolerance 2e-2 --min-common 10
}
chk_c5() {  # same GPU: 10 + resume + 10 == 20 straight, bit for bit
  half_and_resume "$DEV" "$DEV" g2g || return 1
  cmpm "$RUNS/c_g2g.jsonl" "$RUNS/c_gpu.jsonl" --bitwise --min-common 20
}
chk_c6() {  # without --debug: are two identical runs identical? (informs, does not fail)
  tiny20 "$DEV" "$RUNS/c_nd1.jsonl" || return 1
  tiny20 "$DEV" "$RUNS/c_nd2.jsonl" || return 1
  cmpm "$RUNS/c_nd1.jsonl" "$RUNS/c_nd2.jsonl" --bitwise --min-common 20 || return 78
}

# d: several ranks on one GPU (device buffers staged through host memory, since
#    NCCL takes one rank per GPU): same global batch of 8, 20 steps, vs 1 rank
chk_d1() { mpi 1 fsdptrain --device "$DEV" $TINY --batch-size 8 --steps 20 --metrics "$RUNS/d_np1.jsonl" || return 1; note "1 rank, batch 8"; }
ranks_vs_one() {
  local n=$1 b=$((8 / $1))
  mpi "$n" fsdptrain --device "$DEV" $STAGED $TINY --batch-size "$b" --steps 20 \
    --metrics "$RUNS/d_np$n.jsonl" || { note "mpirun -np $n ${STAGED:+($STAGED) }failed: $(grep -m1 'error' "$LOGS/$CHECK_ID.log" | head -c 150)"; return 1; }
  [ -s "$RUNS/d_np1.jsonl" ] || { note "no d1 metrics to compare"; return 1; }
  cmpm "$RUNS/d_np$n.jsonl" "$RUNS/d_np1.jsonl" --tolerance 2e-2 --min-common 20
}
chk_d2() { ranks_vs_one 2; }
chk_d3() { ranks_vs_one 4; }

# e: --debug names the first unit that makes NaN/Inf, with step and micro-batch,
#    in exactly one error line (tests/src/cli_errors_test.py does it on the CPU)
nan_run() {
  local err=$RUNS/e_$1.err rc
  x fsdptrain --device "$1" --model tiny --train-data "$DATA" --seq-len 16 --steps 3 --debug --lr 1e30 \
    --grad-clip 0 --warmup-steps 0 2> "$err"; rc=$?
  echo "--- stderr:"; cat "$err"
  local errs; errs=$(grep -c '^fsdptrain: error:' "$err")
  local want="^fsdptrain: error: --debug: the (forward|backward) of unit '[^']+' produced NaN or Inf at step [0-9]+, micro-batch [0-9]+"
  note "$(grep -m1 '^fsdptrain: error:' "$err" | sed -E "s/.*(the (forward|backward) of unit '[^']+').*(at step [0-9]+, micro-batch [0-9]+).*/\1 \3/" | head -c 120)"
  [ "$rc" != 0 ] && [ "$errs" = 1 ] && grep -qE "$want" "$err" && return 0
  note "(exit $rc, $errs error lines, $(grep -c . "$err") stderr lines)"; return 1
}
chk_e1() { nan_run "$DEV"; }
chk_e2() { nan_run cpu; }

# f: PyTorch parity: a gpt-350m-shaped model (vocab 256: the byte data) saves at
#    step 5 and trains on to 55; tools/torch_reference.py continues the step-5
#    checkpoint in bf16 on the GPU for 50 steps on the same batches: every step's
#    loss within 1%
export PARITY_ARGS="$PARITY_MODEL --train-data $DATA --steps 55 --lr 3e-4 --min-lr 3e-5 --warmup-steps 5 --log-every 5 --checkpoint-dir $RUNS/f_ck --metrics $RUNS/f.jsonl"
chk_f1() {
  x fsdptrain --device "$DEV" $PARITY_ARGS --stop-at-step 5 || { note "saving run failed"; return 1; }
  x fsdptrain --device "$DEV" $PARITY_ARGS --resume auto 2>&1 | tee "$RUNS/f.resume.txt"
  [ "${PIPESTATUS[0]}" = 0 ] || { note "resumed run failed"; return 1; }
  resumed "$RUNS/f.resume.txt" || return 1
  note "$(grep -c '"loss"' "$RUNS/f.jsonl") steps, checkpoint $(du -sh "$RUNS/f_ck/step_00000005.h5" | cut -f1)"
}
chk_f2() {
  have_torch || { note "no python3 with torch, h5py, numpy"; return 77; }
  [ -f "$RUNS/f_ck/step_00000005.h5" ] || { note "no f1 checkpoint"; return 1; }
  local out=$RUNS/f_torch.txt rc
  x py "$ROOT/tools/torch_reference.py" "$RUNS/f_ck/step_00000005.h5" --metrics "$RUNS/f.jsonl" --steps 50 \
    --device "$TORCH_DEV" --dtype "$TORCH_DTYPE" --tolerance "$PARITY_TOL" 2>&1 | tee "$out"; rc=${PIPESTATUS[0]}
  note "$(grep -m1 '^worst relative' "$out" || tail -1 "$out" | head -c 150)"
  rm -rf "$RUNS/f_ck"   # ~3 GB each; the speed checks want the disk cache
  return "$rc"
}

# m: Muon on the GPU (bf16 Newton-Schulz on cuBLASLt, issue 33): tiny, 20 steps as
#    in c, against the CPU's fp32 Muon, resumed bit for bit, and on 2 ranks. GPU vs
#    CPU within c2's 2%: bf16 Newton-Schulz alone moved a tiny Muon run's loss by
#    2.6e-4 at most over 19 steps (PyTorch's bf16 iteration against fp32, by
#    tools/torch_reference.py), while AdamW's curve is 7% from Muon's here.
export MUON="--optimizer muon"   # match_rms_adamw: TINY's AdamW --lr carries over
chk_m1() { tiny20 "$DEV" "$RUNS/m_gpu.jsonl" $MUON $(dbg "$DEV") || return 1; note "Muon, 20 steps straight"; }
chk_m2() {
  tiny20 cpu "$RUNS/m_cpu.jsonl" $MUON || return 1
  [ -s "$RUNS/m_gpu.jsonl" ] || { note "no m1 metrics to compare"; return 1; }
  cmpm "$RUNS/m_gpu.jsonl" "$RUNS/m_cpu.jsonl" --tolerance 2e-2 --min-common 20
}
chk_m3() {  # momentum on the device goes through the checkpoint: bitwise
  local ck=$RUNS/m_ck m=$RUNS/m_g2g.jsonl
  tiny20 "$DEV" "$m" $MUON $(dbg "$DEV") --checkpoint-dir "$ck" --checkpoint-every 5 --stop-at-step 10 ||
    { note "saving run failed"; return 1; }
  tiny20 "$DEV" "$m" $MUON $(dbg "$DEV") --checkpoint-dir "$ck" --checkpoint-every 5 --resume auto 2>&1 |
    tee "$RUNS/m_g2g.resume.txt"
  [ "${PIPESTATUS[0]}" = 0 ] || { note "resumed run failed"; return 1; }
  resumed "$RUNS/m_g2g.resume.txt" || return 1
  cmpm "$m" "$RUNS/m_gpu.jsonl" --bitwise --min-common 20
}
chk_m4() {  # owners on two ranks exchange whole matrices through the staged communicator
  mpi 1 fsdptrain --device "$DEV" $TINY $MUON --batch-size 8 --steps 20 --metrics "$RUNS/m_np1.jsonl" ||
    { note "1 rank failed"; return 1; }
  mpi 2 fsdptrain --device "$DEV" $STAGED $TINY $MUON --batch-size 4 --steps 20 --metrics "$RUNS/m_np2.jsonl" ||
    { note "mpirun -np 2 failed: $(grep -m1 'error' "$LOGS/$CHECK_ID.log" | head -c 150)"; return 1; }
  cmpm "$RUNS/m_np2.jsonl" "$RUNS/m_np1.jsonl" --tolerance 2e-2 --min-common 20
}
chk_m5() {  # NorMuon: the row statistics and scaling on the device against the CPU reference
  tiny20 "$DEV" "$RUNS/nm_gpu.jsonl" $MUON --muon-normuon true $(dbg "$DEV") || return 1
  tiny20 cpu "$RUNS/nm_cpu.jsonl" $MUON --muon-normuon true || return 1
  cmpm "$RUNS/nm_gpu.jsonl" "$RUNS/nm_cpu.jsonl" --tolerance 2e-2 --min-common 20
}

# g: speed. fsdptrain and PyTorch (eager, torch.compile) on the same shapes;
#    each measurement is one RESULT line in results.txt
g_fsdp() {  # MODEL MICRO_BATCH [collective|fp8|fp8cast]: "collective" keeps the gather/reduce-
  # scatter path on one rank; fp8: --precision fp8; fp8cast: that, casting gathered bf16 weights
  local tag=$1_mb$2${3:+_$3} system=fsdptrain${3:+-$3} extra=() PRECISION=$PRECISION
  case "${3:-}" in
    collective) extra=(--single-rank-direct false) ;;
    fp8) extra=(--precision fp8); PRECISION=fp8 system=fsdptrain ;;
    fp8cast) extra=(--precision fp8 --fp8-gather false); PRECISION=fp8 ;;
  esac
  local m=$RUNS/g_fsdp_$tag.jsonl rc peak
  mem_poll_start "$RUNS/g_mem_$tag.txt"
  x fsdptrain --device "$DEV" --model "$1" --train-data "$DATA" --seq-len "$SPEED_SEQ" --batch-size "$2" \
    --steps "$SPEED_STEPS" --warmup-steps 5 --lr 3e-4 --log-every 5 --metrics "$m" "${extra[@]}"; rc=$?
  peak=$(mem_poll_stop "$RUNS/g_mem_$tag.txt")
  [ "$rc" = 0 ] || { note "fsdptrain exited $rc: $(grep -m1 'error' "$LOGS/$CHECK_ID.log" | head -c 150)"; return 1; }
  local line
  line=$(python3 "$ROOT/bench/cuda/result_line.py" "$m" --system "$system" --model "$1" --precision "$PRECISION" \
    --micro-batch "$2" --seq "$SPEED_SEQ" --peak-gib "$peak" --device "$GPU_NAME") || { note "no RESULT"; return 1; }
  echo "$line"; echo "$line" >> "$OUT/results.txt"
  note "$(sed -E 's/.*(tokens_per_s=[^ ]+ mfu=[^ ]+ peak_gib=[^ ]+).*/\1/' <<< "$line") (nvidia-smi: $peak GiB)"
  return 78
}
g_torch() {  # MODEL MICRO_BATCH eager|compile
  have_torch || { note "no python3 with torch"; return 77; }
  local out=$RUNS/g_torch_$3_$1_mb$2.txt rc
  x py "$ROOT/bench/cuda/torch_reference.py" --model "$1" --batch "$2" --seq "$SPEED_SEQ" --steps "$TORCH_STEPS" \
    --device "$TORCH_DEV" --result-device "$GPU_NAME" $([ "$3" = compile ] && echo --compile) 2>&1 | tee "$out"
  rc=${PIPESTATUS[0]}
  [ "$rc" = 0 ] || { note "torch_reference exited $rc: $(grep -m1 -E 'Error|error' "$out" | head -c 150)"; return 1; }
  grep '^RESULT ' "$out" | tail -1 >> "$OUT/results.txt"
  note "$(grep '^RESULT ' "$out" | tail -1 | sed -E 's/.*(tokens_per_s=[^ ]+ mfu=[^ ]+ peak_gib=[^ ]+).*/\1/')"
  return 78
}

# h: where the time goes. h1: bench_cuda_ops times each projection's GEMM,
#    attention and a forward+backward at gpt-350m shapes, and exports its
#    weights and first batch, on which PyTorch's loss must agree within 1%.
chk_h1() {
  local out=$RUNS/bench_ops.txt rc
  # --cases model: the ops at the model's shapes (the small table cases are
  # launch-bound and already run for parity in check a)
  x "$BUNDLE/bin/bench_cuda_ops" --model "$PROF_MODEL" --batch "$PROF_BATCH" --seq "$SPEED_SEQ" --steps 10 \
    --cases model --export-init "$RUNS/init" 2>&1 | tee "$out"; rc=${PIPESTATUS[0]}
  [ "$rc" = 0 ] || { note "bench_cuda_ops exited $rc"; return 1; }
  grep -q "no CUDA device" "$out" && { note "no CUDA device"; return 77; }
  note "$(grep -m1 '^train step' "$out" | sed -E 's/.*: //' | head -c 120)"
  have_torch || { note "no torch: first-batch loss not compared"; return 78; }
  local ours theirs
  ours=$(sed -n 's/^first batch mean loss \([0-9.]*\).*/\1/p' "$out" | head -1)
  x py "$ROOT/bench/cuda/torch_reference.py" --init "$RUNS/init" --model "$PROF_MODEL" --batch "$PROF_BATCH" \
    --seq "$SPEED_SEQ" --steps 2 --device "$TORCH_DEV" 2>&1 | tee "$RUNS/bench_ops_torch.txt"
  theirs=$(sed -n 's/^torch first batch mean loss \([0-9.]*\).*/\1/p' "$RUNS/bench_ops_torch.txt" | head -1)
  rm -f "$RUNS"/init.*   # 1.3 GB of weights
  python3 -c 'import sys; a, b = map(float, sys.argv[1:]); d = abs(a - b) / abs(b); print(f"first-batch loss {a:.5f} vs torch {b:.5f}: rel {d:.2e}"); sys.exit(not d <= 1e-2)' \
    "${ours:-nan}" "${theirs:-nan}" > "$RUNS/bench_ops_cmp.txt" 2>&1
  rc=$?; cat "$RUNS/bench_ops_cmp.txt"; note "$(tail -1 "$RUNS/bench_ops_cmp.txt")"
  return $rc
}

# p: fsdptrain --profile-ops: every op of a whole step (optimizer and casts
#    included) timed between CUDA events on the stream, per op and shape, with
#    its rate; PROF_STEPS steps after the first. The table is profile.txt.
chk_p1() {
  local out=$RUNS/profile_run.txt rc
  x fsdptrain --device "$DEV" --model "$PROF_MODEL" --train-data "$DATA" --seq-len "$SPEED_SEQ" \
    --batch-size "$PROF_BATCH" --steps "${PROF_STEPS:-6}" --warmup-steps 1 --log-every 1 --profile-ops \
    2>&1 | tee "$out"; rc=${PIPESTATUS[0]}
  [ "$rc" = 0 ] || { note "fsdptrain exited $rc"; return 1; }
  { echo "# fsdptrain --profile-ops, $PROF_MODEL, micro-batch $PROF_BATCH x $SPEED_SEQ, on $GPU_NAME"
    grep '^step ' "$out" | tail -2
    sed -n '/^op profile/,$p' "$out"; } > "$OUT/profile.txt"
  grep -q '^op profile' "$out" || { note "no profile table"; return 1; }
  note "$(grep -m1 '^op profile' "$out" | sed 's/; rate.*//' | head -c 150)"
  return 78
}

# h3: PyTorch's FP8 GEMM (torch._scaled_mm) and bf16 matmul at gpt-350m's block
#     shapes, beside h1's linear_fp8 lines (issue 13's yardstick)
chk_h3() {
  have_torch || { note "no python3 with torch"; return 77; }
  local out=$RUNS/torch_fp8_gemm.txt rc
  x py "$ROOT/bench/cuda/torch_fp8_gemm.py" --tokens $((PROF_BATCH * SPEED_SEQ)) 2>&1 | tee "$out"
  rc=${PIPESTATUS[0]}
  [ "$rc" = 0 ] || { note "torch_fp8_gemm.py exited $rc: $(grep -m1 -E 'Error|error' "$out" | head -c 150)"; return 1; }
  note "$(grep -m1 'w1/w3' "$out" | sed 's/.*: //' | head -c 150)"
  return 78
}

# h2: per-kernel GPU time of a few gpt-350m steps. nsys if
#    it works here (it was not on the image's PATH when last looked at), else
#    Nsight Compute timing each kernel (serialised: kernel totals, not overlap)
find_ncu() {
  command -v ncu 2>/dev/null && return
  ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1
}
find_nsys() {
  command -v nsys 2>/dev/null && return
  ls /opt/nvidia/nsight-systems*/bin/nsys /usr/local/cuda/bin/nsys /usr/local/cuda/nsight-systems*/bin/nsys \
    2>/dev/null | head -1
}
chk_h2() {
  local args="--device $DEV --model $PROF_MODEL --train-data $DATA --seq-len $SPEED_SEQ --batch-size $PROF_BATCH --warmup-steps 1 --log-every 1"
  local nsys; nsys=$(find_nsys)
  if [ -n "$nsys" ]; then
    if x "$nsys" profile -o "$RUNS/prof" --force-overwrite true --trace cuda,nvtx --sample none \
         --cpuctxsw none fsdptrain $args --steps 6 &&
       x "$nsys" stats --report cuda_gpu_kern_sum --format table "$RUNS/prof.nsys-rep" > "$RUNS/kernels.txt" 2>&1 &&
       grep -q . "$RUNS/kernels.txt"; then
      cat "$RUNS/kernels.txt"; cp "$RUNS/kernels.txt" "$OUT/kernels.txt"
      note "nsys: $(grep -c . "$RUNS/kernels.txt") lines in kernels.txt"; return 78
    fi
    echo "nsys did not produce a report; trying ncu"
  fi
  local ncu; ncu=$(find_ncu)
  [ -n "$ncu" ] || { note "neither nsys nor ncu here"; return 77; }
  # --clock-control none: leave the card's clocks alone; --cache-control none:
  # warm caches, as in training. ncu takes ~0.12 s a kernel here (an H100,
  # 2026-11-23: 1639 kernels in 200 s), so NCU_LAUNCHES=1250 covers start-up
  # (~26) and the warm-up forward+backward of gpt-350m (~1216), each timed
  # once (a single-pass metric, so no replays).
  x "$ncu" --clock-control none --cache-control none --target-processes all --metrics gpu__time_duration.sum \
    --launch-count "${NCU_LAUNCHES:-1250}" -f -o "$RUNS/ncu_prof" \
    fsdptrain $args --steps 2 --metrics "$RUNS/h_ncu.jsonl" > "$RUNS/ncu_run.txt" 2>&1
  local rc=$?; tail -20 "$RUNS/ncu_run.txt"
  [ -f "$RUNS/ncu_prof.ncu-rep" ] || { note "ncu exited $rc, no report: $(grep -m1 -E 'ERR|rror' "$RUNS/ncu_run.txt" | head -c 120)"; return 1; }
  x "$ncu" -i "$RUNS/ncu_prof.ncu-rep" --csv --page raw --print-units base > "$RUNS/ncu.csv" 2>&1
  local head="# ncu, $PROF_MODEL, micro-batch $PROF_BATCH x $SPEED_SEQ, first NCU_LAUNCHES=${NCU_LAUNCHES:-1250} kernels: start-up and the warm-up forward+backward (serialised by the profiler)"
  { echo "$head"; python3 "$ROOT/bench/cuda/kernel_summary.py" "$RUNS/ncu.csv" --top 40; } > "$RUNS/kernels.txt" 2>&1
  local krc=$?
  if [ "$krc" != 0 ]; then  # the other CSV layout
    x "$ncu" -i "$RUNS/ncu_prof.ncu-rep" --csv --page details --print-units base > "$RUNS/ncu.csv" 2>&1
    { echo "$head"; python3 "$ROOT/bench/cuda/kernel_summary.py" "$RUNS/ncu.csv" --top 40; } > "$RUNS/kernels.txt" 2>&1
    krc=$?
  fi
  cat "$RUNS/kernels.txt"; cp "$RUNS/kernels.txt" "$OUT/kernels.txt"
  echo "--- ncu's own per-kernel summary:"
  "$ncu" -i "$RUNS/ncu_prof.ncu-rep" --print-summary per-kernel 2>&1 | head -400
  gzip -c "$RUNS/ncu.csv" > "$LOGS/ncu.csv.gz"
  [ "$krc" = 0 ] || { note "kernel_summary failed (raw CSV in logs/ncu.csv.gz)"; return 1; }
  note "ncu: $(sed -n 2p "$RUNS/kernels.txt" | head -c 120)"
  return 78
}

# i: FP8 training (issue 13). Speed: RESULT lines with precision=fp8, weights
#    gathered as e4m3 codes (fp8) and cast per GEMM from bf16 (fp8cast);
#    where the time goes (profile_fp8.txt in the logs); loss: FP8_MODEL,
#    FP8_STEPS steps of fp8 against bf16 on the same data and seed: the final
#    validation loss within 1%, and no 50-step window of the training loss
#    after the first 100 steps more than 5% above bf16's (never diverging).
fp8_loss_run() {  # PRECISION METRICS
  x fsdptrain --device "$DEV" --model "$FP8_MODEL" --train-data "$DATA" --val-data "$VAL" \
    --seq-len "$SPEED_SEQ" --batch-size "$FP8_BATCH" --steps "$FP8_STEPS" --lr 3e-4 --warmup-steps 50 \
    --log-every 10 --eval-every "$FP8_STEPS" --eval-batches 20 --precision "$1" --metrics "$2"
}
chk_i1() {
  fp8_loss_run "$PRECISION" "$RUNS/i_ref.jsonl" || { note "the $PRECISION run failed"; return 1; }
  note "$PRECISION: val_loss $(last_val "$RUNS/i_ref.jsonl")"
}
chk_i2() {
  [ -s "$RUNS/i_ref.jsonl" ] || { note "i1 left no metrics"; return 77; }
  fp8_loss_run fp8 "$RUNS/i_fp8.jsonl" || { note "the fp8 run failed"; return 1; }
  local out rc
  out=$(python3 "$ROOT/bench/cuda/compare_metrics.py" follows "$RUNS/i_ref.jsonl" "$RUNS/i_fp8.jsonl" 2>&1)
  rc=$?; echo "$out"; note "$(tail -1 <<< "$out" | sed -E 's/^(PASS|FAIL): //')"
  return $rc
}
chk_i3() {  # the profile of an fp8 step, into the logs
  local out=$RUNS/profile_fp8.txt rc
  x fsdptrain --device "$DEV" --model "$PROF_MODEL" --train-data "$DATA" --seq-len "$SPEED_SEQ" \
    --batch-size "$PROF_BATCH" --steps "${PROF_STEPS:-6}" --warmup-steps 1 --log-every 1 --profile-ops \
    --precision fp8 2>&1 | tee "$out"; rc=${PIPESTATUS[0]}
  [ "$rc" = 0 ] || { note "fsdptrain exited $rc"; return 1; }
  grep -q '^op profile' "$out" || { note "no profile table"; return 1; }
  note "$(grep -m1 '^op profile' "$out" | sed 's/; rate.*//' | head -c 150) (logs: runs/profile_fp8.txt)"
  return 78
}

# group t's checks (--time-budget, --eval-seq-len on the GPU)
# shellcheck source=bench/cuda/checks_t.sh
source "$ROOT/bench/cuda/checks_t.sh"
# group n's checks and their rows, N_CHECKS (NCCL ranks sharing the GPU through
# bench/cuda/nccl_rank.sh; a rehearsal runs them on MPI)
# shellcheck source=bench/cuda/checks_n.sh
source "$ROOT/bench/cuda/checks_n.sh"
# group k's checks, K_CHECKS: a speed lever before and after (fsdptrain-base)
# shellcheck source=bench/cuda/checks_k.sh
source "$ROOT/bench/cuda/checks_k.sh"

# ---- the check list: id | usual seconds on an H100 | limit | command | what --------------
# Order is priority order. Usual seconds are guesses with start-up included;
# a check starts only if they fit in what is left of BUDGET_S.
CHECKS=(
  "${N_CHECKS[@]}"
  "a1|20|120|chk_a1|test_cuda_ops: every CUDA op vs the CPU reference"
  "a2|90|240|chk_a2|test_cuda_model: whole model (tiny, gpt-350m-shaped) vs the CPU reference"
  "a3|10|60|chk_a3|test_comm_nccl_communicator on one rank"
  "${K_CHECKS[@]}"
  "b1|15|90|chk_b1|fsdptrain --device $DEV tiny, 300 steps: the loss falls"
  "b2|25|120|chk_b2|the same run on the CPU: the curves agree (windows of 25, 5%)"
  "c1|6|60|chk_c1|tiny 20 steps on the GPU (--debug), reference for c"
  "c2|4|60|chk_c2|tiny 20 steps on the CPU; GPU vs CPU within 2%"
  "c3|10|90|chk_c3|GPU save -> CPU resume continues the GPU curve (2%)"
  "c4|10|90|chk_c4|CPU save -> GPU resume continues the CPU curve (2%)"
  "c5|10|90|chk_c5|GPU save -> GPU resume == 20 straight, bitwise (--debug)"
  "c6|10|90|chk_c6|without --debug, two GPU runs bitwise equal? (INFO)"
  "c7|8|60|chk_c7|tiny 20 steps with --document-mask on the GPU (--debug), verses as documents"
  "c8|5|60|chk_c8|the same on the CPU; GPU vs CPU within 2% over the 20 losses"
  "d1|8|60|chk_d1|mpirun -np 1, batch 8: reference for d"
  "d2|10|90|chk_d2|mpirun -np 2 $STAGED, batch 4: vs 1 rank (2%)"
  "d3|12|90|chk_d3|mpirun -np 4 $STAGED, batch 2: vs 1 rank (2%)"
  "e1|5|45|chk_e1|--debug NaN injection on the GPU: one error line naming unit, step, micro-batch"
  "e2|3|45|chk_e2|the same on the CPU"
  "m1|6|60|chk_m1|--optimizer muon: tiny 20 steps on the GPU (--debug), reference for m"
  "m2|6|60|chk_m2|the same on the CPU (fp32 Newton-Schulz); GPU vs CPU within 2%"
  "m3|10|90|chk_m3|Muon: GPU save -> GPU resume == 20 straight, bitwise (--debug)"
  "m4|20|120|chk_m4|Muon on mpirun -np 2 $STAGED, batch 4: vs 1 rank (2%)"
  "m5|12|90|chk_m5|--muon-normuon: tiny 20 steps on the GPU (--debug) and on the CPU; within 2%"
  "t1|75|150|chk_t1|--time-budget $T_BUDGET --steps 0: the budget sets the count; ends inside it, near the plan"
  "t2|40|120|chk_t2|--eval-seq-len $T_HALF during training == --eval-only of its checkpoint at that context (1e-3)"
  "t3|90|300|chk_t3|--async-checkpoint: step 20 written in the background == ordinary saves' (bitwise, --debug); host copy cost"
  "t4|80|200|chk_t4|what a save costs the steps without --debug: none, ordinary, background (INFO)"
  "f1|45|150|chk_f1|$PARITY_MODEL: 5 steps, checkpoint, resume to 55"
  "f2|45|180|chk_f2|tools/torch_reference.py $TORCH_DTYPE on $TORCH_DEV from step 5, 50 steps within $PARITY_TOL"
)
gi=0
add_g() { gi=$((gi + 1)); CHECKS+=("g$gi|$1|$2|$3|$3"); }
# fsdptrain's own numbers first, then one PyTorch baseline, the kernel profile
# (what the speed work needs next), the compiled baseline, then the rest
first=${SPEED_RUNS%% *}; rest=${SPEED_RUNS#"$first"}
rest=$(for r in $rest; do [[ $r == *:*:* ]] || echo "$r"; done)   # PyTorch has no "collective" variant
# usual seconds of one fsdptrain speed run by model (H100, 2026-11-26: gpt-350m
# 17-22, gpt-760m 36, gpt-1.3b 49-51 with its plan timing and warm-up)
speed_est() { case $1 in gpt-1.3b*) echo 55;; gpt-760m*) echo 40;; *) echo 25;; esac; }
for r in $SPEED_RUNS; do add_g "$(speed_est "$r")" 120 "g_fsdp ${r//:/ }"; done
CHECKS+=("p1|40|120|chk_p1|fsdptrain --profile-ops $PROF_MODEL micro-batch $PROF_BATCH: device time per op and shape (profile.txt)")
CHECKS+=("h3|20|90|chk_h3|torch._scaled_mm (fp8) and bf16 matmul at $PROF_MODEL's block shapes")
CHECKS+=("h1|45|150|chk_h1|bench_cuda_ops $PROF_MODEL: GEMM, attention, fwd+bwd timings; first-batch loss vs PyTorch (1%)")
add_g 30 150 "g_torch ${first%%:*} ${first##*:} eager"
CHECKS+=("h2|180|240|chk_h2|per-kernel GPU time of the warm-up forward+backward of $PROF_MODEL (nsys, else ncu)")
add_g 90 240 "g_torch ${first%%:*} ${first##*:} compile"
for r in $rest; do add_g 30 150 "g_torch ${r%%:*} ${r##*:} eager"; done
for r in $rest; do add_g 90 240 "g_torch ${r%%:*} ${r##*:} compile"; done
CHECKS+=("i1|50|180|chk_i1|$FP8_MODEL $FP8_STEPS steps in $PRECISION, micro-batch $FP8_BATCH: reference for i2")
CHECKS+=("i2|60|200|chk_i2|the same in fp8: final val_loss at most 1% above, no 50-step window 5% above")
CHECKS+=("i3|40|120|chk_i3|fsdptrain --profile-ops --precision fp8 $PROF_MODEL micro-batch $PROF_BATCH (logs: runs/profile_fp8.txt)")
ii=3
add_i() { ii=$((ii + 1)); CHECKS+=("i$ii|$1|$2|$3|$3"); }
for r in $FP8_RUNS; do
  add_i "$(speed_est "$r")" 150 "g_fsdp ${r//:/ } fp8"
  add_i "$(speed_est "$r")" 150 "g_fsdp ${r//:/ } fp8cast"
done

export -f x note py have_torch mpi cmpm resumed mem_poll_start mem_poll_stop gtest_run train_demo \
  last_val tiny20 docs20 dbg half_and_resume ranks_vs_one nan_run g_fsdp g_torch find_nsys find_ncu \
  fp8_loss_run k_run k_ab
for f in $(declare -F | awk '$3 ~ /^chk_/ {print $3}'); do export -f "$f"; done

session_left() {  # "pid:name ..." of the live processes of session $1 (zombies are already dead)
  local sid=$1 f st rest out=()
  for f in /proc/[0-9]*/stat; do
    { read -r st < "$f"; } 2>/dev/null || continue
    rest=${st##*) }; set -- $rest   # state ppid pgrp session ...
    [ "${4:-}" = "$sid" ] || continue
    [ "$1" = Z ] && continue
    out+=("${f//[^0-9]/}:$(tr -d '\0' < "${f%stat}comm" 2>/dev/null)")
  done
  echo "${out[*]}"
}
# run one check in its own session under a limit; ends whatever it left behind
run_limited() {  # LIMIT LOG COMMAND
  local limit=$1 log=$2 cmd=$3 pid rc
  if command -v setsid >/dev/null; then
    setsid timeout -k 10 "$limit" bash -c "$cmd" >> "$log" 2>&1 < /dev/null &
  else
    timeout -k 10 "$limit" bash -c "$cmd" >> "$log" 2>&1 < /dev/null &
  fi
  pid=$!
  wait "$pid"; rc=$?
  # setsid made $pid a session leader: anything of that session still alive
  # (an mpirun rank that outlived a killed launcher) is ours to end, after a
  # moment's grace for launchers that are still cleaning up
  local left
  left=$(session_left "$pid")
  [ -n "$left" ] && { sleep 2; left=$(session_left "$pid"); }
  if [ -n "$left" ]; then
    echo "run_gpu_checks: ending leftover process(es) of the check: $left" >> "$log"
    local e; for e in $left; do kill -KILL "${e%%:*}" 2>/dev/null; done
  fi
  return "$rc"
}

selected() {  # id: its letter or the id itself is in STEPS; in the groups whose checks
  # compare with earlier runs of the group (b, c, d, f), any member selects them all
  local s; for s in $STEPS; do
    [ "$s" = "$1" ] || [ "$s" = "${1:0:1}" ] && return 0
    [[ "${1:0:1}" == [bcdf] && "${s:0:1}" == "${1:0:1}" ]] && return 0
    [[ "$1" == i[12] && "$s" == i[12] ]] && return 0   # i2 compares with i1
  done
  return 1
}
if [ "${1:-}" = --list ]; then   # the plan, without running anything
  printf '%-4s %6s %6s  %s\n' id usual limit what
  for c in "${CHECKS[@]}"; do
    IFS='|' read -r id est limit cmd what <<< "$c"
    selected "$id" && printf '%-4s %5ss %5ss  %s\n' "$id" "$est" "$limit" "$what"
  done
  exit 0
fi

# ---- the bundle: fsdptrain, the test programs, mpirun, their libraries -------------
BUNDLE_TAR=$CARRY/fsdp-bundle.tar.xz
export BUNDLE=$WORK/bundle/fsdp-bundle
if [ ! -f "$BUNDLE_TAR" ]; then
  say "FAIL setup: no $BUNDLE_TAR; run bash bench/cuda/prepare_carry.sh here and carry .gpu_carry"
  pack_logs; exit 1
fi
stamp=$(cksum < "$BUNDLE_TAR")
if [ "$(cat "$WORK/bundle/.stamp" 2>/dev/null)" != "$stamp" ]; then
  rm -rf "$WORK/bundle" && mkdir -p "$WORK/bundle"
  if command -v xz >/dev/null; then
    tar -xJf "$BUNDLE_TAR" -C "$WORK/bundle"
  else  # the GPU image may lack xz; python's lzma reads it
    python3 - "$BUNDLE_TAR" "$WORK/bundle" <<'EOF'
import sys, tarfile
with tarfile.open(sys.argv[1]) as t:
    t.extractall(sys.argv[2], **({"filter": "tar"} if hasattr(tarfile, "tar_filter") else {}))
EOF
  fi || { say "FAIL setup: cannot unpack $BUNDLE_TAR"; pack_logs; exit 1; }
  echo "$stamp" > "$WORK/bundle/.stamp"
fi
# env.sh: CUDA libraries from this machine (torch's nvidia/* wheels), Open MPI
# relocated to the bundle, single-node MPI defaults (plm=isolated, root allowed).
# shellcheck disable=SC1091
source "$BUNDLE/env.sh" 2> "$LOGS/env.log"
export _FSDP_ORIG_LD_LIBRARY_PATH=${_FSDP_ORIG_LD_LIBRARY_PATH:-}

export GPU_NAME
GPU_NAME=$(timeout 30 nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
GPU_NAME=${GPU_NAME:-none}
[ "$DEV" = cpu ] && GPU_NAME="cpu-rehearsal"

# ---- header ----------------------------------------------------------------------------
{
  echo "# run_gpu_checks.sh $(date -u +%FT%TZ) on $(hostname)"
  echo "STEPS='$STEPS' BUDGET_S=$BUDGET_S CHECK_DEVICE=$DEV STAGED='$STAGED' OUT=$OUT WORK=$WORK"
  echo "## tree"
  if git -C "$ROOT" rev-parse HEAD >/dev/null 2>&1; then
    # the device tool's copy may keep the session's first commit as HEAD while
    # its files are newer: the bundle's build below is the one to trust
    echo "HEAD $(git -C "$ROOT" rev-parse HEAD) (git metadata of this copy)"; git -C "$ROOT" status --short
  else
    echo "(no git here: the tree came without .git; see the build below)"
  fi
  echo "## the bundle's build (written by prepare_carry.sh)"
  cat "$CARRY/BUILD_INFO.txt" 2>/dev/null || echo "(no BUILD_INFO.txt)"
  echo "## GPU"
  # (each under timeout: a wedged driver must not hang the header)
  timeout 30 nvidia-smi 2>&1 || echo "nvidia-smi failed: no GPU visible"
  timeout 30 nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv 2>&1
  echo "## toolchain"
  nvcc --version 2>&1 | tail -2
  LD_LIBRARY_PATH="$_FSDP_ORIG_LD_LIBRARY_PATH" timeout 60 python3 -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())' 2>&1
  LD_LIBRARY_PATH="$_FSDP_ORIG_LD_LIBRARY_PATH" timeout 60 python3 -m pip list 2>/dev/null | grep -iE '^(nvidia-(cudnn|nccl|cublas|cuda-runtime|cuda-nvrtc)|h5py|numpy|torch) '
  echo "ncu: $(find_ncu || true)  nsys: $(find_nsys || true)  xz: $(command -v xz || echo none)"
  [ -n "$(find_ncu)" ] && timeout 30 "$(find_ncu)" --version 2>&1 | tail -1
  echo "## bundle env.sh said"
  cat "$LOGS/env.log"
  echo "fsdptrain = $(command -v fsdptrain); mpirun = $(command -v mpirun)"
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  head -3 "$BUNDLE/MANIFEST.txt" 2>/dev/null
  echo "## fsdptrain --help"
  timeout 30 fsdptrain --help 2>&1 | head -80
  echo "## nproc $(nproc), memory $(free -g 2>/dev/null | awk '/Mem/{print $2" GiB"}'), disk $(df -h "$WORK" | awk 'NR==2{print $4" free"}')"
} > "$OUT/header.log" 2>&1
cp "$OUT/header.log" "$LOGS/header.log"

say "== fsdptrain GPU checks on '$GPU_NAME' (device $DEV), STEPS='$STEPS', budget ${BUDGET_S}s =="
n_pass=0 n_fail=0 n_skip=0 n_info=0 n_cut=0
failed=() left_out=()
for c in "${CHECKS[@]}"; do
  IFS='|' read -r id est limit cmd what <<< "$c"
  selected "$id" || continue
  used=$((SECONDS - T0)); left=$((BUDGET_S - used))
  g=${id:0:1}
  # b, c, d and f compare with runs made earlier in their group: once one of
  # them is left out, so is the rest of the group, and a later call reruns it whole
  if [[ "$g" == [bcdf] && " ${left_out[*]} " == *" $g "* ]]; then continue; fi
  if [ "$left" -lt "$est" ]; then
    if [[ "$g" == [bcdf] ]]; then left_out+=("$g"); else left_out+=("$id"); fi
    continue
  fi
  cut=0   # a limit shortened to the budget's rest: running out of it is no verdict
  [ "$limit" -gt "$left" ] && { limit=$left; cut=1; }
  log="$LOGS/$id.log"
  t=$SECONDS
  export CHECK_ID=$id
  { echo "# $id: $what"; echo "# $cmd, limit ${limit}s, started $(date -u +%T)"; } > "$log"
  run_limited "$limit" "$log" "$cmd"; rc=$?
  dt=$((SECONDS - t))
  detail=$(awk 'NR > 1 {printf "; "} {printf "%s", $0}' "$NOTES/$id" 2>/dev/null)
  case $rc in
    0) st=PASS; n_pass=$((n_pass + 1));;
    77) st=SKIP; n_skip=$((n_skip + 1));;
    78) st=INFO; n_info=$((n_info + 1));;
    124|137) if [ "$cut" = 1 ]; then   # ran past its usual time into the budget's end
               st=CUT; n_cut=$((n_cut + 1)); detail="stopped at the budget's end after ${limit}s; rerun it"
             else
               st=FAIL; n_fail=$((n_fail + 1)); failed+=("$id"); detail="timed out after ${limit}s${detail:+; $detail}"
             fi;;
    *) st=FAIL; n_fail=$((n_fail + 1)); failed+=("$id");;
  esac
  if [ "$st" = CUT ]; then   # rerun next call; a cut b/c/d/f check reruns its whole group
    if [[ "$g" == [bcdf] ]]; then left_out+=("$g"); else left_out+=("$id"); fi
  fi
  say "$(printf '%-4s %-4s %4ss  %-8s %s' "$st" "$id" "$dt" "$id.log" "$what")"
  [ -n "$detail" ] && say "            -> $(head -c 300 <<< "$detail")"
  if [ "$st" = FAIL ]; then   # the end of its log, so a failure can be read from stdout alone
    { grep -m1 -E 'error:|Error|FAILED|Assertion|Segmentation|what\(\)' "$log"
      grep -v -e '^+ ' -e '^# ' "$log" | grep . | tail -2; } | awk '!seen[$0]++' | cut -c1-200 |
      sed 's/^/            | /' | tee -a "$OUT/summary.txt"
  fi
  pack_logs
done

# ---- summary ------------------------------------------------------------------------------
say ""
cut_txt=""; [ "$n_cut" -gt 0 ] && cut_txt=", $n_cut CUT"
say "== summary: $n_pass PASS, $n_fail FAIL, $n_skip SKIP, $n_info INFO$cut_txt in $((SECONDS - T0))s on '$GPU_NAME' =="
[ ${#failed[@]} -gt 0 ] && say "failed: ${failed[*]}"
if [ ${#left_out[@]} -gt 0 ]; then
  say "not run or cut short, out of time budget: ${left_out[*]}"
  say "to finish them: STEPS='${left_out[*]}' bash bench/cuda/run_gpu_checks.sh"
fi
if [ -s "$OUT/results.txt" ]; then
  say "== results =="
  tee -a "$OUT/summary.txt" < "$OUT/results.txt"
fi
say "logs: $OUT/logs.tar.gz (logs/<id>.log, logs/commands.txt, runs/*.jsonl), $OUT/header.log"
{ echo "## commands run"; cat "$LOGS/commands.txt" 2>/dev/null; } >> "$OUT/header.log"
pack_logs
[ "$n_fail" = 0 ]
