// Whole-model parity: one training forward and backward of the Transformer on
// CudaOps (bf16) against CpuOps (fp32) from the same bf16-rounded weights and
// the same tokens; and the same with the block GEMMs in FP8 on both sides.
//
// Tolerances: the loss within 1e-2 relative (bf16 activations through every
// layer move it by ~1e-3); each unit's gradient within 5e-2 relative L2
// (bf16 rounding compounds through the backward chain; a wrong op is off by
// order 1).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <utility>
#include <vector>

#include "model/transformer.h"
#include "tests/model/cuda/cuda_test_util.h"
#include "tests/model/cuda/device_weights.h"
#include "tests/model/full_weights.h"

namespace fsdp {
namespace {

constexpr double kLossTol = 1e-2, kGradTol = 5e-2;
// --precision fp8 (block GEMMs on e4m3 codes, cast from the same bf16
// weights on both sides, so the weight codes agree): the GPU's bf16
// activations sit ~2^-9 from the CPU's fp32 ones, which moves about one code
// in 16 across an e4m3 rounding boundary, each by one step (2^-4): ~1.5%
// relative L2 per cast operand, four casts per linear, compounding through
// the layers. The bars are set from that estimate before any GPU run; a
// wrong cast or GEMM is off by order 1.
constexpr double kFp8LossTol = 2e-2, kFp8GradTol = 1.5e-1;

// The host weights rounded to bf16 in place, so that both backends start from
// the same values; returns them per unit for the device copy.
std::vector<std::vector<float>> round_to_bf16(testing::FullWeights& host,
                                              const std::vector<UnitSpec>& units) {
  std::vector<std::vector<float>> weights;
  for (int u = 0; u < int(units.size()); ++u) {
    for (float& x : host.unit_weights(u)) x = test::round_bf16(x);
    weights.push_back(host.unit_weights(u));
  }
  return weights;
}

double train_pass(Transformer& m, UnitAccess& w, const std::vector<int32_t>& in,
                  const std::vector<int32_t>& tg, float scale) {
  m.set_batch(in.data(), tg.data(), scale);
  for (int u = 0; u < m.num_units(); ++u) m.forward(u, w, true);
  const double loss = m.loss_sum();
  for (int u = m.num_units() - 1; u >= 0; --u) m.backward(u, w);
  return loss;
}

// head_rows: the GPU model's LM-head chunk (0: Transformer::kHeadRows); the
// CPU reference always takes the head in one chunk and recomputes nothing.
// built (rows, columns), when given: the GPU model is built for that shape,
// trains a pass in it (so its buffers hold another shape's values), and is
// then set to B x T (Transformer::set_shape, --eval-seq-len's path).
// adjust, when given, changes the initial weights first (parameters that
// start where their path is the identity). document_end (--document-mask):
// the end-of-text id, written at `ends` in the inputs.
void check_model(ModelConfig cfg, int B, int T, bool fp8 = false, int head_rows = 0,
                 Recompute recompute = Recompute::none, std::pair<int, int> built = {0, 0},
                 const std::function<void(testing::FullWeights&)>& adjust = {},
                 int document_end = -1, const std::vector<int>& ends = {}) {
  FSDP_SKIP_WITHOUT_GPU();
  const auto units = model_units(cfg);
  testing::FullWeights host(units, 1234);
  if (adjust) adjust(host);
  const std::vector<std::vector<float>> weights = round_to_bf16(host, units);
  std::mt19937 rng(std::random_device{}());
  std::uniform_int_distribution<int> pick(0, cfg.vocab_size - 1);
  std::vector<int32_t> in(size_t(B) * T), tg(size_t(B) * T);
  for (auto& t : in) t = pick(rng);
  for (auto& t : tg) t = pick(rng);
  tg[1] = -1;  // an ignored target
  for (int i : ends) in[size_t(i)] = document_end;
  const float scale = 1.0f / float(B * T - 1);

  CpuOps cpu;
  Transformer cm(cfg, cpu, B, T, Recompute::none, fp8);
  cm.set_document_end(document_end);
  const double cpu_loss = train_pass(cm, host, in, tg, scale);

  CudaOps gpu;
  test::DeviceWeights dev(gpu, units, weights);
  const bool reshaped = built.first > 0;
  Transformer gm(cfg, gpu, reshaped ? built.first : B, reshaped ? built.second : T, recompute, fp8,
                 head_rows);
  gm.set_document_end(document_end);
  if (reshaped) {
    std::vector<int32_t> other(size_t(built.first) * built.second, 3);
    train_pass(gm, dev, other, other, 1.0f);
    dev.zero_grads();
    gm.set_shape(B, T);
  }
  const double gpu_loss = train_pass(gm, dev, in, tg, scale);

  std::printf("  loss%s: cpu %.6f gpu %.6f\n", fp8 ? " (fp8)" : "", cpu_loss, gpu_loss);
  EXPECT_TRUE(std::isfinite(gpu_loss));
  EXPECT_LE(std::abs(gpu_loss - cpu_loss), (fp8 ? kFp8LossTol : kLossTol) * std::abs(cpu_loss));
  for (int u = 0; u < int(units.size()); ++u)
    test::expect_rel(units[u].name.c_str(), test::download(gpu, dev.unit_grads(u)),
                     host.unit_grads(u), fp8 ? kFp8GradTol : kGradTol);
}

TEST(CudaModel, TinyMatchesCpu) {
  check_model(model_preset("tiny"), 2, 32);
}

TEST(CudaModel, Gpt350mShapedMatchesCpu) {
  // gpt-350m's widths, heads and vocabulary with two layers, so the CPU
  // reference stays quick.
  ModelConfig cfg = model_preset("gpt-350m");
  cfg.n_layer = 2;
  check_model(cfg, 1, 256);
}

// The head in chunks of 96 rows (96, 96, 64): row offsets into hf, dh and
// the losses that the one-chunk path never takes.
TEST(CudaModel, Gpt350mShapedHeadChunksMatchCpu) {
  ModelConfig cfg = model_preset("gpt-350m");
  cfg.n_layer = 2;
  check_model(cfg, 1, 256, false, 96);
}

// --recompute: the backward runs the block's (or the MLP's) forward again
// from the unit's input, on the GPU's own buffers and strided views.
TEST(CudaModel, Gpt350mShapedRecomputeMlpMatchesCpu) {
  ModelConfig cfg = model_preset("gpt-350m");
  cfg.n_layer = 2;
  check_model(cfg, 1, 256, false, 0, Recompute::mlp);
}

TEST(CudaModel, Gpt350mShapedRecomputeBlockMatchesCpu) {
  ModelConfig cfg = model_preset("gpt-350m");
  cfg.n_layer = 2;
  check_model(cfg, 1, 256, false, 0, Recompute::block);
}

// Heads set apart from d_model / n_head (--head-dim), as Qwen3-0.6B's: 16
// heads of 128 and 8 kv heads over d_model 1024, so q|k|v rows are 4096
// wide and Wo reads 2048; two layers, vocabulary 4096, to stay quick.
TEST(CudaModel, Qwen3ShapedHeadDimMatchesCpu) {
  ModelConfig cfg = model_preset("gpt-350m");
  cfg.n_layer = 2;
  cfg.vocab_size = 4096;
  cfg.n_kv_head = 8;
  cfg.head_size = 128;
  cfg.d_ff = 3072;
  check_model(cfg, 1, 128);
}

// Without QK-norm (--qk-norm false, as Llama): q and k only rotated, the
// block's later parameters two places earlier in its unit.
TEST(CudaModel, Gpt350mShapedNoQkNormMatchesCpu) {
  ModelConfig cfg = model_preset("gpt-350m");
  cfg.n_layer = 2;
  cfg.qk_norm = false;
  check_model(cfg, 1, 256);
}

// --logit-softcap and --z-loss: the head's loss through the cap and the z
// term, with the head in chunks (96, 96, 64). The initial logits have a std
// of ~0.6, so a cap of 1 bends them, and a z of 1e-2 scales the softmax's
// part of the gradient by 1 + 2 z lse ~ 1.2 (lse ~ log 50257).
TEST(CudaModel, Gpt350mShapedSoftcapZLossMatchesCpu) {
  ModelConfig cfg = model_preset("gpt-350m");
  cfg.n_layer = 2;
  cfg.logit_softcap = 1;
  cfg.z_loss = 1e-2f;
  check_model(cfg, 1, 256, false, 96);
}

// --relu2-mlp at SwiGLU's parameter count (d_ff 1.5 x 2816): W1 alone and
// relu(a)^2 in bf16, then under FP8 with the MLP recomputed (W1's output
// gradient cast by the amax relu2_backward writes; s's codes cast again).
TEST(CudaModel, Gpt350mShapedRelu2MlpMatchesCpu) {
  ModelConfig cfg = model_preset("gpt-350m");
  cfg.n_layer = 2;
  cfg.relu2_mlp = true;
  cfg.d_ff = 4224;
  check_model(cfg, 1, 256);
  check_model(cfg, 1, 256, true, 0, Recompute::mlp);
}

// --value-residual over 3 blocks (the first keeps its values, the middle one
// adds to their gradient, the last writes it), mixed in place inside the
// q|k|v GEMM's output; in bf16, then under FP8 with whole blocks recomputed
// (the first block's values must outlive the shared buffers).
TEST(CudaModel, Gpt350mShapedValueResidualMatchesCpu) {
  ModelConfig cfg = model_preset("gpt-350m");
  cfg.n_layer = 3;
  cfg.value_residual = true;
  check_model(cfg, 1, 256);
  check_model(cfg, 1, 256, true, 0, Recompute::block);
}

// --value-residual-learned over 3 blocks: the pair's mix through
// value_embed_mix with the first block's values as its table (the middle
// block adds to their gradient, the last sets it), the pairs moved from
// their (0.5, 0.5) start, where the mix is the fixed mean. In bf16, then
// under FP8 with whole blocks recomputed (the values before each mix made
// again).
TEST(CudaModel, Gpt350mShapedValueResidualLearnedMatchesCpu) {
  ModelConfig cfg = model_preset("gpt-350m");
  cfg.n_layer = 3;
  cfg.value_residual = cfg.value_residual_learned = true;
  const auto units = model_units(cfg);
  auto adjust = [&](testing::FullWeights& w) {
    for (int l = 0; l < cfg.n_layer; ++l) {
      const UnitSpec& b = units[size_t(l) + 1];
      ASSERT_EQ(b.params.back().name, "blocks." + std::to_string(l) + ".value_residual_mix");
      float* mix = w.unit_weights(l + 1).data() + b.offset_of(int(b.params.size()) - 1);
      mix[0] = 0.7f + 0.1f * float(l);
      mix[1] = 0.3f + 0.2f * float(l);
    }
  };
  check_model(cfg, 1, 256, false, 0, Recompute::none, {0, 0}, adjust);
  check_model(cfg, 1, 256, true, 0, Recompute::block, {0, 0}, adjust);
}

// --document-mask through cuDNN's ragged attention: 2 sequences of 128, the
// first with documents of 1, 2, 34 and 91 tokens (the last ends on the
// sequence's last token, so no document follows it), the second with 100
// and 28: 6 documents, run as 8 (two empty). In bf16, then under FP8 with
// whole blocks recomputed (the recomputed forward reads the same documents).
TEST(CudaModel, Gpt350mShapedDocumentMaskMatchesCpu) {
  ModelConfig cfg = model_preset("gpt-350m");
  cfg.n_layer = 2;
  cfg.document_mask = true;
  const int end = 50256;  // GPT-2's end-of-text
  const std::vector<int> ends = {0, 2, 36, 127, 128 + 99};
  check_model(cfg, 2, 128, false, 0, Recompute::none, {0, 0}, {}, end, ends);
  check_model(cfg, 2, 128, true, 0, Recompute::block, {0, 0}, {}, end, ends);
}

// --unet-skips over 5 blocks (blocks 4 and 3 take blocks 0's and 1's inputs;
// the middle one none), the scalars read on the device; in bf16, then under
// FP8 with whole blocks recomputed (the skip is added outside a block's
// recomputation, its gradient before the RMSNorm backward's amax).
TEST(CudaModel, Gpt350mShapedUnetSkipsMatchCpu) {
  ModelConfig cfg = model_preset("gpt-350m");
  cfg.n_layer = 5;
  cfg.unet_skips = true;
  check_model(cfg, 1, 256);
  check_model(cfg, 1, 256, true, 0, Recompute::block);
}

// --value-embeds 2 over 5 blocks (tables in blocks 0 and 3, 1 and 4, the
// middle block none; the later block's backward sets a table's gradient, the
// earlier one adds), mixed in place inside the q|k|v GEMM's output, the pair
// read on the device; tables filled and pairs moved from their (0; 1, 1)
// start, where the mix is the identity. In bf16, then under FP8 with whole
// blocks recomputed (the values before each mix made again).
TEST(CudaModel, Gpt350mShapedValueEmbedsMatchCpu) {
  ModelConfig cfg = model_preset("gpt-350m");
  cfg.n_layer = 5;
  cfg.value_embeds = 2;
  const auto units = model_units(cfg);
  auto adjust = [&](testing::FullWeights& w) {
    std::mt19937 rng(9);
    std::normal_distribution<float> normal(0.0f, 0.5f);
    for (int p = 1; p <= cfg.value_embeds; ++p)
      for (int64_t i = 0; i < units[0].params[size_t(p)].numel(); ++i)
        w.unit_weights(0)[size_t(units[0].offset_of(p) + i)] = normal(rng);
    for (int l = 0; l < cfg.n_layer; ++l) {
      const UnitSpec& b = units[size_t(l) + 1];
      float* mix = w.unit_weights(l + 1).data() + b.offset_of(int(b.params.size()) - 1);
      mix[0] = 0.8f - 0.1f * float(l);
      mix[1] = 0.6f + 0.15f * float(l);
    }
  };
  check_model(cfg, 1, 256, false, 0, Recompute::none, {0, 0}, adjust);
  check_model(cfg, 1, 256, true, 0, Recompute::block, {0, 0}, adjust);
}

// Llama 3.1's RoPE scaling (the model's rope table built once per shape):
// an original context of 16 puts tiny's 16-wide heads in all three bands.
TEST(CudaModel, TinyRopeScaledMatchesCpu) {
  ModelConfig cfg = model_preset("tiny");
  cfg.rope_scaling_factor = 8;
  cfg.rope_original_context = 16;
  check_model(cfg, 2, 32);
}

TEST(CudaModel, TinyFp8MatchesCpu) {
  check_model(model_preset("tiny"), 2, 32, true);
}

TEST(CudaModel, Gpt350mShapedFp8MatchesCpu) {
  ModelConfig cfg = model_preset("gpt-350m");
  cfg.n_layer = 2;
  check_model(cfg, 1, 256, true);
}

// FP8 with recomputation: the transposed input codes the backward reads were
// kept from the forward per layer (none), cast again with the MLP (mlp), or
// with the whole block (block); each must be the codes of its own layer.
TEST(CudaModel, Gpt350mShapedFp8RecomputeMlpMatchesCpu) {
  ModelConfig cfg = model_preset("gpt-350m");
  cfg.n_layer = 2;
  check_model(cfg, 1, 256, true, 0, Recompute::mlp);
}

TEST(CudaModel, Gpt350mShapedFp8RecomputeBlockMatchesCpu) {
  ModelConfig cfg = model_preset("gpt-350m");
  cfg.n_layer = 2;
  check_model(cfg, 1, 256, true, 0, Recompute::block);
}

// Validation at another context (--eval-seq-len) runs in the training
// activations: a longer context in the same rows (cuDNN's attention graph for
// the new shape, RoPE past the built context), and a shorter one in fewer.
TEST(CudaModel, TinyReshapedMatchesCpu) {
  check_model(model_preset("tiny"), 1, 64, false, 0, Recompute::none, {4, 16});
  check_model(model_preset("tiny"), 3, 8, false, 0, Recompute::none, {4, 16});
}

TEST(CudaModel, Gpt350mShapedReshapedMatchesCpu) {
  ModelConfig cfg = model_preset("gpt-350m");
  cfg.n_layer = 2;
  check_model(cfg, 1, 256, false, 0, Recompute::none, {2, 128});
}

// --seq-warmup-steps' steps: the training micro-batch's rows as many short
// sequences (B*T/c of the step's context c), after passes at the full shape;
// in bf16 and, with whole blocks recomputed, in FP8 (the recipe's).
TEST(CudaModel, Gpt350mShapedSeqWarmupPiecesMatchCpu) {
  ModelConfig cfg = model_preset("gpt-350m");
  cfg.n_layer = 2;
  check_model(cfg, 16, 32, false, 0, Recompute::none, {2, 256});
  check_model(cfg, 4, 128, true, 0, Recompute::block, {2, 256});
}

// --eval-only's model (ModelUse::forward_only): one set of block activations
// that every layer overwrites, two residual buffers taking turns, no
// backward buffers. Its loss equals a training model's forward on the same
// CudaOps bit for bit (the same kernels and plans, other buffers), and the
// CPU's within the loss tolerance.
void check_forward_only(ModelConfig cfg, int B, int T, bool fp8) {
  FSDP_SKIP_WITHOUT_GPU();
  const auto units = model_units(cfg);
  testing::FullWeights host(units, 99);
  const std::vector<std::vector<float>> weights = round_to_bf16(host, units);
  std::vector<int32_t> in(size_t(B) * T), tg(size_t(B) * T);
  for (size_t i = 0; i < in.size(); ++i) {
    in[i] = int32_t((i * 7919) % size_t(cfg.vocab_size));
    tg[i] = int32_t((i * 104729 + 3) % size_t(cfg.vocab_size));
  }
  auto forward = [&](Transformer& m, UnitAccess& w) {
    m.set_batch(in.data(), tg.data(), 0.0f);
    for (int u = 0; u < m.num_units(); ++u) m.forward(u, w, false);
    return m.loss_sum();
  };
  CpuOps cpu;
  Transformer cm(cfg, cpu, B, T, Recompute::none, fp8);
  const double cpu_loss = forward(cm, host);
  CudaOps gpu;
  test::DeviceWeights dev(gpu, units, weights);
  Transformer train(cfg, gpu, B, T, Recompute::none, fp8);
  Transformer eval(cfg, gpu, B, T, Recompute::none, fp8, 0, ModelUse::forward_only);
  const double train_loss = forward(train, dev), eval_loss = forward(eval, dev);
  std::printf("  forward-only loss%s: cpu %.6f gpu %.6f (training model's %.6f)\n",
              fp8 ? " (fp8)" : "", cpu_loss, eval_loss, train_loss);
  EXPECT_EQ(eval_loss, train_loss);
  EXPECT_LE(std::abs(eval_loss - cpu_loss), (fp8 ? kFp8LossTol : kLossTol) * std::abs(cpu_loss));
  EXPECT_LT(eval.activation_bytes(), train.activation_bytes());
}

TEST(CudaModel, Gpt350mShapedForwardOnlyMatchesTraining) {
  ModelConfig cfg = model_preset("gpt-350m");
  cfg.n_layer = 3;
  check_forward_only(cfg, 2, 256, false);
  check_forward_only(cfg, 2, 256, true);
}

// The rerun check (src/trainer/trainer_rerun.cpp) compares a step with its rerun:
// each unit's gradient sum of squares and the loss. On a GPU the attention
// backward sums in a varying order, so a rerun must stay well inside
// kRerunTolerance (1e-2 relative; here 1e-3, ten times inside) or every
// diverged step would be called a device fault; with --debug's deterministic
// attention (OpsCapabilities::bitwise_reruns) it must repeat bit for bit.
void check_rerun(bool deterministic) {
  FSDP_SKIP_WITHOUT_GPU();
  ModelConfig cfg = model_preset("gpt-350m");
  cfg.n_layer = 2;
  const int B = 2, T = 512;
  const auto units = model_units(cfg);
  testing::FullWeights host(units, 99);
  std::vector<std::vector<float>> weights;
  for (int u = 0; u < int(units.size()); ++u) weights.push_back(host.unit_weights(u));
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> pick(0, cfg.vocab_size - 1);
  std::vector<int32_t> in(size_t(B) * T), tg(size_t(B) * T);
  for (auto& t : in) t = pick(rng);
  for (auto& t : tg) t = pick(rng);
  CudaOpsOptions o;
  o.deterministic = deterministic;
  CudaOps gpu(o);
  ASSERT_EQ(gpu.capabilities().bitwise_reruns, deterministic);
  test::DeviceWeights dev(gpu, units, weights, /*f32_grads=*/true);  // as the engine's
  Transformer gm(cfg, gpu, B, T, Recompute::none, false);
  std::vector<double> loss;
  std::vector<std::vector<double>> sums(2);
  for (int pass = 0; pass < 2; ++pass) {
    dev.zero_grads();
    loss.push_back(train_pass(gm, dev, in, tg, 1.0f / float(B * T)));
    for (int u = 0; u < int(units.size()); ++u)
      sums[pass].push_back(gpu.sum_squares(dev.unit_grads(u)));
  }
  EXPECT_EQ(loss[0], loss[1]) << "the forward is deterministic";
  double worst = 0;
  for (size_t u = 0; u < sums[0].size(); ++u) {
    const double rel = std::abs(sums[0][u] - sums[1][u]) / std::max(sums[0][u], 1e-30);
    worst = std::max(worst, rel);
    if (deterministic)
      EXPECT_EQ(sums[0][u], sums[1][u]) << units[u].name;
    else
      EXPECT_LE(rel, 1e-3) << units[u].name;
  }
  std::printf("  rerun%s: loss %.9g, largest relative change of a unit's gradient sum %.3g\n",
              deterministic ? " (deterministic)" : "", loss[0], worst);
}

TEST(CudaModel, Gpt350mShapedRerunStaysInsideTheRerunTolerance) {
  check_rerun(false);
}

TEST(CudaModel, Gpt350mShapedDeterministicRerunIsBitwise) {
  check_rerun(true);
}

}  // namespace
}  // namespace fsdp
