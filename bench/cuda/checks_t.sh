# checks_t.sh - group t of run_gpu_checks.sh (sourced by it): run-control
# features that ran on the CPU but not yet on a GPU (issue 30's list).
#   t1  --time-budget setting the step count itself (--steps 0; wsd, so it
#       plans again late in the stable phase): the final validation ends
#       inside the budget, near the second plan's predicted end
#   t2  --eval-seq-len: validation at half the training context during
#       training equals --eval-only of the saved checkpoint at that context
#   t3  --async-checkpoint: saves written in the background while training
#       goes on give the step-20 checkpoint of ordinary saves bit for bit
#       (both under --debug, deterministic); the host copy's cost from GPU memory
#   t4  what a save costs the steps, without --debug (whose per-op syncs make
#       the steps as noisy as the host): none, ordinary and background saves
#       (INFO: a measurement)
# Each check returns 0 (PASS), 1 (FAIL), 77 (skipped), 78 (INFO); its note is the summary line.

# The shape both run: gpt-350m's widths on the byte data at context 1024 on a
# GPU (tiny at 64 in a CPU rehearsal).
if [ "$DEV" = cuda ]; then
  export T_MODEL=${T_MODEL:---model gpt-350m --vocab-size 256} T_SHAPE="--seq-len 1024 --batch-size 8"
  export T_BUDGET=${T_BUDGET:-60s} T_HALF=512 T_HALF_BATCH=16
else
  export T_MODEL=${T_MODEL:---model tiny} T_SHAPE="--seq-len 64 --batch-size 4"
  export T_BUDGET=${T_BUDGET:-20s} T_HALF=32 T_HALF_BATCH=8
fi

chk_t1() {
  local m=$RUNS/t1.jsonl rc
  # wsd, as the leaderboard recipe: its second plan, late in the stable
  # phase, corrects the first plan's count for the clock the GPU settles at
  x fsdptrain --device "$DEV" $T_MODEL $T_SHAPE --train-data "$DATA" --val-data "$VAL" --steps 0 \
    --time-budget "$T_BUDGET" --warmup-steps 20 --lr-schedule wsd --eval-every 100 \
    --eval-batches 8 --log-every 50 --metrics "$m" 2>&1 | tee "$RUNS/t1.txt"; rc=${PIPESTATUS[0]}
  [ "$rc" = 0 ] || { note "fsdptrain exited $rc"; return 1; }
  local verdict
  verdict=$(python3 - "$m" <<'EOF'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
plan = [d for d in lines if "time_budget_steps" in d]
done = [d for d in lines if "time_used_s" in d]
if len(plan) != 2 or len(done) != 1:
    print(f"FAIL {len(plan)} plan and {len(done)} end records (wanted 2 and 1)"); sys.exit()
p, q, d = plan[0], plan[1], done[0]
budget, used, planned = d["time_budget_s"], d["time_used_s"], q["planned_end_s"]
ok = used <= budget and used >= 0.8 * budget and abs(used - planned) <= 0.03 * budget
print(f"{'PASS' if ok else 'FAIL'} {p['time_budget_steps']} steps fixed by a {budget:g} s budget "
      f"(a step {p['step_s'] * 1e3:.2f} ms), {q['time_budget_steps']} at step {q['step']} "
      f"(a step {q['step_s'] * 1e3:.2f} ms); final validation planned at {planned:.1f} s, ended "
      f"at {used:.1f} s")
EOF
)
  note "${verdict#* }"
  [ "${verdict%% *}" = PASS ]
}

