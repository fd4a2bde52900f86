// The decoder, unit by unit. forward(u)/backward(u) run one unit against the
// Ops backend; the caller (the FSDP engine) decides when weights are present.
//
// Training order for one micro-batch: set_batch, forward(0..U-1, training),
// backward(U-1..0). The last unit's training forward computes the loss and
// the head's gradients too: it runs the LM head and cross-entropy a chunk of
// rows at a time and sends each chunk's dL/dlogits through the head at once
// (into dh and the output weight's gradient), so logits exist for one chunk
// only. Its gradient buffers must therefore be there from that forward on;
// its backward is the final norm's.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "model/config.h"
#include "model/ops.h"
#include "model/params.h"
#include "model/unit_access.h"

namespace fsdp {

// Activation recomputation: what backward recomputes instead of keeping.
// mlp: the MLP's intermediates (SwiGLU's 3 x d_ff per token per layer, the
// largest share; ReLU²'s 2 x d_ff); block: everything inside a block but its input. Results are
// bitwise identical; recomputed FLOPs do not count as useful work.
enum class Recompute { none, mlp, block };

// What a model is built for. forward_only (--eval-only): evaluation and
// sampling, no backward ever, so the activations are one block's set (every
// layer's forward overwrites the last's), two residual buffers taking turns,
// and none of the backward's scratch; backward() and a training forward
// refuse. The losses are bitwise a training model's.
enum class ModelUse { train, forward_only };

class Transformer {
 public:
  // Activations are allocated once for micro-batches of batch_size x seq_len
  // rows; set_shape may run later micro-batches in another shape that fits.
  // fp8 (--precision fp8): the block linears run on FP8 codes with
  // per-tensor current scaling, all e4m3 (gradients too: see kFp8Grad in
  // transformer.cpp); the embedding, norms, attention and the head stay in
  // the compute dtype, as do the weights and gradients the engine holds.
  // head_rows: rows per LM-head chunk (0: kHeadRows).
  Transformer(const ModelConfig& config, Ops& ops, int batch_size, int seq_len,
              Recompute recompute = Recompute::none, bool fp8 = false, int head_rows = 0,
              ModelUse use = ModelUse::train);
  ~Transformer();
  Transformer(const Transformer&) = delete;
  Transformer& operator=(const Transformer&) = delete;

  const ModelConfig& config() const { return cfg_; }
  bool fp8() const { return fp8_; }
  ModelUse use() const { return use_; }
  const std::vector<UnitSpec>& units() const { return units_; }
  int num_units() const { return int(units_.size()); }
  // Units that must be gathered while unit u computes, u itself included: the
  // head also reads the embedding when they are tied.
  std::vector<int> units_read_by(int u) const;
  // The shape of the micro-batches from the next set_batch on: any batch x
  // seq_len (seq_len within the model's context) of at most the rows the
  // constructor allocated, so validation at another context than training's
  // (--eval-seq-len) reuses the training activations and costs no memory.
  void set_shape(int batch_size, int seq_len);
  int batch_size() const { return B_; }
  int seq_len() const { return T_; }
  // The rows the activations hold: the constructor's batch_size x seq_len.
  int64_t capacity_rows() const { return capacity_; }
  // Bytes of activations and scratch this model holds (for the memory plan).
  int64_t activation_bytes() const { return activation_bytes_; }
  // The same figure from shapes alone, without allocating.
  // At most linear in the tokens: the logits take one head chunk's rows.
  static int64_t activation_bytes_for(const ModelConfig& c, int batch_size, int seq_len,
                                      DType compute, Recompute recompute = Recompute::none,
                                      bool fp8 = false, int head_rows = 0,
                                      ModelUse use = ModelUse::train);
  // rows per head chunk for micro-batches of `rows` rows (head_rows 0: kHeadRows)
  static int64_t head_rows_for(int64_t rows, int head_rows);
  // The LM head's rows per chunk: 4096 keeps its GEMMs large (4096 rows by
  // the vocabulary) while gpt-350m's micro-batch of 16 x 1024 keeps a quarter
  // of its logits (412 MB in bf16, not 1.65 GB), which a larger micro-batch
  // can use instead.
  static constexpr int kHeadRows = 4096;

