"""tools/plan.py's compute: seconds of forward and backward per unit of one
micro-batch, from ModelConfig's FLOP count at an MFU or from per-unit times
measured on an H100 (--measured FILE; its format is in plan.py's help)."""

import sys


def fail(message):
    sys.exit("plan.py: error: " + message)


def read_measured(path):
    values = {}
    with open(path) as f:
        for number, line in enumerate(f, 1):
            words = line.split("#", 1)[0].split()
            if not words:
                continue
            if len(words) != 2:
                fail(f"--measured {path}:{number}: expected 'key value', got {line.strip()!r}")
            values[words[0]] = words[1]
    need = ("batch", "seq_len", "block_forward_ms", "block_backward_ms", "head_forward_ms",
            "head_backward_ms")
    missing = [k for k in need if k not in values]
    if missing:
        fail(f"--measured {path}: missing {', '.join(missing)}")
    return values


def unit_compute(cfg, prog):
    """Seconds of forward and backward compute of one micro-batch, per unit kind."""
    m, tokens = prog["model"], cfg["micro_batch"] * prog["seq_len"]
    meas = cfg["measured"]
    if meas:
        if int(meas["seq_len"]) != prog["seq_len"]:
            fail(f"--measured is for seq_len {meas['seq_len']}, the plan for {prog['seq_len']}")
        if meas.get("recompute", "none") != cfg["recompute"]:
            fail(f"--measured is for --recompute {meas.get('recompute', 'none')}")
        if "model" in meas and meas["model"] != cfg["model"]:
            fail(f"--measured is for model {meas['model']}, the plan for {cfg['model']}")
        scale = cfg["micro_batch"] / int(meas["batch"]) * 1e-3
        t = lambda k: float(meas.get(k, 0)) * scale
        return {"embed": (t("embed_forward_ms"), t("embed_backward_ms")),
                "block": (t("block_forward_ms"), t("block_backward_ms")),
                "head": (t("head_forward_ms"), t("head_backward_ms"))}
    # ModelConfig's count split by unit: the head's GEMM counts vocab x d
    # (tied or not), the embedding lookup nothing, each block the rest.
    d, L, T = m["d_model"], m["n_layer"], prog["seq_len"]
    head = m["vocab_size"] * d
    block = (prog["num_matmul_params"] - head) / L
    rate = cfg["mfu"] * cfg["peak_tflops"] * 1e12
    fwd = tokens * (2 * block + 4 * d * T)
    bwd = tokens * (4 * block + 8 * d * T)
    if cfg["recompute"] == "block":
        bwd += fwd
    elif cfg["recompute"] == "mlp":
        bwd += tokens * 2 * 3 * d * m["d_ff"]
    return {"embed": (0.0, 0.0), "block": (fwd / rate, bwd / rate),
            "head": (tokens * 2 * head / rate, tokens * 4 * head / rate)}
