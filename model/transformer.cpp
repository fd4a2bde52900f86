#include "model/transformer.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace fsdp {

namespace {
// The FP8 format of output gradients. E5M2 is the usual choice for range,
// but with per-tensor current scaling the range is there anyway, and its 2
// mantissa bits cost accuracy: `tiny` on the example, 300 steps (the demo):
// validation loss 2.1249 in fp32, 2.1337 with FP8 forward only, 2.2257 with
// E5M2 gradients, 2.1187 with E4M3 gradients (2026-11-23, CPU emulation).
constexpr Fp8 kFp8Grad = Fp8::e4m3;

// Parameter indices inside a block unit, in model_units() order (kUnetSkip
// only with --unet-skips, kValueMix with --value-embeds).
enum BlockParam {
  kAttnNorm,
  kWq,
  kWk,
  kWv,
  kQNorm,
  kKNorm,
  kWo,
  kMlpNorm,
  kW1,
  kW3,
  kW2,
  kUnetSkip,
  kValueMix,
  kValueResidualMix
};

// A block parameter's index in this model's unit: without QK-norm its two
// gains are absent and the later parameters move up by two; the ReLU² MLP
// has no W3, and W2 moves up by one more; without U-net skips the value
// mixes move up by one, and without value embeddings the value residual's
// by one more.
int at(const ModelConfig& c, BlockParam p) {
  FSDP_CHECK(!(c.relu2_mlp && p == kW3), "the ReLU² MLP has no W3");
  FSDP_CHECK(p != kUnetSkip || c.unet_skips, "no U-net skips");
  FSDP_CHECK(p != kValueMix || c.value_embeds > 0, "no value embeddings");
  FSDP_CHECK(p != kValueResidualMix || c.value_residual_learned, "no learned value residual");
  return p - (!c.qk_norm && p > kKNorm ? 2 : 0) - (c.relu2_mlp && p > kW3 ? 1 : 0) -
         (!c.unet_skips && p > kUnetSkip ? 1 : 0) - (c.value_embeds == 0 && p > kValueMix ? 1 : 0);
}

// The rest of a buffer from element `from`: a view of q, k or v inside the
// q|k|v GEMM's output (or of b inside W1|W3's), whose rows the ops step
// through by its row stride.
Tensor tail(Tensor t, int64_t from) {
  return t.slice(from, t.numel - from);
}

}  // namespace

int64_t Transformer::head_rows_for(int64_t rows, int head_rows) {
  FSDP_CHECK(head_rows >= 0, "head_rows ", head_rows);
  return std::min<int64_t>(rows, head_rows > 0 ? head_rows : kHeadRows);
}

Transformer::Transformer(const ModelConfig& config, Ops& ops, int batch_size, int seq_len,
                         Recompute recompute, bool fp8, int head_rows, ModelUse use)
    : cfg_(config),
      ops_(ops),
      units_(model_units(config)),
      B_(batch_size),
      T_(seq_len),
      recompute_(recompute),
      fp8_(fp8),
      use_(use) {
  validate_model(cfg_);
  FSDP_CHECK(seq_len >= 1 && seq_len <= cfg_.max_seq_len && batch_size >= 1);
  N_ = capacity_ = int64_t(B_) * T_;
  head_rows_ = head_rows_for(N_, head_rows);
  acts_.resize(cfg_.n_layer);
  int block_members = 0;  // BlockActs members bound by the table
  for (const ActivationBuffer& b :
       activation_table(cfg_, N_, head_rows_, ops_.compute_dtype(), recompute_, fp8_, use_)) {
    std::vector<Tensor> copies;
    for (int i = 0; i < b.copies; ++i) copies.push_back(alloc(b.dtype, b.elements));
    if (copies.empty()) continue;  // a backward buffer of a forward-only model: left empty
    if (b.one) this->*b.one = copies[0];
    if (b.each) this->*b.each = copies;
    if (b.layer) {
      ++block_members;
      for (int l = 0; l < cfg_.n_layer; ++l) acts_[l].*b.layer = copies[l % b.copies];
    }
  }
  // Every BlockActs member has its row; and alloc() ran for the table's rows
  // only, so the memory plan counts every byte the model holds.
  // (the kept FP8 codes only under fp8_ while training).
  const bool kept_codes = fp8_ && use_ == ModelUse::train;
  FSDP_CHECK(block_members ==
             int(sizeof(BlockActs) / sizeof(Tensor)) - (kept_codes ? 0 : kFp8OnlyMembers));
  FSDP_CHECK(activation_bytes_ == activation_bytes_for(cfg_, B_, T_, ops_.compute_dtype(),
                                                       recompute_, fp8_, int(head_rows_), use_));
}

