// The op interface: every kernel the model and the FSDP engine need, written
// once per backend (model/cpu: fp32 reference; model/cuda: bf16/fp8 on H100).
// The model's forward and backward are written against this and nothing else.
//
// Ops is the one front door (the non-virtual interface idiom, as in
// std::num_put::put and its do_put): each op is a plain method that checks its
// arguments once for every backend (model/op_checks.h), brackets the call
// with the profiling hook when one is set, and runs the backend's do_ method.
// A backend overrides the do_ methods only, and may trust what they receive:
// element types (activations in compute_dtype()), buffer sizes and the op's
// own rules were checked at the door. What only data can break (a token
// outside the vocabulary) the backend still checks. Calls a backend makes to
// itself go to its do_ methods directly: they are neither checked again nor
// seen by the hook.
//
// Conventions:
//  - Row-major. Activations are [rows, features]; a [B, T] batch has B*T rows.
//    q is [B, T, n_head, head_dim], k and v are [B, T, n_kv_head, head_dim].
//  - Linear weights are [out, in], as in torch.nn.Linear: y = x W^T.
//  - Weight gradients always accumulate (+=): the engine zeroes them once per
//    unit, and tied or shared weights sum naturally.
//  - Activation gradients overwrite unless the op takes accumulate_dx.
//  - Per-row statistics (rstd, lse) and losses are always f32.
//  - Calls may be asynchronous on a device; to_host() and sum_squares()
//    synchronise.
//  - An `_ld` argument (leading dimension, as in BLAS) is the distance in
//    elements between the starts of consecutive token rows of the tensors it
//    names, at least their row width: q, k and v are views into the output
//    of one q|k|v GEMM, SwiGLU's a and b into that of one W1|W3 GEMM. Such a
//    tensor starts at its first row; its numel reaches at least the end of
//    its last.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/fp8.h"
#include "model/documents.h"
#include "model/rope.h"
#include "model/tensor.h"

namespace fsdp {

// A run of one shard that AdamW updates, and its weight decay.
struct AdamWSpan {
  int64_t begin = 0, count = 0;
  float weight_decay = 0;
};
// A run of one shard that Muon updates (one matrix's slice there) and the
// factor its learning rate is scaled by (MuonLrAdjust, shard/optimizer_config.h).
struct MuonSpan {
  int64_t begin = 0, count = 0;
  float lr_scale = 1;
};
// One Newton-Schulz step's odd quintic: X <- a X + (b A + c A A) X, A = X X^T,
// which maps each singular value s to a s + b s^3 + c s^5.
struct NsQuintic {
  float a = 0, b = 0, c = 0;
};
// The Newton-Schulz iteration Muon orthogonalises with: every value given by
// the caller (shard/muon.h holds the published ones). X starts as the matrix
// over max(norm_scale |X|_F, eps); step s applies quintics[min(s, size - 1)],
// so one quintic is a fixed iteration and a list tunes each step.
struct NewtonSchulz {
  std::vector<NsQuintic> quintics;
  int steps = 0;
  float eps = 0;         // the Frobenius norm it divides by is at least this
  float norm_scale = 1;  // a margin above the norm (1: none)

