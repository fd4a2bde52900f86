#!/usr/bin/env python3
"""PyTorch reference of fsdptrain's model and training step, for parity.

It loads an fsdptrain checkpoint (weights and AdamW moments), trains the same
model on the same batches with the same optimizer, LR schedule and clipping,
and compares its loss at every step with fsdptrain's --metrics file:

    fsdptrain --train-data D.h5 --steps 60 --checkpoint-dir ck --checkpoint-every 10 \\
              --metrics m.jsonl ...
    python3 tools/torch_reference.py ck/step_00000010.h5 --metrics m.jsonl --steps 50

On a CPU in fp32 the curves agree to ~1e-6 (the CPU reference is fp32); on a
GPU use --device cuda --dtype bf16 (autocast), where the bar is 1%. Exit 1
when any step differs by more than --tolerance (relative).

--write-metrics FILE writes its own curve in the --metrics format that
tools/plot_metrics.py reads: one {"step", "loss", "lr", "grad_norm",
"tokens_seen", "tokens_per_s", "elapsed_s"} line per step and, when the
checkpoint's run validated (--val-data with --eval-every), {"step",
"val_loss"} at the same steps on the same windows. With it, --metrics is
optional (no comparison then). Validation losses in the --metrics file at
the replayed steps are compared too (at the run's --eval-seq-len, under the
same tolerance). --perturb REL multiplies every starting weight by
(1 + REL * N(0, 1)): with REL ~1e-7 (one fp32 rounding) a replay against an
unperturbed one shows how fast rounding differences grow in this training,
the baseline for a gap to fsdptrain. --log-every N prints every N-th step.

What it mirrors, and where (keep in step with the C++):
- model: model/transformer.cpp (pre-norm blocks, QK-norm over head_dim before
  RoPE, rotate_half RoPE with angle t*theta^(-2i/hd), causal GQA, SwiGLU
  (or --relu2-mlp's relu(x W1^T)^2), --value-residual's mean of each later
  block's values with the first block's (--value-residual-learned: the
  block's learned pair's mix of them), --unet-skips' scaled mirror-block
  inputs, --value-embeds' tables mixed into the first and last blocks'
  values, final RMSNorm, tied or untied head,
  --logit-softcap, mean cross-entropy, and in training --z-loss's term);
- validation: data/batch_loader.cpp ValBatches (batch i row b reads window
  (i*world + rank)*batch_size + b modulo the windows; --eval-batches 0: every
  window once) and src/trainer/validator.cpp Validator::evaluate (mean over all tokens), at
  --eval-seq-len's context in as many rows as the training micro-batch has
  tokens for (src/options/options.h EvalOptions::micro_batch);
- batches: data/permutation.cpp and data/sampler.cpp (Feistel permutation
  per epoch keyed by seed and epoch; step s uses global positions
  s*G .. s*G+G-1, G = global batch); single-file datasets only; under
  --seq-warmup-steps each sequence cut into sequences of the step's context
  (src/policy/seq_warmup.h, src/trainer/trainer.cpp's train_step);
- optimizer: shard/engine.cpp (clip to --grad-clip with norm+1e-6, AdamW with
  decay on matrices only) and src/policy/lr_schedule.h (cosine, linear, wsd); with --optimizer muon in the
  checkpoint's configuration, torch.optim.Muon (PyTorch >= 2.9) for the block
  matrices (shard/muon.h), continuing from the momentum fsdptrain keeps in
  optim/exp_avg, and AdamW for the rest. torch.optim.Muon runs its
  Newton-Schulz iteration in bf16; with --dtype fp32 this script swaps that
  one function for the same iteration in fp32 (newton_schulz_fp32 below), so
  the CPU reference's fp32 can be compared, and under
  --muon-ns-coefficients polar_express (one quintic per step, which
  torch.optim.Muon cannot take) in any dtype; momentum, Nesterov, the
  learning-rate adjustment, weight decay and the update stay torch's own.
  Under --muon-normuon, NorMuon's row scaling (normuon_rows below) follows
  that function, from the row moments fsdptrain keeps in optim/exp_avg_sq.
"""
import argparse
import json
import math
import re
import sys
import time

