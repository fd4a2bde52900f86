// The H100 backend of the op interface: bf16 activations and gathered weights,
// f32 statistics, losses and optimizer state. GEMMs run through cuBLASLt,
// attention through cuDNN's fused SDPA, everything else through the fused
// kernels, one .cu per op family that also holds the family's do_ methods
// below (cuda_ops.cpp keeps the stream, memory, GEMMs and attention).
//
// This header is plain C++ with no CUDA types in it, so code built by the host
// compiler alone (src/, shard/) can construct the backend; the CUDA, cuBLASLt
// and cuDNN state lives behind an opaque pointer.
//
// Every op is enqueued on one CUDA stream that CudaOps owns, in call order.
// to_host() and sum_squares() wait for it; nothing else blocks the host. A
// communicator that moves the same buffers orders itself against stream().
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "model/ops.h"

namespace fsdp {

struct CudaOpsOptions {
  int device = -1;  // CUDA device ordinal; -1 keeps the calling thread's current device
  // --debug: deterministic cuDNN attention backward (the other kernels are
  // deterministic always), the libraries' first-ranked GEMM and attention
  // plans instead of the fastest by timing (which may differ run to run), and
  // a stream synchronisation after every op so a failure names the op that
  // caused it instead of a later one.
  bool deterministic = false;
  bool sync_each_op = false;
  // --debug: accept cuDNN's slow FALLBACK attention engine for shapes the
  // fast ones do not cover (otherwise that is an error; see attention.cpp).
  bool allow_slow_attention = false;
  size_t gemm_workspace_bytes = size_t(32) << 20;
};

class CudaOps final : public Ops {
 public:
  explicit CudaOps(const CudaOpsOptions& options = {});
  ~CudaOps() override;
  CudaOps(const CudaOps&) = delete;
  CudaOps& operator=(const CudaOps&) = delete;

  // The cudaStream_t every op runs on.
  void* stream() override;
  // Waits for all enqueued work and reports any failure a kernel flagged
  // (an out-of-vocabulary token or target) as fsdp::Error.
  void synchronize();
  // High-water mark of device memory held through alloc(), in bytes.
  int64_t peak_device_bytes() const override;
  // cudaMemGetInfo's free bytes on this device.
  int64_t free_memory_bytes() const override;
  const char* name() const override { return "cuda"; }
  // H100/H200 SXM: 989 TFLOP/s dense bf16.
  OpsCapabilities capabilities() const override;
  DType compute_dtype() const override { return DType::bf16; }
  // GPU, driver, runtime, cuBLASLt and cuDNN versions, then every cuDNN
  // attention engine built so far.
  std::vector<std::string> runtime_report() const override;

  struct Impl;  // public only so the .cpp files behind this class can name it

 private:
  // CUDA events on stream(), from a pool reused after clear_marks().
  int do_mark() override;
  double do_seconds(int a, int b) override;
  void do_clear_marks() override;

  Tensor do_alloc(DType dtype, int64_t numel) override;
  void do_free(Tensor t) override;
  void do_zero(Tensor t) override;
  void do_copy(Tensor dst, Tensor src) override;
  void do_to_device(Tensor dst, const void* host) override;
  void do_to_host(void* host, Tensor src) override;

  void do_embedding(Tensor out, Tensor tokens, Tensor wte, int n, int C) override;
  void do_embedding_backward(Tensor dwte, Tensor dout, Tensor tokens, int n, int C) override;

  void do_rmsnorm(Tensor y, Tensor rstd, Tensor x, Tensor g, int rows, int dim, float eps,
                  Tensor amax) override;
  void do_rmsnorm_backward(Tensor dx, Tensor dg, Tensor dy, Tensor x, Tensor g, Tensor rstd,
                           int rows, int dim, bool accumulate_dx, Tensor amax) override;

  void do_linear(Tensor y, Tensor x, Tensor w, int M, int N, int K) override;
  void do_linear_backward(Tensor dx, Tensor dw, Tensor dy, Tensor x, Tensor w, int M, int N, int K,
                          bool accumulate_dx) override;
  void do_linear_add(Tensor y, Tensor x, Tensor w, Tensor r, int M, int N, int K) override;

  void do_rope(Tensor x, int B, int T, int heads, int head_dim, const Rope& rope) override;
  void do_rope_backward(Tensor dx, int B, int T, int heads, int head_dim,
                        const Rope& rope) override;
  // One fused kernel each way (rope.cu) where the head_dim allows, else
  // rmsnorm and rope one after the other (backward: dy rotated in place).
  void do_norm_rope(Tensor y, Tensor rstd, Tensor x, Tensor g, int B, int T, int heads,
                    int head_dim, float eps, const Rope& rope, int64_t x_ld) override;
  void do_norm_rope_backward(Tensor dx, Tensor dg, Tensor dy, Tensor x, Tensor g, Tensor rstd,
                             int B, int T, int heads, int head_dim, const Rope& rope, Tensor amax,
                             int64_t x_ld) override;

