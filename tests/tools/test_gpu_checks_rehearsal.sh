#!/usr/bin/env bash
# A GPU check group rehearsed on the CPU, as a GPU session's call would run it
# but with --device cpu (and MPI where the group runs several ranks): the
# script's own logic (runs, comparisons, verdicts, wrappers) must give no FAIL,
# so that the call on a GPU judges fsdptrain and not the script.
#   test_gpu_checks_rehearsal.sh BUILD_DIR [GROUP]
# GROUP n (default): several NCCL ranks on one GPU (bench/cuda/checks_n.sh);
# every check passes or skips. GROUP k: a speed lever's before and after
# (bench/cuda/checks_k.sh), with the build's own fsdptrain bundled as the
# baseline; every check reports (INFO) and profile_ab.txt holds a table each.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "$1" && pwd)
group=${2:-n}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
base=()
[ "$group" = k ] && base=(BASELINE_BIN="$build/src/fsdptrain")
env "${base[@]}" REHEARSAL_FROM="$build" CARRY="$work/carry" bash "$root/bench/cuda/prepare_carry.sh"
OUT=$work/out WORK=$work/work CARRY=$work/carry CHECK_DEVICE=cpu STEPS=$group BUDGET_S=400 \
  bash "$root/bench/cuda/run_gpu_checks.sh" || true
summary=$(grep '^== summary' "$work/out/summary.txt" || true)
echo "${summary:-no summary line}"
# every check of the group ran (none CUT or left out) and none failed
ok='PASS|SKIP'
[ "$group" = k ] && ok='INFO'
ran=$(grep -cE "^($ok) ${group}[0-9]" "$work/out/summary.txt" || true)
want=$(grep -c "^  \"${group}[0-9][a-z]*|" "$root/bench/cuda/checks_$group.sh")
tables=$(grep -c 'total inside ops$' "$work/out/profile_ab.txt" 2>/dev/null || true)
if grep -qE '^(FAIL|CUT) ' "$work/out/summary.txt" || [ "$ran" != "$want" ] ||
   { [ "$group" = k ] && [ "${tables:-0}" != "$want" ]; }; then
  echo "FAIL: $ran of $want group-$group checks gave ${ok//|/ or }${tables:+; $tables before-and-after tables}"
  grep -E '^(FAIL|CUT|SKIP|INFO) |->' "$work/out/summary.txt" | head -40
  exit 1
fi
echo "ok: $ran of $want group-$group checks gave ${ok//|/ or }"
