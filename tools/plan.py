#!/usr/bin/env python3
"""Scaling plan for fsdptrain on H100 nodes: time, traffic and memory per
optimizer step, from shapes and datasheet numbers, without the GPUs.

  plan.py [--model gpt-1.3b|7b|PRESET] [--nodes 4] [--gpus-per-node 8]
          [--micro-batch 8] [--grad-accum 1] [--seq-len 1024]
          [--shard-group-size K | --full-shard] [--reduce-dtype fp32|bf16]
          [--reshard-after-forward true|false] [--recompute none|mlp|block]
          [--optimizer adamw|muon] [--muon-ns-steps 5]
          [--mfu 0.45] [--measured FILE] [--json] [--table]

What comes from where:
  * memory, unit sizes, parameter and FLOP counts: fsdptrain's own planner
    (plan_memory, make_layout, ModelConfig), printed by the fsdp_memory_plan
    executable (tools/memory_plan.cpp), which this script runs;
  * compute: ModelConfig::flops_per_token, 6*N_matmul + 12*L*q_dim*T per
    token (forward 1/3, backward 2/3; recomputation adds the forward again),
    at --mfu of --peak-tflops (989, H100 SXM dense bf16); or per-unit GPU
    times from --measured FILE (format below); tools/plan_compute.py;
  * collectives: NCCL ring formulas. All-gather and reduce-scatter move
    (n-1)/n of the full buffer per rank, all-reduce 2(n-1)/n, at the ring's
    bus bandwidth, plus NCCL's own ring latency model (src/graph/tuning.cc,
    Simple protocol: 8.4 us + 3.4 us per NVLink step + 9.6 us per step
    between nodes). A ring that leaves the node runs at min(NVLink per GPU,
    the node's InfiniBand x the group's share of the node's GPUs);
  * overlap: the engine's order (shard/engine.cpp) replayed on compute, the
    shard group's NCCL stream and the replica group's; see simulate_micro_batch;
  * the optimizer step, after the last backward: AdamW's pass over the shards
    at --hbm-gbs; under --optimizer muon also Muon's f32 exchange of each
    block on the shard group and its Newton-Schulz FLOPs on the busiest
    owner of each block at --mfu, its casts at --hbm-gbs (tools/plan_optimizer.py).

--measured FILE: "key value" lines, '#' comments, times in ms for ONE
micro-batch of `batch` x `seq_len` on one H100 (scaled linearly to the
plan's micro-batch; seq_len and recompute must equal the plan's):
    batch 8
    seq_len 1024
    recompute none            (optional, default none)
    model gpt-1.3b            (optional, checked against --model)
    embed_forward_ms 0.2      (optional, default 0)
    embed_backward_ms 0.4     (optional, default 0)
    block_forward_ms 4.1
    block_backward_ms 8.3     (recomputation included, if any)
    head_forward_ms 3.0
    head_backward_ms 6.1
"""

import argparse
import glob
import json
import math
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # also when imported by path
import plan_optimizer  # noqa: E402
from plan_compute import fail, read_measured, unit_compute  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# A 7B shape the presets lack: Mistral-7B's (32 layers, d_model 4096, 32
# heads, 8 KV heads, SwiGLU 14336) on the presets' vocabulary (50304, tied
# embeddings), context 2048: 7.19B parameters.
SHAPE_7B = {"n-layer": 32, "d-model": 4096, "n-head": 32, "n-kv-head": 8, "d-ff": 14336,
            "max-seq-len": 2048}
MODEL_FLAGS = ("vocab-size", "n-layer", "d-model", "n-head", "n-kv-head", "d-ff", "max-seq-len",
               "tie-embeddings")

# Exposed communication above this share of the step counts as "not hidden"
# (the first gather and last reduce-scatter of each micro-batch never hide).
NOT_HIDDEN_SHARE = 0.05
# The share of free GPU memory a run may plan (kUsableShare, src/policy/memory_check.h).
USABLE_SHARE = 0.9

