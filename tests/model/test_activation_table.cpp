// The activation table (model/activation_table.cpp) against a count written
// from the architecture alone, so that a row with a wrong size, dtype or copy
// count fails here; a row left out fails the Transformer's own check that
// every BlockActs member is bound.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "model/config.h"
#include "model/cpu/cpu_ops.h"
#include "model/transformer.h"

namespace fsdp {
namespace {

// Bytes of activations and scratch for B x T tokens, counted by hand: per
// layer, h1, mid and h2 (d each), q|k|v, q and att (3 q_dim and 2 + 1 kv_dim)
// in the compute dtype, and in f32 the two norms' rstd, QK-norm's per head and
// attention's log-sum-exp; the MLP's a|b and s (3 d_ff; ReLU²'s a and s, 2
// d_ff); each kept per layer or once, as recompute says. Under fp8 the
// backward reads the four linear inputs' transposed codes (a byte each, kept
// as long as the input would be) instead of h1, h2 and s, which are kept once,
// but for h2 under --recompute mlp, which the recomputation reads.
// --value-residual adds the first block's values (kv_dim) and their
// gradient, once each; --unet-skips the gradient of each skip (d, n_layer / 2
// of them); --value-embeds K each table's rows and their gradient (kv_dim, K
// each) and the values before the mix of each of its 2K blocks (kv_dim; one
// buffer under --recompute block); --document-mask each token's document
// start (an int32 a token) and each document's first token (up to one a
// token, and the end).
int64_t counted_bytes(const ModelConfig& c, int64_t B, int64_t T, int64_t es, Recompute r,
                      bool fp8) {
  const int64_t N = B * T, d = c.d_model, qd = c.q_dim(), kvd = c.kv_dim(), ff = c.d_ff;
  const int64_t H = c.n_head, Hkv = c.n_kv_head, L = c.n_layer, qkv = qd + 2 * kvd;
  const int64_t up = c.relu2_mlp ? ff : 2 * ff;  // W1|W3's output, or W1's
  const int64_t attn_copies = r == Recompute::block ? 1 : L;
  const int64_t mlp_copies = r == Recompute::none ? L : 1;
  const int64_t h1_h2 = fp8 ? 0 : es * N * 2 * d, s = fp8 ? 0 : es * N * ff;
  const int64_t attn = es * N * (d + 3 * qd + 3 * kvd) + h1_h2 + 4 * N * (2 + 2 * H + Hkv);
  const int64_t mlp = es * N * up + s;
  const int64_t blocks = attn_copies * attn + mlp_copies * mlp;
  const int64_t fp8_once =
      fp8 ? es * N * (d + ff + (r == Recompute::mlp ? L : 1) * d) : 0;  // h1, s; h2
  // inputs, targets; document starts and first tokens
  const int64_t tokens = 4 * (2 * N + (c.document_mask ? 2 * N + 1 : 0));
  const int64_t stream = es * (L + 1) * N * d;  // entering each block, and after the last
  const int64_t head_rows = std::min<int64_t>(N, Transformer::kHeadRows);
  const int64_t head = es * (N * d + head_rows * c.padded_vocab()) + 4 * N * 2;
  const int64_t scratch = es * N * (2 * d + 3 * qd + 3 * kvd + ff + up);
  // one byte a code: the largest input row-major; every layer's inputs
  // transposed (h1 and att as attention's, h2 and s as the MLP's); the
  // largest weight (twice) and output gradient (twice); 2 scale slots and 4
  // per layer; the amaxes (4 per layer, 2 for gradients)
  const int64_t codes = N * std::max({d, qd, ff}) + attn_copies * N * (d + qd) +
                        mlp_copies * N * (d + ff) +
                        2 * (std::max({qkv, up, ff}) * d + N * std::max({qkv, up, d})) +
                        4 * (2 + 4 * L) * kFp8ScaleSlot + 4 * (4 * L + 2);
  const int64_t vres = c.value_residual ? es * N * kvd * 2 : 0;
  const int64_t unet = c.unet_skips ? es * N * d * (L / 2) : 0;
  const int64_t K = c.value_embeds;
  const int64_t ve =
      es * N * kvd * (2 * K + (r == Recompute::block ? std::min<int64_t>(K, 1) : 2 * K));
  // --value-residual-learned: each later block's values before its mix
  const int64_t vrl =
      c.value_residual_learned ? es * N * kvd * (r == Recompute::block ? 1 : L - 1) : 0;
  return tokens + stream + blocks + fp8_once + head + scratch + (fp8 ? codes : 0) + vres + unet +
         ve + vrl;
}

// A forward-only model (--eval-only): one block's set of activations that
// every layer overwrites (h1, h2 and s once each, FP8 or not), the two
// residual buffers that take turns, the head's, no backward scratch; under
// fp8 the row-major codes of the largest input and weight, and the scales and
// amaxes, none of the kept transposed codes or gradient codes; with
// --value-residual the first block's values (no gradient); with
// --unet-skips every block's input, as training keeps (the later blocks read
// the earlier ones'); with --value-embeds each table's rows (no gradient)
// and one buffer for the values before a mix, which every block overwrites
// (and one more for --value-residual-learned's); with --document-mask the
// documents, as training keeps them.
int64_t counted_forward_bytes(const ModelConfig& c, int64_t B, int64_t T, int64_t es, bool fp8) {
  const int64_t N = B * T, d = c.d_model, qd = c.q_dim(), kvd = c.kv_dim(), ff = c.d_ff;
  const int64_t H = c.n_head, Hkv = c.n_kv_head, L = c.n_layer, qkv = qd + 2 * kvd;
  const int64_t up = c.relu2_mlp ? ff : 2 * ff;
  const int64_t block = es * N * (3 * d + 3 * qd + 3 * kvd + up + ff) + 4 * N * (2 + 2 * H + Hkv);
  const int64_t tokens = 4 * (2 * N + (c.document_mask ? 2 * N + 1 : 0));
  const int64_t stream = es * (c.unet_skips ? L + 1 : 2) * N * d;
  const int64_t head_rows = std::min<int64_t>(N, Transformer::kHeadRows);
  const int64_t head = es * (N * d + head_rows * c.padded_vocab()) + 4 * N * 2;
  const int64_t codes = N * std::max({d, qd, ff}) + std::max({qkv, up, ff}) * d +
                        4 * (2 + 4 * L) * kFp8ScaleSlot + 4 * (4 * L + 2);
  const int64_t vres = c.value_residual ? es * N * kvd : 0;
  const int64_t ve = es * N * kvd * (c.value_embeds + std::min(c.value_embeds, 1));
  const int64_t vrl = c.value_residual_learned ? es * N * kvd : 0;
  return tokens + stream + block + head + (fp8 ? codes : 0) + vres + ve + vrl;
}

TEST(ActivationTable, ForwardOnlyKeepsOneLayersSet) {
  CpuOps ops;
  for (const char* name : {"tiny", "gpt-350m"})
    for (bool fp8 : {false, true}) {
      SCOPED_TRACE(testing::Message() << name << " fp8 " << fp8);
      const ModelConfig c = model_preset(name);
      // recompute does not matter: nothing is kept for a backward
      for (Recompute r : {Recompute::none, Recompute::block})
        EXPECT_EQ(Transformer::activation_bytes_for(c, 8, 1024, DType::bf16, r, fp8, 0,
                                                    ModelUse::forward_only),
                  counted_forward_bytes(c, 8, 1024, 2, fp8));
      if (std::string(name) != "tiny") continue;
      Transformer m(c, ops, 2, 16, Recompute::none, fp8, 0, ModelUse::forward_only);
      EXPECT_EQ(m.activation_bytes(), counted_forward_bytes(c, 2, 16, 4, fp8));
    }
  ModelConfig relu2 = model_preset("tiny"), vres = relu2, unet = relu2, ve = relu2;
  relu2.relu2_mlp = true;  // W1's output alone, no W3
  vres.value_residual = true;
  unet.unet_skips = true;
  ve.value_embeds = 1;
  ModelConfig vrl = vres, docs = unet;
  vrl.value_residual_learned = true;
  docs.document_mask = true;
  for (const ModelConfig& c : {relu2, vres, unet, ve, vrl, docs})
    for (bool fp8 : {false, true}) {
      Transformer m(c, ops, 2, 16, Recompute::none, fp8, 0, ModelUse::forward_only);
      EXPECT_EQ(m.activation_bytes(), counted_forward_bytes(c, 2, 16, 4, fp8))
          << "fp8 " << fp8 << " relu2 " << c.relu2_mlp << " value residual " << c.value_residual
          << " learned " << c.value_residual_learned << " unet " << c.unet_skips << " value embeds "
          << c.value_embeds << " document mask " << c.document_mask;
    }
  // gpt-350m at 8 x 1024 in bf16: 24 layers' saved activations and the
  // backward's scratch are most of training's
  const ModelConfig big = model_preset("gpt-350m");
  EXPECT_LT(8 * Transformer::activation_bytes_for(big, 8, 1024, DType::bf16, Recompute::none, false,
                                                  0, ModelUse::forward_only),
            Transformer::activation_bytes_for(big, 8, 1024, DType::bf16));
}

TEST(ActivationTable, MatchesTheArchitecturesCount) {
  ModelConfig relu2 = model_preset("gpt-350m");  // at SwiGLU's parameters: 1.5 d_ff
  relu2.relu2_mlp = true;
  relu2.d_ff = relu2.d_ff * 3 / 2;
  ModelConfig vres = model_preset("gpt-350m"), unet = vres, ve = vres;
  vres.value_residual = true;
  unet.unet_skips = true;
  ve.value_embeds = 3;
  ModelConfig vrl = vres, docs = model_preset("gpt-350m");
  vrl.value_residual_learned = true;
  docs.document_mask = true;
  for (const ModelConfig& c :
       {model_preset("tiny"), model_preset("gpt-350m"), relu2, vres, unet, ve, vrl, docs}) {
    const char* name = c.relu2_mlp                ? "gpt-350m relu2"
                       : c.document_mask          ? "gpt-350m document mask"
                       : c.value_residual_learned ? "gpt-350m learned value residual"
                       : c.value_residual         ? "gpt-350m value residual"
                       : c.unet_skips             ? "gpt-350m unet skips"
                       : c.value_embeds           ? "gpt-350m value embeds"
                                                  : c.name.c_str();
    for (Recompute r : {Recompute::none, Recompute::mlp, Recompute::block})
      for (bool fp8 : {false, true})
        for (int B : {1, 8}) {
          SCOPED_TRACE(testing::Message()
                       << name << " recompute " << int(r) << " fp8 " << fp8 << " B " << B);
          EXPECT_EQ(Transformer::activation_bytes_for(c, B, 1024, DType::bf16, r, fp8),
                    counted_bytes(c, B, 1024, 2, r, fp8));
        }
  }
}

// The model holds what the table says, in every recompute mode and with FP8
// codes: the constructor allocates the rows, and nothing besides.
TEST(ActivationTable, TheModelAllocatesItsRows) {
  ModelConfig c = model_preset("tiny");
  CpuOps ops;
  // SwiGLU, ReLU², value residual, U-net skips, value embeddings, the
  // learned value residual, the document mask
  for (int variant : {0, 1, 2, 3, 4, 5, 6}) {
    c.relu2_mlp = variant == 1;
    c.value_residual = variant == 2 || variant == 5;
    c.value_residual_learned = variant == 5;
    c.unet_skips = variant == 3;
    c.value_embeds = variant == 4 ? 1 : 0;
    c.document_mask = variant == 6;
    for (Recompute r : {Recompute::none, Recompute::mlp, Recompute::block})
      for (bool fp8 : {false, true}) {
        Transformer m(c, ops, 2, 16, r, fp8);
        EXPECT_EQ(m.activation_bytes(), counted_bytes(c, 2, 16, 4, r, fp8))
            << "variant " << variant;
      }
  }
}

}  // namespace
}  // namespace fsdp