  const NsQuintic& quintic(int step) const {
    return quintics[std::min(size_t(step), quintics.size() - 1)];
  }
};
// One step's values, every one given by the caller: the defaults of the
// hyperparameters are AdamWConfig's (shard/optimizer_config.h), not repeated here.
struct AdamWHyper {
  float lr = 0, beta1 = 0, beta2 = 0, eps = 0, grad_scale = 1;
  int step = 1;  // from 1, for bias correction
};
// What the LM head's loss adds to softmax cross-entropy (ModelConfig's
// logit_softcap and z_loss; both 0: plain cross-entropy, bit for bit).
// softcap c > 0: the softmax sees y = c tanh(z / c) for each logit z
// (Gemma 2, modded-nanogpt), so no logit leaves (-c, c). z_loss > 0: each
// row's loss gains z_loss * lse^2, lse = log sum exp y (PaLM), pulling the
// softmax's normaliser toward 1.
struct HeadLoss {
  float softcap = 0;
  float z_loss = 0;
};

// The elements a tensor of `rows` token rows of `width`, rows `ld` apart,
// must hold (the `_ld` convention above); ld below width is an error.
inline int64_t rows_need(int64_t rows, int64_t width, int64_t ld) {
  FSDP_CHECK(ld >= width, "row stride ", ld, " is below the row width ", width);
  return rows == 0 ? 0 : (rows - 1) * ld + width;
}

// FP8 codes (u8, from quantize_fp8 or quantize_fp8_t) with the inverse
// scale they were made with (f32[1]) and their format.
struct Fp8Tensor {
  Tensor codes, scale_inv;
  Fp8 format = Fp8::e4m3;
};

// Floats between the inverse scales of an array of them. cuBLASLt refuses an
// FP8 GEMM, with every algorithm, whose scale pointer is a float 4 bytes into
// a buffer (H100, cuBLASLt 13.1); a 256-byte slot each, as the operands get.
constexpr int64_t kFp8ScaleSlot = 64;

// What a backend can do, asked instead of comparing names.
struct OpsCapabilities {
  // Buffers live in host memory, which a node's ranks share (the memory
  // check then budgets the node, not one device).
  bool host_memory = false;
  // FP8 GEMMs run on FP8 tensor cores; false where they are emulated on
  // dequantized values (the CPU reference).
  bool native_fp8 = false;
  // The Muon optimizer's ops (muon_momentum, newton_schulz, muon_update,
  // row_mean_squares, normuon_scale).
  bool muon = false;
  // Dense bf16 peak FLOP/s of one device, the denominator of MFU; 0 where
  // MFU means nothing (the CPU).
  double peak_flops = 0;
  // The same ops on the same inputs give the same bits every time (the CPU;
  // a GPU with --debug's deterministic attention backward). Elsewhere a
  // rerun of a step matches only to rounding (src/trainer/trainer_rerun.cpp).
  bool bitwise_reruns = false;
};

// One op call as the profiling hook sees it: op and shape ("linear
// 8192x3072x1024"; the same GEMM in every layer shares a key) and its nominal
// work, FLOPs for GEMMs and attention, bytes touched for the memory-bound rest.
struct OpCall {
  std::string key;
  double flops = 0, bytes = 0;
};

// Called around every op that enters through the front door (model/op_profiler.h
// times them). begin() runs before the backend's do_ method, end() after it
// returned (on a device: after the work was enqueued).
class OpHook {
 public:
  virtual ~OpHook() = default;
  virtual void begin(const OpCall& call) = 0;
  virtual void end(const OpCall& call) = 0;
  // clear_marks() is about to recycle the timing marks: the last moment to
  // read any the hook took.
  virtual void settle() {}
};

class Ops {
 public:
  virtual ~Ops() = default;
  virtual const char* name() const = 0;
  virtual OpsCapabilities capabilities() const = 0;
  // The device stream all ops run on (a cudaStream_t), so communication can be
  // ordered against compute with events; nullptr for host backends.
  virtual void* stream() { return nullptr; }
  // Element type of activations and gathered weights on this backend.
  virtual DType compute_dtype() const = 0;
  // What this backend runs on and what it chose so far (device, library
  // versions, kernels/engines picked per shape), one line each, for the log
  // of a run; empty for the CPU reference.
  virtual std::vector<std::string> runtime_report() const { return {}; }
  // High-water mark of device memory allocated through alloc(), in bytes; 0
  // for host backends (the process's peak RSS tells their story).
  virtual int64_t peak_device_bytes() const { return 0; }
  // Bytes this process could still allocate through alloc() now: what the
  // GPU has free, or on the host the memory the kernel and this process's
  // cgroup would still grant. Set-up compares the memory plan against it
  // before allocating (src/policy/memory_check.h).
  virtual int64_t free_memory_bytes() const = 0;

  // Every op call from now on is reported to hook (nullptr: none). The hook
  // must outlive its use; it may call mark() and seconds().
  void set_hook(OpHook* hook) { hook_ = hook; }

  // ---- timing -----------------------------------------------------------------
  // Timestamps in stream order, for metrics that must time what the device
  // does, not when the host enqueued it (step time; compute stalled waiting
  // for a collective). mark() records one after all work enqueued so far and
  // returns its id; seconds(a, b) waits for mark b and returns the time from a
  // to b; ids stay valid until clear_marks(). The CPU computes synchronously,
  // so there a mark is simply the host clock.
  int mark() { return do_mark(); }
  double seconds(int a, int b) { return do_seconds(a, b); }
  void clear_marks();