# The table of docs/CLUSTER.md: each model at its context, micro-batch chosen to fill
# an H100 without recomputation.
TABLE_MODELS = (("gpt-350m", 8, 1024), ("gpt-1.3b", 8, 1024), ("7b", 4, 2048))
TABLE_GPUS = (8, 32, 256)


# --- the program's own planner ------------------------------------------------

def find_exe(explicit):
    if explicit:
        return explicit
    found = glob.glob(os.path.join(REPO, "build*", "tools", "fsdp_memory_plan"))
    if not found:
        fail("fsdp_memory_plan not found under build*/tools; build it "
             "(cmake --build build --target fsdp_memory_plan) or pass --memory-plan-exe")
    return max(found, key=os.path.getmtime)  # the most recently built


def program_plan(exe, cfg, cache={}):  # cache: the table and suggestions re-ask often
    """fsdp_memory_plan's JSON for cfg's model, shard group, batch and dtypes."""
    flags = {"model": "gpt-1.3b", **SHAPE_7B} if cfg["model"] == "7b" else {"model": cfg["model"]}
    flags.update(cfg["model_overrides"])
    flags.update({"batch-size": cfg["micro_batch"], "seq-len": cfg["seq_len"],
                  "shard-group-size": cfg["shard"], "world-size": cfg["world"],
                  "precision": "bf16", "recompute": cfg["recompute"],
                  "reduce-dtype": cfg["reduce_dtype"], "optimizer": cfg["optimizer"],
                  "muon-ns-steps": cfg["muon_ns_steps"],
                  "reshard-after-forward": "true" if cfg["reshard"] else "false"})
    args = [exe]
    for k, v in flags.items():
        args += ["--" + k, str(v)]
    key = tuple(args)
    if key not in cache:
        r = subprocess.run(args, capture_output=True, text=True)
        if r.returncode != 0:
            also = " (plan.py also knows 7b)" if "--model:" in r.stderr else ""
            fail((r.stderr.strip() or f"{exe} exited {r.returncode}") + also)
        cache[key] = json.loads(r.stdout)
    return cache[key]


# --- links ---------------------------------------------------------------------

def ring(cfg, n, per_node):
    """The link of a ring over n ranks with per_node of them on each node."""
    nodes = n // per_node
    nvlink = cfg["nvlink_gbs"] * 1e9
    if nodes <= 1:
        return {"name": "NVLink", "ranks": n, "nodes": 1, "bus_bw": nvlink}
    # Each of the ring's channels leaves the node through its own NIC, so the
    # ring gets the group's share of the node's InfiniBand (all of it when the
    # group holds every GPU of the node, one GPU's share for replica groups).
    ib_node = cfg["ib_nics"] * cfg["ib_gbps"] / 8 * 1e9
    bw = min(nvlink, ib_node * per_node / cfg["gpus_per_node"])
    return {"name": "InfiniBand", "ranks": n, "nodes": nodes, "bus_bw": bw}


def collective_time(cfg, link, kind, full_bytes):
    """Seconds and bytes sent per rank for one ring collective of a full_bytes buffer
    (the gathered unit for all-gather/reduce-scatter, the buffer for all-reduce)."""
    n = link["ranks"]
    if n == 1:
        return 0.0, 0.0
    twice = 2 if kind == "all-reduce" else 1
    moved = twice * (n - 1) / n * full_bytes
    steps, inter = twice * (n - 1), twice * (link["nodes"] - 1)
    latency = (cfg["base_us"] + (steps - inter) * cfg["nvlink_hop_us"] +
               inter * cfg["ib_hop_us"]) * 1e-6
    return latency + moved / link["bus_bw"], moved


# --- the engine's schedule -----------------------------------------------------