Transformer::~Transformer() {
  for (Tensor t : owned_) ops_.free(t);
}

Tensor Transformer::alloc(DType t, int64_t n) {
  Tensor x = ops_.alloc(t, n);
  owned_.push_back(x);
  activation_bytes_ += int64_t(x.bytes());
  return x;
}

std::vector<int> Transformer::units_read_by(int u) const {
  if (u == num_units() - 1 && cfg_.tie_embeddings) return {u, 0};
  return {u};
}

void Transformer::set_shape(int batch_size, int seq_len) {
  FSDP_CHECK(batch_size >= 1 && seq_len >= 1 && seq_len <= cfg_.max_seq_len &&
                 int64_t(batch_size) * seq_len <= capacity_,
             "micro-batch ", batch_size, " x ", seq_len, " in a model of ", capacity_,
             " rows and context ", cfg_.max_seq_len);
  B_ = batch_size;
  T_ = seq_len;
  N_ = int64_t(B_) * T_;
}

void Transformer::set_batch(const int32_t* inputs, const int32_t* targets, float loss_scale) {
  ops_.to_device(tokens_.slice(0, N_), inputs);
  ops_.to_device(targets_.slice(0, N_), targets);
  if (cfg_.document_mask) {
    FSDP_CHECK(eos_id_ >= 0, "--document-mask: no end-of-text id (set_document_end)");
    find_documents(inputs, B_, T_, eos_id_, docs_host_);
    const Documents d = docs();
    ops_.to_device(d.start, docs_host_.start.data());
    ops_.to_device(d.first, docs_host_.first.data());
  }
  loss_scale_ = loss_scale;
  loss_count_ = 0;
  for (int64_t i = 0; i < N_; ++i) loss_count_ += targets[i] >= 0;
}

void Transformer::forward(int unit, UnitAccess& w, bool training) {
  FSDP_CHECK(!training || use_ == ModelUse::train, "a training forward of a forward-only model");
  training_ = training;
  if (unit == 0) {
    ops_.embedding(res(0), tokens_, w.weight(0, 0), int(N_), cfg_.d_model);
    // --value-embeds: the tables' rows for these tokens, kept for the blocks.
    for (int j = 0; j < cfg_.value_embeds; ++j)
      ops_.embedding(ve_[size_t(j)], tokens_, w.weight(0, 1 + j), int(N_), cfg_.kv_dim());
  } else if (unit <= cfg_.n_layer) {
    // --unet-skips: a later block's input gains its mirror block's, once per
    // forward, outside block_forward (which recomputation runs again).
    const int layer = unit - 1;
    if (cfg_.takes_skip(layer))
      ops_.skip_add(res(layer), res(cfg_.n_layer - 1 - layer), w.weight(unit, at(cfg_, kUnetSkip)),
                    N_ * cfg_.d_model);
    block_forward(layer, w);
  } else {
    head_forward(w, training);
  }
}

void Transformer::backward(int unit, UnitAccess& w) {
  FSDP_CHECK(use_ == ModelUse::train, "backward of a forward-only model");
  training_ = true;  // a recomputation's casts keep their transposed codes
  if (unit == 0) {
    ops_.embedding_backward(w.grad(0, 0), dres_, tokens_, int(N_), cfg_.d_model);
    for (int j = 0; j < cfg_.value_embeds; ++j)
      ops_.embedding_backward(w.grad(0, 1 + j), dve_[size_t(j)], tokens_, int(N_), cfg_.kv_dim());
  } else if (unit <= cfg_.n_layer) {
    block_backward(unit - 1, w);
  } else {
    head_backward(w);
  }
}