chk_t2() {
  local m=$RUNS/t2.jsonl e=$RUNS/t2_eval.jsonl ck=$RUNS/t2_ck rc
  rm -rf "$ck"
  x fsdptrain --device "$DEV" $T_MODEL $T_SHAPE --train-data "$DATA" --val-data "$VAL" --steps 30 \
    --warmup-steps 5 --eval-every 30 --eval-batches 4 --eval-seq-len "$T_HALF" --log-every 10 \
    --checkpoint-dir "$ck" --checkpoint-every 30 --metrics "$m" || { note "training run failed"; return 1; }
  # The same windows in the same rows: T_HALF_BATCH sequences of T_HALF per micro-batch.
  x fsdptrain --device "$DEV" $T_MODEL --val-data "$VAL" --eval-only --resume "$ck/step_00000030.h5" \
    --seq-len "$T_HALF" --batch-size "$T_HALF_BATCH" --eval-batches 4 --metrics "$e" \
    || { note "--eval-only failed"; return 1; }
  local verdict
  verdict=$(python3 - "$m" "$e" <<'EOF'
import json, sys
vals = [json.loads(l)["val_loss"] for l in open(sys.argv[1]) if '"val_loss"' in l]
ev = [json.loads(l)["val_loss"] for l in open(sys.argv[2]) if '"val_loss"' in l]
if not vals or len(ev) != 1:
    print(f"FAIL {len(vals)} validations, {len(ev)} eval-only records"); sys.exit()
rel = abs(vals[-1] - ev[0]) / ev[0]
# bf16 forwards of the same rows: the same kernels on the same shapes, so
# equal up to the order of the loss sum (bitwise on the CPU)
print(f"{'PASS' if rel <= 1e-3 else 'FAIL'} validation at context half of training's: "
      f"{vals[-1]:.5f} during training, {ev[0]:.5f} by --eval-only (rel {rel:.1e}, tolerance 1e-3)")
EOF
)
  note "${verdict#* }"
  [ "${verdict%% *}" = PASS ]
}