def simulate_micro_batch(fwd, bwd, ag, rs, tied, reshard, ar=None):
    """Seconds of one FsdpEngine::forward_backward without and with the replica
    all-reduces (ar: per unit, on the last micro-batch of a step; measure_gradients
    waits for them), replaying its issue and wait order on three streams:
    compute, the shard group's (all-gathers and reduce-scatters, in issue order)
    and the replica group's. A collective starts when its stream is free and
    compute has reached the point where it was issued (wait_stream); compute
    waits where the engine waits. finish_reduce (begin_grads reusing a slot,
    unit u+2 after unit u's backward, every slot at the end) makes compute wait
    for the unit's reduce-scatter, then issues the unit's all-reduce."""
    U = len(fwd)
    reads = lambda u: [u, 0] if u == U - 1 and tied else [u]
    slot = lambda u: (0 if u == 0 else 1 if u == U - 1 else 2 + u % 2) if reshard else u
    c = m = r = 0.0
    ready, gather_done, pending = [False] * U, [None] * U, {}  # pending: slot -> (unit, done)

    def issue(x):
        nonlocal m
        if not ready[x] and gather_done[x] is None:
            m = max(m, c) + ag[x]
            gather_done[x] = m

    def wait(x):
        nonlocal c
        if not ready[x]:
            issue(x)
            c = max(c, gather_done[x])
            gather_done[x], ready[x] = None, True

    def finish(s):
        nonlocal c, r
        if s in pending:
            unit, done = pending.pop(s)
            c = max(c, done)
            r = max(r, c) + ar[unit] if ar else r

    for u in range(U):
        for x in reads(u):
            wait(x)
        for x in reads(u + 1) if u + 1 < U else []:
            issue(x)
        c += fwd[u]
        if reshard and 0 < u < U - 1:
            ready[u] = False
    active = set()
    for u in range(U - 1, -1, -1):
        for x in reads(u):
            wait(x)
        for x in reads(u - 1) if u > 0 else []:
            issue(x)
        for x in reads(u):
            if x not in active:  # begin_grads
                finish(slot(x))
                active.add(x)
        c += bwd[u]
        m = max(m, c) + rs[u]
        pending[slot(u)] = (u, m)
        active.discard(u)
        ready[u] = False
        if u + 2 < U and pending.get(slot(u + 2), (None,))[0] == u + 2:
            finish(slot(u + 2))
    for s in sorted(pending):
        finish(s)
    return c, max(c, r)


# --- one plan ------------------------------------------------------------------

def resolve(args_cfg):
    cfg = dict(args_cfg)
    cfg["world"] = cfg["nodes"] * cfg["gpus_per_node"]
    if cfg["full_shard"]:
        cfg["shard"] = cfg["world"]
    elif not cfg.get("shard"):  # hybrid by default: shard inside the node
        cfg["shard"] = cfg["gpus_per_node"] if cfg["nodes"] > 1 else cfg["world"]
    k, g = cfg["shard"], cfg["gpus_per_node"]
    if cfg["world"] % k or (k % g and g % k):
        fail(f"shard group {k} must divide the {cfg['world']} GPUs and divide or be a "
             f"multiple of {g} GPUs per node")
    return cfg