  // inputs/targets: host arrays of batch_size*seq_len token ids, the
  // current shape (targets < 0 are ignored). loss_scale multiplies d(sum of
  // token losses), e.g. 1/(global token count) so gradients come out averaged
  // over the global batch.
  // --document-mask: a document starts at a sequence's first token and after
  // each `inputs` token equal to eos_id. Set before the first set_batch of a
  // model with config().document_mask (the data's eos_id; -1: none).
  void set_batch(const int32_t* inputs, const int32_t* targets, float loss_scale);
  void set_document_end(int eos_id) { eos_id_ = eos_id; }
  void forward(int unit, UnitAccess& w, bool training);
  void backward(int unit, UnitAccess& w);
  // What unit u's forward (or backward) just wrote: its output activations,
  // or the gradient it passes down. For --debug's finite checks.
  Tensor output_of(int unit, bool backward) const;

  // Sum of token losses and number of counted targets of the last forward.
  double loss_sum();
  int64_t loss_count() const { return loss_count_; }
  // Sampling: the rows (b * seq_len + t) whose vocab_size logits the next
  // forward without training keeps, as f32 on the host, for logits_row (the
  // head's chunks overwrite each other's logits on the device). That forward
  // uses the request up; the one after keeps nothing unless asked again.
  // With --logit-softcap the rows hold the capped logits, the softmax's input.
  void keep_logits(std::vector<int64_t> rows);
  std::vector<float> logits_row(int64_t row) const;