from newton_schulz_tables import NS_TABLES  # shard/muon.h's tables, this folder


def missing(what):
    # One line, and exit 2 as argparse does for usage errors (1 means the losses differ).
    print(f"torch_reference: error: needs {what}", file=sys.stderr)
    sys.exit(2)


try:
    import h5py
    import numpy as np
except ImportError as e:
    missing(f"the python package {e.name} (tools/setup.sh installs it into .venv: run the "
            f"tools with .venv/bin/python)")
try:
    import torch
    import torch.nn.functional as F
except ImportError:
    missing("PyTorch, which tools/setup.sh does not install (it is large): add the CPU build to "
            "the project's venv with .venv/bin/python -m pip install torch --index-url "
            "https://download.pytorch.org/whl/cpu")

M64 = (1 << 64) - 1


def mix64(x):
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


class Permutation:
    ROUNDS = 6

    def __init__(self, n, key):
        bits = max(2, (n - 1).bit_length())
        self.n, self.half = n, (bits + 1) // 2
        self.mask = (1 << self.half) - 1
        k = mix64(key)
        self.keys = []
        for _ in range(self.ROUNDS):
            k = mix64(k)
            self.keys.append(k)

    def __call__(self, i):
        while True:
            left, right = i >> self.half, i & self.mask
            for rk in self.keys:
                left, right = right, left ^ (mix64(right ^ rk) & self.mask)
            i = (left << self.half) | right
            if i < self.n:
                return i


def window_of(position, windows, seed):
    epoch = position // windows
    return Permutation(windows, seed ^ mix64(epoch ^ 0x5EED))(position % windows)


def seq_warmup_context(step, T, steps, start):
    """src/policy/seq_warmup.h: the largest divisor of T not above the linear ramp
    from start (0: T // 8) to T over `steps` steps; T once the warm-up is over."""
    if steps <= 0 or step >= steps:
        return T
    start = start or T // 8
    c = start + (T - start) * step // steps
    while T % c:
        c -= 1
    return c


def batch_warmup_micro_batches(step, accum, steps, start):
    """src/policy/batch_warmup.h: the step's micro-batches, growing linearly from
    start (0: 1) to accum over `steps` steps; accum once the warm-up is over."""
    if steps <= 0 or step >= steps:
        return accum
    start = start or 1
    return start + (accum - start) * step // steps


def lr_at(step, total, warmup, lr, min_lr, shape="cosine", decay_fraction=0.2):
    """src/policy/lr_schedule.h: warmup, then cosine, linear or wsd (stable, then linear
    over the last decay_fraction of the steps) to min_lr at the last step."""
    if step < warmup:
        return np.float32(lr * (step + 1) / warmup)
    if shape == "wsd":
        decay = max(1, int(math.floor(float(np.float32(decay_fraction)) * total + 0.5)))  # C++ holds a float
        start = max(warmup, total - decay)
        if step < start:
            return np.float32(lr)
        return np.float32(lr + (min_lr - lr) * min(1.0, (step - start + 1) / max(1, total - start)))
    decay = max(1, total - warmup - 1)
    progress = min(1.0, (step - warmup) / decay)
    if shape == "linear":
        return np.float32(lr + (min_lr - lr) * progress)
    return np.float32(min_lr + 0.5 * (lr - min_lr) * (1.0 + math.cos(math.pi * progress)))


def rmsnorm(x, g, eps):
    return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps).to(x.dtype) * g


def rope(x, theta):  # x [B, T, H, hd], rotate_half
    T, hd = x.shape[1], x.shape[3]
    half = hd // 2
    f64 = dict(dtype=torch.float64, device=x.device)
    inv = theta ** (-2.0 * torch.arange(half, **f64) / hd)
    ang = torch.arange(T, **f64)[:, None] * inv[None, :]
    cos = ang.cos().to(x.dtype)[None, :, None, :]
    sin = ang.sin().to(x.dtype)[None, :, None, :]
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


