// Whole-model gradient check: for every parameter tensor of a small model, the
// analytic directional derivative <grad, v> along a random direction v must
// match the central difference of the loss. Catches a wrong or missing
// gradient path anywhere in the forward/backward wiring (the ops themselves
// are checked one by one in tests/model/cpu).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>

#include "model/cpu/cpu_ops.h"
#include "model/transformer.h"
#include "tests/model/full_weights.h"

namespace fsdp {
namespace {

ModelConfig small_config(bool tied) {
  ModelConfig c = testing::small_model_config();
  c.init_std = 0.2f;  // a less linear model makes a sharper test than the default 0.02
  c.tie_embeddings = tied;
  return c;
}

// --document-mask's end-of-text token in these tests.
constexpr int kDocEnd = 0;

struct ModelRun {
  ModelConfig cfg;
  CpuOps ops;
  Transformer model;
  testing::FullWeights w;
  std::vector<int32_t> in, tgt;
  ModelRun(const ModelConfig& c, int B, int T)
      : cfg(c), model(c, ops, B, T), w(model.units(), 7), in(B * T), tgt(B * T) {
    std::mt19937 rng(3);
    for (auto& x : in) x = int32_t(rng() % c.vocab_size);
    for (auto& x : tgt) x = int32_t(rng() % c.vocab_size);
    tgt[1] = -1;  // an ignored position must not contribute
    // --document-mask: every fourth token from the second ends a document.
    model.set_document_end(kDocEnd);
    if (c.document_mask)
      for (size_t i = 1; i < in.size(); i += 4) in[i] = kDocEnd;
  }
  // Sum of token losses; with grads, their gradient (loss_scale 1). A
  // training forward without grads gives the training objective (--z-loss's
  // term included), and leaves the head's gradient changed.
  double loss(bool with_grads, bool training = false) {
    model.set_batch(in.data(), tgt.data(), 1.0f);
    const int U = model.num_units();
    for (int u = 0; u < U; ++u) model.forward(u, w, with_grads || training);
    if (with_grads)
      for (int u = U - 1; u >= 0; --u) model.backward(u, w);
    return model.loss_sum();
  }
};

// Block `layer`'s parameter `name` (e.g. "unet_skip") in the run's weights.
float* block_param(ModelRun& r, int layer, const std::string& name) {
  const UnitSpec& spec = r.model.units()[size_t(layer) + 1];
  const std::string full = "blocks." + std::to_string(layer) + "." + name;
  for (int p = 0; p < int(spec.params.size()); ++p)
    if (spec.params[size_t(p)].name == full)
      return r.w.unit_weights(layer + 1).data() + spec.offset_of(p);
  ADD_FAILURE() << "no " << full;
  static float none[2];
  return none;
}

// The loss of r's batch at r's weights through a forward-only model
// (--eval-only's) of r's configuration.
double forward_only_loss(ModelRun& r, int B, int T) {
  Transformer eval(r.cfg, r.ops, B, T, Recompute::none, false, 0, ModelUse::forward_only);
  eval.set_document_end(kDocEnd);
  eval.set_batch(r.in.data(), r.tgt.data(), 1.0f);
  for (int u = 0; u < eval.num_units(); ++u) eval.forward(u, r.w, false);
  return eval.loss_sum();
}

// --unet-skips: every block's scalar set apart from its initial 1 (0.6, 0.7,
// ...), so that a skip's gradient missing its factor shows.
void set_unet_skips(ModelRun& r) {
  if (!r.cfg.unet_skips) return;
  for (int l = 0; l < r.cfg.n_layer; ++l) *block_param(r, l, "unet_skip") = 0.6f + 0.1f * float(l);
}

// --value-residual-learned: every block's pair set apart from its initial
// (0.5, 0.5) and from each other, so that a factor left out or swapped shows.
void set_value_residual_mix(ModelRun& r) {
  if (!r.cfg.value_residual_learned) return;
  for (int l = 0; l < r.cfg.n_layer; ++l) {
    float* mix = block_param(r, l, "value_residual_mix");
    mix[0] = 0.7f + 0.1f * float(l);
    mix[1] = 0.3f + 0.2f * float(l);
  }
}

// --value-embeds: the tables filled (they start at zero, where a path left
// out has a zero derivative too) and every block's pair set apart from its
// initial (1, 1), so that a factor left out shows.
void set_value_embeds(ModelRun& r) {
  const int K = r.cfg.value_embeds;
  if (K == 0) return;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  const UnitSpec& embed = r.model.units()[0];
  for (int j = 0; j < K; ++j) {
    const ParamSpec& t = embed.params[size_t(j) + 1];
    EXPECT_EQ(t.name, "embed.value." + std::to_string(j));
    float* w = r.w.unit_weights(0).data() + embed.offset_of(j + 1);
    for (int64_t i = 0; i < t.numel(); ++i) w[i] = 0.5f * normal(rng);
  }
  for (int l = 0; l < r.cfg.n_layer; ++l) {
    float* mix = block_param(r, l, "value_mix");
    mix[0] = 0.8f - 0.1f * float(l);
    mix[1] = 0.6f + 0.15f * float(l);
  }
}

void check_all_params(const ModelConfig& cfg, int B, int T, double h = 1e-2) {
  const bool tied = cfg.tie_embeddings;
  ModelRun r(cfg, B, T);
  set_unet_skips(r);
  set_value_embeds(r);
  set_value_residual_mix(r);
  r.w.zero_grads();
  r.loss(true);
  // Kept apart: with --z-loss the differences below run training forwards,
  // which add to the head's gradient.
  std::vector<std::vector<float>> grads;
  for (int u = 0; u < r.model.num_units(); ++u) grads.push_back(r.w.unit_grads(u));
  std::mt19937 rng(11);
  std::normal_distribution<float> normal;
  int checked = 0;
  for (int u = 0; u < r.model.num_units(); ++u) {
    const UnitSpec& spec = r.model.units()[u];
    for (int p = 0; p < int(spec.params.size()); ++p) {
      const int64_t off = spec.offset_of(p), n = spec.params[p].numel();
      float* w = r.w.unit_weights(u).data() + off;
      const float* g = grads[size_t(u)].data() + off;
      std::vector<float> v(n), saved(w, w + n);
      // The direction is scaled to the tensor's own size (0.02-scale
      // matrices, 1-scale gains), so h is a relative step for every tensor.
      double rms = 0;
      for (int64_t i = 0; i < n; ++i) rms += double(saved[i]) * saved[i];
      rms = std::sqrt(rms / n);
      double analytic = 0;
      for (int64_t i = 0; i < n; ++i) {
        v[i] = float(normal(rng) * rms);
        analytic += double(g[i]) * v[i];
      }
      // h: large enough that fp32 rounding of the loss stays small against
      // h * |<g, v>|, small enough that the curvature term is negligible.
      // Measured on `tiny` (h = 3e-2 .. 1e-3): 1e-2 sits between the two.
      auto shifted = [&](double s) {
        for (int64_t i = 0; i < n; ++i) w[i] = float(saved[i] + s * v[i]);
        return r.loss(false, cfg.z_loss > 0);
      };
      const double fd = (shifted(h) - shifted(-h)) / (2 * h);
      std::copy(saved.begin(), saved.end(), w);
      const double rel =
          std::abs(fd - analytic) / std::max({std::abs(fd), std::abs(analytic), 1e-3});
      // 2e-2: fp32 forward passes; a wrong or missing term is off by O(1).
      EXPECT_LT(rel, 2e-2) << spec.params[p].name << ": finite difference " << fd << " vs analytic "
                           << analytic;
      ++checked;
    }
  }
  const int per_block = (cfg.qk_norm ? 11 : 9) - (cfg.relu2_mlp ? 1 : 0) +
                        (cfg.unet_skips ? 1 : 0) + (cfg.value_embeds > 0 ? 1 : 0) +
                        (cfg.value_residual_learned ? 1 : 0);
  EXPECT_EQ(checked, cfg.n_layer * per_block + (tied ? 2 : 3) + cfg.value_embeds);
}

TEST(TransformerGradcheck, TiedEmbeddings) {
  check_all_params(small_config(true), 2, 6);
}
TEST(TransformerGradcheck, UntiedHead) {
  check_all_params(small_config(false), 2, 6);
}
// Heads wider than d_model / n_head (--head-dim, as Qwen3-0.6B's 16 x 128
// over 1024): q|k|v and Wo's inner width is n_head * head_dim, not d_model.
TEST(TransformerGradcheck, HeadDimApartFromWidth) {
  ModelConfig c = small_config(false);
  c.head_size = 6;  // 4 heads of 6 over d_model 16
  // q|k|v now widen the residual 16 -> 24, and at h = 1e-2 the finite
  // difference's curvature term reaches 2-4% on wq and the embedding; it
  // shrinks as h^2 (within 2e-2 at 3e-3 and 1e-3), as a wrong term would not.
  ASSERT_EQ(c.q_dim(), 24);
  check_all_params(c, 2, 6, 3e-3);
}
// Without QK-norm (Llama): RoPE alone on q and k, no q/k gains.
TEST(TransformerGradcheck, NoQkNorm) {
  ModelConfig c = small_config(true);
  c.qk_norm = false;
  check_all_params(c, 2, 6);
}
// --logit-softcap and --z-loss: the head's loss through the cap, and the
// training objective's z term (the differences taken of a training forward).
// A cap of 0.5 bends every logit of this model, whose logits reach ~1.
TEST(TransformerGradcheck, SoftcapAndZLoss) {
  ModelConfig c = small_config(true);
  c.logit_softcap = 0.5f;
  c.z_loss = 0.05f;
  check_all_params(c, 2, 6);
}
// --relu2-mlp: W1 and W2 around relu(a)^2, no W3; with and without QK-norm
// (both shift W2's index in the unit).
TEST(TransformerGradcheck, Relu2Mlp) {
  ModelConfig c = small_config(false);
  c.relu2_mlp = true;
  c.d_ff = 40;
  check_all_params(c, 2, 6);
  c.qk_norm = false;
  check_all_params(c, 2, 6);
}
// --value-residual over 3 blocks: the first keeps its values, the second
// (accumulating) and the last (writing) send half of their dv back to them.
TEST(TransformerGradcheck, ValueResidual) {
  ModelConfig c = small_config(false);
  c.value_residual = true;
  c.n_layer = 3;
  check_all_params(c, 2, 6);
}
// It changes the model: the same weights give another loss (a mix that
// silently did nothing would pass the gradient check).
TEST(Transformer, ValueResidualChangesTheLoss) {
  ModelConfig plain = small_config(true), vres = plain;
  vres.value_residual = true;
  ModelRun p(plain, 2, 6), v(vres, 2, 6);
  EXPECT_GT(std::abs(v.loss(false) - p.loss(false)), 1e-3);
}
// --value-residual-learned over 3 blocks (the second block adding to the
// first's dv, the last setting it; the first's pair never read: gradient and
// difference both zero), then over 4 with a value table (its mix after this
// one's), then with the U-net skips and no QK-norm (the pair's index moves
// with each). (Over 4 blocks with all three, each of h = 1e-2 and 3e-3 finds
// one tensor whose derivative along the direction is below 1e-3, the float32
// noise of the difference, off by 3-10%, and a different one at each h.)
TEST(TransformerGradcheck, ValueResidualLearned) {
  ModelConfig c = small_config(false);
  c.value_residual = c.value_residual_learned = true;
  c.n_layer = 3;
  check_all_params(c, 2, 6);
  c.n_layer = 4;
  c.value_embeds = 1;
  check_all_params(c, 2, 6);
  c.value_embeds = 0;
  c.unet_skips = true;
  c.qk_norm = false;
  check_all_params(c, 2, 6);
}
// At its start (every pair at (0.5, 0.5)) it is the fixed mean, bit for bit:
// the loss and every gradient but the pairs'. With the pairs set, another
// model, whose forward-only model (--eval-only's) gives the same loss bit for
// bit.
TEST(Transformer, ValueResidualLearnedStartsAsTheMean) {
  ModelConfig mean = small_config(true), learned = mean;
  mean.value_residual = learned.value_residual = learned.value_residual_learned = true;
  mean.n_layer = learned.n_layer = 3;
  ModelRun m(mean, 2, 6), l(learned, 2, 6);
  m.w.zero_grads();
  l.w.zero_grads();
  const double at_start = l.loss(true);
  EXPECT_EQ(at_start, m.loss(true));
  int compared = 0;
  for (int u = 0; u < m.model.num_units(); ++u) {
    const UnitSpec &ms = m.model.units()[size_t(u)], &ls = l.model.units()[size_t(u)];
    for (int p = 0; p < int(ms.params.size()); ++p, ++compared) {
      ASSERT_EQ(ms.params[size_t(p)].name, ls.params[size_t(p)].name);
      const auto mg = m.w.unit_grads(u).begin() + ms.offset_of(p);
      const auto lg = l.w.unit_grads(u).begin() + ls.offset_of(p);
      const int64_t n = ms.params[size_t(p)].numel();
      EXPECT_TRUE(std::equal(mg, mg + n, lg)) << ms.params[size_t(p)].name;
    }
  }
  EXPECT_GT(compared, 3 * 11);
  set_value_residual_mix(l);
  const double set = l.loss(false);
  EXPECT_GT(std::abs(set - at_start), 1e-3);
  EXPECT_EQ(forward_only_loss(l, 2, 6), set);
}
// --unet-skips over 4 blocks (blocks 3 and 2 take blocks 0's and 1's
// inputs) and over 3 (the middle block takes none); then with ReLU² and
// without QK-norm (the scalar's index moves with both). The earlier blocks'
// scalars are never read: gradient and difference both zero.
TEST(TransformerGradcheck, UnetSkips) {
  ModelConfig c = small_config(true);
  c.unet_skips = true;
  c.n_layer = 4;
  check_all_params(c, 2, 6);
  // (Untied at 4 blocks, blocks.1.attn.wq's derivative along the direction
  // is 2e-3, below the float32 noise of the difference of two losses at h =
  // 1e-2: off by 6%, and by 12% at 3e-3. Every other tensor agrees.)
  c.tie_embeddings = false;
  c.n_layer = 3;
  check_all_params(c, 2, 6);
  c.n_layer = 4;
  c.relu2_mlp = true;
  c.d_ff = 40;
  c.qk_norm = false;
  // At h = 1e-2 the curvature term reaches 3.5% on blocks.2.mlp.w1 and
  // grows as h^2 (17% at 3e-2); at 3e-3 it is inside 2e-2, as a wrong term
  // would not be.
  check_all_params(c, 2, 6, 3e-3);
}
// It changes the model, and its scalars matter: at 1 the loss differs from
// the plain model's, and it moves again when they move.
TEST(Transformer, UnetSkipsChangeTheLoss) {
  ModelConfig plain = small_config(true), unet = plain;
  unet.unet_skips = true;
  ModelRun p(plain, 2, 6), u(unet, 2, 6);
  const double at_one = u.loss(false);
  EXPECT_GT(std::abs(at_one - p.loss(false)), 1e-3);
  set_unet_skips(u);
  EXPECT_GT(std::abs(u.loss(false) - at_one), 1e-3);
}
// --value-embeds: 2 tables over 4 blocks, untied (each table in two blocks,
// the later one's backward setting its gradient and the earlier one's
// adding), then over 5 tied (the middle block mixes none: its pair's
// gradient and difference both zero), then 1 table over 3 blocks with the
// value residual, the U-net skips, ReLU² and no QK-norm (the pair's index
// moves with each; the value residual's mean comes first).
TEST(TransformerGradcheck, ValueEmbeds) {
  ModelConfig c = small_config(false);
  c.value_embeds = 2;
  c.n_layer = 4;
  // At h = 1e-2 the curvature term reaches 2.6% on blocks.0.attn.wo (24% at
  // 3e-2, 9x: it grows as h^2); at 3e-3 every tensor is inside 2e-2. (Tied
  // at 4 blocks, blocks.0.mlp.w3's derivative along the direction is 6e-3,
  // below the float32 noise of the difference at any h: 2.4% at 1e-2, 11% at
  // 1e-3.)
  check_all_params(c, 2, 6, 3e-3);
  c.tie_embeddings = true;
  c.n_layer = 5;
  check_all_params(c, 2, 6);
  c.value_embeds = 1;
  c.n_layer = 3;
  c.value_residual = true;
  c.unet_skips = true;
  c.relu2_mlp = true;
  c.d_ff = 40;
  c.qk_norm = false;
  check_all_params(c, 2, 6, 3e-3);
}
// At their start (zero tables, pairs at 1) the model is the one without them,
// bit for bit; with tables and pairs set, another, whose forward-only model
// (--eval-only's) gives the same loss bit for bit.
TEST(Transformer, ValueEmbedsStartAsTheModelWithout) {
  ModelConfig plain = small_config(true), ve = plain;
  ve.value_embeds = 1;
  ModelRun p(plain, 2, 6), v(ve, 2, 6);
  const double at_start = v.loss(false);
  EXPECT_EQ(at_start, p.loss(false));
  set_value_embeds(v);
  const double set = v.loss(false);
  EXPECT_GT(std::abs(set - at_start), 1e-3);
  EXPECT_EQ(forward_only_loss(v, 2, 6), set);
}
// The `tiny` preset itself, with its own (small) initialisation.
// --document-mask: documents of 1 to 4 tokens (ends at positions 1, 5, 9
// of rows of 7), untied; then over 4 blocks with U-net skips and a value
// table (whose paths cross blocks, not positions) at h 3e-3: at 1e-2 the
// curvature puts one tensor (blocks.0.mlp.w3) 7% off, at 3e-3 inside the
// bar, and without the mask it passes at either.
TEST(TransformerGradcheck, DocumentMask) {
  ModelConfig c = small_config(false);
  c.document_mask = true;
  check_all_params(c, 2, 7);
  c.n_layer = 4;
  c.unet_skips = true;
  c.value_embeds = 1;
  check_all_params(c, 2, 7, 3e-3);
}
// A document's losses do not depend on the tokens of the documents before it
// in its sequence (bit for bit), as they do without the mask; a forward-only
// model gives the training model's loss.
TEST(Transformer, DocumentMaskKeepsDocumentsApart) {
  ModelConfig plain = small_config(true), masked = plain;
  masked.document_mask = true;
  const int B = 2, T = 8, end = 3;  // each row: a document to position 3, another after it
  for (const ModelConfig& c : {plain, masked}) {
    ModelRun r(c, B, T);
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < T; ++t) {
        const int i = b * T + t;
        r.in[size_t(i)] = t == end ? kDocEnd : 1 + (i * 7) % (c.vocab_size - 1);
        r.tgt[size_t(i)] = t <= end ? -1 : (i * 5) % c.vocab_size;  // the second document's alone
      }
    const double before = r.loss(false);
    EXPECT_EQ(r.model.loss_count(), B * (T - end - 1));
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < end; ++t) r.in[size_t(b * T + t)] = 1 + (b + t * 3) % (c.vocab_size - 1);
    const double after = r.loss(false);
    if (c.document_mask) {
      EXPECT_EQ(after, before);
      EXPECT_EQ(forward_only_loss(r, B, T), after);
    } else {
      EXPECT_GT(std::abs(after - before), 1e-4);
    }
  }
}

