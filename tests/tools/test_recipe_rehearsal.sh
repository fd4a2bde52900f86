#!/usr/bin/env bash
# The leaderboard recipe's dress rehearsal (issue 64) rehearsed on the CPU, as
# the GPU call runs it: the recipe's data commands (bench/cuda/recipe_data.sh, on
# 1.5 MB of the KJV with the CPU profile's 512-token BPE), then the recipe's
# training and --eval-only commands (bench/cuda/recipe_run.sh, a 15 s budget),
# whose report must give no FAIL (its budget line is INFO on a CPU). Also: the GPU profile changes nothing in
# the recipe's commands but the folders, the budget and the --eval-only's metrics
# file, and a recipe page that drops a flag the rehearsal sets stops it with a
# message naming the flag. Usage: test_recipe_rehearsal.sh BUILD_DIR
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "$1" && pwd)
command -v bible > /dev/null || { echo "skipped: no 'bible' (bible-kjv; tools/setup.sh installs it)"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmds=$root/bench/cuda/recipe_commands.py

# 1. the GPU profile: the recipe's commands but for the folders, the budget, the eval metrics
for stage in data train eval; do
  python3 "$cmds" "$stage" --text /T --tokens /K --run /R --budget 6m > "$work/$stage.txt" 2> "$work/$stage.err"
done
changes=$(cat "$work"/*.err)
want="# recipe: eval: added --metrics /R/owt_eval.jsonl
# recipe: train: --time-budget 1.5h -> 6m"
[ "$(sort <<< "$changes")" = "$want" ] || { echo "FAIL: the GPU profile changed more than it should:"; echo "$changes"; exit 1; }
for flag in "--model gpt-350m" "--vocab-size 32000" "--optimizer muon" "--lr-schedule wsd" "--async-checkpoint" \
            "--eval-seq-len 512" "--grad-accum 16"; do
  grep -q -- "$flag" "$work/train.txt" || { echo "FAIL: the training command lacks $flag:"; cat "$work/train.txt"; exit 1; }
done
# 2. a recipe page without a flag the rehearsal sets: stopped, the flag named
sed 's/ --time-budget 1\.5h//' "$root/docs/PERFORMANCE.md" > "$work/PERFORMANCE.md"
if python3 "$cmds" train --page "$work/PERFORMANCE.md" --text /T --tokens /K --run /R --budget 6m > /dev/null 2> "$work/drift.err"; then
  echo "FAIL: a recipe without --time-budget was accepted"; exit 1
fi
grep -q "has no --time-budget" "$work/drift.err" || { echo "FAIL: unclear refusal:"; cat "$work/drift.err"; exit 1; }

# 3. the whole rehearsal at the CPU shapes
bible "Gen1:1-Rev22:21" > "$work/kjv_all.txt"   # (head in a pipe would kill bible: pipefail)
head -c 1500000 "$work/kjv_all.txt" > "$work/kjv.txt"
RECIPE_TEXT=$work/kjv.txt PROFILE=cpu RECIPE_CARRY=$work/recipe_carry WORK=$work/data \
  bash "$root/bench/cuda/recipe_data.sh"
REHEARSAL_FROM=$build CARRY=$work/carry bash "$root/bench/cuda/prepare_carry.sh" > /dev/null
rc=0
OUT=$work/out WORK=$work/run CARRY=$work/carry RECIPE_CARRY=$work/recipe_carry RECIPE_DEVICE=cpu \
  RECIPE_BUDGET_S=15 bash "$root/bench/cuda/recipe_run.sh" || rc=$?
# loss, saves and eval pass; the budget's line is INFO on a CPU (recipe_run.sh says why)
passed=$(grep -cE '^PASS (loss|saves|eval):' "$work/out/summary.txt" || true)
if [ "$rc" != 0 ] || [ "$passed" != 3 ] || ! grep -q '^INFO budget: steps chosen' "$work/out/summary.txt" ||
   ! grep -q '^RESULT system=fsdptrain recipe=leaderboard' "$work/out/summary.txt"; then
  echo "FAIL: the rehearsal exited $rc with $passed of 3 verdicts passed"; tail -30 "$work/out/recipe_log.txt"; exit 1
fi
echo "ok: the recipe rehearsed: 3 verdicts passed, the budget's line reported"
