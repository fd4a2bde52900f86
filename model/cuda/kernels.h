// Host-side launchers of the hand-written kernels, one .cu per op family (the
// section headers below name it).
// Each enqueues its work on `stream` and checks the launch; sizes and dtypes
// were validated by CudaOps before the call. Pointers are device pointers.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace fsdp::cuda {

using bf16 = __nv_bfloat16;

// Device scratch for kernels that need temporaries (partial sums, sort
// buffers). One region per call: everything runs on one stream, so the next
// call may reuse it.
class Scratch {
 public:
  virtual ~Scratch() = default;
  virtual void* get(size_t bytes) = 0;
};

// Codes a kernel writes into the device error word (first one wins); CudaOps
// turns them into fsdp::Error at the next synchronisation.
enum ErrorCode : int { kNoError = 0, kTokenOutOfRange = 1, kTargetOutOfRange = 2 };

struct DeviceInfo {
  int sm_count = 132;
};

// ---- embedding.cu ----------------------------------------------------------------
void embedding_forward(bf16* out, const int32_t* tokens, const bf16* wte, int n, int C,
                       int64_t vocab, int* err, cudaStream_t stream);
// dwte is bf16 when dwte_bf16, else f32.
void embedding_backward(void* dwte, bool dwte_bf16, const bf16* dout, const int32_t* tokens, int n,
                        int C, int64_t vocab, Scratch& scratch, cudaStream_t stream);

// ---- rmsnorm.cu ------------------------------------------------------------------
// amax: null, or an f32 word that gets max |y| as stored.
void rmsnorm_forward(bf16* y, float* rstd, const bf16* x, const bf16* g, int rows, int dim,
                     float eps, float* amax, cudaStream_t stream);
// dg is bf16 when dg_bf16, else f32. amax: null, or an f32 word that gets
// max |dx| as stored.
void rmsnorm_backward(bf16* dx, void* dg, bool dg_bf16, const bf16* dy, const bf16* x,
                      const bf16* g, const float* rstd, int rows, int dim, bool accumulate_dx,
                      float* amax, const DeviceInfo& dev, Scratch& scratch, cudaStream_t stream);
// dg[dim] += the sum of `blocks` partial rows partial[blocks, dim] (f32), added
// in block order: the last step of every RMSNorm-style backward.
void rmsnorm_dg_reduce(void* dg, bool dg_bf16, const float* partial, int blocks, int dim,
                       cudaStream_t stream);

// ---- rope.cu ---------------------------------------------------------------------
// cos_sin holds [T, head_dim/2] cosines followed by as many sines (f32).
// sign +1 rotates forward, -1 applies the transpose.
void rope(bf16* x, const float* cos_sin, int B, int T, int heads, int head_dim, float sign,
          cudaStream_t stream);

// QK-norm then RoPE fused: per head vector of x[B, T, heads, hd],
// y = rope(rmsnorm(x) * g) with rstd[B*T*heads] kept; backward rotates dy
// back and runs RMSNorm's backward, dx overwritten, dg += (bf16 when dg_bf16,
// else f32), max |dx| as stored into amax unless it is null; x's and dx's
// token rows are x_ld apart. Both return false, having enqueued nothing, when
// the shape or alignment is not one the fused kernels handle (hd must be
// 16 * 2^i up to 512, pointers 16-byte aligned, x_ld a multiple of 8); the
// caller then composes rmsnorm and rope.
bool norm_rope_forward(bf16* y, float* rstd, const bf16* x, const bf16* g, const float* cos_sin,
                       int B, int T, int heads, int hd, float eps, int64_t x_ld,
                       cudaStream_t stream);
bool norm_rope_backward(bf16* dx, void* dg, bool dg_bf16, const bf16* dy, const bf16* x,
                        const bf16* g, const float* rstd, const float* cos_sin, int B, int T,
                        int heads, int hd, float* amax, int64_t x_ld, const DeviceInfo& dev,
                        Scratch& scratch, cudaStream_t stream);

// ---- elementwise.cu --------------------------------------------------------------
// SwiGLU over [rows, cols]: a, b, da and db rows ab_ld apart, s and ds
// packed. amax: null, or an f32 word that gets max |s| (forward), or the max
// of |da| and |db| over both (backward), as stored.
void swiglu_forward(bf16* s, const bf16* a, const bf16* b, int rows, int cols, int64_t ab_ld,
                    float* amax, cudaStream_t stream);
void swiglu_backward(bf16* da, bf16* db, const bf16* ds, const bf16* a, const bf16* b, int rows,
                     int cols, int64_t ab_ld, float* amax, cudaStream_t stream);
void add(bf16* y, const bf16* a, const bf16* b, int64_t n, cudaStream_t stream);

// ---- cross_entropy.cu ------------------------------------------------------------
// Rows of Vp logits, the first V real (see Ops::cross_entropy).
void cross_entropy(float* losses, bf16* logits, const int32_t* targets, int n, int V, int Vp,
                   float grad_scale, int* err, cudaStream_t stream);

