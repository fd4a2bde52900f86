// The activation table: every buffer the Transformer allocates, with its
// dtype, size and how many copies the recompute mode keeps. The constructor
// allocates from it and activation_bytes_for (the memory plan) sums it, so a
// new buffer is one row here and cannot be left out of the plan.
#include <algorithm>

#include "model/transformer.h"

namespace fsdp {

std::vector<Transformer::ActivationBuffer> Transformer::activation_table(
    const ModelConfig& c, int64_t rows, int64_t head_rows, DType ct, Recompute recompute, bool fp8,
    ModelUse use) {
  const DType f32 = DType::f32, i32 = DType::i32, u8 = DType::u8;
  const int64_t N = rows, d = c.d_model, qd = c.q_dim(), kvd = c.kv_dim(), ff = c.d_ff;
  const int64_t qkv = qd + 2 * kvd, H = c.n_head, Hkv = c.n_kv_head, up = c.mlp_up_dim();
  const int L = c.n_layer;
  // A block's saved activations: a set per layer, or one set all layers share
  // for what backward recomputes (mlp: SwiGLU's; block: all of them). A
  // forward-only model keeps one set and no backward buffer (`back`: none of
  // a row that only the backward reads).
  const bool trains = use == ModelUse::train;
  const int attn = recompute == Recompute::block || !trains ? 1 : L;
  const int mlp = recompute == Recompute::none && trains ? L : 1;
  const int back = trains ? 1 : 0;
  const int vres = c.value_residual ? 1 : 0;
  // Under fp8 the backward reads the transposed codes its forward kept
  // (Transformer::cast_input), never h1, h2 or s themselves: their one copy
  // is scratch for the cast, but for h2 under --recompute mlp, which the
  // recomputation casts again.
  const int h1_copies = fp8 ? 1 : attn, s_copies = fp8 ? 1 : mlp;
  const int h2_copies = fp8 && recompute != Recompute::mlp ? 1 : attn;

  using T = Transformer;
  auto one = [](Tensor T::*m, DType t, int64_t n, int copies = 1) {
    return ActivationBuffer{t, n, copies, m};
  };
  auto block = [](Tensor BlockActs::*m, DType t, int64_t n, int copies) {
    return ActivationBuffer{t, n, copies, nullptr, nullptr, m};
  };
  std::vector<ActivationBuffer> table = {
      one(&T::tokens_, i32, N),
      one(&T::targets_, i32, N),
      // --document-mask: each token's document start, each document's first
      // token (none without it)
      one(&T::doc_start_, i32, N, c.document_mask ? 1 : 0),
      one(&T::doc_first_, i32, N + 1, c.document_mask ? 1 : 0),
      // the residual stream entering each block, and after the last (two
      // that take turns, forward-only: Transformer::res; all of them under
      // --unet-skips)
      ActivationBuffer{ct, N * d, trains || c.unet_skips ? L + 1 : 2, nullptr, &T::res_},
      // attention and the norms: qkv is the q|k|v GEMM's output, q and k
      // are normed and rotated out of it; the f32 rows are RMSNorm's,
      // QK-norm's (per head) and attention's log-sum-exp (per head)
      block(&BlockActs::h1, ct, N * d, h1_copies),
      block(&BlockActs::rstd1, f32, N, attn),
      block(&BlockActs::qkv, ct, N * qkv, attn),
      block(&BlockActs::q, ct, N * qd, attn),
      block(&BlockActs::k, ct, N * kvd, attn),
      block(&BlockActs::q_rstd, f32, N * H, attn),
      block(&BlockActs::k_rstd, f32, N * Hkv, attn),
      block(&BlockActs::att, ct, N * qd, attn),
      block(&BlockActs::lse, f32, N * H, attn),
      block(&BlockActs::mid, ct, N * d, attn),
      block(&BlockActs::h2, ct, N * d, h2_copies),
      block(&BlockActs::rstd2, f32, N, attn),
      // the MLP: W1|W3's output a|b (ReLU²: W1's a), and the activation's
      // s (3 d_ff a token for SwiGLU, the largest share)
      block(&BlockActs::ab, ct, N * up, mlp),
      block(&BlockActs::s, ct, N * ff, s_copies),
      // the head: the final norm's output and rstd, one chunk of logits (at
      // most head_rows rows), each token's loss
      one(&T::hf_, ct, N * d),
      one(&T::rstdf_, f32, N),
      one(&T::logits_, ct, head_rows * c.padded_vocab()),
      one(&T::losses_, f32, N),
      // backward scratch, reused by every layer
      one(&T::dres_, ct, N * d, back),
      one(&T::dh_, ct, N * d, back),
      one(&T::dq_, ct, N * qd, back),
      one(&T::dk_, ct, N * kvd, back),
      one(&T::dqkv_, ct, N * qkv, back),
      one(&T::datt_, ct, N * qd, back),
      one(&T::ds_, ct, N * ff, back),
      one(&T::dab_, ct, N * up, back),
      // --value-residual: the first block's values, and their gradient from
      // the later blocks
      one(&T::v0_, ct, N * kvd, vres),
      one(&T::dv0_, ct, N * kvd, vres * back),
      // --unet-skips: the gradient each skip sends back to its first block
      ActivationBuffer{ct, N * d, c.num_skips() * back, nullptr, &T::dskip_},
      // --value-embeds: each table looked up by the tokens, its gradient
      // from its two blocks, and the values each such block had before the
      // mix (for the pair's gradient; one buffer that the blocks share under
      // --recompute block, which makes them again, and forward-only, whose
      // blocks write them for no backward)
      ActivationBuffer{ct, N * kvd, c.value_embeds, nullptr, &T::ve_},
      ActivationBuffer{ct, N * kvd, c.value_embeds * back, nullptr, &T::dve_},
      ActivationBuffer{ct, N * kvd, attn == 1 ? std::min(c.value_embeds, 1) : 2 * c.value_embeds,
                       nullptr, &T::ve_in_},
      // --value-residual-learned: the values each later block had before its
      // mix (shared as ve_in_ is)
      ActivationBuffer{ct, N * kvd, c.value_residual_learned ? (attn == 1 ? 1 : L - 1) : 0, nullptr,
                       &T::vr_in_},
  };
  if (fp8) {
    // FP8 codes, one byte each: a linear's input, row-major for the forward
    // GEMM, and every layer's inputs transposed for the backward, kept as
    // long as the input itself would be (h2's and s's as the MLP's, which
    // --recompute mlp casts again); the weight and the output gradient, each
    // with its transpose, sized for the largest linear; the f32 inverse
    // scales (a slot each: weight, gradient, then each layer's inputs); each
    // layer's input amaxes, then GradAmax's.
    const int64_t in = std::max({d, qd, ff}), out = std::max({qkv, up, d});
    const int64_t weight = std::max({qkv, up, ff}) * d;  // the largest block matrix
    const std::vector<ActivationBuffer> codes = {
        one(&T::x8_, u8, N * in),
        block(&BlockActs::h1_t8, u8, N * d, attn * back),
        block(&BlockActs::att_t8, u8, N * qd, attn * back),
        block(&BlockActs::h2_t8, u8, N * d, mlp * back),
        block(&BlockActs::s_t8, u8, N * ff, mlp * back),
        one(&T::w8_, u8, weight),
        one(&T::w8t_, u8, weight, back),
        one(&T::g8_, u8, N * out, back),
        one(&T::g8t_, u8, N * out, back),
        one(&T::scales8_, f32, (kFixedScales + kBlockInputs * int64_t(L)) * kFp8ScaleSlot),
        one(&T::amax8_, f32, kBlockInputs * int64_t(L) + kGradAmaxes),
    };
    table.insert(table.end(), codes.begin(), codes.end());
  }
  return table;
}

int64_t Transformer::activation_bytes_for(const ModelConfig& c, int batch_size, int seq_len,
                                          DType compute, Recompute recompute, bool fp8,
                                          int head_rows, ModelUse use) {
  const int64_t rows = int64_t(batch_size) * seq_len;
  int64_t bytes = 0;
  for (const ActivationBuffer& b :
       activation_table(c, rows, head_rows_for(rows, head_rows), compute, recompute, fp8, use))
    bytes += b.bytes();
  return bytes;
}

}  // namespace fsdp