class Model(torch.nn.Module):
    """fsdptrain's decoder; parameter names are the checkpoint's (dots -> __)."""

    def __init__(self, cfg, tensors):
        super().__init__()
        self.cfg = cfg
        self.p = torch.nn.ParameterDict(
            {k.replace(".", "__"): torch.nn.Parameter(torch.from_numpy(v.copy())) for k, v in tensors.items()})

    def w(self, name):
        return self.p[name.replace(".", "__")]

    def forward(self, tokens, targets, objective=False):
        """The mean cross-entropy; objective=True: training's, with --z-loss's term."""
        c = self.cfg
        B, T = tokens.shape
        H, Hkv, d = c["n_head"], c["n_kv_head"], c["d_model"]
        hd, eps, theta = d // H, c["norm_eps"], c["rope_theta"]
        x = F.embedding(tokens, self.w("embed.weight"))
        mask = None  # --document-mask: causal within each document only
        if c.get("document_mask", 0):
            # a document starts at the window's start and after each end of text
            starts = torch.ones_like(tokens, dtype=torch.bool)
            starts[:, 1:] = tokens[:, :-1] == self.eos
            doc = starts.cumsum(1)
            causal = torch.ones(T, T, dtype=torch.bool, device=tokens.device).tril()
            mask = ((doc[:, :, None] == doc[:, None, :]) & causal)[:, None]
        v0 = None  # --value-residual: the first block's values
        L, inputs = c["n_layer"], []  # --unet-skips: each block's input
        K = c.get("value_embeds", 0)  # --value-embeds: table j's rows for these tokens
        ve = [F.embedding(tokens, self.w(f"embed.value.{j}")).view(B, T, Hkv, hd) for j in range(K)]
        for l in range(L):
            b = f"blocks.{l}."
            if c.get("unet_skips", 0) and L - 1 - l < l:  # + s x_(L-1-l), s a learned scalar
                x = x + self.w(b + "unet_skip") * inputs[L - 1 - l]
            inputs.append(x)
            h = rmsnorm(x, self.w(b + "attn_norm"), eps)
            q = (h @ self.w(b + "attn.wq").t()).view(B, T, H, hd)
            k = (h @ self.w(b + "attn.wk").t()).view(B, T, Hkv, hd)
            v = (h @ self.w(b + "attn.wv").t()).view(B, T, Hkv, hd)
            if c.get("value_residual", 0):  # later blocks attend over (v + v0) / 2
                if v0 is None:
                    v0 = v
                elif c.get("value_residual_learned", 0):  # or w0 v + w1 v0, (w0, w1) learned
                    pair = self.w(b + "value_residual_mix")
                    v = pair[0] * v + pair[1] * v0
                else:
                    v = (v + v0) / 2
            j = l if l < K else l - (L - K) if l >= L - K else -1
            if j >= 0:  # the first and last K blocks: w0 v + w1 ve_j, (w0, w1) learned
                mix = self.w(b + "value_mix")
                v = mix[0] * v + mix[1] * ve[j]
            q = rope(rmsnorm(q, self.w(b + "attn.q_norm"), eps), theta)
            k = rope(rmsnorm(k, self.w(b + "attn.k_norm"), eps), theta)
            o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                               attn_mask=mask, is_causal=mask is None, enable_gqa=True)
            x = x + o.transpose(1, 2).reshape(B, T, H * hd) @ self.w(b + "attn.wo").t()
            h = rmsnorm(x, self.w(b + "mlp_norm"), eps)
            if c.get("relu2_mlp", 0):  # --relu2-mlp: relu(h W1^T)^2, no W3
                s = F.relu(h @ self.w(b + "mlp.w1").t()).square()
            else:
                s = F.silu(h @ self.w(b + "mlp.w1").t()) * (h @ self.w(b + "mlp.w3").t())
            x = x + s @ self.w(b + "mlp.w2").t()
        h = rmsnorm(x, self.w("final_norm"), eps)
        head = self.w("embed.weight") if c["tie_embeddings"] else self.w("head.weight")
        logits = (h @ head.t()).float().view(-1, head.shape[0])
        cap = c.get("logit_softcap", 0)
        if cap > 0:  # --logit-softcap: the softmax sees cap tanh(logit / cap)
            logits = cap * torch.tanh(logits / cap)
        loss = F.cross_entropy(logits, targets.reshape(-1))
        if objective and c.get("z_loss", 0) > 0:  # --z-loss: z lse^2, training only
            loss = loss + c["z_loss"] * torch.logsumexp(logits, -1).pow(2).mean()
        return loss