def plan(base, exe, suggest=True, baseline=True):
    cfg = resolve(base)
    prog = program_plan(exe, cfg)
    cfg["seq_len"] = prog["seq_len"]
    world, k, g = cfg["world"], cfg["shard"], cfg["gpus_per_node"]
    replicas = world // k
    shard_link = ring(cfg, k, min(k, g))
    replica_link = ring(cfg, replicas, g // k if k < g else 1)

    units = prog["units"]  # embed, block (x n_layer), head
    per_unit = {u["name"]: u for u in units}
    L = per_unit["block"]["count"]
    kinds = ["embed"] + ["block"] * L + ["head"]
    es = 2 if prog["compute_dtype"] == "bf16" else 4
    rs_bytes = 2 if prog["reduce_dtype"] == "bf16" else 4
    comp = unit_compute(cfg, prog)

    def coll(kind, unit, elem_bytes, link, size="padded"):
        return collective_time(cfg, link, kind, per_unit[unit][size] * elem_bytes)

    ag = [coll("all-gather", u, es, shard_link)[0] for u in kinds]
    rs = [coll("reduce-scatter", u, rs_bytes, shard_link)[0] for u in kinds]
    # Replica all-reduce: one fp32 all-reduce per unit of its gradient shard,
    # on the last micro-batch only, issued as the unit's reduce-scatter lands;
    # what outlasts that micro-batch's backward adds to the step.
    ar = {u: coll("all-reduce", u, 4, replica_link, "shard")[0] for u in per_unit}
    fwd, bwd = ([comp[u][i] for u in kinds] for i in (0, 1))
    micro, last = simulate_micro_batch(fwd, bwd, ag, rs, prog["model"]["tie_embeddings"],
                                       cfg["reshard"], [ar[u] for u in kinds])
    compute_micro = sum(fwd) + sum(bwd)
    optimizer = plan_optimizer.elementwise_seconds(cfg, units)
    ga = cfg["grad_accum"]
    compute = ga * compute_micro
    exposed_shard = ga * (micro - compute_micro)
    tokens_gpu = cfg["micro_batch"] * prog["seq_len"] * ga
    flops = prog["flops_per_token"] * tokens_gpu

    # Per step and GPU, what each collective moves (the engine re-gathers and
    # reduce-scatters every micro-batch: no no_sync).
    def traffic(kind, names, elem_bytes, link, times, size="padded"):
        per = [coll(kind, n, elem_bytes, link, size) for n in names]
        cnt = [per_unit[n]["count"] for n in names]
        return {"link": link["name"], "group": link["ranks"], "nodes": link["nodes"],
                "bus_gbs": link["bus_bw"] / 1e9, "dtype": "bf16" if elem_bytes == 2 else "fp32",
                "calls": times * sum(cnt),
                "bytes": times * sum(c * b for c, (_, b) in zip(cnt, per)),
                "seconds": times * sum(c * t for c, (t, _) in zip(cnt, per))}

    muon = plan_optimizer.muon(cfg, prog, lambda kind: traffic(kind, ("block",), 4, shard_link, 1))
    muon_s = muon["time"]["muon_s"] if muon else 0.0
    exposed_replica = last - micro
    step = ga * micro + exposed_replica + optimizer + muon_s

    all_units = ("embed", "block", "head")
    colls = {"all-gather (forward)": traffic("all-gather", all_units, es, shard_link, ga)}
    if cfg["reshard"]:  # blocks only: embedding and head stay gathered (engine.cpp)
        colls["all-gather (backward)"] = traffic("all-gather", ("block",), es, shard_link, ga)
    colls["reduce-scatter (gradients)"] = traffic("reduce-scatter", all_units, rs_bytes,
                                                  shard_link, ga)
    colls["all-reduce (replicas)"] = dict(traffic("all-reduce", all_units, 4, replica_link,
                                                  int(replicas > 1), "shard"), per_call_s=ar)
    colls.update(muon["collectives"] if muon else {})

    b = kinds.index("block")
    per_layer = {"forward_compute_s": fwd[b], "backward_compute_s": bwd[b], "all_gather_s": ag[b],
                 "reduce_scatter_s": rs[b], "forward_hidden": ag[b] <= fwd[b],
                 # in backward the re-gather and the reduce-scatter share the one stream
                 "backward_hidden": rs[b] + (ag[b] if cfg["reshard"] else 0) <= bwd[b]}

    mem = prog["memory"]
    result = {
        "config": {k2: cfg[k2] for k2 in (
            "model", "nodes", "gpus_per_node", "world", "shard", "micro_batch", "grad_accum",
            "seq_len", "reshard", "recompute", "reduce_dtype", "optimizer", "mfu")},
        "replicas": replicas,
        "model": {**prog["model"], "name": cfg["model"], "num_params": prog["num_params"],
                  "flops_per_token": prog["flops_per_token"]},
        "compute_source": "measured" if cfg["measured"] else "flops",
        "tokens_per_gpu_per_step": tokens_gpu, "global_batch_tokens": tokens_gpu * world,
        "per_layer": per_layer,
        "collectives": colls,
        "muon": muon["summary"] if muon else None,
        "time": {"compute_s": compute, "optimizer_s": optimizer,
                 **(muon["time"] if muon else {"muon_s": 0.0}),
                 "exposed_shard_comm_s": exposed_shard, "exposed_replica_comm_s": exposed_replica,
                 "replica_allreduce_s": colls["all-reduce (replicas)"]["seconds"],
                 "exposed_comm_s": exposed_shard + exposed_replica, "step_s": step},
        "tokens_per_s": tokens_gpu * world / step,
        "tokens_per_s_per_gpu": tokens_gpu / step,
        "mfu": flops / (step * cfg["peak_tflops"] * 1e12),
        "memory": mem,
        "memory_fits": mem["total"] <= USABLE_SHARE * cfg["gpu_mem_gib"] * 2**30,
    }
    result["comm_hidden"] = exposed_shard + exposed_replica <= NOT_HIDDEN_SHARE * step
    if baseline:
        result["scaling"] = scaling(cfg, result, exe)
    if suggest and not result["comm_hidden"]:
        result["suggestions"] = suggestions(cfg, result, exe)
    return result


def scaling(cfg, result, exe):
    """Per-GPU throughput against one node (or, on one node, one GPU) with the
    same micro-batch and settings: 1.0 is perfect scaling."""
    if cfg["world"] == 1:
        return {"versus": "1 GPU", "efficiency": 1.0}
    one = dict(cfg, full_shard=False, shard=None)
    if cfg["nodes"] > 1:
        one["nodes"], versus = 1, f"1 node ({cfg['gpus_per_node']} GPUs)"
    else:
        one["gpus_per_node"], versus = 1, "1 GPU"
    base = plan(one, exe, suggest=False, baseline=False)
    return {"versus": versus,
            "efficiency": result["tokens_per_s_per_gpu"] / base["tokens_per_s_per_gpu"]}


def suggestions(cfg, result, exe):
    """Each single change that could hide communication, re-planned; those that
    fit in memory and raise tokens/s per GPU, best first."""
    w, k, g, mb, ga = cfg["world"], cfg["shard"], cfg["gpus_per_node"], cfg["micro_batch"], \
        cfg["grad_accum"]
    cands = []
    if cfg["nodes"] > 1 and k != g:
        cands.append(("hybrid sharding: --shard-group-size %d" % g, {"shard": g}))
    if k != w:
        cands.append(("full sharding: --shard-group-size %d" % w, {"shard": w}))
    for k2 in (k * 2, k // 2):
        if g <= k2 < w and k2 != g and w % k2 == 0:
            cands.append((f"--shard-group-size {k2} ({w // k2} replicas)", {"shard": k2}))
    if cfg["reduce_dtype"] == "fp32":
        cands.append(("--reduce-dtype bf16", {"reduce_dtype": "bf16"}))
    if cfg["reshard"]:
        cands.append(("--reshard-after-forward false", {"reshard": False}))
    if ga % 2 == 0:
        cands.append((f"--batch-size {mb * 2} --grad-accum {ga // 2} (same global batch)",
                      {"micro_batch": mb * 2, "grad_accum": ga // 2}))
    cands.append((f"--batch-size {mb * 2} (global batch x2)", {"micro_batch": mb * 2}))
    if cfg["recompute"] != "block":  # only tried when the one before does not fit
        cands.append((f"--batch-size {mb * 2} --recompute block (global batch x2)",
                      {"micro_batch": mb * 2, "recompute": "block"}))
    cands.append((f"--grad-accum {ga * 2} (global batch x2)", {"grad_accum": ga * 2}))
    out, fits = [], False
    for text, change in cands:
        if "recompute" in change and fits:
            continue
        r = plan(dict(cfg, full_shard=False, **change), exe, suggest=False, baseline=False)
        fits = r["memory_fits"]
        gain = r["tokens_per_s_per_gpu"] / result["tokens_per_s_per_gpu"] - 1
        if r["memory_fits"] and gain > 0.01:
            out.append({"change": text, "settings": change, "gain": gain, "step_s": r["time"]["step_s"],
                        "tokens_per_s_per_gpu": r["tokens_per_s_per_gpu"],
                        "comm_hidden": r["comm_hidden"]})
    return sorted(out, key=lambda s: -s["gain"])


# --- output --------------------------------------------------------------------

def ms(s):
    return f"{s * 1e3:8.1f} ms"


def layout(r):
    c = r["config"]
    if c["shard"] < c["world"]:
        return f"hybrid {c['shard']}x{r['replicas']}"
    return "full" if c["world"] > 1 else "1 GPU"


def model_label(r):
    m = r["model"]
    return (f"{r['config']['model']}: {m['num_params'] / 1e9:.2f}B parameters, {m['n_layer']} layers, "
            f"d_model {m['d_model']}, {m['n_head']}/{m['n_kv_head']} heads, d_ff {m['d_ff']}, "
            f"vocab {m['vocab_size']}, {'tied' if m['tie_embeddings'] else 'untied'}")


def print_plan(r, cfg):
    c, t, m = r["config"], r["time"], r["memory"]
    print(f"== {model_label(r)}")
    print(f"   {c['world']} GPUs = {c['nodes']} node(s) x {c['gpus_per_node']}; shard group "
          f"{c['shard']} ({r['collectives']['all-gather (forward)']['link']}), {r['replicas']} "
          f"replica(s); micro-batch {c['micro_batch']} x seq {c['seq_len']} x grad-accum "
          f"{c['grad_accum']} = {r['tokens_per_gpu_per_step']} tokens/GPU/step, global "
          f"{r['global_batch_tokens'] / 1e6:.2f}M tokens")
    print(f"   bf16 weights gathered, gradients reduce-scattered in {c['reduce_dtype']}, replica "
          f"all-reduce in fp32; reshard after forward {'yes' if c['reshard'] else 'no'}; "
          f"recompute {c['recompute']}")
    if r["compute_source"] == "flops":
        print(f"   compute: FLOP model, {r['model']['flops_per_token'] / 1e9:.2f} GFLOP/token "
              f"(6*N + 12*L*d*T) at MFU {c['mfu']:.0%} of {cfg['peak_tflops']:g} TFLOP/s "
              f"(no --measured FILE)")
    else:
        print(f"   compute: measured per-unit times from {cfg['measured_path']}")
    pl = r["per_layer"]
    print(f"   per block: forward {ms(pl['forward_compute_s'])} vs all-gather "
          f"{ms(pl['all_gather_s'])} -> {'hidden' if pl['forward_hidden'] else 'NOT hidden'}; "
          f"backward {ms(pl['backward_compute_s'])} vs "
          f"{'all-gather + ' if c['reshard'] else ''}reduce-scatter "
          f"{ms(pl['reduce_scatter_s'] + (pl['all_gather_s'] if c['reshard'] else 0))} -> "
          f"{'hidden' if pl['backward_hidden'] else 'NOT hidden'}")
    print(f"   {'collective per step':28} {'dtype':5} {'link':40} {'calls':>6} "
          f"{'GB/GPU':>9} {'time':>11}")
    for name, x in r["collectives"].items():
        if x["group"] <= 1:
            continue
        link = f"{x['link']} {x['bus_gbs']:.0f} GB/s, {x['group']} ranks" + \
            (f"/{x['nodes']} nodes" if x["nodes"] > 1 else "")
        print(f"   {name:28} {x['dtype']:5} {link:40} {x['calls']:6d} {x['bytes'] / 1e9:9.3f} "
              f"{ms(x['seconds'])}")
    if r["muon"]:
        mu = r["muon"]
        print(f"   Muon: {mu['matrices']} matrices, Newton-Schulz {mu['ns_steps']} steps "
              f"{mu['ns_flops'] / 1e12:.2f} TFLOP a step, {mu['ns_critical_flops'] / 1e12:.2f} on "
              f"the blocks' busiest owners (ideal {mu['ns_ideal_flops'] / 1e12:.2f}) = "
              f"{ms(t['muon_ns_s']).strip()} at MFU {c['mfu']:.0%}; norm, casts and zeroing "
              f"{ms(t['muon_hbm_s']).strip()}; f32 exchange {ms(t['muon_exchange_s']).strip()}; "
              f"not overlapped")
    muon_part = f" + Muon {ms(t['muon_s'])}" if r["muon"] else ""
    print(f"   step: compute {ms(t['compute_s'])} + optimizer {ms(t['optimizer_s'])}{muon_part} + exposed "
          f"shard-group comm {ms(t['exposed_shard_comm_s'])} + exposed replica all-reduce "
          f"{ms(t['exposed_replica_comm_s'])} (of {ms(t['replica_allreduce_s']).strip()}, under "
          f"the last backward) = {ms(t['step_s'])}")
    sc = r["scaling"]
    print(f"   throughput: {r['tokens_per_s'] / 1e6:.3f}M tokens/s, {r['tokens_per_s_per_gpu']:,.0f} "
          f"tokens/s/GPU, MFU {r['mfu']:.1%}, scaling efficiency {sc['efficiency']:.1%} vs "
          f"{sc['versus']}")
    gib = lambda b: b / 2**30
    print(f"   memory/GPU (plan_memory): model state {gib(m['persistent']):.2f} + buffers "
          f"{gib(m['buffers']):.2f} + activations {gib(m['activations']):.2f} = "
          f"{gib(m['total']):.2f} GiB -> {'fits' if r['memory_fits'] else 'DOES NOT FIT'} in "
          f"{USABLE_SHARE:.0%} of {cfg['gpu_mem_gib']:g} GiB")
    if r["comm_hidden"]:
        print("   communication hidden (exposed <= 5% of the step)")
    else:
        print(f"   communication NOT hidden: {t['exposed_comm_s'] / t['step_s']:.0%} of the step "
              f"is exposed")
        for s in r["suggestions"][:3]:
            print(f"   -> try {s['change']}: step {ms(s['step_s'])}, "
                  f"{s['tokens_per_s_per_gpu']:,.0f} tokens/s/GPU (+{s['gain']:.0%})")
        if not r["suggestions"]:
            print("   -> no single change that fits in memory helps")
    print()


def table(cfg_base, exe, as_json):
    rows = []
    for model, mb, seq in TABLE_MODELS:
        for gpus in TABLE_GPUS:
            nodes = max(1, gpus // cfg_base["gpus_per_node"])
            shards = [None] if nodes == 1 else [None, gpus]  # hybrid, then full
            for shard in shards:
                cfg = dict(cfg_base, model=model, micro_batch=mb, seq_len=seq, nodes=nodes,
                           shard=shard, full_shard=False)
                rows.append(plan(cfg, exe))
    if as_json:
        print(json.dumps(rows, indent=1))
        return
    print("| model | GPUs | sharding | tokens/GPU/step | step | exposed comm | tokens/s | "
          "tokens/s/GPU | MFU | scaling | memory/GPU | best change if comm not hidden |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        c, t = r["config"], r["time"]
        best = r.get("suggestions", [])
        hint = f"{best[0]['change']} (+{best[0]['gain']:.0%})" if best else ""
        print(f"| {c['model']} | {c['world']} | {layout(r)} | {c['micro_batch']}x{c['seq_len']} | "
              f"{t['step_s'] * 1e3:.0f} ms | {t['exposed_comm_s'] / t['step_s']:.1%} | "
              f"{r['tokens_per_s'] / 1e6:.2f}M | {r['tokens_per_s_per_gpu'] / 1e3:.1f}k | "
              f"{r['mfu']:.1%} | {r['scaling']['efficiency']:.0%} | "
              f"{r['memory']['total'] / 2**30:.1f} GiB{'' if r['memory_fits'] else ' (no fit)'} | "
              f"{hint} |")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    boolean = lambda s: {"true": True, "false": False}[s.lower()]
    p.add_argument("--model", default="gpt-1.3b", help="fsdptrain preset, or 7b (default gpt-1.3b)")
    for f in MODEL_FLAGS:
        p.add_argument("--" + f, help="override the model field, as fsdptrain's flag")
    p.add_argument("--nodes", type=int, default=1)
    p.add_argument("--gpus-per-node", type=int, default=8)
    p.add_argument("--micro-batch", "--batch-size", dest="micro_batch", type=int, default=8,
                   help="sequences per GPU per micro-batch (fsdptrain's --batch-size)")
    p.add_argument("--grad-accum", type=int, default=1)
    p.add_argument("--seq-len", type=int, default=0, help="0: the model's context")
    p.add_argument("--shard-group-size", type=int, default=0,
                   help="0: GPUs per node when nodes > 1 (hybrid), else all GPUs")
    p.add_argument("--full-shard", action="store_true", help="shard over all GPUs")
    p.add_argument("--reshard-after-forward", type=boolean, default=True)
    p.add_argument("--recompute", choices=("none", "mlp", "block"), default="none")
    p.add_argument("--reduce-dtype", choices=("fp32", "bf16"), default="fp32")
    p.add_argument("--optimizer", choices=("adamw", "muon"), default="adamw")
    p.add_argument("--muon-ns-steps", type=int, default=5, help="Newton-Schulz steps (muon)")
    p.add_argument("--mfu", type=float, default=0.45, help="share of peak on executed FLOPs")
    p.add_argument("--peak-tflops", type=float, default=989.0, help="H100 SXM dense bf16")
    p.add_argument("--hbm-gbs", type=float, default=3350.0, help="H100 SXM HBM3, for AdamW")
    p.add_argument("--gpu-mem-gib", type=float, default=80.0)
    p.add_argument("--nvlink-gbs", type=float, default=450.0, help="per GPU per direction")
    p.add_argument("--ib-nics", type=int, default=8, help="InfiniBand NICs per node")
    p.add_argument("--ib-gbps", type=float, default=400.0, help="Gb/s per NIC")
    p.add_argument("--nvlink-hop-us", type=float, default=3.4, help="NCCL ring step, NVLink")
    p.add_argument("--ib-hop-us", type=float, default=9.6, help="NCCL ring step between nodes")
    p.add_argument("--collective-base-us", type=float, default=8.4, help="NCCL launch latency")
    p.add_argument("--measured", metavar="FILE", help="per-unit GPU times (format below)")
    p.add_argument("--memory-plan-exe", help="fsdp_memory_plan (default: newest build*/tools/)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--table", action="store_true", help="the table of docs/CLUSTER.md")
    a = p.parse_args()
    for name in ("nodes", "gpus_per_node", "micro_batch", "grad_accum"):
        if getattr(a, name) < 1:
            fail(f"--{name.replace('_', '-')} must be at least 1")
    if not (0 < a.mfu <= 1):
        fail("--mfu must be in (0, 1]")
    cfg = {"model": a.model, "nodes": a.nodes, "gpus_per_node": a.gpus_per_node,
           "micro_batch": a.micro_batch, "grad_accum": a.grad_accum, "seq_len": a.seq_len,
           "shard": a.shard_group_size, "full_shard": a.full_shard,
           "reshard": a.reshard_after_forward, "recompute": a.recompute,
           "reduce_dtype": a.reduce_dtype, "optimizer": a.optimizer,
           "muon_ns_steps": a.muon_ns_steps, "mfu": a.mfu, "peak_tflops": a.peak_tflops,
           "hbm_gbs": a.hbm_gbs, "gpu_mem_gib": a.gpu_mem_gib, "nvlink_gbs": a.nvlink_gbs,
           "ib_nics": a.ib_nics, "ib_gbps": a.ib_gbps, "nvlink_hop_us": a.nvlink_hop_us,
           "ib_hop_us": a.ib_hop_us, "base_us": a.collective_base_us,
           "measured": read_measured(a.measured) if a.measured else None,
           "measured_path": a.measured,
           "model_overrides": {f: getattr(a, f.replace("-", "_")) for f in MODEL_FLAGS
                               if getattr(a, f.replace("-", "_")) is not None}}
    exe = find_exe(a.memory_plan_exe)
    if a.table:
        table(cfg, exe, a.json)
        return
    r = plan(cfg, exe)
    if a.json:
        print(json.dumps(r, indent=1))
    else:
        print_plan(r, cfg)


if __name__ == "__main__":
    main()