TEST(TransformerGradcheck, TinyPreset) {
  check_all_params(model_preset("tiny"), 2, 16);
}

// --z-loss is training's objective only: validation (a forward without
// training) reports the cross-entropy, the same as without it, while the
// training forward's loss is larger by z lse^2 per token. A cap changes both.
TEST(Transformer, ZLossCountsInTrainingOnly) {
  ModelConfig plain = small_config(true), z = plain, cap = plain;
  z.z_loss = 0.05f;
  cap.logit_softcap = 0.5f;
  ModelRun p(plain, 2, 6), rz(z, 2, 6), rc(cap, 2, 6);
  EXPECT_EQ(rz.loss(false), p.loss(false));
  EXPECT_GT(rz.loss(false, true), p.loss(false, true) + 1e-3);
  EXPECT_EQ(p.loss(false, true), p.loss(false));
  EXPECT_NE(rc.loss(false), p.loss(false));
}

TEST(Transformer, IgnoredTargetsAreNotCounted) {
  ModelRun r(small_config(true), 2, 6);
  r.loss(false);
  EXPECT_EQ(r.model.loss_count(), 2 * 6 - 1);
}

TEST(Transformer, HeadReadsEmbeddingOnlyWhenTied) {
  CpuOps ops;
  Transformer tied(small_config(true), ops, 1, 4), untied(small_config(false), ops, 1, 4);
  const int last = tied.num_units() - 1;
  EXPECT_EQ(tied.units_read_by(last), (std::vector<int>{last, 0}));
  EXPECT_EQ(untied.units_read_by(last), (std::vector<int>{last}));
  EXPECT_EQ(tied.units_read_by(1), (std::vector<int>{1}));
}

}  // namespace
}  // namespace fsdp