  // ---- memory ---------------------------------------------------------------
  Tensor alloc(DType dtype, int64_t numel);
  void free(Tensor t);
  void zero(Tensor t);
  void copy(Tensor dst, Tensor src);  // same dtype and numel
  void to_device(Tensor dst, const void* host);
  void to_host(void* host, Tensor src);

  // ---- model ----------------------------------------------------------------
  // out[n, C] = wte[tokens[i], :]
  void embedding(Tensor out, Tensor tokens, Tensor wte, int n, int C);
  // dwte[tokens[i], :] += dout[i, :]
  void embedding_backward(Tensor dwte, Tensor dout, Tensor tokens, int n, int C);

  // y = x * rstd * g with rstd = 1/sqrt(mean(x^2) + eps), per row of length dim.
  // With amax (f32[1], or empty): amax[0] = max |y| of the values stored, as
  // Ops::amax would find it, for the FP8 forward to cast y by without another
  // pass over it.
  void rmsnorm(Tensor y, Tensor rstd, Tensor x, Tensor g, int rows, int dim, float eps,
               Tensor amax);
  // dx (=|+=) d/dx, dg += d/dg. With amax (f32[1], or empty): amax[0] =
  // max |dx| of the values stored (after the +=), as Ops::amax would find it,
  // for the FP8 backward to cast dx by without another pass over it.
  void rmsnorm_backward(Tensor dx, Tensor dg, Tensor dy, Tensor x, Tensor g, Tensor rstd, int rows,
                        int dim, bool accumulate_dx, Tensor amax);

  // y[M, N] = x[M, K] W[N, K]^T
  void linear(Tensor y, Tensor x, Tensor w, int M, int N, int K);
  // dx[M, K] (=|+=) dy W;  dw[N, K] += dy^T x.  dx may be empty (numel 0) to skip it.
  void linear_backward(Tensor dx, Tensor dw, Tensor dy, Tensor x, Tensor w, int M, int N, int K,
                       bool accumulate_dx);
  // y[M, N] = x[M, K] W[N, K]^T + r[M, N]: a linear layer and the residual add
  // after it, the residual added in the GEMM's epilogue (one rounding on a
  // GPU instead of two, and no second pass over y). r may alias y.
  void linear_add(Tensor y, Tensor x, Tensor w, Tensor r, int M, int N, int K);

  // In place on x[B, T, heads, head_dim], rotating the two halves of each head
  // (the "rotate_half" convention of Llama-style checkpoints) by angle
  // t * rope_inv_freq(i) for position t and pair i (model/rope.h).
  void rope(Tensor x, int B, int T, int heads, int head_dim, const Rope& rope);
  // In place on dx: the transpose (inverse) rotation.
  void rope_backward(Tensor dx, int B, int T, int heads, int head_dim, const Rope& rope);

  // QK-norm and RoPE in one op: for every head vector of x[B, T, heads,
  // head_dim], y = rope(rmsnorm(x) * g), i.e. rmsnorm over the B*T*heads rows
  // of width head_dim (rstd[B*T*heads], f32, kept for backward) followed by
  // rope on the result. x's token rows are x_ld apart; y is packed.
  void norm_rope(Tensor y, Tensor rstd, Tensor x, Tensor g, int B, int T, int heads, int head_dim,
                 float eps, const Rope& rope, int64_t x_ld);
  // dx = d/dx (overwritten), dg += d/dg, from dy = dL/dy and the forward's
  // rstd; dx's and x's token rows are x_ld apart, dy is packed. dy's contents
  // after the call are unspecified: a backend may rotate it back in place.
  // amax as in rmsnorm_backward: max |dx|.
  void norm_rope_backward(Tensor dx, Tensor dg, Tensor dy, Tensor x, Tensor g, Tensor rstd, int B,
                          int T, int heads, int head_dim, const Rope& rope, Tensor amax,
                          int64_t x_ld);

