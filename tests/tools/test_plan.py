#!/usr/bin/env python3
"""CTest for tools/plan.py, the scaling plan.

  test_plan.py PLAN_PY FSDP_MEMORY_PLAN

Checks the plan against the program's own memory planner (the executable),
collective bytes against the ring formulas worked by hand for the tiny
preset, the engine's schedule against timelines worked by hand (the replica
all-reduce under the last backward included), and the model's behaviour:
more replicas, infinitely fast links, a case whose communication cannot hide
and whose suggested change helps, the --measured hook and the table of docs/CLUSTER.md.
Nothing is timed.
"""

import importlib.util
import json
import os
import subprocess
import sys
import tempfile

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL: " + what)


def close(a, b, rel=1e-9):
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-30)


def plan(*args):
    r = subprocess.run([sys.executable, PLAN, "--memory-plan-exe", EXE, "--json"] +
                       [str(a) for a in args], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"plan.py {args} exited {r.returncode}: {r.stderr}")
    return json.loads(r.stdout)


def program(*args):
    r = subprocess.run([EXE] + [str(a) for a in args], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"fsdp_memory_plan {args} exited {r.returncode}: {r.stderr}")
    return json.loads(r.stdout)


SHAPE_7B = ["--model", "gpt-1.3b", "--n-layer", 32, "--d-model", 4096, "--n-head", 32,
            "--n-kv-head", 8, "--d-ff", 14336, "--max-seq-len", 2048]


def test_memory_is_the_programs():
    # plan.py picks the shard group (hybrid: the node's 8; full: all 32) and
    # passes every setting on; the planner asked directly must agree.
    common = ["--micro-batch", 2, "--recompute", "mlp", "--reduce-dtype", "bf16",
              "--reshard-after-forward", "false"]
    for extra, shard in (([], 8), (["--full-shard"], 32)):
        r = plan("--model", "7b", "--nodes", 4, *common, *extra)
        want = program(*SHAPE_7B, "--shard-group-size", shard, "--world-size", 32,
                       "--batch-size", 2, "--seq-len", 2048, "--precision", "bf16",
                       "--recompute", "mlp", "--reduce-dtype", "bf16",
                       "--reshard-after-forward", "false")["memory"]
        check(r["config"]["shard"] == shard, f"shard group {r['config']['shard']} != {shard}")
        check(r["memory"] == want, f"shard {shard}: memory {r['memory']} != planner {want}")
        check(r["model"]["num_params"] == 7185641472, "7b has 7.19B parameters")
    h = plan("--model", "7b", "--nodes", 4)["memory"]
    f = plan("--model", "7b", "--nodes", 4, "--full-shard")["memory"]
    check(close(f["persistent"] * 4, h["persistent"], 1e-4),
          "full sharding over 4x the ranks holds 1/4 of the model state")