Tensor Transformer::BlockActs::*Transformer::kept_codes(BlockInput in) {
  switch (in) {
    case kInH1:
      return &BlockActs::h1_t8;
    case kInAtt:
      return &BlockActs::att_t8;
    case kInH2:
      return &BlockActs::h2_t8;
    default:
      return &BlockActs::s_t8;
  }
}

Transformer::LinearInput Transformer::cast_input(int layer, BlockInput in, Tensor x, int M, int K,
                                                 InputCast cast) {
  LinearInput li{x, {}, {}};
  if (!fp8_) return li;
  const int64_t n = int64_t(M) * K;
  const Tensor amax = input_amax(layer, in), scale = input_scale(layer, in);
  if (cast == InputCast::forward_measure) ops_.amax(amax, x.slice(0, n));
  if (cast != InputCast::t_only) li.q = {x8_.slice(0, n), scale, Fp8::e4m3};
  if (!training_) {  // an evaluation: no backward reads t
    FSDP_CHECK(cast != InputCast::t_only, "t_only cast outside training");
    ops_.quantize_fp8_amax(li.q.codes, scale, x.slice(0, n), amax, li.q.format);
    return li;
  }
  li.t = {(acts_[layer].*kept_codes(in)).slice(0, n), scale, Fp8::e4m3};
  ops_.quantize_fp8_t_amax(li.q.codes, li.t.codes, scale, x.slice(0, n), amax, M, K, li.t.format);
  return li;
}

Transformer::LinearInput Transformer::kept_input(int layer, BlockInput in, Tensor x, int M, int K) {
  if (!fp8_) return {x, {}, {}};
  const Fp8Tensor t{(acts_[layer].*kept_codes(in)).slice(0, int64_t(M) * K), input_scale(layer, in),
                    Fp8::e4m3};
  return {x, {}, t};
}

void Transformer::block_linear(Tensor y, const LinearInput& in, UnitAccess& w, int unit, Weight W,
                               int M, int N, int K, Tensor r) {
  if (!fp8_) {
    if (r.numel > 0)
      ops_.linear_add(y, in.x, w.weight(unit, W.param, W.count), r, M, N, K);
    else
      ops_.linear(y, in.x, w.weight(unit, W.param, W.count), M, N, K);
    return;
  }
  Fp8Tensor wq = w.weight_fp8(unit, W.param, W.count);  // codes gathered so, or cast here
  if (wq.codes.numel == 0) {
    wq = {w8_.slice(0, int64_t(N) * K), scale8(kScaleWeight), Fp8::e4m3};
    ops_.quantize_fp8(wq.codes, wq.scale_inv, w.weight(unit, W.param, W.count), wq.format);
  }
  ops_.linear_fp8(y, in.q, wq, r, M, N, K);
}

// The input's transposed codes are the ones its forward cast kept
// (cast_input); the output gradient is cast here.
void Transformer::block_linear_backward(Tensor dx, Tensor dy, const LinearInput& in, UnitAccess& w,
                                        int unit, Weight W, int M, int N, int K, bool accumulate_dx,
                                        Tensor dy_amax) {
  const Tensor dw = w.grad(unit, W.param, W.count);
  if (!fp8_) {
    ops_.linear_backward(dx, dw, dy, in.x, w.weight(unit, W.param, W.count), M, N, K,
                         accumulate_dx);
    return;
  }
  const int64_t gn = int64_t(M) * N;
  const Fp8Tensor g{g8_.slice(0, gn), scale8(kScaleGrad), kFp8Grad},
      gt{g8t_.slice(0, gn), scale8(kScaleGrad), kFp8Grad};
  if (dy_amax.numel > 0)  // made by the op that wrote dy
    ops_.quantize_fp8_t_amax(g.codes, gt.codes, g.scale_inv, dy.slice(0, gn), dy_amax, M, N,
                             kFp8Grad);
  else
    ops_.quantize_fp8_t(g.codes, gt.codes, g.scale_inv, dy.slice(0, gn), M, N, kFp8Grad);
  const Fp8Tensor given = w.weight_fp8(unit, W.param, W.count);
  Fp8Tensor wt{w8t_.slice(0, int64_t(N) * K), given.scale_inv, Fp8::e4m3};
  if (given.codes.numel > 0) {
    ops_.transpose_fp8(wt.codes, given.codes, N, K);
  } else {
    wt.scale_inv = scale8(kScaleWeight);
    ops_.quantize_fp8_t(w8_.slice(0, int64_t(N) * K), wt.codes, wt.scale_inv,
                        w.weight(unit, W.param, W.count), N, K, Fp8::e4m3);
  }
  ops_.linear_backward_fp8(dx, dw, g, gt, in.t, wt, M, N, K, accumulate_dx);
}

