// The op table's cases for the fused cross-entropy (see op_table.h): losses
// and, in place over the logits, their gradient; padded vocabularies,
// ignored targets, and the head's extra terms (--logit-softcap, --z-loss).
#include <utility>

#include "tests/model/op_table/case_util.h"

namespace fsdp::test {
namespace {

// ---- cross-entropy ------------------------------------------------------------
// Targets are random in [0, V); with n > 20, rows 3 and 20 are ignored
// (targets -1 and -100) and must give loss 0 exactly. grad_scale 0 asks for
// losses only: the logits must come back untouched. The logits span [-6, 6),
// so a cap of 4 bends most of them.
OpCase cross_entropy_case(int n, int V, int Vp, float grad_scale, HeadLoss extra = {}) {
  OpCase c;
  c.op = "cross_entropy";
  c.shape = fmt("n=%d V=%d Vp=%d", n, V, Vp);
  c.variant =
      grad_scale == 0.0f ? "losses only" : fmt("losses and dlogits in place, scale %g", grad_scale);
  if (extra.softcap > 0) c.variant += fmt(", softcap %g", extra.softcap);
  if (extra.z_loss > 0) c.variant += fmt(", z-loss %g", extra.z_loss);
  c.dtypes = "logits bf16; targets i32; losses f32";
  // Read the logits once, and write the gradient over them when asked.
  c.fwd_bytes = (grad_scale == 0.0f ? 1.0 : 2.0) * double(n) * Vp * 2 + 8.0 * n;
  c.bind = [=](Env& e) {
    std::uniform_int_distribution<int> pick(0, V - 1);
    std::vector<int32_t> tg(static_cast<size_t>(n));
    for (auto& t : tg) t = pick(e.rng);
    const bool ignored = n > 20;
    if (ignored) {
      tg[3] = -1;
      tg[20] = -100;
    }
    const auto logits = e.rnd(int64_t(n) * Vp, -6.0f, 6.0f);
    Tensor lt = e.in(BF, logits), loss = e.out(F32, n), tt = e.tokens(tg);
    Ops& o = e.ops;
    Bound b;
    b.fwd = [=, &o] { o.cross_entropy(loss, lt, tt, n, V, Vp, grad_scale, extra); };
    b.fwd_checks = {vs_ref("cross_entropy losses (f32)", loss, kF32)};
    if (ignored) {
      b.fwd_checks.push_back(vs_host("loss of ignored target -1", loss.slice(3, 1), kBitwise, {0}));
      b.fwd_checks.push_back(
          vs_host("loss of ignored target -100", loss.slice(20, 1), kBitwise, {0}));
    }
    if (grad_scale == 0.0f)
      b.fwd_checks.push_back(vs_host("logits untouched (no gradient)", lt, kBitwise, logits));
    else
      b.fwd_checks.push_back(vs_ref("cross_entropy dlogits (in place)", lt, kRound));
    // The gradient of grad_scale * (the sum of the losses), written over the
    // logits by the forward itself.
    if (grad_scale != 0.0f) {
      b.loss = {{loss, {}, grad_scale}};
      b.grads = {{"dlogits", lt, lt}};
    }
    return b;
  };
  return c;
}

}  // namespace

FSDP_OP_FAMILY(
    "cross_entropy",
    [](std::vector<OpCase>& t) {
      // (V, Vp): unpadded, and a vocabulary padded as ModelConfig::padded_vocab
      // pads it (50257 -> 50304), whose padding columns must not count.
      for (auto [V, Vp] : {std::pair{50304, 50304}, std::pair{1003, 1003}, std::pair{50257, 50304},
                           std::pair{1003, 1024}})
        for (float scale : {0.0f, 1.0f / 64}) t.push_back(cross_entropy_case(37, V, Vp, scale));
      // The extra terms, apart and together, on the padded vocabulary: a z of
      // 1e-2 scales the softmax part of the gradient by 1 + 2 z lse, ~1.2 at lse ~ 10.
      for (HeadLoss e : {HeadLoss{4.0f, 0.0f}, HeadLoss{0.0f, 1e-2f}, HeadLoss{4.0f, 1e-2f}})
        for (float scale : {0.0f, 1.0f / 64})
          t.push_back(cross_entropy_case(37, 1003, 1024, scale, e));
    },
    [](std::vector<OpCase>& t, const ModelShape& m) {
      t.push_back(
          cross_entropy_case(m.M(), m.c.vocab_size, m.c.padded_vocab(), 1.0f / float(m.M())));
      // What the lever costs: modded-nanogpt's cap of 30 and PaLM's z of 1e-4.
      t.push_back(cross_entropy_case(m.M(), m.c.vocab_size, m.c.padded_vocab(), 1.0f / float(m.M()),
                                     {30.0f, 1e-4f}));
    });

}  // namespace fsdp::test
