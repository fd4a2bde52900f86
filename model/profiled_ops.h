// ProfiledOps: any backend with every op call timed in stream order, for
// `fsdptrain --profile-ops`. Each call is bracketed by two
// marks of the wrapped backend (CUDA events on a GPU, the host clock on the
// CPU), so the table shows what the device spent per op while the run keeps
// its normal asynchrony: the marks are read only when the caller clears them
// (once per step), never in between.
//
// Rows are keyed by op and shape ("linear 8192x3072x1024"), so the same GEMM
// in every layer adds up to one row, and carry the op's nominal work (FLOPs
// for GEMMs and attention, bytes touched for the memory-bound rest) to give
// a rate to hold against the device's roofline.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "model/ops.h"

namespace fsdp {

// Not final: a test can derive a spy that sees every op of a real backend.
class ProfiledOps : public Ops {
 public:
  explicit ProfiledOps(std::unique_ptr<Ops> inner);
  Ops& inner() { return *inner_; }

  // Timing is off until enabled; disabled calls pass straight through (for
  // the first step's warm-up and for evaluation).
  void set_enabled(bool on) { enabled_ = on; }
  // Counts one profiled step, for the per-step column of the table.
  void count_step() { ++steps_; }

  struct Row {
    std::string key;  // op and shape
    long calls = 0;
    double seconds = 0, flops = 0, bytes = 0;
  };
  // Every row so far, longest total first (reads the marks still pending).
  std::vector<Row> rows();
  // The table: one line per row with ms/step, share, and TFLOP/s or GB/s;
  // rows under min_share of the total are folded into one, but for each op's
  // largest.
  std::string report(double min_share = 0.002);

  // ---- Ops: forwarded, timed --------------------------------------------------
  const char* name() const override { return inner_->name(); }
  void* stream() override { return inner_->stream(); }
  DType compute_dtype() const override { return inner_->compute_dtype(); }
  std::vector<std::string> runtime_report() const override { return inner_->runtime_report(); }
  int64_t peak_device_bytes() const override { return inner_->peak_device_bytes(); }
  int64_t free_memory_bytes() const override { return inner_->free_memory_bytes(); }
  int mark() override { return inner_->mark(); }
  double seconds(int a, int b) override { return inner_->seconds(a, b); }
  void clear_marks() override;

  Tensor alloc(DType dtype, int64_t numel) override { return inner_->alloc(dtype, numel); }
  void free(Tensor t) override { inner_->free(t); }
  void zero(Tensor t) override;
  void copy(Tensor dst, Tensor src) override;
  void to_device(Tensor dst, const void* host) override;
  void to_host(void* host, Tensor src) override;

  void embedding(Tensor out, Tensor tokens, Tensor wte, int n, int C) override;
  void embedding_backward(Tensor dwte, Tensor dout, Tensor tokens, int n, int C) override;
  void rmsnorm(Tensor y, Tensor rstd, Tensor x, Tensor g, int rows, int dim, float eps,
               Tensor amax) override;
  void rmsnorm_backward(Tensor dx, Tensor dg, Tensor dy, Tensor x, Tensor g, Tensor rstd, int rows,
                        int dim, bool accumulate_dx, Tensor amax) override;
  void linear(Tensor y, Tensor x, Tensor w, int M, int N, int K) override;
  void linear_backward(Tensor dx, Tensor dw, Tensor dy, Tensor x, Tensor w, int M, int N, int K,
                       bool accumulate_dx) override;
  void linear_add(Tensor y, Tensor x, Tensor w, Tensor r, int M, int N, int K) override;
  void rope(Tensor x, int B, int T, int heads, int head_dim, float theta) override;
  void rope_backward(Tensor dx, int B, int T, int heads, int head_dim, float theta) override;
  void norm_rope(Tensor y, Tensor rstd, Tensor x, Tensor g, int B, int T, int heads, int head_dim,
                 float eps, float theta, int64_t x_ld) override;
  void norm_rope_backward(Tensor dx, Tensor dg, Tensor dy, Tensor x, Tensor g, Tensor rstd, int B,
                          int T, int heads, int head_dim, float theta, Tensor amax,
                          int64_t x_ld) override;
  void attention(Tensor out, Tensor lse, Tensor q, Tensor k, Tensor v, int B, int T, int n_head,
                 int n_kv_head, int head_dim, int64_t v_ld) override;
  void attention_backward(Tensor dq, Tensor dk, Tensor dv, Tensor dout, Tensor out, Tensor lse,
                          Tensor q, Tensor k, Tensor v, int B, int T, int n_head, int n_kv_head,
                          int head_dim, int64_t v_ld) override;
  void swiglu(Tensor s, Tensor a, Tensor b, int rows, int cols, int64_t ab_ld,
              Tensor amax) override;
  void swiglu_backward(Tensor da, Tensor db, Tensor ds, Tensor a, Tensor b, int rows, int cols,
                       int64_t ab_ld, Tensor amax) override;
  void add(Tensor y, Tensor a, Tensor b, int64_t n) override;
  void cross_entropy(Tensor losses, Tensor logits, Tensor targets, int n, int V, int Vp,
                     float grad_scale) override;
  void cast(Tensor dst, Tensor src) override;
  void accumulate(Tensor dst, Tensor src, float scale) override;
  double sum_squares(Tensor x) override;
  void sum_squares_each(Tensor out, const std::vector<Tensor>& xs) override;
  void adamw(Tensor param, Tensor grad, Tensor exp_avg, Tensor exp_avg_sq, Tensor send,
             const std::vector<AdamWSpan>& spans, const AdamWHyper& h, bool clear_grad) override;
  void quantize_fp8(Tensor q, Tensor scale_inv, Tensor src, Fp8 format) override;
  void quantize_fp8_t(Tensor q, Tensor qt, Tensor scale_inv, Tensor src, int rows, int cols,
                      Fp8 format) override;
  void quantize_fp8_t_amax(Tensor q, Tensor qt, Tensor scale_inv, Tensor src, Tensor amax, int rows,
                           int cols, Fp8 format) override;
  void amax(Tensor out, Tensor x) override;
  void quantize_fp8_amax(Tensor q, Tensor scale_inv, Tensor src, Tensor amax, Fp8 format) override;
  void amax_each(Tensor out, const std::vector<Tensor>& xs) override;
  void quantize_fp8_amax_each(const std::vector<Fp8Cast>& casts, Fp8 format) override;
  void transpose_fp8(Tensor qt, Tensor q, int rows, int cols) override;
  void dequantize_fp8(Tensor dst, Tensor q, Tensor scale_inv, Fp8 format) override;
  void linear_fp8(Tensor y, const Fp8Tensor& x, const Fp8Tensor& w, Tensor r, int M, int N,
                  int K) override;
  void linear_backward_fp8(Tensor dx, Tensor dw, const Fp8Tensor& dy, const Fp8Tensor& dyt,
                           const Fp8Tensor& xt, const Fp8Tensor& wt, int M, int N, int K,
                           bool accumulate_dx) override;

 private:
  // Runs f between two marks and files the span under key (when enabled).
  template <class F>
  void timed(const std::string& key, double flops, double bytes, F&& f);
  void settle();  // reads pending spans into rows_

  struct Pending {
    Row* row;
    int a, b;
  };
  std::unique_ptr<Ops> inner_;
  bool enabled_ = false;
  long steps_ = 0;
  std::map<std::string, Row> rows_;
  std::vector<Pending> pending_;
};

}  // namespace fsdp