void Transformer::block_forward(int layer, UnitAccess& w) {
  const int u = layer + 1, M = int(N_), d = cfg_.d_model, hd = cfg_.head_dim();
  const int H = cfg_.n_head, Hkv = cfg_.n_kv_head, ff = cfg_.d_ff;
  const int qd = cfg_.q_dim(), kvd = cfg_.kv_dim(), qkv = qd + 2 * kvd;
  const float eps = cfg_.norm_eps;
  BlockActs& a = acts_[layer];
  Tensor x = res(layer);
  auto amax = [&](BlockInput in) { return input_amax(layer, in); };

  ops_.rmsnorm(a.h1, a.rstd1, x, w.weight(u, kAttnNorm), M, d, eps, amax(kInH1));
  const LinearInput h1 = cast_input(layer, kInH1, a.h1, M, d, InputCast::forward);
  // Wq|Wk|Wv are packed into one matrix: one GEMM, whose output rows hold
  // q, k and v side by side (views with row stride qkv).
  block_linear(a.qkv, h1, w, u, {kWq, 3}, M, qkv, d);
  // --value-residual: the first block keeps its values; every later one
  // attends over the mean of its own and those (v in place in qkv), or
  // under --value-residual-learned over its pair's mix of them (keeping its
  // own for the pair's gradient).
  if (cfg_.value_residual_learned && layer > 0)
    ops_.value_embed_mix(tail(a.qkv, qd + kvd), vr_in(layer), v0_,
                         w.weight(u, at(cfg_, kValueResidualMix)), M, kvd, qkv);
  else if (cfg_.value_residual)
    ops_.value_residual(tail(a.qkv, qd + kvd), v0_, M, kvd, qkv, layer == 0);
  // --value-embeds: the first and the last blocks mix a table into their
  // values (after the value residual's mean where both are on).
  if (const int j = cfg_.value_embed_of(layer); j >= 0)
    ops_.value_embed_mix(tail(a.qkv, qd + kvd), ve_in(layer), ve_[size_t(j)],
                         w.weight(u, at(cfg_, kValueMix)), M, kvd, qkv);
  // QK-norm (RMSNorm over each head's vector), then the rotation, in one op;
  // without QK-norm (no gain given) the rotation alone.
  const bool qkn = cfg_.qk_norm;
  ops_.norm_rope(a.q, qkn ? a.q_rstd : Tensor{}, a.qkv, qkn ? w.weight(u, kQNorm) : Tensor{}, B_,
                 T_, H, hd, eps, cfg_.rope(), qkv);
  ops_.norm_rope(a.k, qkn ? a.k_rstd : Tensor{}, tail(a.qkv, qd),
                 qkn ? w.weight(u, kKNorm) : Tensor{}, B_, T_, Hkv, hd, eps, cfg_.rope(), qkv);
  ops_.attention(a.att, a.lse, a.q, a.k, tail(a.qkv, qd + kvd), B_, T_, H, Hkv, hd, qkv, docs());
  // The residual add rides in the GEMM's epilogue: mid = att Wo^T + x.
  const LinearInput att = cast_input(layer, kInAtt, a.att, M, qd, InputCast::forward_measure);
  block_linear(a.mid, att, w, u, {at(cfg_, kWo), 1}, M, d, qd, x);

  ops_.rmsnorm(a.h2, a.rstd2, a.mid, w.weight(u, at(cfg_, kMlpNorm)), M, d, eps, amax(kInH2));
  const LinearInput s = mlp_forward(layer, w, false);
  block_linear(res(layer + 1), s, w, u, {at(cfg_, kW2), 1}, M, d, ff, a.mid);
}