 private:
  struct BlockActs {
    // qkv: the q|k|v GEMM's output [rows, q_dim + 2 kv_dim]; q and k are
    // QK-normed and rotated out of it, v is read from it in place. ab: the
    // W1|W3 GEMM's [rows, 2 d_ff], SwiGLU's a and b side by side (ReLU²:
    // W1's [rows, d_ff], mlp_up_dim()).
    Tensor h1, rstd1, qkv, q, k, q_rstd, k_rstd, att, lse, mid, h2, rstd2, ab, s;
    // Under fp8_ only: the transposed FP8 codes of the four linear inputs
    // (BlockInput order), cast in forward and kept for the backward's weight
    // gradients (cast_input).
    Tensor h1_t8, att_t8, h2_t8, s_t8;
  };
  static constexpr int kFp8OnlyMembers = 4;
  // One row of the activation table (model/activation_table.cpp): `copies`
  // buffers of `elements` each, bound to one member (`one`), to a vector
  // member a copy each (`each`), or to a member of every layer's BlockActs
  // (`layer`; layer l takes copy l % copies, so one copy is a set all layers
  // share: what backward recomputes; none, a buffer a forward-only model does
  // not need, left empty).
  struct ActivationBuffer {
    DType dtype;
    int64_t elements;
    int copies = 1;
    Tensor Transformer::*one = nullptr;
    std::vector<Tensor> Transformer::*each = nullptr;
    Tensor BlockActs::*layer = nullptr;
    int64_t bytes() const { return int64_t(dtype_size(dtype)) * elements * copies; }
  };
  // Every buffer the model allocates: the constructor allocates these and
  // nothing else, and activation_bytes_for sums them. rows = B*T, head_rows
  // already resolved (at most rows).
  static std::vector<ActivationBuffer> activation_table(const ModelConfig& c, int64_t rows,
                                                        int64_t head_rows, DType compute,
                                                        Recompute recompute, bool fp8,
                                                        ModelUse use);
  Tensor alloc(DType t, int64_t n);
  void block_forward(int layer, UnitAccess& w);
  void block_backward(int layer, UnitAccess& w);
  void head_forward(UnitAccess& w, bool training);
  void head_backward(UnitAccess& w);
  // Row `chunk_row` of a logits chunk, its vocab_size real columns as f32.
  std::vector<float> logits_to_host(Tensor logits, int64_t chunk_row);
  // The input [M, K] of one or more block linears (q, k and v read h1; W1
  // and W3 read h2) and, under fp8_, its codes, cast once by the amax in
  // input_amax: q, row-major, for the forward GEMM (in x8_ until the next
  // input is cast), and while training t, transposed, for the backward's
  // weight gradient, kept per layer with its scale (BlockActs' *_t8,
  // input_scale) so that the backward casts nothing. Casting both in one
  // pass costs a byte an element more than the forward's cast alone, and
  // saves the backward's second read of x (2 bytes) and its write.
  struct LinearInput {
    Tensor x;
    Fp8Tensor q, t;
  };
  enum BlockInput { kInH1, kInAtt, kInH2, kInS, kBlockInputs };
  // forward: the amax already holds max |x|, written by the op that made x
  // (RMSNorm, SwiGLU); forward_measure: x's maker (cuDNN's attention) gives
  // none, so an amax pass fills it first; t_only: the transposed codes
  // alone, for a recomputation that runs no forward GEMM on them (SwiGLU's
  // output under --recompute mlp).
  enum class InputCast { forward, forward_measure, t_only };
  LinearInput cast_input(int layer, BlockInput in, Tensor x, int M, int K, InputCast cast);
  // The backward's view of the same input: x and the transposed codes the
  // forward kept.
  LinearInput kept_input(int layer, BlockInput in, Tensor x, int M, int K);
  Tensor input_amax(int layer, BlockInput in) const {
    return fp8_ ? amax8_.slice(int64_t(layer) * kBlockInputs + in, 1) : Tensor{};
  }
  // W1|W3 and SwiGLU (or W1 and ReLU²), from h2 to s; returns s as W2's
  // input. again: the backward's recomputation (--recompute mlp), which needs
  // s's transposed codes only.
  LinearInput mlp_forward(int layer, UnitAccess& w, bool again);
  // A block's y = x W^T (+ r when given), W = parameter `param` of `unit`
  // (with the `count` - 1 packed behind it: q|k|v, W1|W3), and its
  // backward (dW into w.grad): the compute dtype's GEMMs, or FP8 ones under
  // fp8_, on the codes the engine gathered when it did.
  struct Weight {
    int param, count;
  };
  void block_linear(Tensor y, const LinearInput& in, UnitAccess& w, int unit, Weight W, int M,
                    int N, int K, Tensor r = {});
  // dy_amax: max |dy| when the op that made dy computed it, else empty.
  void block_linear_backward(Tensor dx, Tensor dy, const LinearInput& in, UnitAccess& w, int unit,
                             Weight W, int M, int N, int K, bool accumulate_dx,
                             Tensor dy_amax = {});

  ModelConfig cfg_;
  Ops& ops_;
  std::vector<UnitSpec> units_;
  int B_, T_;  // the current shape (set_shape)
  Recompute recompute_;
  bool fp8_;
  ModelUse use_;
  bool training_ = false;  // the current forward's: whether a backward follows
  int64_t N_;              // rows = B*T, at most capacity_
  int64_t capacity_;       // rows allocated: the constructor's B*T
  int64_t head_rows_;      // rows per LM-head chunk, at most capacity_
  float loss_scale_ = 0.0f;
  int64_t loss_count_ = 0;
  int64_t activation_bytes_ = 0;
  std::vector<Tensor> owned_;