namespace fsdp {
namespace {

// Recomputation must change memory, never results: the same ops on the same
// inputs give bitwise identical losses and gradients. Under fp8 each mode
// keeps the forward's transposed codes of the linear inputs for another span
// (per layer, or cast again by the recomputation).
// --value-residual's first-block values are kept apart from the buffers
// the recomputation shares, so its gradient is unchanged by it too; so are
// --unet-skips' (the skip is added outside what a block recomputes);
// --value-embeds' tables are looked up once, and the values before each mix,
// shared by the blocks under --recompute block, are made again.
TEST(Transformer, RecomputeIsBitwiseIdenticalAndSmaller) {
  ModelConfig vres = small_config(true), unet = small_config(true), ve = small_config(true);
  vres.value_residual = true;
  vres.n_layer = 3;
  unet.unet_skips = true;  // the skips' sources outlive the shared buffers
  unet.n_layer = 4;
  ve.value_embeds = 2;
  ve.n_layer = 4;
  ModelConfig vrl = vres;  // the values before each mix, shared as ve's are
  vrl.value_residual_learned = true;
  vrl.value_embeds = 1;
  ModelConfig docs = small_config(true);  // the document starts, shared by every layer
  docs.document_mask = true;
  CpuOps ops;
  for (const ModelConfig& c : {small_config(true), vres, unet, ve, vrl, docs})
    for (bool fp8 : {false, true}) {
      SCOPED_TRACE(::testing::Message()
                   << "fp8 " << fp8 << " value residual " << c.value_residual << " unet "
                   << c.unet_skips << " value embeds " << c.value_embeds << " learned "
                   << c.value_residual_learned << " document mask " << c.document_mask);
      std::vector<std::vector<float>> grads;
      std::vector<double> losses;
      std::vector<int64_t> bytes;
      for (Recompute r : {Recompute::none, Recompute::mlp, Recompute::block}) {
        Transformer m(c, ops, 2, 6, r, fp8);
        m.set_document_end(kDocEnd);
        EXPECT_EQ(m.activation_bytes(),
                  Transformer::activation_bytes_for(c, 2, 6, DType::f32, r, fp8));
        bytes.push_back(m.activation_bytes());
        testing::FullWeights w(m.units(), 7);
        // value tables away from their zero start, so that their rows count
        const UnitSpec& embed = m.units()[0];
        for (int p = 1; p < int(embed.params.size()); ++p)
          for (int64_t i = 0; i < embed.params[size_t(p)].numel(); ++i)
            w.unit_weights(0)[size_t(embed.offset_of(p) + i)] = 0.3f * std::sin(float(i + p));
        std::vector<int32_t> in(12), tgt(12);
        for (int rep = 0; rep < 2; ++rep) {  // twice: shared buffers must not leak between batches
          for (int i = 0; i < 12; ++i)
            in[i] = (i * 7 + rep) % c.vocab_size, tgt[i] = (i * 5 + 3) % c.vocab_size;
          in[2 + rep] = in[9] = kDocEnd;  // documents' ends (--document-mask)
          m.set_batch(in.data(), tgt.data(), 1.0f);
          for (int u = 0; u < m.num_units(); ++u) m.forward(u, w, true);
          for (int u = m.num_units() - 1; u >= 0; --u) m.backward(u, w);
        }
        losses.push_back(m.loss_sum());
        std::vector<float> all;
        for (int u = 0; u < m.num_units(); ++u)
          all.insert(all.end(), w.unit_grads(u).begin(), w.unit_grads(u).end());
        grads.push_back(all);
      }
      EXPECT_EQ(losses[0], losses[1]);
      EXPECT_EQ(losses[0], losses[2]);
      EXPECT_EQ(grads[0], grads[1]);
      EXPECT_EQ(grads[0], grads[2]);
      EXPECT_LT(bytes[1], bytes[0]);
      EXPECT_LT(bytes[2], bytes[1]);
    }
}

// Under fp8 the forward casts h1, h2 and s by the amaxes their RMSNorm and
// SwiGLU computed, and only attention's output after an amax pass, into
// codes for its GEMM and, while training, the transposed codes the backward
// keeps (Transformer::cast_input); the backward casts only the output
// gradients, by the amaxes the ops that wrote them computed (SwiGLU's dA|dB,
// RMSNorm's dres). Each must be the amax of the very tensor being cast, in
// every recompute mode and for a second batch, so the codes are what
// casting it afresh gives.
// The spy overrides the reference's do_ methods, so it sees the calls the
// model makes through the front door and none the reference makes to itself.
struct AmaxSpy : CpuOps {
  int passes = 0, q_casts = 0, t_casts = 0, t_only = 0;
  void do_amax(Tensor out, Tensor x) override {
    ++passes;
    CpuOps::do_amax(out, x);
  }
  void do_quantize_fp8_amax(Tensor q, Tensor scale_inv, Tensor src, Tensor amax,
                            Fp8 format) override {
    float own = 0.0f;
    CpuOps::do_amax(Tensor{&own, DType::f32, 1}, src);
    EXPECT_EQ(own, amax.f32()[0]) << "cast " << q_casts << " of " << src.numel;
    ++q_casts;
    CpuOps::do_quantize_fp8_amax(q, scale_inv, src, amax, format);
  }
  void do_quantize_fp8_t_amax(Tensor q, Tensor qt, Tensor scale_inv, Tensor src, Tensor amax,
                              int rows, int cols, Fp8 format) override {
    float own = 0.0f;
    CpuOps::do_amax(Tensor{&own, DType::f32, 1}, src);
    EXPECT_EQ(own, amax.f32()[0]) << "transposing cast " << t_casts << " [" << rows << ", " << cols
                                  << "]";
    ++t_casts;
    t_only += q.numel == 0;
    CpuOps::do_quantize_fp8_t_amax(q, qt, scale_inv, src, amax, rows, cols, format);
  }
};

TEST(Transformer, Fp8CastsByTheAmaxOfWhatItCasts) {
  const ModelConfig c = small_config(true);
  ASSERT_GE(c.n_layer, 2);
  for (Recompute r : {Recompute::none, Recompute::mlp, Recompute::block}) {
    SCOPED_TRACE(::testing::Message() << "recompute " << int(r));
    AmaxSpy ops;
    Transformer m(c, ops, 2, 6, r, /*fp8=*/true);
    testing::FullWeights w(m.units(), 7);
    std::vector<int32_t> in(12), tgt(12);
    for (int rep = 0; rep < 2; ++rep) {  // another batch: no amax may be left from the first
      for (int i = 0; i < 12; ++i)
        in[i] = (i * 7 + rep) % c.vocab_size, tgt[i] = (i * 5 + 3 * rep) % c.vocab_size;
      m.set_batch(in.data(), tgt.data(), 1.0f);
      for (int u = 0; u < m.num_units(); ++u) m.forward(u, w, true);
      for (int u = m.num_units() - 1; u >= 0; --u) m.backward(u, w);
    }
    // Per block and batch: the forward's 4 inputs h1, att, h2, s, each time
    // it runs (all 4 again under block; under mlp h2, for W1 and W3, and
    // s's transposed codes alone); the gradients dres (W2's and Wo's) and
    // dA|dB. Only dq|dk|dv, whose dv cuDNN writes, is cast by its own amax.
    const int runs = r == Recompute::block ? 2 : 1, mlp_again = r == Recompute::mlp ? 1 : 0;
    EXPECT_EQ(ops.t_casts, 2 * (4 * runs + 2 * mlp_again + 3) * c.n_layer);
    EXPECT_EQ(ops.t_only, 2 * mlp_again * c.n_layer);
    EXPECT_EQ(ops.q_casts, 0);  // training keeps the transposed codes of every input
    // the amax pass is attention's output's alone
    EXPECT_EQ(ops.passes, 2 * runs * c.n_layer);
    // An evaluation casts the 4 inputs for their GEMMs only.
    m.set_batch(in.data(), tgt.data(), 1.0f);
    const int t_casts = ops.t_casts;
    for (int u = 0; u < m.num_units(); ++u) m.forward(u, w, false);
    EXPECT_EQ(ops.q_casts, 4 * c.n_layer);
    EXPECT_EQ(ops.t_casts, t_casts);
  }
}

TEST(Transformer, RecomputeShrinksGpt350mActivations) {
  const ModelConfig c = model_preset("gpt-350m");
  const double none = Transformer::activation_bytes_for(c, 8, 1024, DType::bf16);
  const double mlp = Transformer::activation_bytes_for(c, 8, 1024, DType::bf16, Recompute::mlp);
  const double block = Transformer::activation_bytes_for(c, 8, 1024, DType::bf16, Recompute::block);
  // FP8 keeps a byte a code of each linear input for the backward, in place
  // of the compute-dtype copies of h1, h2 and s.
  const double fp8 = Transformer::activation_bytes_for(c, 8, 1024, DType::bf16, Recompute::none,
                                                       /*fp8=*/true);
  std::printf(
      "[ plan ] gpt-350m B=8 T=1024 bf16 activations: none %.2f GiB, mlp %.2f GiB, "
      "block %.2f GiB; fp8 none %.2f GiB\n",
      none / (1 << 30), mlp / (1 << 30), block / (1 << 30), fp8 / (1 << 30));
  EXPECT_LT(mlp, 0.6 * none);
  EXPECT_LT(block, 0.25 * none);
  EXPECT_LT(fp8, none);
}

}  // namespace
}  // namespace fsdp