Transformer::LinearInput Transformer::mlp_forward(int layer, UnitAccess& w, bool again) {
  const int u = layer + 1, M = int(N_), d = cfg_.d_model, ff = cfg_.d_ff;
  BlockActs& a = acts_[layer];
  // h2's amax is the one its RMSNorm wrote, still in place when
  // recomputation re-runs only this part.
  const LinearInput h2 = cast_input(layer, kInH2, a.h2, M, d, InputCast::forward);
  if (cfg_.relu2_mlp) {
    block_linear(a.ab, h2, w, u, {at(cfg_, kW1), 1}, M, ff, d);
    ops_.relu2(a.s, a.ab, int64_t(M) * ff, input_amax(layer, kInS));
  } else {
    // W1|W3 are packed into one matrix: one GEMM, a and b side by side in its rows.
    block_linear(a.ab, h2, w, u, {at(cfg_, kW1), 2}, M, 2 * ff, d);
    ops_.swiglu(a.s, a.ab, tail(a.ab, ff), M, ff, 2 * ff, input_amax(layer, kInS));
  }
  return cast_input(layer, kInS, a.s, M, ff, again ? InputCast::t_only : InputCast::forward);
}

// dres_ holds dL/d(block output) on entry and dL/d(block input) on exit.
void Transformer::block_backward(int layer, UnitAccess& w) {
  // Recomputation rewrites the shared buffers with exactly the values the
  // forward computed (block_forward also rewrites res(layer + 1), which no
  // later step reads any more).
  if (recompute_ == Recompute::block) block_forward(layer, w);
  if (recompute_ == Recompute::mlp) mlp_forward(layer, w, true);
  const int u = layer + 1, M = int(N_), d = cfg_.d_model, hd = cfg_.head_dim();
  const int H = cfg_.n_head, Hkv = cfg_.n_kv_head, ff = cfg_.d_ff;
  const int qd = cfg_.q_dim(), kvd = cfg_.kv_dim(), qkv = qd + 2 * kvd;
  BlockActs& a = acts_[layer];
  auto input = [&](Tensor x, int K, BlockInput in) { return kept_input(layer, in, x, M, K); };

  // MLP branch; the residual passes dres_ through unchanged and the norm's
  // input gradient is added to it.
  block_linear_backward(ds_, dres_, input(a.s, ff, kInS), w, u, {at(cfg_, kW2), 1}, M, d, ff, false,
                        grad_amax(kGradRes));
  const bool relu2 = cfg_.relu2_mlp;
  if (relu2)
    ops_.relu2_backward(dab_, ds_, a.ab, int64_t(M) * ff, grad_amax(kGradAB));
  else
    ops_.swiglu_backward(dab_, tail(dab_, ff), ds_, a.ab, tail(a.ab, ff), M, ff, 2 * ff,
                         grad_amax(kGradAB));
  block_linear_backward(dh_, dab_, input(a.h2, d, kInH2), w, u, {at(cfg_, kW1), relu2 ? 1 : 2}, M,
                        int(cfg_.mlp_up_dim()), d, false, grad_amax(kGradAB));
  ops_.rmsnorm_backward(dres_, w.grad(u, at(cfg_, kMlpNorm)), dh_, a.mid,
                        w.weight(u, at(cfg_, kMlpNorm)), a.rstd2, M, d, true, grad_amax(kGradRes));

  // Attention branch: dq, dk and dv land in dqkv_ laid out as qkv, so Wq|Wk|Wv
  // take one GEMM backward too. dq_ and dk_ are scratch that nothing reads
  // afterwards, so norm_rope_backward may rotate them in place.
  block_linear_backward(datt_, dres_, input(a.att, qd, kInAtt), w, u, {at(cfg_, kWo), 1}, M, d, qd,
                        false, grad_amax(kGradRes));
  ops_.attention_backward(dq_, dk_, tail(dqkv_, qd + kvd), datt_, a.att, a.lse, a.q, a.k,
                          tail(a.qkv, qd + kvd), B_, T_, H, Hkv, hd, qkv, docs());
  // --value-embeds: the mix's transpose; a table's later block runs first
  // and sets its gradient, the earlier one adds to it.
  if (const int j = cfg_.value_embed_of(layer); j >= 0)
    ops_.value_embed_mix_backward(
        tail(dqkv_, qd + kvd), dve_[size_t(j)], w.grad(u, at(cfg_, kValueMix)), ve_in(layer),
        ve_[size_t(j)], w.weight(u, at(cfg_, kValueMix)), M, kvd, qkv, layer < cfg_.value_embeds);
  // --value-residual: a later block sends half its dv (learned: w1 dv) to
  // the first block's values (dv0_, set by the last block and added to on
  // the way down), which the first block adds to its own.
  const bool last = layer == cfg_.n_layer - 1;
  if (cfg_.value_residual_learned && layer > 0)
    ops_.value_embed_mix_backward(tail(dqkv_, qd + kvd), dv0_,
                                  w.grad(u, at(cfg_, kValueResidualMix)), vr_in(layer), v0_,
                                  w.weight(u, at(cfg_, kValueResidualMix)), M, kvd, qkv, !last);
  else if (cfg_.value_residual)
    ops_.value_residual_backward(tail(dqkv_, qd + kvd), dv0_, M, kvd, qkv, layer == 0,
                                 layer > 0 && !last);
  const bool qkn = cfg_.qk_norm;
  auto gain = [&](BlockParam p, bool grad) {
    return !qkn ? Tensor{} : grad ? w.grad(u, p) : w.weight(u, p);
  };
  ops_.norm_rope_backward(dqkv_, gain(kQNorm, true), dq_, a.qkv, gain(kQNorm, false),
                          qkn ? a.q_rstd : Tensor{}, B_, T_, H, hd, cfg_.rope(), {}, qkv);
  ops_.norm_rope_backward(tail(dqkv_, qd), gain(kKNorm, true), dk_, tail(a.qkv, qd),
                          gain(kKNorm, false), qkn ? a.k_rstd : Tensor{}, B_, T_, Hkv, hd,
                          cfg_.rope(), {}, qkv);
  block_linear_backward(dh_, dqkv_, input(a.h1, d, kInH1), w, u, {kWq, 3}, M, qkv, d, false);
  // --unet-skips: this block's input also reached a later block, whose
  // backward left that gradient in dskip_; added while Wo's backward no
  // longer reads dres_ and before the RMSNorm backward, whose amax of dres_
  // the next FP8 cast uses.
  const int64_t n = N_ * d;
  if (cfg_.sends_skip(layer)) ops_.add(dres_, dres_, dskip_[size_t(layer)], n);
  // Layer 0's dres_ goes to the embedding, which no FP8 cast reads.
  ops_.rmsnorm_backward(dres_, w.grad(u, kAttnNorm), dh_, res(layer), w.weight(u, kAttnNorm),
                        a.rstd1, M, d, true, layer > 0 ? grad_amax(kGradRes) : Tensor{});
  // A block that took a skip: dres_, the gradient of its input (the sum),
  // passes on unchanged to the block below and, scaled, to the mirror block.
  if (cfg_.takes_skip(layer)) {
    const int from = cfg_.n_layer - 1 - layer;
    ops_.skip_add_backward(dskip_[size_t(from)], w.grad(u, at(cfg_, kUnetSkip)), dres_, res(from),
                           w.weight(u, at(cfg_, kUnetSkip)), n);
  }
}

