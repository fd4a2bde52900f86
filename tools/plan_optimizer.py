"""The optimizer step's share of tools/plan.py's step: AdamW's pass over the
shards (memory-bound) and, under --optimizer muon, Muon's whole-matrix
exchange and Newton-Schulz (shard/muon.h).

Nothing of it overlaps: FsdpEngine::apply_update runs after the last
backward, unit after unit, and MuonStep::update_unit waits for each unit's
exchange before the next.
"""

from plan_compute import fail

# HBM traffic per element of a rank's shard, per step (engine.cpp), AdamW:
# sum_squares reads the gradient (4); adamw reads master, gradient and both
# moments (16) and writes master and moments (12); zero writes the gradient
# (4); refresh_send_buffers reads the master (4) and writes bf16 (2).
# A Muon element costs the same 42: sum_squares (4), muon_momentum reads
# gradient and momentum and writes both (16), muon_update reads master and
# update and writes master (12), the AdamW pass still zeroes its gradient
# (4) and refreshes its send copy (6).
OPTIMIZER_BYTES_PER_ELEM = 42
# Muon's own HBM traffic, on top of the GEMMs (shard/muon.cpp,
# model/cuda/muon.cu): per element of an owner's matrices, the norm
# reads it (4), the cast in reads it and writes bf16 (6), the cast out reads
# bf16 and writes it (6); per element of an exchanged unit, on several
# ranks, zeroing the results buffer writes 4.
MUON_CAST_BYTES_PER_ELEM = 16
MUON_ZERO_BYTES_PER_ELEM = 4


def elementwise_seconds(cfg, units):
    """AdamW's (and Muon's elementwise) pass over one rank's shards."""
    shard_elems = sum(u["shard"] * u["count"] for u in units)
    return shard_elems * OPTIMIZER_BYTES_PER_ELEM / (cfg["hbm_gbs"] * 1e9)


def muon(cfg, prog, block_traffic):
    """Muon's share of a step, None under AdamW. block_traffic(kind) is plan.py's
    per-step traffic entry of one f32 collective of every block on the shard
    group (bytes, seconds, calls).

    Per exchanged unit (the blocks: embeddings and head hold no Muon matrix)
    the shard group all-gathers the momentum direction in f32, each owner
    runs Newton-Schulz on its matrices, and a reduce-scatter (sum) returns
    the slices; one rank skips both collectives. The units run one after
    another, each as long as its busiest owner, so the Newton-Schulz time
    is the program's ns_critical_flops (plan_muon's owners, summed over
    units of each unit's busiest rank) at the plan's --mfu, not the total
    over the ranks: to be replaced by bench_cuda_ops' timings of the
    batched GEMMs once measured on an H100. The GEMMs' own reads and writes
    are inside that MFU; the norm, the casts around the iteration (on the
    same busiest owners' elements) and zeroing the results buffer are
    counted at --hbm-gbs.
    """
    m = prog["muon"]
    if m is None:
        return None
    blocks = next(u["count"] for u in prog["units"] if u["name"] == "block")
    if m["exchanged_units"] != blocks:
        fail(f"fsdp_memory_plan exchanges {m['exchanged_units']} units for Muon, plan.py "
             f"times the {blocks} blocks; teach tools/plan_optimizer.py the new units")
    rate = cfg["mfu"] * cfg["peak_tflops"] * 1e12
    colls = {}
    if prog["shard_size"] > 1:
        colls = {"all-gather (Muon)": block_traffic("all-gather"),
                 "reduce-scatter (Muon)": block_traffic("reduce-scatter")}
    exchange = sum(c["seconds"] for c in colls.values())
    ns = m["ns_critical_flops"] / rate
    block = next(u["padded"] for u in prog["units"] if u["name"] == "block")
    zeroed = block * blocks if prog["shard_size"] > 1 else 0
    hbm = (MUON_CAST_BYTES_PER_ELEM * m["ns_critical_elems"] + MUON_ZERO_BYTES_PER_ELEM * zeroed) \
        / (cfg["hbm_gbs"] * 1e9)
    return {"collectives": colls,
            "time": {"muon_exchange_s": exchange, "muon_ns_s": ns, "muon_hbm_s": hbm,
                     "muon_s": exchange + ns + hbm},
            "summary": {**m, "ns_ideal_flops": m["ns_flops"] / prog["shard_size"]}}
