#!/usr/bin/env python3
"""Verdicts of the leaderboard recipe's dress rehearsal (bench/cuda/recipe_run.sh).

  recipe_report.py TRAIN.jsonl EVAL.jsonl --train-tokens N --val-tokens N
                   [--vocab-size 32000] [--warmup-steps 100] [--max-val-ratio 0.6]
                   [--eval-seq-len 512] [--budget-info] [--checkpoint-dir DIR]
                   [--device NAME] [--model NAME]

Reads the training run's and the final --eval-only's metrics and prints one
line per question, PASS/FAIL/INFO first, then one RESULT line:
  budget  the run ended inside its --time-budget, near its last plan's end
          (as GPU check t1: at least 0.8 of the budget used, within 3% of it
          of the planned end; INFO only with --budget-info);
  loss    every logged loss finite, no spike after warm-up (a mean of 5
          logged losses 20% above the lowest such mean before it), and the
          last validation at most --max-val-ratio (0.6) of ln(V), a uniform
          guess's loss (a run that learnt nothing stays near 1.0);
  saves   the last step's checkpoint written (in the background where the run
          asked for it) and on disk;
  eval    --eval-only read that checkpoint (its step), over the whole split
          (no token counted twice, less than one --eval-seq-len window left);
  speed   tokens/s and MFU (medians after the first 10 steps), the step count
          each plan chose, the epochs of the training tokens seen (INFO).
Exit 1 when any verdict failed.
"""
import argparse
import json
import math
import os
import statistics
import sys