void Transformer::head_forward(UnitAccess& w, bool training) {
  const int u = num_units() - 1, d = cfg_.d_model;
  const int V = cfg_.vocab_size, Vp = cfg_.padded_vocab();
  const bool tied = cfg_.tie_embeddings;
  Tensor wout = tied ? w.weight(0, 0) : w.weight(u, 1);
  Tensor dwout = !training ? Tensor{} : tied ? w.grad(0, 0) : w.grad(u, 1);
  ops_.rmsnorm(hf_, rstdf_, res(cfg_.n_layer), w.weight(u, 0), int(N_), d, cfg_.norm_eps, {});
  // Kept rows serve the next forward without training only: an evaluation
  // after sampling copies nothing to the host.
  std::vector<int64_t> keep;
  if (!training) {
    keep.swap(keep_rows_);
    kept_logits_.clear();
  }
  for (int64_t r0 = 0; r0 < N_; r0 += head_rows_) {
    const int n = int(std::min(head_rows_, N_ - r0));
    const Tensor h = hf_.slice(r0 * d, int64_t(n) * d), logits = logits_.slice(0, int64_t(n) * Vp);
    ops_.linear(logits, h, wout, n, Vp, d);  // padding columns: zero rows of wout
    for (int64_t row : keep)
      if (row >= r0 && row < r0 + n) kept_logits_[row] = logits_to_host(logits, row - r0);
    // z-loss is training's objective only: validation reports cross-entropy.
    ops_.cross_entropy(losses_.slice(r0, n), logits, targets_.slice(r0, n), n, V, Vp,
                       training ? loss_scale_ : 0.0f,
                       {cfg_.logit_softcap, training ? cfg_.z_loss : 0.0f});
    // Training: the chunk's logits now hold dL/dlogits; through the head now,
    // before the next chunk overwrites them.
    if (training)
      ops_.linear_backward(dh_.slice(r0 * d, int64_t(n) * d), dwout, logits, h, wout, n, Vp, d,
                           false);
  }
}