  // Causal grouped-query attention with scale 1/sqrt(head_dim). Query head h
  // reads kv head h / (n_head / n_kv_head). lse[B, n_head, T] keeps the
  // log-sum-exp of each softmax row for backward. v's token rows (and dv's)
  // are v_ld apart; every other tensor is packed. docs (empty: causal alone;
  // --document-mask): the documents packed into the sequences
  // (model/documents.h), so that row t attends to keys docs.start[t]..t only
  // (keys of a sequence's earlier documents get no weight and, backward, no
  // gradient).
  void attention(Tensor out, Tensor lse, Tensor q, Tensor k, Tensor v, int B, int T, int n_head,
                 int n_kv_head, int head_dim, int64_t v_ld, const Documents& docs = {});
  void attention_backward(Tensor dq, Tensor dk, Tensor dv, Tensor dout, Tensor out, Tensor lse,
                          Tensor q, Tensor k, Tensor v, int B, int T, int n_head, int n_kv_head,
                          int head_dim, int64_t v_ld, const Documents& docs = {});

  // s = silu(a) * b, elementwise over [rows, cols]: a's and b's rows ab_ld
  // apart (the halves of the W1|W3 GEMM's output), s packed. amax as in
  // rmsnorm: max |s|.
  void swiglu(Tensor s, Tensor a, Tensor b, int rows, int cols, int64_t ab_ld, Tensor amax);
  // da and db laid out as a and b, from ds (packed). With amax (f32[1], or
  // empty): amax[0] = the max of |da| and |db| over both, of the values
  // stored (Ops::amax's): what the FP8 backward casts the W1|W3 gradient by,
  // without another pass over it.
  void swiglu_backward(Tensor da, Tensor db, Tensor ds, Tensor a, Tensor b, int rows, int cols,
                       int64_t ab_ld, Tensor amax);
  // The ReLU² MLP's activation (ModelConfig::relu2_mlp): s = relu(a)^2 over
  // n packed elements (W1's output). amax as swiglu's: max |s|.
  void relu2(Tensor s, Tensor a, int64_t n, Tensor amax);
  // da = ds * 2 relu(a), all packed; da may alias a or ds. amax: max |da| as
  // stored, what the FP8 backward casts W1's output gradient by.
  void relu2_backward(Tensor da, Tensor ds, Tensor a, int64_t n, Tensor amax);

  // Value residual (ModelConfig::value_residual): v [rows, cols], rows v_ld
  // apart (the v part of the q|k|v GEMM's output), and the first block's
  // values v0 [rows, cols], packed. first: v0 = v, kept for the later blocks
  // (v unchanged); otherwise v = (v + v0) / 2 in place, what the block
  // attends over.
  void value_residual(Tensor v, Tensor v0, int rows, int cols, int64_t v_ld, bool first);
  // Its transpose, in place on dv (laid out as v): dL/d(what the block
  // attended over) on entry, dL/d(the block's own values) on exit. first:
  // dv += dv0, what every later block sent back to the first one's values;
  // otherwise dv0 = dv / 2 (+= with accumulate) and dv = dv / 2.
  void value_residual_backward(Tensor dv, Tensor dv0, int rows, int cols, int64_t v_ld, bool first,
                               bool accumulate);

  // A U-net skip (ModelConfig::unet_skips): x += w[0] s over n elements, in
  // place on the stream entering a later-half block; s is the stream that
  // entered its mirror block, w the block's learned scalar (a weight).
  void skip_add(Tensor x, Tensor s, Tensor w, int64_t n);
  // Its transpose, from dx = dL/d(the sum): ds = w[0] dx (overwritten: what
  // the mirror block's backward adds to its input's gradient) and
  // dw[0] += sum(dx s); dx passes on unchanged.
  void skip_add_backward(Tensor ds, Tensor dw, Tensor dx, Tensor s, Tensor w, int64_t n);

  // A value embedding's mix (ModelConfig::value_embeds), in place on v
  // [rows, cols] (rows v_ld apart: the v part of the q|k|v GEMM's output):
  // v_in = v (packed, kept for the backward), then v = w[0] v + w[1] e, e the
  // block's table looked up by the tokens (packed), w its pair (a weight).
  void value_embed_mix(Tensor v, Tensor v_in, Tensor e, Tensor w, int rows, int cols, int64_t v_ld);
  // Its transpose, from dv = dL/d(the mixed v), laid out as v: dv = w[0] dv
  // in place, de = w[1] dv (or += with accumulate: a table's second block),
  // dw[0] += sum(dv v_in), dw[1] += sum(dv e).
  void value_embed_mix_backward(Tensor dv, Tensor de, Tensor dw, Tensor v_in, Tensor e, Tensor w,
                                int rows, int cols, int64_t v_ld, bool accumulate);