def test_program_fp8():
    # --precision fp8 on the tiny preset (d 64, 4 heads of 16, 2 KV heads, d_ff
    # 192, 2 layers), 2 x 16 tokens on a shard group of 4.
    base = ["--model", "tiny", "--batch-size", 2, "--seq-len", 16, "--shard-group-size", 4,
            "--world-size", 4]
    bf16 = program(*base, "--precision", "bf16")
    kept = program(*base, "--precision", "fp8", "--fp8-gather", "false")
    codes = program(*base, "--precision", "fp8")
    check(not bf16["fp8"] and kept["fp8"] and not kept["fp8_gather"] and codes["fp8_gather"],
          "fp8 and fp8_gather reported as asked")
    # Activations gain the FP8 codes (model/activation_table.cpp): one byte a
    # code for the largest input (32 rows x d_ff); each layer's inputs h1,
    # attention's output (q_dim = d here), h2 and s transposed; the largest
    # weight (2 d_ff x d) and output gradient (32 x 2 d_ff), each with its
    # transpose; f32 scales of 64-element slots, 2 and 4 a layer; 4 amaxes a
    # layer and 2 for gradients. They lose the bf16 copies of h1, h2 and s
    # of all layers but one, which the backward no longer reads.
    n, d, ff, L = 32, 64, 192, 2
    want = (n * ff + L * n * (3 * d + ff) + 2 * (2 * ff * d + n * 2 * ff) +
            4 * (2 + 4 * L) * 64 + 4 * (4 * L + 2)) - (L - 1) * 2 * n * (2 * d + ff)
    got = kept["memory"]["activations"] - bf16["memory"]["activations"]
    check(got == want, f"fp8 activations add {got} bytes, counted {want}")
    same = {k: v for k, v in kept["memory"].items() if k not in ("activations", "total")}
    check(same == {k: bf16["memory"][k] for k in same},
          f"without --fp8-gather the model state is bf16's: {kept['memory']} vs {bf16['memory']}")
    # Gathered as codes: the block linears' shard is 1 byte an element, the
    # rest 2, plus an f32 amax and a 64-slot inverse scale for each of the 4
    # matrices of a block (q|k|v, wo, w1|w3, w2).
    units = {u["name"]: u for u in codes["units"]}
    b, e, h = units["block"], units["embed"], units["head"]
    check(b["fp8_shard"] > 0 and e["fp8_shard"] == 0 and h["fp8_shard"] == 0,
          f"only the blocks are gathered as codes: {codes['units']}")
    send = (2 * (e["shard"] + h["shard"]) +
            L * (b["fp8_shard"] + 2 * (b["shard"] - b["fp8_shard"]) + 4 * 4 * (1 + 64)))
    check(codes["memory"]["send_copy"] == send,
          f"send copy {codes['memory']['send_copy']}, counted {send}")
    check(codes["memory"]["gather_buffers"] < bf16["memory"]["gather_buffers"],
          "gather buffers shrink with codes")


