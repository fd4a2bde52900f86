#!/usr/bin/env python3
"""Where a step's time goes, fsdptrain beside torchtitan, in the same categories.

Issue 63 asks, where fsdptrain falls short of its goals against torchtitan,
for the profile of both that says where the difference is. The two programs
name their work differently: fsdptrain's --profile-ops times each op at the
front door (linear_backward, attention, rmsnorm, adamw, ...) and torchtitan's
kernels under torch.profiler carry the libraries' and inductor's names
(nvjet_*, flash_*, triton_red_fused_*, multi_tensor_apply_kernel, ...). Both
are sorted here into one list of categories, per training step:

  gemm        the model's matrix products (forward and backward)
  attention   fused attention, forward and backward
  pointwise   norms, RoPE, SwiGLU, residual adds: inductor's fusions
  fp8_cast    scaling, casting and transposing for FP8 GEMMs
  loss_embed  the cross-entropy and the embedding
  optimizer   the optimizer step, gradient norm and clipping, Muon's iterations
  other       copies, fills and whatever matches nothing above

and the rest of a step is time no kernel ran (launch gaps, host work,
synchronisation): the step's wall time less its kernels.

  profile_compare.py --fsdp FSDP_OUT.txt --fsdp-step-ms 74.4 \\
                     --titan TITAN_PROFILE.json [--top 8]

FSDP_OUT.txt is fsdptrain's output with --profile-ops (its "op profile"
table); TITAN_PROFILE.json is what bench/cuda/titan_ttl.py --profile-steps
writes (its kernels, and the wall time of unprofiled steps). --fsdp-step-ms
is fsdptrain's step time (the --time-budget plan's, say); left out, with
--tokens-per-step, it is read from the last step line's tok/s in FSDP_OUT
(that run's own, with --profile-ops' stream-ordered marks: no syncs, a few
microseconds an op); with neither, the gap row is blank for it. On a CPU (titan_ttl's
rehearsal) torch.profiler sees aten ops instead of kernels; they sort into
the same categories.
"""
import argparse
import json
import re
import sys

CATEGORIES = ["gemm", "attention", "pointwise", "fp8_cast", "loss_embed", "optimizer", "other"]

# fsdptrain's op names (model/ops.h's front door), by their first word
FSDP_OPS = [
    (re.compile(r"^(linear|linear_add|linear_backward|linear_fp8|linear_backward_fp8)(\+r)?$"), "gemm"),
    (re.compile(r"^attention(_backward)?$"), "attention"),
    (re.compile(r"^(rmsnorm|norm_rope|rope|swiglu|add)"), "pointwise"),
    (re.compile(r"^(quantize_fp8|dequantize_fp8|transpose_fp8|amax|cast)"), "fp8_cast"),
    (re.compile(r"^(cross_entropy|embedding)"), "loss_embed"),
    (re.compile(r"^(adamw|muon_|newton_schulz|sum_squares)"), "optimizer"),
]

# Kernel (or, on a CPU, aten op) names as torch.profiler reports them. Order
# matters, the first match wins: an FP8 GEMM (sm90_xmma_gemm_e4m3...) is a
# GEMM; an inductor fusion is named after the ops it holds, so one with an
# amax or a clamp (float8's saturation) is FP8 scaling even if it also
# touches a norm, and a cast fused into a norm without either counts as
# pointwise.
TITAN_KERNELS = [
    (re.compile(r"multi_tensor_apply|fused_adam|adamw?_|_foreach_|foreach|clip_grad|lpnorm|"
                r"^aten::(_fused_adamw?|_foreach)", re.I), "optimizer"),
    (re.compile(r"flash|fmha|sdpa|attention|cudnn_generated|^aten::_scaled_dot_product", re.I), "attention"),
    (re.compile(r"gemm|nvjet|cutlass|xmma|cublas|Kernel2|splitK|^aten::(mm|addmm|bmm|_scaled_mm|matmul)$",
                re.I), "gemm"),
    (re.compile(r"amax|clamp|float8|_to_fp8", re.I), "fp8_cast"),
    (re.compile(r"nll_loss|log_softmax|cross_entropy|embedding|index_select|indexSelect|index_put|"
                r"gather|scatter_add|^aten::(embedding|nll|_log_softmax)", re.I), "loss_embed"),
    (re.compile(r"^triton_|elementwise|vectorized|reduce_kernel|rms_norm|layer_norm|silu|mul|add|"
                r"^aten::(mul|add|silu|rsqrt|pow|mean|_fused_rms_norm|cat|neg)", re.I), "pointwise"),
]


def fsdp_category(row):
    op = row.split(" ")[0]
    for pattern, cat in FSDP_OPS:
        if pattern.match(op):
            return cat
    return "other"


def titan_category(name):
    for pattern, cat in TITAN_KERNELS:
        if pattern.search(name):
            return cat
    return "other"


