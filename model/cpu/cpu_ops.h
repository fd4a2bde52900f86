// The fp32 reference backend: the executable specification every GPU kernel is
// tested against. Plain single-threaded loops (OpenBLAS only for the GEMMs),
// reductions in double, so results are bitwise reproducible run to run and
// easy to check by eye. Speed matters only enough to train tiny models.
#pragma once

#include <cstdint>

#include "common/dtype.h"  // f32_to_bf16, bf16_to_f32
#include "model/ops.h"

namespace fsdp {

// Not final: a test derives a spy that sees the ops the model calls. The
// reference's calls to itself name CpuOps::do_... so a spy sees only those.
class CpuOps : public Ops {
 public:
  const char* name() const override { return "cpu"; }
  OpsCapabilities capabilities() const override {
    return {.host_memory = true, .muon = true, .bitwise_reruns = true};
  }
  DType compute_dtype() const override { return DType::f32; }
  // Host memory: MemAvailable, or less under a cgroup limit (host_memory.h).
  int64_t free_memory_bytes() const override;

 protected:
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
  // The product into a temporary, then y = product + r (so r may alias y).
  void do_linear_add(Tensor y, Tensor x, Tensor w, Tensor r, int M, int N, int K) override;

  void do_rope(Tensor x, int B, int T, int heads, int head_dim, const Rope& rope) override;
  void do_rope_backward(Tensor dx, int B, int T, int heads, int head_dim,
                        const Rope& rope) override;
  // The reference is the composition: rmsnorm then rope; backward rotates a
  // copy of dy back and runs rmsnorm_backward on it (dy is left untouched).
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
  void do_adamw(Tensor param, Tensor grad, Tensor exp_avg, Tensor exp_avg_sq, Tensor send,
                const std::vector<AdamWSpan>& spans, const AdamWHyper& h, bool clear_grad) override;
  void do_quantize_fp8(Tensor q, Tensor scale_inv, Tensor src, Fp8 format) override;
  void do_quantize_fp8_t(Tensor q, Tensor qt, Tensor scale_inv, Tensor src, int rows, int cols,
                         Fp8 format) override;
  void do_quantize_fp8_t_amax(Tensor q, Tensor qt, Tensor scale_inv, Tensor src, Tensor amax,
                              int rows, int cols, Fp8 format) override;
  void do_amax(Tensor out, Tensor x) override;
  void do_quantize_fp8_amax(Tensor q, Tensor scale_inv, Tensor src, Tensor amax,
                            Fp8 format) override;
  void do_transpose_fp8(Tensor qt, Tensor q, int rows, int cols) override;
  void do_dequantize_fp8(Tensor dst, Tensor q, Tensor scale_inv, Fp8 format) override;
  void do_linear_fp8(Tensor y, const Fp8Tensor& x, const Fp8Tensor& w, Tensor r, int M, int N,
                     int K) override;
  void do_linear_backward_fp8(Tensor dx, Tensor dw, const Fp8Tensor& dy, const Fp8Tensor& dyt,
                              const Fp8Tensor& xt, const Fp8Tensor& wt, int M, int N, int K,
                              bool accumulate_dx) override;
  // cpu_muon.cpp
  void do_muon_momentum(Tensor grad, Tensor buf, const std::vector<MuonSpan>& spans, float momentum,
                        bool nesterov, float grad_scale) override;
  void do_newton_schulz(const std::vector<Tensor>& outs, const std::vector<Tensor>& xs,
                        int64_t rows, int64_t cols, const NewtonSchulz& ns) override;
  void do_muon_update(Tensor param, Tensor update, const std::vector<MuonSpan>& spans, float lr,
                      float weight_decay) override;
  void do_row_mean_squares(Tensor out, Tensor x, int64_t rows, int64_t cols) override;
  void do_normuon_scale(Tensor x, int64_t first, int64_t count, Tensor stats, int64_t rows,
                        int64_t cols, float beta2, float eps) override;
};

}  // namespace fsdp