  Tensor tokens_, targets_;
  // --document-mask: the micro-batch's documents (Ops::attention's docs),
  // found in the tokens by set_batch; doc_first_ holds up to N_ + 1.
  Tensor doc_start_, doc_first_;
  int eos_id_ = -1;
  DocumentsHost docs_host_;
  Documents docs() const {
    if (!cfg_.document_mask) return {};
    return {doc_start_.slice(0, N_), doc_first_.slice(0, int64_t(docs_host_.first.size()))};
  }
  std::vector<Tensor> res_;  // residual stream entering each block, and after the last
  // res_[i], the stream entering block i (i = n_layer: after the last); a
  // forward-only model keeps two buffers, which alternate (all of them under
  // --unet-skips, whose later blocks read the earlier ones' inputs). A block
  // that takes a U-net skip adds it in place: its res_ is its input.
  Tensor res(int64_t i) const { return res_[size_t(i) % res_.size()]; }
  std::vector<BlockActs> acts_;
  Tensor hf_, rstdf_, losses_;
  Tensor logits_;  // one head chunk's [head_rows_, padded vocab]
  std::vector<int64_t> keep_rows_;
  std::map<int64_t, std::vector<float>> kept_logits_;
  // Backward scratch, reused by every layer. dqkv_ and dab_ are laid out as
  // qkv and ab.
  Tensor dres_, dh_, dq_, dk_, dqkv_, datt_, ds_, dab_;
  // --value-residual: the first block's values [rows, kv_dim], packed, which
  // every later block mixes into its own (forward and recomputation), and
  // the gradient the later blocks send back to them (backward).
  Tensor v0_, dv0_;
  // --value-residual-learned: vr_in(layer), the values block layer > 0 had
  // before its mix, kept for its pair's gradient (one buffer that all share
  // under --recompute block, which makes them again, and in a forward-only
  // model).
  std::vector<Tensor> vr_in_;
  Tensor vr_in(int layer) const { return vr_in_[size_t(layer - 1) % vr_in_.size()]; }
  // --unet-skips: dskip_[i], what the skip from block i's input to block
  // n_layer-1-i's sends back (the skip's scalar times that block's input
  // gradient), written by the later block's backward and added by block i's.
  std::vector<Tensor> dskip_;
  // --value-embeds: ve_[j], table j looked up by the tokens [rows, kv_dim]
  // (unit 0's forward), and dve_[j], its gradient from the two blocks that
  // mix it in (written by the later block's backward, added to by the
  // earlier's, read by unit 0's). ve_in(layer): the values such a block had
  // before its mix, kept for the backward (one buffer that all share under
  // --recompute block, which makes them again, and in a forward-only model).
  std::vector<Tensor> ve_, dve_, ve_in_;
  Tensor ve_in(int layer) const {
    const int j = cfg_.value_embed_of(layer);
    return ve_in_[size_t(j + (layer < cfg_.value_embeds ? 0 : cfg_.value_embeds)) % ve_in_.size()];
  }
  // fp8_: the row-major codes of one linear's input (LinearInput::q), and
  // the codes of its weight and output gradient, each with its transpose for
  // backward; their inverse scales (scale8), then each layer's inputs'
  // (input_scale). w8_ serves only weights that arrive in the compute dtype
  // (UnitAccess::weight_fp8 empty).
  Tensor x8_, w8_, w8t_, g8_, g8t_, scales8_;
  Tensor amax8_;  // per layer, the amax of each BlockInput (input_amax); then GradAmax's
  // Output gradients whose max |.| the op that writes them also computes, so
  // their FP8 cast skips the amax pass: SwiGLU's dA|dB (ReLU²'s dA), and
  // dres_ (from each RMSNorm backward: W2's and Wo's dy). Each slot holds the
  // value of the latest write, read by the next cast. dqkv_ gets an amax
  // pass: its dv part comes from cuDNN, which computes none.
  enum GradAmax { kGradAB, kGradRes, kGradAmaxes };
  // Under fp8_ (else empty): the slot of g.
  Tensor grad_amax(GradAmax g) const {
    if (!fp8_) return {};
    return amax8_.slice(int64_t(kBlockInputs) * cfg_.n_layer + g, 1);
  }
  // The inverse scale of the weight or gradient codes, and of a layer's
  // input codes (q and t share it); a slot each.
  enum ScaleSlot { kScaleWeight, kScaleGrad, kFixedScales };
  Tensor scale8(ScaleSlot which) const { return scales8_.slice(which * kFp8ScaleSlot, 1); }
  Tensor input_scale(int layer, BlockInput in) const {
    return scales8_.slice((kFixedScales + int64_t(layer) * kBlockInputs + in) * kFp8ScaleSlot, 1);
  }
  // The member holding `in`'s kept transposed codes.
  static Tensor BlockActs::*kept_codes(BlockInput in);
};

}  // namespace fsdp