# "    12.367  14.4%    48.0  733.47 TFLOP/s  linear_backward 16384x2816x1024"
FSDP_ROW = re.compile(r"^\s*([0-9.]+)\s+([0-9.]+)%\s+([0-9.]+)\s+(?:[0-9.]+ (?:TFLOP/s|GB/s))?\s*([a-z][^\s]*)")


def read_fsdp(path):
    """fsdptrain's --profile-ops table: [(op and shape, ms a step)]; the line
    that folds the smallest rows together counts as "(small rows)"."""
    rows, seen = [], False
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if line.startswith("op profile"):
                seen = True
            elif seen and "(rows under" in line:
                rows.append(("(small rows)", float(line.split()[0])))
            elif seen and (m := FSDP_ROW.match(line)):
                rows.append((f"{m.group(4)} {line[m.end():].strip()}".strip(), float(m.group(1))))
    if not seen:
        sys.exit(f"profile_compare: error: {path} has no 'op profile' table (run fsdptrain with --profile-ops)")
    return rows


def step_ms_from_log(path, tokens_per_step):
    """The last step line's tok/s ("... | 231.3K tok/s | ETA ...") as ms a step."""
    rate = None
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = re.search(r"\|\s*([0-9.]+)([KM]?) tok/s", line)
            if m and line.startswith("step "):
                rate = float(m.group(1)) * {"": 1, "K": 1e3, "M": 1e6}[m.group(2)]
    return None if not rate else 1e3 * tokens_per_step / rate


def read_titan(path):
    try:
        with open(path, encoding="utf-8") as f:
            d = json.load(f)
        return [(k["name"], float(k["ms_per_step"])) for k in d["kernels"]], d
    except (OSError, ValueError, KeyError, TypeError) as e:
        sys.exit(f"profile_compare: error: {path}: not a titan_ttl.py --profile-steps file ({e})")


def by_category(rows, categorize):
    """rows: (name, ms a step); categorize sees the whole name (fsdptrain's
    rows: the op and its shape; fsdp_category reads the op, its first word)."""
    totals = {c: 0.0 for c in CATEGORIES}
    top = {c: [] for c in CATEGORIES}
    for name, ms in rows:
        c = "other" if name == "(small rows)" else categorize(name)
        totals[c] += ms
        top[c].append((ms, name))
    return totals, top


def fmt(x):
    return "" if x is None else f"{x:9.2f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fsdp", required=True, help="fsdptrain's output with --profile-ops")
    ap.add_argument("--fsdp-step-ms", type=float, help="fsdptrain's step time without the profiler")
    ap.add_argument("--tokens-per-step", type=int, help="batch x seq-len: the step time from FSDP_OUT's tok/s")
    ap.add_argument("--titan", required=True, help="titan_ttl.py --profile-out JSON")
    ap.add_argument("--top", type=int, default=3, help="largest names listed per category")
    a = ap.parse_args()

    f_rows = read_fsdp(a.fsdp)
    if a.fsdp_step_ms is None and a.tokens_per_step:
        a.fsdp_step_ms = step_ms_from_log(a.fsdp, a.tokens_per_step)
    t_rows, t = read_titan(a.titan)
    ft, ftop = by_category(f_rows, fsdp_category)
    tt, ttop = by_category(t_rows, titan_category)
    f_sum, t_sum = sum(ft.values()), sum(tt.values())
    f_gap = None if a.fsdp_step_ms is None else a.fsdp_step_ms - f_sum
    t_step = t.get("step_ms")
    t_gap = None if t_step is None else t_step - t_sum

    print(f"# ms a training step: fsdptrain (--profile-ops) beside {t.get('system', 'torchtitan')} "
          f"(torch.profiler, {t.get('device', '?')}, steps {t.get('steps', '?')})")
    print(f"{'category':<12}{'fsdptrain':>10}{'titan':>10}{'titan-fsdp':>12}")
    for c in CATEGORIES:
        print(f"{c:<12}{ft[c]:10.2f}{tt[c]:10.2f}{tt[c] - ft[c]:12.2f}")
    print(f"{'kernels':<12}{f_sum:10.2f}{t_sum:10.2f}{t_sum - f_sum:12.2f}")
    print(f"{'no kernel':<12}{fmt(f_gap):>10}{fmt(t_gap):>10}"
          f"{'' if None in (f_gap, t_gap) else f'{t_gap - f_gap:12.2f}'}")
    print(f"{'step':<12}{fmt(a.fsdp_step_ms):>10}{fmt(t_step):>10}"
          f"{'' if None in (a.fsdp_step_ms, t_step) else f'{t_step - a.fsdp_step_ms:12.2f}'}")
    for c in CATEGORIES:
        if not (ftop[c] or ttop[c]):
            continue
        print(f"## {c}")
        for who, top in (("fsdptrain", ftop[c]), ("titan", ttop[c])):
            for ms, name in sorted(top, reverse=True)[:a.top]:
                print(f"  {who:<10}{ms:8.2f}  {name[:100]}")
    if f_sum <= 0 or t_sum <= 0:
        sys.exit("profile_compare: error: a profile with no time in it")


if __name__ == "__main__":
    main()