def layout(numel, n):
    """shard/layout.cpp: per-rank elements rounded up to 32, padded = shard x n."""
    per_rank = -(-numel // n)
    shard = -(-per_rank // 32) * 32
    return shard, shard * n


def tiny_numels():
    """The tiny preset's units (vocab 256, d 64, 4 heads of 16, 2 KV heads,
    d_ff 192), each parameter starting at a multiple of 64 elements."""
    d, hd, kv, ff = 64, 16, 32, 192
    block = 0  # norms, wq, wk, wv, q/k norms, wo, norm, w1, w3, w2 (model/params.cpp)
    for p in (d, d * d, kv * d, kv * d, hd, hd, d * d, d, ff * d, ff * d, d * ff):
        block = -(-block // 64) * 64 + p
    return 256 * d, block, d  # embedding, one block, the head (final norm only: tied)


def test_bytes_by_hand():
    # 2 nodes x 4 GPUs: shard groups of 4 on NVLink, 2 replicas over InfiniBand.
    n, r, L, ga = 4, 2, 2, 3
    e, b, h = (layout(x, n) for x in tiny_numels())
    check(b[1] == 49408, f"tiny block padded {b[1]} (hand layout)")
    full = e[1] + L * b[1] + h[1]
    for dtype, rs_bytes in (("fp32", 4), ("bf16", 2)):
        p = plan("--model", "tiny", "--nodes", 2, "--gpus-per-node", 4, "--micro-batch", 2,
                 "--grad-accum", ga, "--reduce-dtype", dtype)
        c = p["collectives"]
        ag = (n - 1) / n * 2 * full * ga
        check(close(c["all-gather (forward)"]["bytes"], ag), f"forward all-gather {c}")
        check(close(c["all-gather (backward)"]["bytes"], (n - 1) / n * 2 * L * b[1] * ga),
              "backward re-gather: blocks only")
        check(close(c["reduce-scatter (gradients)"]["bytes"], (n - 1) / n * rs_bytes * full * ga),
              f"reduce-scatter in {dtype}")
        shards = e[0] + L * b[0] + h[0]
        check(close(c["all-reduce (replicas)"]["bytes"], 2 * (r - 1) / r * 4 * shards),
              "replica all-reduce: fp32 shards, once per step")
        check(c["all-reduce (replicas)"]["link"] == "InfiniBand" and
              c["all-gather (forward)"]["link"] == "NVLink", "links: shard group in the node")
    p = plan("--model", "tiny", "--nodes", 2, "--gpus-per-node", 4,
             "--reshard-after-forward", "false")
    check("all-gather (backward)" not in p["collectives"], "no re-gather without resharding")


def test_muon_by_hand():
    # Tiny preset, 2 nodes x 4 GPUs (shard groups of 4, 2 replicas). Muon
    # exchanges each block whole in f32 on the shard group, once per step
    # whatever --grad-accum: an all-gather and a reduce-scatter of its padded
    # elements. Newton-Schulz, 5 steps: 148111360 FLOPs in all, 55705600 on
    # the busiest owner of each block (tests/shard/test_engine_muon.cpp,
    # MuonCost.ByHandOnTheTinyPreset), at MFU 45% of 989 TFLOP/s.
    n, L = 4, 2
    e, b, h = (layout(x, n) for x in tiny_numels())
    base = ["--model", "tiny", "--nodes", 2, "--gpus-per-node", 4, "--grad-accum", 3]
    adamw, muon = plan(*base), plan(*base, "--optimizer", "muon")
    consistent(muon)
    check(muon["config"]["optimizer"] == "muon" and adamw["muon"] is None, "optimizer reported")
    for kind in ("all-gather (Muon)", "reduce-scatter (Muon)"):
        c = muon["collectives"].get(kind, {})
        check(c.get("calls") == L and c.get("dtype") == "fp32" and c.get("link") == "NVLink" and
              close(c.get("bytes", 0), (n - 1) / n * 4 * L * b[1]), f"{kind}: {c}")
        check(kind not in adamw["collectives"], f"no {kind} under AdamW")
    rate = 0.45 * 989e12
    t = muon["time"]
    check(close(t["muon_ns_s"], 55705600 / rate), f"Newton-Schulz time {t['muon_ns_s']}")
    ex = sum(muon["collectives"][k]["seconds"] for k in ("all-gather (Muon)",
                                                          "reduce-scatter (Muon)"))
    # The norm and casts on the busiest owners' 2 x 18432 elements (16 bytes
    # each), and zeroing the results buffer of each block (4 bytes each).
    hbm = (16 * 2 * 18432 + 4 * L * b[1]) / 3350e9
    check(close(t["muon_exchange_s"], ex) and close(t["muon_hbm_s"], hbm) and
          close(t["muon_s"], ex + t["muon_ns_s"] + hbm),
          f"Muon time = exchange + Newton-Schulz + HBM passes: {t}")
    check(close(t["step_s"] - adamw["time"]["step_s"], t["muon_s"], 1e-6),
          "Muon adds its time to AdamW's step, overlapping nothing")
    check(muon["memory"]["optimizer_buffers"] == 2 * 4 * b[1] and
          adamw["memory"]["optimizer_buffers"] == 0, "two f32 buffers of a block")
    check(muon["muon"]["ns_flops"] == 148111360 and
          close(muon["muon"]["ns_ideal_flops"], 148111360 / n), f"FLOPs {muon['muon']}")
    # One GPU: no exchange, one buffer, every matrix on the one rank.
    one = plan("--model", "tiny", "--gpus-per-node", 1, "--optimizer", "muon")["time"]
    check(close(one["muon_s"], 148111360 / rate + 16 * 98304 / 3350e9) and
          one["muon_exchange_s"] == 0, f"one GPU: every matrix, no exchange or zeroing: {one}")
    # One Newton-Schulz step: a fifth of the FLOPs, the same exchange.
    once = plan(*base, "--optimizer", "muon", "--muon-ns-steps", 1)["time"]
    check(close(once["muon_ns_s"], 55705600 / 5 / rate) and close(once["muon_exchange_s"], ex),
          f"--muon-ns-steps 1: {once}")


def consistent(r):
    """The step adds up (only the part of the replica all-reduce that outlasts the
    last backward counts) and the rates follow from it."""
    t, c = r["time"], r["config"]
    check(close(t["step_s"], t["compute_s"] + t["optimizer_s"] + t["muon_s"] +
                t["exposed_shard_comm_s"] + t["exposed_replica_comm_s"]), f"step adds up: {t}")
    check(0 <= t["exposed_replica_comm_s"] <= t["replica_allreduce_s"] * (1 + 1e-9),
          f"exposed replica all-reduce within its total: {t}")
    check(t["exposed_shard_comm_s"] > 0, "the first gather of a micro-batch is always exposed")
    check(close(r["tokens_per_s_per_gpu"], r["tokens_per_gpu_per_step"] / t["step_s"]), "tok/s")
    check(close(r["tokens_per_s"], r["tokens_per_s_per_gpu"] * c["world"]), "job tok/s")
    check(close(r["mfu"], r["model"]["flops_per_token"] * r["tokens_per_gpu_per_step"] /
                (t["step_s"] * 989e12)), "MFU")


def test_more_replicas():
    # The same global batch on twice the GPUs: half the compute per GPU, the
    # same gather traffic per GPU (it depends on the shard group only).
    a = plan("--model", "gpt-350m", "--nodes", 2, "--micro-batch", 8)
    b = plan("--model", "gpt-350m", "--nodes", 4, "--micro-batch", 4)
    consistent(a)
    consistent(b)
    check(b["replicas"] == 2 * a["replicas"], "twice the replicas")
    check(b["global_batch_tokens"] == a["global_batch_tokens"], "same global batch")
    check(b["time"]["compute_s"] < 0.6 * a["time"]["compute_s"], "less compute per GPU")
    for k in ("all-gather (forward)", "all-gather (backward)", "reduce-scatter (gradients)"):
        check(close(a["collectives"][k]["bytes"], b["collectives"][k]["bytes"]),
              f"{k}: same bytes per GPU")


FAST = ["--nvlink-gbs", 1e15, "--ib-gbps", 1e16, "--nvlink-hop-us", 0, "--ib-hop-us", 0,
        "--collective-base-us", 0]
STUCK = ["--model", "7b", "--nodes", 32, "--micro-batch", 1, "--full-shard"]


def test_fast_links_hide_everything():
    for args in (STUCK, ["--model", "gpt-350m", "--nodes", 32]):
        t = plan(*args, *FAST)["time"]
        check(t["exposed_shard_comm_s"] < 1e-9 and t["exposed_replica_comm_s"] < 1e-9,
              f"{args}: nothing exposed with infinite links: {t}")
        check(close(t["step_s"], t["compute_s"] + t["optimizer_s"], 1e-6), "step = compute")


FLAG = {"shard": "--shard-group-size", "reduce_dtype": "--reduce-dtype",
        "micro_batch": "--micro-batch", "grad_accum": "--grad-accum", "recompute": "--recompute",
        "reshard": "--reshard-after-forward"}


def replan(base, settings):
    args = [a for a in base if a != "--full-shard"]
    if "shard" not in settings:
        args.append("--full-shard")
    for k, v in settings.items():
        args += [FLAG[k], str(v).lower()]
    return plan(*args)


def test_stuck_case_suggests_a_faster_setting():
    r = plan(*STUCK)
    check(not r["comm_hidden"], "7b, 256 GPUs, full sharding, micro-batch 1: comm not hidden")
    check(not r["per_layer"]["backward_hidden"], "the backward's per-block comm exceeds compute")
    s = r.get("suggestions", [])
    check(len(s) > 0, "suggestions offered")
    check(all(x["tokens_per_s_per_gpu"] > r["tokens_per_s_per_gpu"] for x in s),
          "every suggestion is faster")
    for best in s[:3]:
        again = replan(STUCK, best["settings"])
        check(close(again["tokens_per_s_per_gpu"], best["tokens_per_s_per_gpu"]),
              f"{best['change']}: re-plan from the CLI gives the suggested figure")
        check(again["tokens_per_s_per_gpu"] > r["tokens_per_s_per_gpu"],
              f"{best['change']}: more tokens/s per GPU")
    same_batch = [x for x in s if x["settings"] == {"reduce_dtype": "bf16"}]
    check(len(same_batch) == 1 and same_batch[0]["step_s"] < r["time"]["step_s"],
          "--reduce-dtype bf16 suggested with a shorter step")


def test_schedule_by_hand():
    # Embedding, one block, untied head; no resharding. Forward: the head's
    # gather (2 s) is issued when compute reaches the block (t = 1.5), so the
    # head waits until 3.5; backward then runs 6 s of compute, each unit's
    # reduce-scatter (0.5 s) after it; the last one ends at 11.
    spec = importlib.util.spec_from_file_location("plan", PLAN)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    t = mod.simulate_micro_batch(fwd=[1, 1, 1], bwd=[2, 2, 2], ag=[0.5, 0.5, 2],
                                 rs=[0.5, 0.5, 0.5], tied=False, reshard=False)
    check(t == (11.0, 11.0), f"hand schedule: {t} != 11")
    # With comm free, the micro-batch is its compute.
    t = mod.simulate_micro_batch([0, 1, 1, 1, 2], [0, 2, 2, 2, 4], [0] * 5, [0] * 5, True, True,
                                 [0] * 5)
    check(close(t[0], 15.0) and close(t[1], 15.0), f"free comm: {t} != 15")
    # The replica all-reduces of the last micro-batch: embedding, blocks 1-3,
    # untied head (slots 0, 3, 2, 3, 1), resharding, gathers free, forward
    # ends at 4; each backward 2 s (the embedding's 0) and its reduce-scatter
    # 0.5 s, ending at 6.5 (head), 8.5 (3), 10.5 (2), 12.5 (1), 13 (0).
    # All-reduces, one stream, each issued when finish_reduce lands its
    # reduce-scatter: the head's (3 s) after block 2's backward, at 10 ->
    # 13; block 3's when block 1 takes its slot, at 10 -> 14 (queued behind
    # the head's); block 2's after the embedding's backward, at 12 -> 15;
    # the end loop's, the embedding's and block 1's once the last
    # reduce-scatter lands at 13 -> 16 -> 17. The micro-batch ends at 13
    # without them, 17 with them: 4 s exposed of 7 (the old engine: all 7).
    kw = dict(fwd=[0, 1, 1, 1, 1], bwd=[0, 2, 2, 2, 2], ag=[0] * 5, rs=[0.5] * 5, tied=False,
              reshard=True)
    t = mod.simulate_micro_batch(**kw, ar=[1, 1, 1, 1, 3])
    check(t == (13.0, 17.0), f"hand replica schedule: {t} != (13, 17)")
    check(mod.simulate_micro_batch(**kw) == (13.0, 13.0), "earlier micro-batches issue none")
    # A head all-reduce that outlasts the backward pushes everything behind it.
    t = mod.simulate_micro_batch(**kw, ar=[1, 1, 1, 1, 10])
    check(t == (13.0, 24.0), f"long head all-reduce: {t} != (13, 24)")


def test_replica_overlap():
    # Hybrid 8x4, grad-accum 1: the all-reduces of the head and blocks 3..L
    # start during the backward, two units after their own; block 2's after
    # the embedding's backward, the embedding's and block 1's in the end
    # loop. So at least those two are exposed, and at most those three plus
    # what the rest, issued from the head's on (after block L-2's backward),
    # does not fit under the L-2 block backwards still to run.
    L = 24
    r = plan("--model", "gpt-1.3b", "--nodes", 4)
    consistent(r)
    a, t = r["collectives"]["all-reduce (replicas)"]["per_call_s"], r["time"]
    b = r["per_layer"]["backward_compute_s"]
    spill = max(0.0, (L - 2) * a["block"] + a["head"] - (L - 2) * b)
    lo, hi = a["embed"] + a["block"], a["embed"] + 2 * a["block"] + spill
    check(lo * (1 - 1e-9) <= t["exposed_replica_comm_s"] <= hi * (1 + 1e-9),
          f"exposed replica {t['exposed_replica_comm_s']} not in [{lo}, {hi}]")
    check(t["exposed_replica_comm_s"] < 0.25 * t["replica_allreduce_s"], "most of it hides")
    check(close(t["replica_allreduce_s"], a["embed"] + L * a["block"] + a["head"]), "total")
    # Only the last micro-batch all-reduces: grad-accum leaves it as it is.
    g = plan("--model", "gpt-1.3b", "--nodes", 4, "--grad-accum", 4)["time"]
    check(close(g["exposed_replica_comm_s"], t["exposed_replica_comm_s"]) and
          close(g["replica_allreduce_s"], t["replica_allreduce_s"]), "once per step")
    f = plan("--model", "gpt-1.3b", "--nodes", 4, "--full-shard")["time"]
    check(f["replica_allreduce_s"] == 0 and f["exposed_replica_comm_s"] == 0, "no replicas")


def test_recompute_costs_a_forward():
    none = plan("--model", "gpt-1.3b", "--grad-accum", 2)
    block = plan("--model", "gpt-1.3b", "--grad-accum", 2, "--recompute", "block")
    extra = 2 * 24 * none["per_layer"]["forward_compute_s"]
    check(close(block["time"]["compute_s"] - none["time"]["compute_s"], extra, 1e-6),
          "--recompute block adds each block's forward to the backward")
    check(block["mfu"] < none["mfu"], "MFU counts the model's FLOPs, not the recomputed ones")
    check(block["memory"]["activations"] < none["memory"]["activations"], "and saves memory")


def test_measured_hook():
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write("# one micro-batch of 4 x 1024\nbatch 4\nseq_len 1024\nmodel gpt-350m\n"
                "block_forward_ms 1.0\nblock_backward_ms 2.0\nhead_forward_ms 0.5\n"
                "head_backward_ms 1.0\nembed_backward_ms 0.25\n")
    try:
        r = plan("--model", "gpt-350m", "--micro-batch", 8, "--grad-accum", 2,
                 "--measured", f.name)
    finally:
        os.unlink(f.name)
    want = 2 * (8 / 4) * (24 * 3.0 + 1.5 + 0.25) * 1e-3
    check(r["compute_source"] == "measured", "measured times used")
    check(close(r["time"]["compute_s"], want), f"compute {r['time']['compute_s']} != {want}")


def test_table():
    rows = plan("--table")
    got = [(x["config"]["model"], x["config"]["world"], x["config"]["shard"]) for x in rows]
    want = []
    for m in ("gpt-350m", "gpt-1.3b", "7b"):
        want += [(m, 8, 8), (m, 32, 8), (m, 32, 32), (m, 256, 8), (m, 256, 256)]
    check(got == want, f"table rows {got}")
    check(all(x["memory_fits"] for x in rows), "every table configuration fits an H100")


if __name__ == "__main__":
    PLAN, EXE = sys.argv[1], sys.argv[2]
    for name, fn in list(globals().items()):
        if name.startswith("test_"):
            fn()
    if failures:
        sys.exit(f"{len(failures)} check(s) failed")
    print("all checks passed")