  // y = a + b (y may alias a or b).
  void add(Tensor y, Tensor a, Tensor b, int64_t n);

  // Fused softmax cross-entropy over logits[n, Vp] whose first V columns are
  // the vocabulary; columns [V, Vp) are padding (ModelConfig::padded_vocab)
  // that take no part in the softmax. losses[i] = -log p[i, targets[i]].
  // With grad_scale != 0 the logits are overwritten in place by
  // grad_scale * (p - onehot(target)), and the padding by 0, so no second
  // [n, Vp] buffer ever exists. Targets < 0 are ignored (loss 0, gradient 0).
  // With `extra` (HeadLoss): p is the softmax of the capped logits, losses[i]
  // = lse - y[target] + z_loss lse^2, and the gradient written is that of
  // grad_scale * losses[i] with respect to the raw logits.
  void cross_entropy(Tensor losses, Tensor logits, Tensor targets, int n, int V, int Vp,
                     float grad_scale, HeadLoss extra = {});

  // ---- optimizer and engine -------------------------------------------------
  // dst = convert(src), any dtype pair of f32/bf16, n = dst.numel.
  void cast(Tensor dst, Tensor src);
  // dst(f32) += scale * src, n = dst.numel.
  void accumulate(Tensor dst, Tensor src, float scale);
  // sum of squares of an f32 tensor, in double, on the host.
  double sum_squares(Tensor x);
  // out[i] = sum of squares of xs[i] (f32 tensors), rounded to f32, left in
  // out (f32, where ops computes) without waiting: reading out once then gives
  // every unit's share of the gradient norm for one synchronisation, not one
  // per unit. The reference is sum_squares per tensor.
  void sum_squares_each(Tensor out, const std::vector<Tensor>& xs);
  // The optimizer step of one f32 shard in one pass (one launch on a GPU):
  // decoupled-weight-decay Adam over `spans` (sorted, disjoint, each with its
  // own decay; elements outside them keep their values: the engine's padding,
  // which stays zero), grad multiplied by h.grad_scale (clipping) first; then
  // over the whole shard `send` = the updated param in send's dtype unless
  // send is empty (the all-gather's copy), and grad = 0 when clear_grad.
  void adamw(Tensor param, Tensor grad, Tensor exp_avg, Tensor exp_avg_sq, Tensor send,
             const std::vector<AdamWSpan>& spans, const AdamWHyper& h, bool clear_grad);

  // Muon's momentum over `spans` of one f32 shard (lr_scale unused; elements
  // outside the spans keep their values): g = grad * grad_scale, buf = buf +
  // (1 - momentum) (g - buf), then grad = g + momentum (buf - g) with
  // nesterov, else buf: the direction Newton-Schulz takes, in place of the
  // gradient.
  void muon_momentum(Tensor grad, Tensor buf, const std::vector<MuonSpan>& spans, float momentum,
                     bool nesterov, float grad_scale);
  // outs[i][rows, cols] = Newton-Schulz of xs[i][rows, cols] for a batch of
  // matrices of one shape (f32, row-major; no out aliases an x or another
  // out): X = x / max(|x|_F, eps), as its transpose when rows > cols; then
  // ns.steps times A = X X^T, X = a X + (b A + c A A) X; transposed back. A
  // batch lets a backend run the matrices' GEMMs as one (the CUDA one does,
  // in bf16; the CPU reference computes each alone, in fp32).
  void newton_schulz(const std::vector<Tensor>& outs, const std::vector<Tensor>& xs, int64_t rows,
                     int64_t cols, const NewtonSchulz& ns);
  void newton_schulz(Tensor out, Tensor x, int64_t rows, int64_t cols, const NewtonSchulz& ns) {
    newton_schulz(std::vector<Tensor>{out}, std::vector<Tensor>{x}, rows, cols, ns);
  }
  // NorMuon's two ops (shard/muon.h runs them). out[r] = the mean over the
  // row of x[r, :]^2, x [rows, cols] f32 (the owner's orthogonalised update).
  void row_mean_squares(Tensor out, Tensor x, int64_t rows, int64_t cols);
  // Scales a slice of a [rows, cols] update by row: x holds its `count`
  // elements from element `first` (row-major). stats (f32, 2 x rows): on
  // entry the rows' mean squares m, then their second moment v; every rank passes
  // the same stats and computes the same result. v = v + (1 - beta2) (m - v)
  // (torch.lerp's rounding), s_r = 1 / (sqrt(v_r) + eps), each row's factor
  // f_r = s_r sqrt(sum m / sum m s^2) (the update keeps its Frobenius norm;
  // 0 when the update is 0); x[r, c] *= f_r. On return stats holds f, then
  // the new v.
  void normuon_scale(Tensor x, int64_t first, int64_t count, Tensor stats, int64_t rows,
                     int64_t cols, float beta2, float eps);
  // Over `spans`: param = param (1 - lr weight_decay) - lr span.lr_scale update
  // (decoupled weight decay on the unscaled rate, as torch.optim.Muon).
  void muon_update(Tensor param, Tensor update, const std::vector<MuonSpan>& spans, float lr,
                   float weight_decay);