chk_t3() {
  have_torch || { note "no python3 with torch, h5py, numpy"; return 77; }
  local mode extra
  for mode in sync async; do
    extra=(); [ "$mode" = async ] && extra=(--async-checkpoint)
    rm -rf "$RUNS/t3_$mode"
    x fsdptrain --device "$DEV" $T_MODEL $T_SHAPE --train-data "$DATA" --steps 20 --warmup-steps 5 \
      --debug --log-every 10 --checkpoint-dir "$RUNS/t3_$mode" --checkpoint-every 10 \
      --keep-checkpoints 1 --metrics "$RUNS/t3_$mode.jsonl" "${extra[@]}" \
      || { note "the run with $mode saves failed"; return 1; }
  done
  # The issue's yardstick for the write: dd of 1 GiB of fresh random bytes
  # from RAM to the same disk, conv=fsync (not zeros: some disks compress).
  # A container's /dev/shm may be too small for it: then the run folder.
  local src=/dev/shm/t3_dd_src.bin t0 t1 verdict
  if ! head -c 1073741824 /dev/urandom > "$src" 2>/dev/null; then
    rm -f "$src"
    src="$RUNS/t3_dd_src.bin"
    head -c 1073741824 /dev/urandom > "$src" || { note "cannot make dd's source"; return 1; }
  fi
  t0=$(date +%s.%N)
  dd if="$src" of="$RUNS/t3_dd.bin" bs=64M conv=fsync 2>/dev/null || { note "dd failed"; return 1; }
  t1=$(date +%s.%N)
  rm -f "$src" "$RUNS/t3_dd.bin"
  verdict=$(py - "$RUNS/t3_sync" "$RUNS/t3_async" "$t0" "$t1" <<'EOF'
import json, os, sys
import h5py, numpy as np
s_dir, a_dir = sys.argv[1:3]
dd_mb_s = 1073.741824 / (float(sys.argv[4]) - float(sys.argv[3]))
def tensors(path):
    out = {}
    with h5py.File(path, "r") as f:
        f.visititems(lambda n, o: out.__setitem__(n, o[()]) if isinstance(o, h5py.Dataset) else None)
        out["@checksums"] = np.asarray(f.attrs["tensor_checksums"])
        out["@consumed"] = np.asarray(f["sampler"].attrs["consumed"])
    return out
name = "step_00000020.h5"
a, s = tensors(os.path.join(a_dir, name)), tensors(os.path.join(s_dir, name))
differ = [k for k in sorted(s.keys() | a.keys())
          if k not in a or k not in s or not np.array_equal(a[k], s[k])]
recs = [json.loads(l) for l in open(a_dir + ".jsonl")]
def loss(rs):
    return [r["loss"] for r in rs if "loss" in r]
same_loss = loss(recs) == loss([json.loads(l) for l in open(s_dir + ".jsonl")])
starts = [r for r in recs if "checkpoint_started" in r]
done = [r for r in recs if r.get("background")]
c = starts[-1] if starts else {"host_copy_bytes": 0, "host_copy_s": float("nan")}
w = done[-1] if done else {"write_mb_per_s": float("nan")}
# What step 10's save cost the run: the time between steps 10 and 20 past
# ten median steps. Async: the host copy (step 11) plus the steps slowed
# beside the write (12-20), which shares the node's disk, memory and HDF5 lock.
def gaps(rs):
    t = {r["step"]: r["elapsed_s"] for r in rs if "loss" in r}
    return [t[i + 1] - t[i] for i in range(1, 20)]
def cost(g):
    return sum(g[9:19]) - 10 * sorted(g)[len(g) // 2]
ga, gs = gaps(recs), gaps([json.loads(l) for l in open(s_dir + ".jsonl")])
ok = not differ and same_loss and len(starts) == len(done) == 2
print(f"{'PASS' if ok else 'FAIL'} step 20 by background saves == ordinary saves: "
      f"{len(s) - 2} tensors {'equal' if not differ else 'differ: ' + ', '.join(differ[:3])}, "
      f"losses {'equal' if same_loss else 'differ'}; host copy {c['host_copy_bytes'] / 1e6:.0f} MB "
      f"in {c['host_copy_s'] * 1e3:.0f} ms, write {w['write_mb_per_s']:.0f} MB/s = "
      f"{w['write_mb_per_s'] / dd_mb_s:.2f} of dd's {dd_mb_s:.0f} MB/s; step 10's save cost "
      f"{cost(gs):.2f} s ordinary, {cost(ga):.2f} s in the background (steps 12-20 beside the write "
      f"{sum(ga[10:19]) - 9 * sorted(ga)[len(ga) // 2]:.2f} s)")
EOF
)
  echo "$verdict"
  note "${verdict#* }"
  [ "${verdict%% *}" = PASS ]
}

# t4: three runs of 400 steps, saves at 150 and 300 (none, ordinary,
# background). A save's cost is the time of the steps after it, up to the
# next save or the end, past the same steps of the run without saves: the
# whole save for an ordinary one; the host copy plus any slowing of the
# steps beside the write for a background one (gpt-350m's write takes about
# 5 s, some 130 steps; the first save also allocates the host buffers).
chk_t4() {
  local mode extra
  for mode in none sync async; do
    extra=()
    [ "$mode" != none ] && extra=(--checkpoint-dir "$RUNS/t4_$mode" --checkpoint-every 150
                                  --keep-checkpoints 1)
    [ "$mode" = async ] && extra+=(--async-checkpoint)
    rm -rf "$RUNS/t4_$mode"
    x fsdptrain --device "$DEV" $T_MODEL $T_SHAPE --train-data "$DATA" --steps 400 \
      --warmup-steps 5 --log-every 100 --metrics "$RUNS/t4_$mode.jsonl" "${extra[@]}" \
      || { note "the run with saves '$mode' failed"; return 1; }
  done
  local verdict
  verdict=$(python3 - "$RUNS/t4" <<'EOF'
import json, sys
base = sys.argv[1]
def recs(mode):
    return [json.loads(l) for l in open(f"{base}_{mode}.jsonl")]
def steps(rs):
    t = {r["step"]: r["elapsed_s"] for r in rs if "loss" in r}
    return {i: t[i] - t[i - 1] for i in range(2, 401)}
none, sync, asyn = (steps(recs(m)) for m in ("none", "sync", "async"))
copies = [r for r in recs("async") if "checkpoint_started" in r]
writes = [r for r in recs("async") if r.get("background")]
parts = []
for save, end in ((150, 300), (300, 400)):
    window = range(save + 1, end + 1)
    def cost(d):
        return sum(d[i] - none[i] for i in window)
    c = next((r["host_copy_s"] for r in copies if r["step"] == save), float("nan"))
    parts.append(f"save at {save}: ordinary +{cost(sync):.2f} s, background +{cost(asyn):.2f} s "
                 f"(host copy {c:.2f} s, steps beside the write {cost(asyn) - c:+.2f} s)")
rate = ", ".join(f"{r['write_mb_per_s']:.0f}" for r in writes)
print(f"INFO {'; '.join(parts)}; background writes {rate} MB/s")
EOF
)
  echo "$verdict"
  note "${verdict#* }"
  [ "${verdict%% *}" = INFO ] && return 78
  return 1
}