BLOCK_MATRIX = re.compile(r"blocks\.\d+\.(attn\.w[qkvo]|mlp\.w[123])$")


def newton_schulz_fp32(g, quintics, steps, eps, margin=1.0):
    """Muon's quintic Newton-Schulz iteration kept in the input's dtype
    (written here from its definition: X = G/max(margin |G|_F, eps) on the
    wide orientation, then X <- aX + (bA + cA^2)X with A = XX^T, step k
    taking quintics[min(k, len - 1)])."""
    x = g.clone()
    tall = x.shape[0] > x.shape[1]
    if tall:
        x = x.t()
    x = x / (x.norm() * margin).clamp(min=eps)
    for k in range(steps):
        a, b, c = quintics[min(k, len(quintics) - 1)]
        gram = x @ x.t()
        x = a * x + (b * gram + c * (gram @ gram)) @ x
    return x.t() if tall else x


def normuon_rows(u, v, beta2, eps=1e-8):
    """NorMuon on an orthogonalised update u [rows, cols] (written here from
    its definition, Li et al. 2025, as shard/muon.h keeps the norm): each row's
    second moment v <- v + (1 - beta2)(mean of the row's u^2 - v), the row over
    sqrt(v) + eps, then the whole rescaled to u's Frobenius norm."""
    m = (u.double() ** 2).mean(dim=1)
    v.lerp_(m.to(v.dtype), 1 - beta2)
    s = 1 / (v.double().sqrt() + eps)
    hat = (m * s * s).sum()
    keep = torch.sqrt(m.sum() / hat) if hat != 0 else torch.zeros((), dtype=torch.float64)
    return (u.double() * (s * keep)[:, None]).to(u.dtype)


def read_checkpoint(path):
    with h5py.File(path, "r") as f:
        m = f["model"]
        cfg = {k: (v.item() if hasattr(v, "item") else v) for k, v in m.attrs.items()}
        cfg["tie_embeddings"] = bool(cfg["tie_embeddings"])
        names = [k for k in m.keys()]
        model = {k: m[k][()] for k in names}
        avg = {k: f["optim/exp_avg"][k][()] for k in names}
        avg_sq = {k: f["optim/exp_avg_sq"][k][()] for k in names}
        scalar = lambda v: v.item() if getattr(v, "size", 1) == 1 and hasattr(v, "item") else v
        root = {k: scalar(v) for k, v in f.attrs.items()}  # tensor_checksums is an array
        sampler = {k: int(v) for k, v in f["sampler"].attrs.items()}
    ini = root["config"]
    ini = ini.decode() if isinstance(ini, bytes) else ini
    opts = dict(l.split(" = ", 1) for l in ini.splitlines() if " = " in l)
    return cfg, model, avg, avg_sq, root, sampler, opts


def read_tokens(spec, what):
    path, _, dset = spec.partition(":/")
    if "," in path or "*" in path:
        sys.exit(f"torch_reference: error: multi-file datasets are not mirrored here; pass {what} FILE.h5")
    with h5py.File(path, "r") as f:
        return f["/" + (dset or "tokens")][()].astype(np.int64)