  // ---- FP8, per-tensor current scaling --------------------------------------
  // q = fp8(src * s) with s = max(format) / amax, amax the largest |src|
  // (NaN elements do not count; s = 1 when amax is 0 or not finite), rounded
  // to nearest even with saturation (common/fp8.h); scale_inv[0] = 1 / s is
  // what dequantizing (and an FP8 GEMM) multiplies back. src f32 or bf16,
  // q u8 (FP8 bit patterns) of src.numel, scale_inv f32[1]. Everything stays
  // on the device: the scale is never read by the host.
  void quantize_fp8(Tensor q, Tensor scale_inv, Tensor src, Fp8 format);
  // As quantize_fp8 on src [rows, cols], also writing qt [cols, rows], the
  // same codes transposed, in the same pass: Hopper's FP8 GEMMs take both
  // operands K-major, so the backward's products need the transposed copies
  // of activations, weights and gradients.
  void quantize_fp8_t(Tensor q, Tensor qt, Tensor scale_inv, Tensor src, int rows, int cols,
                      Fp8 format);
  // The same by a given amax (f32[1]: the model's backward reuses the one
  // its forward cast the same activation with), skipping the amax pass; q
  // may be empty (numel 0) to write only the transpose.
  void quantize_fp8_t_amax(Tensor q, Tensor qt, Tensor scale_inv, Tensor src, Tensor amax, int rows,
                           int cols, Fp8 format);
  // The two halves of quantize_fp8, for a scale agreed across ranks (the
  // FSDP engine's FP8 weight all-gather): out[0] = the largest |x| (NaN
  // elements do not count; 0 when x is empty), f32[1] on the device; and the
  // cast by the scale of a given amax (f32[1], e.g. all-reduced with max),
  // writing scale_inv[0] even when src is empty. quantize_fp8 is exactly
  // amax then quantize_fp8_amax.
  void amax(Tensor out, Tensor x);
  void quantize_fp8_amax(Tensor q, Tensor scale_inv, Tensor src, Tensor amax, Fp8 format);
  // The same over many small tensors at once (the engine's per-weight slices;
  // one launch on a GPU instead of one each): out[i] = amax(xs[i]), and
  // quantize_fp8_amax of every cast.
  void amax_each(Tensor out, const std::vector<Tensor>& xs);
  struct Fp8Cast {
    Tensor q, scale_inv, src, amax;
  };
  void quantize_fp8_amax_each(const std::vector<Fp8Cast>& casts, Fp8 format);
  // qt [cols, rows] = q [rows, cols] transposed (u8 codes; the scale is
  // shared): the K-major copy of a weight that arrived as codes.
  void transpose_fp8(Tensor qt, Tensor q, int rows, int cols);
  // dst = fp8_to_f32(q) * scale_inv[0], rounded to dst's dtype (f32 or bf16).
  void dequantize_fp8(Tensor dst, Tensor q, Tensor scale_inv, Fp8 format);
  // y[M, N] = dequant(x)[M, K] dequant(w)[N, K]^T (+ r[M, N] when r is not
  // empty, as linear_add): linear on codes made by quantize_fp8, with fp32
  // accumulation (an FP8 tensor-core GEMM on a GPU, the residual in its
  // epilogue; there M, N, K must be multiples of 16, and no e5m2 x e5m2).
  void linear_fp8(Tensor y, const Fp8Tensor& x, const Fp8Tensor& w, Tensor r, int M, int N, int K);
  // Its backward: dx[M, K] (=|+=) dy w, dw[N, K] += dy^T x, in fp32 sums. A
  // GPU's FP8 GEMMs take K-major operands only, so this takes the transposed
  // codes quantize_fp8_t makes: dy [M, N] with dyt [N, M] (same scale),
  // xt [K, M], wt [K, N]. dx may be empty (numel 0) to skip it.
  void linear_backward_fp8(Tensor dx, Tensor dw, const Fp8Tensor& dy, const Fp8Tensor& dyt,
                           const Fp8Tensor& xt, const Fp8Tensor& wt, int M, int N, int K,
                           bool accumulate_dx);