  void do_attention(Tensor out, Tensor lse, Tensor q, Tensor k, Tensor v, int B, int T, int n_head,
                    int n_kv_head, int head_dim, int64_t v_ld, const Documents& docs) override;
  void do_attention_backward(Tensor dq, Tensor dk, Tensor dv, Tensor dout, Tensor out, Tensor lse,
                             Tensor q, Tensor k, Tensor v, int B, int T, int n_head, int n_kv_head,
                             int head_dim, int64_t v_ld, const Documents& docs) override;

  void do_swiglu(Tensor s, Tensor a, Tensor b, int rows, int cols, int64_t ab_ld,
                 Tensor amax) override;
  void do_swiglu_backward(Tensor da, Tensor db, Tensor ds, Tensor a, Tensor b, int rows, int cols,
                          int64_t ab_ld, Tensor amax) override;
  void do_relu2(Tensor s, Tensor a, int64_t n, Tensor amax) override;
  void do_relu2_backward(Tensor da, Tensor ds, Tensor a, int64_t n, Tensor amax) override;
  void do_value_residual(Tensor v, Tensor v0, int rows, int cols, int64_t v_ld,
                         bool first) override;
  void do_value_residual_backward(Tensor dv, Tensor dv0, int rows, int cols, int64_t v_ld,
                                  bool first, bool accumulate) override;

  void do_skip_add(Tensor x, Tensor s, Tensor w, int64_t n) override;
  void do_skip_add_backward(Tensor ds, Tensor dw, Tensor dx, Tensor s, Tensor w,
                            int64_t n) override;
  void do_value_embed_mix(Tensor v, Tensor v_in, Tensor e, Tensor w, int rows, int cols,
                          int64_t v_ld) override;
  void do_value_embed_mix_backward(Tensor dv, Tensor de, Tensor dw, Tensor v_in, Tensor e, Tensor w,
                                   int rows, int cols, int64_t v_ld, bool accumulate) override;
  void do_add(Tensor y, Tensor a, Tensor b, int64_t n) override;

  void do_cross_entropy(Tensor losses, Tensor logits, Tensor targets, int n, int V, int Vp,
                        float grad_scale, HeadLoss extra) override;

  void do_cast(Tensor dst, Tensor src) override;
  void do_accumulate(Tensor dst, Tensor src, float scale) override;
  double do_sum_squares(Tensor x) override;
  void do_sum_squares_each(Tensor out, const std::vector<Tensor>& xs) override;
  void do_adamw(Tensor param, Tensor grad, Tensor exp_avg, Tensor exp_avg_sq, Tensor send,
                const std::vector<AdamWSpan>& spans, const AdamWHyper& h, bool clear_grad) override;
  // muon.cu: Newton-Schulz in bf16 on cuBLASLt, a batch's GEMMs as one.
  void do_muon_momentum(Tensor grad, Tensor buf, const std::vector<MuonSpan>& spans, float momentum,
                        bool nesterov, float grad_scale) override;
  void do_newton_schulz(const std::vector<Tensor>& outs, const std::vector<Tensor>& xs,
                        int64_t rows, int64_t cols, const NewtonSchulz& ns) override;
  void do_muon_update(Tensor param, Tensor update, const std::vector<MuonSpan>& spans, float lr,
                      float weight_decay) override;
  void do_row_mean_squares(Tensor out, Tensor x, int64_t rows, int64_t cols) override;
  void do_normuon_scale(Tensor x, int64_t first, int64_t count, Tensor stats, int64_t rows,
                        int64_t cols, float beta2, float eps) override;
  void do_quantize_fp8(Tensor q, Tensor scale_inv, Tensor src, Fp8 format) override;
  void do_quantize_fp8_t(Tensor q, Tensor qt, Tensor scale_inv, Tensor src, int rows, int cols,
                         Fp8 format) override;
  void do_quantize_fp8_t_amax(Tensor q, Tensor qt, Tensor scale_inv, Tensor src, Tensor amax,
                              int rows, int cols, Fp8 format) override;
  void do_amax(Tensor out, Tensor x) override;
  void do_quantize_fp8_amax(Tensor q, Tensor scale_inv, Tensor src, Tensor amax,
                            Fp8 format) override;
  void do_amax_each(Tensor out, const std::vector<Tensor>& xs) override;
  void do_quantize_fp8_amax_each(const std::vector<Fp8Cast>& casts, Fp8 format) override;
  void do_transpose_fp8(Tensor qt, Tensor q, int rows, int cols) override;
  void do_dequantize_fp8(Tensor dst, Tensor q, Tensor scale_inv, Fp8 format) override;
  void do_linear_fp8(Tensor y, const Fp8Tensor& x, const Fp8Tensor& w, Tensor r, int M, int N,
                     int K) override;
  void do_linear_backward_fp8(Tensor dx, Tensor dw, const Fp8Tensor& dy, const Fp8Tensor& dyt,
                              const Fp8Tensor& xt, const Fp8Tensor& wt, int M, int N, int K,
                              bool accumulate_dx) override;

  void after(const char* op);
  std::unique_ptr<Impl> impl_;
};

// Number of CUDA devices this process can use; 0 when there is no driver or no
// GPU (tests and tools use it to skip rather than fail). A driver too old for
// this build throws fsdp::Error saying so (common/cuda_driver.h).
int cuda_device_count();

}  // namespace fsdp