def eos_id(spec):
    """The end-of-text id a token file states (--document-mask), or None."""
    path, _, dset = spec.partition(":/")
    with h5py.File(path, "r") as f:
        eos = f["/" + (dset or "tokens")].attrs.get("eos_id")
        return None if eos is None else int(eos)


def val_loss(model, tokens, T, B, world, batches, dev, autocast):
    """fsdptrain's evaluate(): the mean loss over every token of the batches
    that all ranks together read (batches 0..batches-1 of every rank; 0: each
    window once)."""
    windows = (len(tokens) - 1) // T
    if batches == 0:
        ids = list(range(windows))
    else:
        ids = [((i * world + r) * B + b) % windows for i in range(batches) for r in range(world) for b in range(B)]
    total, count = 0.0, 0
    with torch.no_grad():
        for k in range(0, len(ids), B):
            rows = torch.from_numpy(np.stack([tokens[w * T: w * T + T + 1] for w in ids[k:k + B]])).to(dev)
            with autocast():
                loss = model(rows[:, :-1], rows[:, 1:])
            total += loss.item() * rows[:, 1:].numel()
            count += rows[:, 1:].numel()
    return total / count


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkpoint", help="an fsdptrain checkpoint (.h5); training continues from it")
    ap.add_argument("--metrics", help="fsdptrain's --metrics file of the same run (required without "
                    "--write-metrics)")
    ap.add_argument("--write-metrics", metavar="FILE", help="write this replay's curve as JSON lines "
                    "(the --metrics format, for tools/plot_metrics.py)")
    ap.add_argument("--steps", type=int, default=50, help="steps to train and compare")
    ap.add_argument("--train-data", help="override the data file named in the checkpoint's config")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--tolerance", type=float, default=1e-2, help="largest relative loss difference")
    ap.add_argument("--val-data", help="override the validation file named in the checkpoint's config")
    ap.add_argument("--perturb", type=float, default=0.0, metavar="REL",
                    help="multiply the starting weights by 1 + REL*N(0,1) (a rounding-growth baseline)")
    ap.add_argument("--log-every", type=int, default=1, metavar="N", help="print every N-th step")
    a = ap.parse_args()
    if not a.metrics and not a.write_metrics:
        ap.error("give --metrics (compare with fsdptrain), --write-metrics (write the curve), or both")
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(a.device == "cpu")

    cfg, weights, avg, avg_sq, root, sampler, opts = read_checkpoint(a.checkpoint)
    start = int(root["step"])
    B, T = int(opts["batch-size"]), int(opts["seq-len"])
    accum, world = int(opts["grad-accum"]), int(root["world_size"])
    total, warmup = int(opts["steps"]), int(opts["warmup-steps"])
    lr, min_lr = float(opts["lr"]), float(opts["min-lr"])
    wd, clip = float(opts["weight-decay"]), float(opts["grad-clip"])
    betas, eps = (float(opts["beta1"]), float(opts["beta2"])), float(opts["adam-eps"])
    tokens = read_tokens(a.train_data or opts["train-data"], "--train-data")
    windows = (len(tokens) - 1) // T
    eval_every = int(opts.get("eval-every", "0"))
    val_spec = a.val_data or opts.get("val-data", "")
    theirs_val = {}
    if a.metrics:
        theirs_val = {l["step"]: l["val_loss"] for l in map(json.loads, open(a.metrics)) if "val_loss" in l}
    val_tokens = read_tokens(val_spec, "--val-data") if (a.write_metrics or theirs_val) and val_spec else None
    # the validation context and its rows per micro-batch (EvalOptions)
    val_T = int(opts.get("eval-seq-len", "0")) or T
    val_B = B * T // val_T
    # --seq-warmup-steps: each sequence cut into pieces of the step's context
    warm_steps, warm_start = int(opts.get("seq-warmup-steps", "0")), int(opts.get("seq-warmup-start", "0"))
    # --batch-warmup-steps: the step's global batch, B x world x its micro-batches
    ramp_steps, ramp_start = int(opts.get("batch-warmup-steps", "0")), int(opts.get("batch-warmup-start", "0"))
    G_at = lambda s: B * world * batch_warmup_micro_batches(s, accum, ramp_steps, ramp_start)
    seed = sampler["seed"] & M64
    consumed, tokens_seen = sampler["consumed"], int(root["tokens_seen"])

    dev = torch.device(a.device)
    if a.perturb:
        g = np.random.default_rng(0)
        weights = {k: (v * (1 + a.perturb * g.standard_normal(v.shape))).astype(v.dtype) for k, v in weights.items()}
    model = Model(cfg, weights).to(dev)
    model.eos = eos_id(a.train_data or opts["train-data"]) if cfg.get("document_mask", 0) else None
    muon = opts.get("optimizer", "adamw") == "muon"
    is_muon = lambda n: muon and BLOCK_MATRIX.match(n.replace("__", ".")) is not None
    decay = [p for n, p in model.p.items() if p.ndim >= 2 and not is_muon(n)]
    no_decay = [p for n, p in model.p.items() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": wd}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=lr, betas=betas, eps=eps, foreach=False)
    opts_all = [opt]
    if muon:
        if not hasattr(torch.optim, "Muon"):
            missing("torch.optim.Muon (PyTorch 2.9 or newer) for a checkpoint of --optimizer muon")
        table = opts.get("muon-ns-coefficients", "jordan")
        if a.dtype == "fp32" or table != "jordan":  # torch.optim.Muon takes one quintic only
            import torch.optim._muon as muon_module
            quintics, margin = NS_TABLES[table]
            muon_module._zeropower_via_newtonschulz = \
                lambda g, _coefficients, steps, eps: newton_schulz_fp32(g, quintics, steps, eps, margin)
        opt_muon = torch.optim.Muon([p for n, p in model.p.items() if is_muon(n)], lr=lr, weight_decay=wd,
                                    momentum=float(opts["muon-momentum"]),
                                    nesterov=opts["muon-nesterov"] == "true",
                                    ns_steps=int(opts["muon-ns-steps"]), adjust_lr_fn=opts["muon-lr-adjust"])
        opts_all.append(opt_muon)
        if opts.get("muon-normuon", "false") == "true":
            # torch.optim.Muon visits its parameters in one order every step;
            # NorMuon follows each orthogonalisation there, with the row
            # moments fsdptrain keeps in the first `rows` elements of each
            # matrix's optim/exp_avg_sq.
            import torch.optim._muon as muon_module
            orthogonalise = muon_module._zeropower_via_newtonschulz
            names = [n.replace("__", ".") for n, p in model.p.items() if is_muon(n)]
            moments = [torch.from_numpy(avg_sq[n].reshape(-1)[:avg_sq[n].shape[0]].copy()).to(dev) for n in names]
            beta2, calls = float(opts["muon-normuon-beta2"]), [0]

            def orthogonalise_normuon(g, coefficients, steps, eps):
                i = calls[0] % len(moments)
                calls[0] += 1
                return normuon_rows(orthogonalise(g, coefficients, steps, eps), moments[i], beta2)
            muon_module._zeropower_via_newtonschulz = orthogonalise_normuon
    for n, p in model.p.items():  # continue with fsdptrain's moments and step count
        name = n.replace("__", ".")
        if is_muon(n):  # fsdptrain keeps Muon's momentum where AdamW's first moment would be
            opt_muon.state[p] = {"momentum_buffer": torch.from_numpy(avg[name].copy()).to(dev)}
            continue
        opt.state[p] = {"step": torch.tensor(float(root["optimizer_steps"])),
                        "exp_avg": torch.from_numpy(avg[name].copy()).to(dev),
                        "exp_avg_sq": torch.from_numpy(avg_sq[name].copy()).to(dev)}

    theirs = {}
    if a.metrics:
        theirs = {l["step"]: l["loss"] for l in map(json.loads, open(a.metrics)) if "loss" in l}
    out = open(a.write_metrics, "w") if a.write_metrics else None
    autocast = lambda: torch.autocast(dev.type, dtype=torch.bfloat16, enabled=a.dtype == "bf16")
    end = min(start + a.steps, total)
    worst, worst_val, vals_compared, failures = 0.0, 0.0, 0, 0
    t_start = time.perf_counter()
    for s in range(start, end):
        t0 = time.perf_counter()
        G = G_at(s)  # positions consumed .. consumed + G - 1, in the data loader's order
        rows = [tokens[w * T: w * T + T + 1] for w in (window_of(consumed + j, windows, seed) for j in range(G))]
        consumed, tokens_seen = consumed + G, tokens_seen + G * T
        batch = torch.from_numpy(np.stack(rows)).to(dev)
        with autocast():
            c = seq_warmup_context(s, T, warm_steps, warm_start)
            loss = model(batch[:, :-1].reshape(-1, c), batch[:, 1:].reshape(-1, c), objective=True)
        for o in opts_all:
            o.zero_grad(set_to_none=True)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip if clip > 0 else float("inf"))
        step_lr = float(lr_at(s, total, warmup, lr, min_lr, opts.get("lr-schedule", "cosine"),
                              float(opts.get("decay-fraction", "0.2"))))
        for o in opts_all:
            for g in o.param_groups:
                g["lr"] = step_lr
            o.step()
        ours = loss.item()
        dt, elapsed = time.perf_counter() - t0, time.perf_counter() - t_start  # validation left out
        v = None
        if val_tokens is not None and (s + 1 == total or (eval_every > 0 and (s + 1) % eval_every == 0)):
            v = val_loss(model, val_tokens, val_T, val_B, world, int(opts["eval-batches"]),
                         dev, autocast)
        if out:
            out.write(json.dumps({"step": s + 1, "loss": ours, "lr": step_lr, "grad_norm": norm.item(),
                                  "tokens_seen": tokens_seen, "tokens_per_s": G * T / dt,
                                  "elapsed_s": elapsed}) + "\n")
            if v is not None:
                out.write(json.dumps({"step": s + 1, "val_loss": v}) + "\n")
            out.flush()
        if v is not None and s + 1 in theirs_val:
            ref = theirs_val[s + 1]
            diff = abs(v - ref) / abs(ref)
            worst_val, vals_compared = max(worst_val, diff), vals_compared + 1
            failures += not diff <= a.tolerance
            print(f"step {s + 1:5d} | torch val {v:.6f} | fsdptrain val {ref:.6f} | rel. diff {diff:.2e}"
                  f"{'  <-- over tolerance' if not diff <= a.tolerance else ''}", flush=True)
        if not a.metrics:
            if (s + 1 - start) % a.log_every == 0 or s + 1 == end:
                print(f"step {s + 1:5d} | torch {ours:.6f}", flush=True)
            continue
        ref = theirs.get(s + 1)
        diff = abs(ours - ref) / abs(ref) if ref is not None else float("nan")
        worst = max(worst, diff) if ref is not None else worst
        bad = ref is None or not diff <= a.tolerance
        failures += bad
        if bad or (s + 1 - start) % a.log_every == 0 or s + 1 == end:
            print(f"step {s + 1:5d} | torch {ours:.6f} | fsdptrain {ref if ref is not None else float('nan'):.6f} "
                  f"| rel. diff {diff:.2e}{'  <-- over tolerance' if bad else ''}", flush=True)
    if out:
        out.close()
    if a.metrics:
        vals = f", validation {worst_val:.2e} ({vals_compared} compared)" if vals_compared else ""
        print(f"worst relative difference {worst:.2e}{vals} over steps {start + 1}..{end} "
              f"(tolerance {a.tolerance:g}, {a.dtype} on {a.device})")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
