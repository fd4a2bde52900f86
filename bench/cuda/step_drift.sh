#!/usr/bin/env bash
# step_drift.sh - why do a run's first steps time faster than its later ones?
# (GPU check t1 failed on an H200: steps 2-10 took 36.6 ms, steps 20+ 37.8 ms.)
# Runs gpt-350m (byte vocab, 8 x 1024) for 300 steps twice while nvidia-smi
# samples SM clock, power, temperature and clock-event reasons every 50 ms:
#   A: --lr 1e-3 (t1's run)          weights change
#   B: --lr 1e-9                      weights (almost) frozen
# If B keeps its first steps' time, the drift follows the weights' values
# (power drawn by the tensor cores), not the clock of a GPU warming up.
#   run(command="bash bench/cuda/step_drift.sh", carry=[".gpu_carry"])
# Writes, in bench/results' run-folder layout: header.log (GPU, commit),
# summary.txt, results.txt (RESULT lines) and logs.tar.gz (logs/: the runs'
# output and nvidia-smi samples; runs/: their metrics).
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd); cd "$ROOT"
OUT=${OUT:-/tmp/step_drift}; W=/tmp/step_drift_work; mkdir -p "$OUT" "$W"
python3 - .gpu_carry/fsdp-bundle.tar.xz "$W" <<'PY'
import sys, tarfile
with tarfile.open(sys.argv[1]) as t:  # filter= exists only in newer Pythons
    t.extractall(sys.argv[2], **({"filter": "tar"} if hasattr(tarfile, "tar_filter") else {}))
PY
source "$W/fsdp-bundle/env.sh" 2> "$OUT/env.log"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv | tee "$OUT/smi_head.txt"
git rev-parse HEAD 2>/dev/null | tee -a "$OUT/smi_head.txt"
for run in A:1e-3 B:1e-9; do
  name=${run%%:*} lr=${run#*:}
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active \
    --format=csv,noheader -lms 50 > "$OUT/smi_$name.csv" 2>&1 &
  smi=$!
  date +%s.%N > "$OUT/start_$name.txt"
  fsdptrain --device cuda --model gpt-350m --vocab-size 256 --seq-len 1024 --batch-size 8 \
    --train-data .gpu_carry/example/kjv_train.h5 --steps 300 --warmup-steps 20 --lr "$lr" --min-lr 0 \
    --log-every 50 --metrics "$OUT/m_$name.jsonl" > "$OUT/log_$name.txt" 2>&1
  echo "run $name exit $?"
  kill $smi; wait $smi 2>/dev/null
done
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
python3 - "$OUT" "$GPU" <<'PY' | tee "$OUT/results.txt"
import json, sys
out, gpu = sys.argv[1:3]
for n in "AB":
    S = {d["step"]: d for d in map(json.loads, open(f"{out}/m_{n}.jsonl")) if "loss" in d}
    def ms(a, b): return (S[b]["train_s"] - S[a]["train_s"]) / (b - a) * 1e3
    print(f"RESULT system=fsdptrain check=step_drift run={n} ms_2_10={ms(2,10):.2f} "
          f"ms_10_20={ms(10,20):.2f} ms_20_50={ms(20,50):.2f} ms_50_150={ms(50,150):.2f} ms_150_300={ms(150,300):.2f} "
          f"loss_300={S[300]['loss']:.3f} device={gpu}")
PY
# the run-folder layout
{ echo "# bash bench/cuda/step_drift.sh $(date -u +%FT%TZ)"; cat "$OUT/smi_head.txt"; } > "$OUT/header.log"
cp "$OUT/results.txt" "$OUT/summary.txt"
mkdir -p "$W/pack/logs" "$W/pack/runs"
mv "$OUT"/log_* "$OUT"/smi_* "$OUT"/env.log "$OUT"/start_* "$W/pack/logs/"
mv "$OUT"/m_*.jsonl "$W/pack/runs/"
tar -czf "$OUT/logs.tar.gz" -C "$W/pack" logs runs
