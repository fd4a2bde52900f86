#!/usr/bin/env bash
# GPU check group n (bench/cuda/checks_n.sh) rehearsed on the CPU, as a GPU
# session's first call would run it but with --device cpu and MPI: the
# script's own logic (runs, comparisons, fault verdicts, the per-rank
# wrapper) must give no FAIL, so that the call on a GPU judges fsdptrain and
# not the script. Usage: test_gpu_checks_rehearsal.sh BUILD_DIR
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "$1" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
REHEARSAL_FROM=$build CARRY=$work/carry bash "$root/bench/cuda/prepare_carry.sh"
OUT=$work/out WORK=$work/work CARRY=$work/carry CHECK_DEVICE=cpu STEPS=n BUDGET_S=400 \
  bash "$root/bench/cuda/run_gpu_checks.sh" || true
summary=$(grep '^== summary' "$work/out/summary.txt" || true)
echo "${summary:-no summary line}"
# every check of the group ran (none CUT or left out) and none failed
ran=$(grep -cE '^(PASS|SKIP) n[0-9]' "$work/out/summary.txt" || true)
want=$(grep -c '^  "n[0-9][a-z]*|' "$root/bench/cuda/checks_n.sh")
if grep -qE '^(FAIL|CUT) ' "$work/out/summary.txt" || [ "$ran" != "$want" ]; then
  echo "FAIL: $ran of $want group-n checks passed or skipped"
  grep -E '^(FAIL|CUT) |->' "$work/out/summary.txt" | head -40
  exit 1
fi
echo "ok: $ran of $want group-n checks passed or skipped"