 private:
  // ---- what a backend implements (see the public op of the same name) -------
  virtual int do_mark();
  virtual double do_seconds(int a, int b);
  virtual void do_clear_marks();
  virtual Tensor do_alloc(DType dtype, int64_t numel) = 0;
  virtual void do_free(Tensor t) = 0;
  virtual void do_zero(Tensor t) = 0;
  virtual void do_copy(Tensor dst, Tensor src) = 0;
  virtual void do_to_device(Tensor dst, const void* host) = 0;
  virtual void do_to_host(void* host, Tensor src) = 0;
  virtual void do_embedding(Tensor out, Tensor tokens, Tensor wte, int n, int C) = 0;
  virtual void do_embedding_backward(Tensor dwte, Tensor dout, Tensor tokens, int n, int C) = 0;
  virtual void do_rmsnorm(Tensor y, Tensor rstd, Tensor x, Tensor g, int rows, int dim, float eps,
                          Tensor amax) = 0;
  virtual void do_rmsnorm_backward(Tensor dx, Tensor dg, Tensor dy, Tensor x, Tensor g, Tensor rstd,
                                   int rows, int dim, bool accumulate_dx, Tensor amax) = 0;
  virtual void do_linear(Tensor y, Tensor x, Tensor w, int M, int N, int K) = 0;
  virtual void do_linear_backward(Tensor dx, Tensor dw, Tensor dy, Tensor x, Tensor w, int M, int N,
                                  int K, bool accumulate_dx) = 0;
  virtual void do_linear_add(Tensor y, Tensor x, Tensor w, Tensor r, int M, int N, int K) = 0;
  virtual void do_rope(Tensor x, int B, int T, int heads, int head_dim, const Rope& rope) = 0;
  virtual void do_rope_backward(Tensor dx, int B, int T, int heads, int head_dim,
                                const Rope& rope) = 0;
  virtual void do_norm_rope(Tensor y, Tensor rstd, Tensor x, Tensor g, int B, int T, int heads,
                            int head_dim, float eps, const Rope& rope, int64_t x_ld) = 0;
  virtual void do_norm_rope_backward(Tensor dx, Tensor dg, Tensor dy, Tensor x, Tensor g,
                                     Tensor rstd, int B, int T, int heads, int head_dim,
                                     const Rope& rope, Tensor amax, int64_t x_ld) = 0;
  virtual void do_attention(Tensor out, Tensor lse, Tensor q, Tensor k, Tensor v, int B, int T,
                            int n_head, int n_kv_head, int head_dim, int64_t v_ld,
                            const Documents& docs) = 0;
  virtual void do_attention_backward(Tensor dq, Tensor dk, Tensor dv, Tensor dout, Tensor out,
                                     Tensor lse, Tensor q, Tensor k, Tensor v, int B, int T,
                                     int n_head, int n_kv_head, int head_dim, int64_t v_ld,
                                     const Documents& docs) = 0;
  virtual void do_swiglu(Tensor s, Tensor a, Tensor b, int rows, int cols, int64_t ab_ld,
                         Tensor amax) = 0;
  virtual void do_swiglu_backward(Tensor da, Tensor db, Tensor ds, Tensor a, Tensor b, int rows,
                                  int cols, int64_t ab_ld, Tensor amax) = 0;
  virtual void do_relu2(Tensor s, Tensor a, int64_t n, Tensor amax) = 0;
  virtual void do_relu2_backward(Tensor da, Tensor ds, Tensor a, int64_t n, Tensor amax) = 0;
  virtual void do_value_residual(Tensor v, Tensor v0, int rows, int cols, int64_t v_ld,
                                 bool first) = 0;
  virtual void do_value_residual_backward(Tensor dv, Tensor dv0, int rows, int cols, int64_t v_ld,
                                          bool first, bool accumulate) = 0;
  virtual void do_skip_add(Tensor x, Tensor s, Tensor w, int64_t n) = 0;
  virtual void do_skip_add_backward(Tensor ds, Tensor dw, Tensor dx, Tensor s, Tensor w,
                                    int64_t n) = 0;
  virtual void do_value_embed_mix(Tensor v, Tensor v_in, Tensor e, Tensor w, int rows, int cols,
                                  int64_t v_ld) = 0;
  virtual void do_value_embed_mix_backward(Tensor dv, Tensor de, Tensor dw, Tensor v_in, Tensor e,
                                           Tensor w, int rows, int cols, int64_t v_ld,
                                           bool accumulate) = 0;
  virtual void do_add(Tensor y, Tensor a, Tensor b, int64_t n) = 0;
  virtual void do_cross_entropy(Tensor losses, Tensor logits, Tensor targets, int n, int V, int Vp,
                                float grad_scale, HeadLoss extra) = 0;
  virtual void do_cast(Tensor dst, Tensor src) = 0;
  virtual void do_accumulate(Tensor dst, Tensor src, float scale) = 0;
  virtual double do_sum_squares(Tensor x) = 0;
  virtual void do_sum_squares_each(Tensor out,
                                   const std::vector<Tensor>& xs);  // default: one at a time
  virtual void do_adamw(Tensor param, Tensor grad, Tensor exp_avg, Tensor exp_avg_sq, Tensor send,
                        const std::vector<AdamWSpan>& spans, const AdamWHyper& h,
                        bool clear_grad) = 0;
  // Muon's ops: a backend without them (capabilities().muon false) keeps
  // these, which refuse by name.
  virtual void do_muon_momentum(Tensor grad, Tensor buf, const std::vector<MuonSpan>& spans,
                                float momentum, bool nesterov, float grad_scale);
  virtual void do_newton_schulz(const std::vector<Tensor>& outs, const std::vector<Tensor>& xs,
                                int64_t rows, int64_t cols, const NewtonSchulz& ns);
  virtual void do_muon_update(Tensor param, Tensor update, const std::vector<MuonSpan>& spans,
                              float lr, float weight_decay);
  virtual void do_row_mean_squares(Tensor out, Tensor x, int64_t rows, int64_t cols);
  virtual void do_normuon_scale(Tensor x, int64_t first, int64_t count, Tensor stats, int64_t rows,
                                int64_t cols, float beta2, float eps);
  virtual void do_quantize_fp8(Tensor q, Tensor scale_inv, Tensor src, Fp8 format) = 0;
  virtual void do_quantize_fp8_t(Tensor q, Tensor qt, Tensor scale_inv, Tensor src, int rows,
                                 int cols, Fp8 format) = 0;
  virtual void do_quantize_fp8_t_amax(Tensor q, Tensor qt, Tensor scale_inv, Tensor src,
                                      Tensor amax, int rows, int cols, Fp8 format) = 0;
  virtual void do_amax(Tensor out, Tensor x) = 0;
  virtual void do_quantize_fp8_amax(Tensor q, Tensor scale_inv, Tensor src, Tensor amax,
                                    Fp8 format) = 0;
  virtual void do_amax_each(Tensor out, const std::vector<Tensor>& xs);  // default: one at a time
  virtual void do_quantize_fp8_amax_each(const std::vector<Fp8Cast>& casts,
                                         Fp8 format);  // default: one at a time
  virtual void do_transpose_fp8(Tensor qt, Tensor q, int rows, int cols) = 0;
  virtual void do_dequantize_fp8(Tensor dst, Tensor q, Tensor scale_inv, Fp8 format) = 0;
  virtual void do_linear_fp8(Tensor y, const Fp8Tensor& x, const Fp8Tensor& w, Tensor r, int M,
                             int N, int K) = 0;
  virtual void do_linear_backward_fp8(Tensor dx, Tensor dw, const Fp8Tensor& dy,
                                      const Fp8Tensor& dyt, const Fp8Tensor& xt,
                                      const Fp8Tensor& wt, int M, int N, int K,
                                      bool accumulate_dx) = 0;

  OpHook* hook_ = nullptr;
  std::vector<std::chrono::steady_clock::time_point> host_marks_;
};

// True when every element of t is finite. Copies t to the host: for --debug,
// where naming the first bad unit matters more than speed.
bool all_finite(Ops& ops, Tensor t);

}  // namespace fsdp