def records(path):
    out = []
    if os.path.exists(path):
        for line in open(path):
            line = line.strip()
            if line.startswith("{"):
                out.append(json.loads(line))
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("train")
    p.add_argument("eval")
    p.add_argument("--train-tokens", type=float, required=True)
    p.add_argument("--val-tokens", type=float, required=True)
    p.add_argument("--vocab-size", type=int, default=32000)
    p.add_argument("--warmup-steps", type=int, default=100)
    p.add_argument("--max-val-ratio", type=float, default=0.6)
    p.add_argument("--eval-seq-len", type=int, default=512)
    p.add_argument("--budget-info", action="store_true",
                   help="the budget line as INFO, not a verdict (a shared CPU's step times)")
    p.add_argument("--checkpoint-dir")
    p.add_argument("--model", default="gpt-350m")
    p.add_argument("--device", default="unknown")
    a = p.parse_args()
    t, e = records(a.train), records(a.eval)
    steps = [r for r in t if "loss" in r]
    vals = [(r["step"], r["val_loss"]) for r in t if "val_loss" in r]
    plans = [r for r in t if "time_budget_steps" in r]
    end = [r for r in t if "time_used_s" in r]
    lines, ok = [], True

    def say(verdict, what, text):
        nonlocal ok
        ok &= verdict != "FAIL"
        lines.append(f"{verdict} {what}: {text}")

    if not steps:
        print("FAIL run: no training steps in " + a.train)
        return 1
    last = steps[-1]["step"]

    # budget
    if len(plans) < 1 or len(end) != 1:
        say("FAIL", "budget", f"{len(plans)} plan and {len(end)} end records (wanted >= 1 and 1)")
    else:
        d, q = end[0], plans[-1]
        budget, used, planned = d["time_budget_s"], d["time_used_s"], q["planned_end_s"]
        good = 0.8 * budget <= used <= budget and abs(used - planned) <= 0.03 * budget
        chosen = ", ".join(f"{r['time_budget_steps']} at step {r['step']} (a step {r['step_s'] * 1e3:.0f} ms)"
                           for r in plans)
        say("INFO" if a.budget_info else "PASS" if good else "FAIL", "budget",
            f"steps chosen {chosen}; ran {last}; final validation planned at {planned:.1f} s, ended at "
            f"{used:.1f} s of {budget:g} s")

    # loss
    losses = [(r["step"], r["loss"]) for r in steps]
    bad = [s for s, v in losses if not math.isfinite(v)] + [s for s, v in vals if not math.isfinite(v)]
    # means of 5 consecutive logged losses: one noisy micro-batch is not a spike
    spikes, low = [], math.inf
    for i in range(4, len(losses)):
        s, m = losses[i][0], statistics.mean(v for _, v in losses[i - 4:i + 1])
        if s > a.warmup_steps and m > 1.2 * low:
            spikes.append(s)
        low = min(low, m)
    uniform = math.log(a.vocab_size)
    final_val = vals[-1][1] if vals else math.nan
    good = not bad and not spikes and vals and final_val <= a.max_val_ratio * uniform
    curve = ", ".join(f"{s}: {v:.3f}" for s, v in vals)
    tail = losses[-min(10, len(losses)):]
    say("PASS" if good else "FAIL", "loss",
        f"{len(bad)} non-finite, {len(spikes)} spikes{' at ' + str(spikes[:5]) if spikes else ''}; "
        f"training loss {losses[0][1]:.3f} at step {losses[0][0]} -> {statistics.mean(v for _, v in tail):.3f} "
        f"(mean of the last {len(tail)}); validation {curve or 'none'} (at most {a.max_val_ratio:g} ln V = {a.max_val_ratio * uniform:.3f})")

    # saves
    saved = [r for r in t if r.get("checkpoint") and r["step"] == last]
    started = [r for r in t if "checkpoint_started" in r]
    path = saved[-1]["checkpoint"] if saved else None
    on_disk = path and (os.path.exists(path) or (a.checkpoint_dir and os.path.exists(
        os.path.join(a.checkpoint_dir, os.path.basename(path)))))
    say("PASS" if saved and on_disk else "FAIL", "saves",
        f"step {last}'s checkpoint {'written' if saved else 'missing'}"
        f"{' in the background' if saved and saved[-1].get('background') else ''}"
        f"{'' if on_disk else ', not on disk'}; {len(started)} background saves started"
        + (f", host copy {started[-1]['host_copy_s']:.2f} s, write {saved[-1].get('write_mb_per_s', 0):.0f} MB/s"
           if started and saved else ""))

    # eval
    ev = [r for r in e if r.get("eval_only")]
    if len(ev) != 1:
        say("FAIL", "eval", f"{len(ev)} --eval-only records (wanted 1)")
        eval_loss = math.nan
    else:
        r = ev[0]
        eval_loss = r["val_loss"]
        left = a.val_tokens - r["eval_tokens"]
        good = r["step"] == last and 0 <= left <= a.eval_seq_len
        say("PASS" if good else "FAIL", "eval",
            f"--eval-only of step {r['step']} (training ended at {last}): val_loss {eval_loss:.4f} over "
            f"{r['eval_tokens']:.0f} of the split's {a.val_tokens:.0f} tokens")

    # speed
    later = [r for r in steps if r["step"] > 10] or steps
    tps = statistics.median(r["tokens_per_s"] for r in later)
    mfus = [r["mfu"] for r in later if r.get("mfu") is not None]   # none on a CPU
    mfu = statistics.median(mfus) if mfus else math.nan
    seen = steps[-1].get("tokens_seen", math.nan)
    epochs = seen / a.train_tokens
    say("INFO", "speed", f"{tps:,.0f} tokens/s, MFU {mfu:.3f} (medians after step 10); {last} steps, "
        f"{seen / 1e6:.1f}M tokens = {epochs:.2f} epochs of the {a.train_tokens / 1e6:.1f}M training tokens")

    print("\n".join(lines))
    print(f"RESULT system=fsdptrain recipe=leaderboard model={a.model} "
          f"budget_s={end[0]['time_budget_s'] if end else 'nan'} steps={last} tokens_per_s={tps:.0f} mfu={mfu:.4f} "
          f"epochs={epochs:.2f} val_loss={final_val:.4f} eval_loss={eval_loss:.4f} device={a.device}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