// dh_ already holds the gradient the training forward sent through the head.
void Transformer::head_backward(UnitAccess& w) {
  const int u = num_units() - 1, M = int(N_), d = cfg_.d_model;
  ops_.rmsnorm_backward(dres_, w.grad(u, 0), dh_, res(cfg_.n_layer), w.weight(u, 0), rstdf_, M, d,
                        false, grad_amax(kGradRes));
}

Tensor Transformer::output_of(int unit, bool backward) const {
  // Rows past the current shape hold an earlier shape's values, or none.
  const int64_t d = cfg_.d_model;
  if (backward) return dres_.slice(0, N_ * d);  // the gradient flowing to the unit below
  if (unit == num_units() - 1) return losses_.slice(0, N_);
  return res(unit).slice(0, N_ * d);  // unit 0 writes res(0); block l (unit l+1) res(l+1)
}

bool all_finite(Ops& ops, Tensor t) {
  std::vector<uint32_t> host((t.bytes() + 3) / 4);
  ops.to_host(host.data(), t);
  if (t.dtype == DType::i32) return true;
  if (t.dtype == DType::bf16) {
    const auto* h = reinterpret_cast<const uint16_t*>(host.data());
    for (int64_t i = 0; i < t.numel; ++i)
      if ((h[i] & 0x7f80u) == 0x7f80u) return false;  // exponent all ones: inf or NaN
    return true;
  }
  for (int64_t i = 0; i < t.numel; ++i)
    if ((host[size_t(i)] & 0x7f800000u) == 0x7f800000u) return false;
  return true;
}

std::vector<float> Transformer::logits_to_host(Tensor logits, int64_t chunk_row) {
  const int64_t V = cfg_.vocab_size;
  const Tensor r = logits.slice(chunk_row * cfg_.padded_vocab(), V);
  std::vector<float> out(static_cast<size_t>(V));
  if (r.dtype == DType::f32) {
    ops_.to_host(out.data(), r);
  } else {
    std::vector<uint16_t> h(static_cast<size_t>(V));
    ops_.to_host(h.data(), r);
    for (size_t i = 0; i < h.size(); ++i) out[i] = bf16_to_f32(h[i]);
  }
  // What the softmax sees (cross_entropy caps the device's copy as it reads it).
  if (const double cap = cfg_.logit_softcap; cap > 0)
    for (float& z : out) z = float(cap * std::tanh(z / cap));
  return out;
}

void Transformer::keep_logits(std::vector<int64_t> rows) {
  for (int64_t row : rows) FSDP_CHECK(row >= 0 && row < N_, "logits row ", row, " of ", N_);
  keep_rows_ = std::move(rows);
}

std::vector<float> Transformer::logits_row(int64_t row) const {
  const auto it = kept_logits_.find(row);
  FSDP_CHECK(it != kept_logits_.end(), "logits row ", row,
             " was not kept: name it in keep_logits before the forward");
  return it->second;
}

double Transformer::loss_sum() {
  std::vector<float> host(static_cast<size_t>(N_));
  ops_.to_host(host.data(), losses_.slice(0, N_));
  double s = 0;
  for (float x : host) s += x;
  return s;
}

}  // namespace fsdp