// ---- shard_casts.cu --------------------------------------------------------------
void cast_f32_to_bf16(bf16* dst, const float* src, int64_t n, cudaStream_t stream);
void cast_bf16_to_f32(float* dst, const bf16* src, int64_t n, cudaStream_t stream);
void accumulate_f32(float* dst, const float* src, float scale, int64_t n, cudaStream_t stream);
void accumulate_bf16(float* dst, const bf16* src, float scale, int64_t n, cudaStream_t stream);
// ---- adamw.cu --------------------------------------------------------------------
// Writes the sum of squares into *result (device memory; summed in double).
void sum_squares(double* result, const float* x, int64_t n, const DeviceInfo& dev, Scratch& scratch,
                 cudaStream_t stream);
void sum_squares(float* result, const float* x, int64_t n, const DeviceInfo& dev, Scratch& scratch,
                 cudaStream_t stream);
struct AdamWStep {
  float lr, beta1, beta2, eps, grad_scale;
  float inv_bc1;       // 1 / (1 - beta1^step)
  float inv_sqrt_bc2;  // 1 / sqrt(1 - beta2^step)
};
// Sorted, disjoint [begin, end) runs of a shard, each with its decay factor
// 1 - lr * weight_decay; passed by value, so a unit's parameters fit one launch.
struct AdamWSpans {
  static constexpr int kMax = 32;
  int n = 0;
  int64_t begin[kMax], end[kMax];
  float decay[kMax];
};
// AdamW over the spans; then, over all n, send = bf16(param) unless send is
// null and grad = 0 when clear_grad.
void adamw(float* param, float* grad, float* exp_avg, float* exp_avg_sq, bf16* send,
           bool clear_grad, int64_t n, const AdamWStep& s, const AdamWSpans& spans,
           cudaStream_t stream);

// ---- muon.cu ---------------------------------------------------------------------
// Sorted, disjoint runs [begin, begin + count) of a shard, each with its step
// lr x lr_scale (muon_update); by value, so a unit's matrices fit one launch.
struct MuonSpans {
  static constexpr int kMax = 32;
  int n = 0;
  int64_t begin[kMax], count[kMax];
  float step[kMax];
};
// Ops::muon_momentum and Ops::muon_update (decay = 1 - lr weight_decay).
void muon_momentum(float* grad, float* buf, const MuonSpans& spans, float momentum, bool nesterov,
                   float grad_scale, cudaStream_t stream);
void muon_update(float* param, const float* update, const MuonSpans& spans, float decay,
                 cudaStream_t stream);
// Newton-Schulz's first and last pass: X [m, n] (m <= n, the wide
// orientation) = bf16(x / max(sqrt(*sum_sq), eps)) from x [rows, cols],
// transposed when rows > cols; and out [rows, cols] = f32(X), transposed back.
void ns_load(bf16* X, const float* x, const double* sum_sq, float eps, int rows, int cols,
             cudaStream_t stream);
void ns_store(float* out, const bf16* X, int rows, int cols, cudaStream_t stream);

// ---- fp8.cu ----------------------------------------------------------------------
// Ops::quantize_fp8 / dequantize_fp8; src and dst are bf16 when the flag says
// so, else f32. fmt_max: the format's largest finite value (common/fp8.h).
void quantize_fp8(uint8_t* q, float* scale_inv, const void* src, bool src_bf16, int64_t n,
                  bool e5m2, float fmt_max, Scratch& scratch, cudaStream_t stream);
// And qt [cols, rows], the codes transposed, from src [rows, cols].
void quantize_fp8_t(uint8_t* q, uint8_t* qt, float* scale_inv, const void* src, bool src_bf16,
                    int rows, int cols, bool e5m2, float fmt_max, Scratch& scratch,
                    cudaStream_t stream);
// Ops::quantize_fp8_t_amax: quantize_fp8_t's cast by a given amax; q may be
// null (the transpose only).
void quantize_fp8_t_amax(uint8_t* q, uint8_t* qt, float* scale_inv, const void* src, bool src_bf16,
                         int rows, int cols, const float* amax, bool e5m2, float fmt_max,
                         cudaStream_t stream);
// Ops::amax (into f32 out[0]) and quantize_fp8_amax: the two passes above,
// apart, with the amax in caller's memory.
void amax(float* out, const void* x, bool x_bf16, int64_t n, cudaStream_t stream);
void quantize_fp8_amax(uint8_t* q, float* scale_inv, const void* src, bool src_bf16, int64_t n,
                       const float* amax, bool e5m2, float fmt_max, cudaStream_t stream);
// Ops::amax_each / quantize_fp8_amax_each, up to kMax tensors a launch (the
// kernel's argument; one block row per tensor). amax_each expects its
// outputs zeroed; q and scale_inv are unused there.
struct Fp8Each {
  static constexpr int kMax = 16;
  const void* src[kMax] = {};
  uint8_t* q[kMax] = {};
  float* amax[kMax] = {};
  float* scale_inv[kMax] = {};
  int64_t n[kMax] = {};
  int count = 0;
};
void amax_each(const Fp8Each& a, bool src_bf16, cudaStream_t stream);
void quantize_fp8_amax_each(const Fp8Each& a, bool src_bf16, bool e5m2, float fmt_max,
                            cudaStream_t stream);
// qt [cols, rows] = q [rows, cols] transposed, codes only.
void transpose_fp8(uint8_t* qt, const uint8_t* q, int rows, int cols, cudaStream_t stream);
void dequantize_fp8(void* dst, bool dst_bf16, const uint8_t* q, const float* scale_inv, int64_t n,
                    bool e5m2, cudaStream_t stream);

}  // namespace fsdp::cuda
