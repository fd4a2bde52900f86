#include "model/profiled_ops.h"

#include <algorithm>
#include <cstdio>
#include <set>

namespace fsdp {

namespace {
std::string shape(const char* op, std::initializer_list<int64_t> dims) {
  std::string s = op;
  char sep = ' ';
  for (int64_t d : dims) {
    s += sep + std::to_string(d);
    sep = 'x';
  }
  return s;
}
double sz(Tensor t) {
  return double(dtype_size(t.dtype));
}
}  // namespace

ProfiledOps::ProfiledOps(std::unique_ptr<Ops> inner) : inner_(std::move(inner)) {
  FSDP_CHECK(inner_ != nullptr);
}

template <class F>
void ProfiledOps::timed(const std::string& key, double flops, double bytes, F&& f) {
  if (!enabled_) {
    f();
    return;
  }
  const int a = inner_->mark();
  f();
  const int b = inner_->mark();
  Row& r = rows_[key];
  r.key = key;
  ++r.calls;
  r.flops += flops;
  r.bytes += bytes;
  pending_.push_back({&r, a, b});
}

void ProfiledOps::settle() {
  for (const Pending& p : pending_) p.row->seconds += inner_->seconds(p.a, p.b);
  pending_.clear();
}

void ProfiledOps::clear_marks() {
  settle();  // before the marks it reads are recycled
  inner_->clear_marks();
}

std::vector<ProfiledOps::Row> ProfiledOps::rows() {
  settle();
  std::vector<Row> out;
  for (const auto& [k, r] : rows_) out.push_back(r);
  std::sort(out.begin(), out.end(),
            [](const Row& a, const Row& b) { return a.seconds > b.seconds; });
  return out;
}

std::string ProfiledOps::report(double min_share) {
  const std::vector<Row> all = rows();
  double total = 0;
  for (const Row& r : all) total += r.seconds;
  const double per = 1.0 / double(std::max(1L, steps_));
  std::string out;
  char line[256];
  std::snprintf(line, sizeof line,
                "op profile (%s, %ld steps): %.3f ms per step inside ops; "
                "rate = nominal FLOPs or bytes touched / time\n"
                "  %9s %6s %7s %13s  %s\n",
                inner_->name(), steps_, total * per * 1e3, "ms/step", "share", "calls", "rate",
                "op and shape");
  out += line;
  Row rest{"(rows under " + std::to_string(min_share * 100).substr(0, 4) + "% each)"};
  auto print = [&](const Row& r) {
    char rate[32] = "";
    if (r.flops > 0 && r.seconds > 0)
      std::snprintf(rate, sizeof rate, "%7.2f TFLOP/s", r.flops / r.seconds * 1e-12);
    else if (r.bytes > 0 && r.seconds > 0)
      std::snprintf(rate, sizeof rate, "%7.1f GB/s", r.bytes / r.seconds * 1e-9);
    std::snprintf(line, sizeof line, "  %9.3f %5.1f%% %7.1f %15s  %s\n", r.seconds * per * 1e3,
                  total > 0 ? 100 * r.seconds / total : 0.0, double(r.calls) * per, rate,
                  r.key.c_str());
    out += line;
  };
  // Every op keeps its largest row, so what ran is visible however the time
  // fell (a stalled core can make any op look small).
  std::set<std::string> shown;
  for (const Row& r : all) {
    const bool first_of_op = shown.insert(r.key.substr(0, r.key.find(' '))).second;
    if (!first_of_op && total > 0 && r.seconds < min_share * total) {
      rest.calls += r.calls;
      rest.seconds += r.seconds;
      continue;
    }
    print(r);
  }
  if (rest.calls > 0) print(rest);
  return out;
}

// ---- the ops ------------------------------------------------------------------------
void ProfiledOps::zero(Tensor t) {
  timed(shape("zero", {t.numel}), 0, double(t.bytes()), [&] { inner_->zero(t); });
}
void ProfiledOps::copy(Tensor dst, Tensor src) {
  timed(shape("copy", {dst.numel}), 0, 2.0 * double(dst.bytes()), [&] { inner_->copy(dst, src); });
}
void ProfiledOps::to_device(Tensor dst, const void* host) {
  timed(shape("to_device", {dst.numel}), 0, double(dst.bytes()),
        [&] { inner_->to_device(dst, host); });
}
void ProfiledOps::to_host(void* host, Tensor src) {
  timed(shape("to_host", {src.numel}), 0, double(src.bytes()), [&] { inner_->to_host(host, src); });
}

void ProfiledOps::embedding(Tensor out, Tensor tokens, Tensor wte, int n, int C) {
  timed(shape("embedding", {n, C}), 0, double(n) * C * (sz(out) + sz(wte)),
        [&] { inner_->embedding(out, tokens, wte, n, C); });
}
void ProfiledOps::embedding_backward(Tensor dwte, Tensor dout, Tensor tokens, int n, int C) {
  timed(shape("embedding_backward", {n, C}), 0, double(n) * C * (sz(dout) + 2 * sz(dwte)),
        [&] { inner_->embedding_backward(dwte, dout, tokens, n, C); });
}
void ProfiledOps::rmsnorm(Tensor y, Tensor rstd, Tensor x, Tensor g, int rows, int dim, float eps,
                          Tensor amax) {
  timed(shape(amax.numel ? "rmsnorm+amax" : "rmsnorm", {rows, dim}), 0,
        double(rows) * dim * (sz(x) + sz(y)),
        [&] { inner_->rmsnorm(y, rstd, x, g, rows, dim, eps, amax); });
}
void ProfiledOps::rmsnorm_backward(Tensor dx, Tensor dg, Tensor dy, Tensor x, Tensor g, Tensor rstd,
                                   int rows, int dim, bool accumulate_dx, Tensor amax) {
  const std::string name = std::string(accumulate_dx ? "rmsnorm_backward+=" : "rmsnorm_backward") +
                           (amax.numel ? "+amax" : "");
  timed(shape(name.c_str(), {rows, dim}), 0,
        double(rows) * dim * (sz(dy) + sz(x) + sz(dx) * (accumulate_dx ? 2 : 1)),
        [&] { inner_->rmsnorm_backward(dx, dg, dy, x, g, rstd, rows, dim, accumulate_dx, amax); });
}
void ProfiledOps::linear(Tensor y, Tensor x, Tensor w, int M, int N, int K) {
  timed(shape("linear", {M, N, K}), 2.0 * M * N * K, 0, [&] { inner_->linear(y, x, w, M, N, K); });
}
void ProfiledOps::linear_add(Tensor y, Tensor x, Tensor w, Tensor r, int M, int N, int K) {
  timed(shape("linear_add", {M, N, K}), 2.0 * M * N * K, 0,
        [&] { inner_->linear_add(y, x, w, r, M, N, K); });
}
void ProfiledOps::linear_backward(Tensor dx, Tensor dw, Tensor dy, Tensor x, Tensor w, int M, int N,
                                  int K, bool accumulate_dx) {
  const bool with_dx = dx.numel > 0;
  timed(shape(with_dx ? "linear_backward" : "linear_backward(dw)", {M, N, K}),
        (with_dx ? 4.0 : 2.0) * M * N * K, 0,
        [&] { inner_->linear_backward(dx, dw, dy, x, w, M, N, K, accumulate_dx); });
}
void ProfiledOps::rope(Tensor x, int B, int T, int heads, int head_dim, float theta) {
  timed(shape("rope", {B * T, heads, head_dim}), 0, 2.0 * B * T * heads * head_dim * sz(x),
        [&] { inner_->rope(x, B, T, heads, head_dim, theta); });
}
void ProfiledOps::rope_backward(Tensor dx, int B, int T, int heads, int head_dim, float theta) {
  timed(shape("rope_backward", {B * T, heads, head_dim}), 0,
        2.0 * B * T * heads * head_dim * sz(dx),
        [&] { inner_->rope_backward(dx, B, T, heads, head_dim, theta); });
}
void ProfiledOps::norm_rope(Tensor y, Tensor rstd, Tensor x, Tensor g, int B, int T, int heads,
                            int head_dim, float eps, float theta, int64_t x_ld) {
  timed(shape("norm_rope", {B * T, heads, head_dim}), 0, 2.0 * B * T * heads * head_dim * sz(x),
        [&] { inner_->norm_rope(y, rstd, x, g, B, T, heads, head_dim, eps, theta, x_ld); });
}
void ProfiledOps::norm_rope_backward(Tensor dx, Tensor dg, Tensor dy, Tensor x, Tensor g,
                                     Tensor rstd, int B, int T, int heads, int head_dim,
                                     float theta, Tensor amax, int64_t x_ld) {
  timed(shape(amax.numel ? "norm_rope_backward+amax" : "norm_rope_backward",
              {B * T, heads, head_dim}),
        0, 3.0 * B * T * heads * head_dim * sz(dy), [&] {
          inner_->norm_rope_backward(dx, dg, dy, x, g, rstd, B, T, heads, head_dim, theta, amax,
                                     x_ld);
        });
}
// Causal attention: half the T x T score matrix, two GEMMs forward (QK^T, PV)
// and five backward (as FlashAttention counts them).
void ProfiledOps::attention(Tensor out, Tensor lse, Tensor q, Tensor k, Tensor v, int B, int T,
                            int n_head, int n_kv_head, int head_dim, int64_t v_ld) {
  timed(shape("attention", {B, T, n_head, n_kv_head, head_dim}),
        2.0 * B * n_head * double(T) * T * head_dim, 0,
        [&] { inner_->attention(out, lse, q, k, v, B, T, n_head, n_kv_head, head_dim, v_ld); });
}
void ProfiledOps::attention_backward(Tensor dq, Tensor dk, Tensor dv, Tensor dout, Tensor out,
                                     Tensor lse, Tensor q, Tensor k, Tensor v, int B, int T,
                                     int n_head, int n_kv_head, int head_dim, int64_t v_ld) {
  timed(shape("attention_backward", {B, T, n_head, n_kv_head, head_dim}),
        5.0 * B * n_head * double(T) * T * head_dim, 0, [&] {
          inner_->attention_backward(dq, dk, dv, dout, out, lse, q, k, v, B, T, n_head, n_kv_head,
                                     head_dim, v_ld);
        });
}
void ProfiledOps::swiglu(Tensor s, Tensor a, Tensor b, int rows, int cols, int64_t ab_ld,
                         Tensor amax) {
  const double n = double(rows) * cols;
  timed(shape(amax.numel ? "swiglu+amax" : "swiglu", {rows, cols}), 0, 3.0 * n * sz(s),
        [&] { inner_->swiglu(s, a, b, rows, cols, ab_ld, amax); });
}
void ProfiledOps::swiglu_backward(Tensor da, Tensor db, Tensor ds, Tensor a, Tensor b, int rows,
                                  int cols, int64_t ab_ld, Tensor amax) {
  const double n = double(rows) * cols;
  timed(shape(amax.numel ? "swiglu_backward+amax" : "swiglu_backward", {rows, cols}), 0,
        5.0 * n * sz(ds),
        [&] { inner_->swiglu_backward(da, db, ds, a, b, rows, cols, ab_ld, amax); });
}
void ProfiledOps::add(Tensor y, Tensor a, Tensor b, int64_t n) {
  timed(shape("add", {n}), 0, 3.0 * double(n) * sz(y), [&] { inner_->add(y, a, b, n); });
}
void ProfiledOps::cross_entropy(Tensor losses, Tensor logits, Tensor targets, int n, int V, int Vp,
                                float grad_scale) {
  timed(shape(grad_scale != 0 ? "cross_entropy+grad" : "cross_entropy", {n, Vp}), 0,
        double(n) * Vp * sz(logits) * (grad_scale != 0 ? 2 : 1),
        [&] { inner_->cross_entropy(losses, logits, targets, n, V, Vp, grad_scale); });
}
void ProfiledOps::cast(Tensor dst, Tensor src) {
  timed(std::string("cast ") + dtype_name(src.dtype) + "->" + dtype_name(dst.dtype) + " " +
            std::to_string(dst.numel),
        0, double(dst.bytes()) + double(dst.numel) * sz(src), [&] { inner_->cast(dst, src); });
}
void ProfiledOps::accumulate(Tensor dst, Tensor src, float scale) {
  timed(shape("accumulate", {dst.numel}), 0, 2.0 * double(dst.bytes()) + double(src.bytes()),
        [&] { inner_->accumulate(dst, src, scale); });
}
double ProfiledOps::sum_squares(Tensor x) {
  double r = 0;
  timed(shape("sum_squares", {x.numel}), 0, double(x.bytes()), [&] { r = inner_->sum_squares(x); });
  return r;
}
void ProfiledOps::sum_squares_each(Tensor out, const std::vector<Tensor>& xs) {
  double bytes = 0;
  int64_t n = 0;
  for (Tensor x : xs) bytes += double(x.bytes()), n += x.numel;
  timed(shape("sum_squares_each", {int64_t(xs.size()), n}), 0, bytes,
        [&] { inner_->sum_squares_each(out, xs); });
}
void ProfiledOps::adamw(Tensor param, Tensor grad, Tensor exp_avg, Tensor exp_avg_sq, Tensor send,
                        const std::vector<AdamWSpan>& spans, const AdamWHyper& h, bool clear_grad) {
  const double bytes = 2.0 * double(param.bytes() + exp_avg.bytes() + exp_avg_sq.bytes()) +
                       double(grad.bytes()) * (clear_grad ? 2 : 1) + double(send.bytes());
  timed(shape("adamw", {param.numel}), 0, bytes,
        [&] { inner_->adamw(param, grad, exp_avg, exp_avg_sq, send, spans, h, clear_grad); });
}

void ProfiledOps::quantize_fp8(Tensor q, Tensor scale_inv, Tensor src, Fp8 format) {
  timed(std::string("quantize_fp8 ") + fp8_name(format) + " " + std::to_string(src.numel), 0,
        2.0 * double(src.bytes()) + double(q.bytes()),
        [&] { inner_->quantize_fp8(q, scale_inv, src, format); });
}
void ProfiledOps::quantize_fp8_t(Tensor q, Tensor qt, Tensor scale_inv, Tensor src, int rows,
                                 int cols, Fp8 format) {
  timed(std::string("quantize_fp8_t ") + fp8_name(format) + " " + std::to_string(rows) + "x" +
            std::to_string(cols),
        0, 2.0 * double(src.bytes()) + 2.0 * double(q.bytes()),
        [&] { inner_->quantize_fp8_t(q, qt, scale_inv, src, rows, cols, format); });
}
void ProfiledOps::quantize_fp8_t_amax(Tensor q, Tensor qt, Tensor scale_inv, Tensor src,
                                      Tensor amax, int rows, int cols, Fp8 format) {
  timed(std::string("quantize_fp8_t_amax ") + fp8_name(format) + (q.numel ? " " : " t-only ") +
            std::to_string(rows) + "x" + std::to_string(cols),
        0, double(src.bytes()) + double(q.bytes()) + double(qt.bytes()),
        [&] { inner_->quantize_fp8_t_amax(q, qt, scale_inv, src, amax, rows, cols, format); });
}
void ProfiledOps::amax(Tensor out, Tensor x) {
  timed(shape("amax", {x.numel}), 0, double(x.bytes()), [&] { inner_->amax(out, x); });
}
void ProfiledOps::quantize_fp8_amax(Tensor q, Tensor scale_inv, Tensor src, Tensor amax,
                                    Fp8 format) {
  timed(std::string("quantize_fp8_amax ") + fp8_name(format) + " " + std::to_string(src.numel), 0,
        double(src.bytes()) + double(q.bytes()),
        [&] { inner_->quantize_fp8_amax(q, scale_inv, src, amax, format); });
}
void ProfiledOps::amax_each(Tensor out, const std::vector<Tensor>& xs) {
  double bytes = 0;
  int64_t n = 0;
  for (Tensor x : xs) bytes += double(x.bytes()), n += x.numel;
  timed(shape("amax_each", {int64_t(xs.size()), n}), 0, bytes, [&] { inner_->amax_each(out, xs); });
}
void ProfiledOps::quantize_fp8_amax_each(const std::vector<Fp8Cast>& casts, Fp8 format) {
  double bytes = 0;
  int64_t n = 0;
  for (const Fp8Cast& c : casts) bytes += double(c.src.bytes() + c.q.bytes()), n += c.src.numel;
  timed(std::string("quantize_fp8_amax_each ") + fp8_name(format) + " " +
            std::to_string(casts.size()) + "x" + std::to_string(n),
        0, bytes, [&] { inner_->quantize_fp8_amax_each(casts, format); });
}
void ProfiledOps::transpose_fp8(Tensor qt, Tensor q, int rows, int cols) {
  timed(shape("transpose_fp8", {rows, cols}), 0, 2.0 * double(q.bytes()),
        [&] { inner_->transpose_fp8(qt, q, rows, cols); });
}
void ProfiledOps::dequantize_fp8(Tensor dst, Tensor q, Tensor scale_inv, Fp8 format) {
  timed(std::string("dequantize_fp8 ") + fp8_name(format) + " " + std::to_string(dst.numel), 0,
        double(q.bytes()) + double(dst.bytes()),
        [&] { inner_->dequantize_fp8(dst, q, scale_inv, format); });
}

void ProfiledOps::linear_fp8(Tensor y, const Fp8Tensor& x, const Fp8Tensor& w, Tensor r, int M,
                             int N, int K) {
  timed(shape(r.numel > 0 ? "linear_fp8+r" : "linear_fp8", {M, N, K}), 2.0 * M * N * K, 0,
        [&] { inner_->linear_fp8(y, x, w, r, M, N, K); });
}
void ProfiledOps::linear_backward_fp8(Tensor dx, Tensor dw, const Fp8Tensor& dy,
                                      const Fp8Tensor& dyt, const Fp8Tensor& xt,
                                      const Fp8Tensor& wt, int M, int N, int K,
                                      bool accumulate_dx) {
  timed(shape("linear_backward_fp8", {M, N, K}), (dx.numel > 0 ? 4.0 : 2.0) * M * N * K, 0,
        [&] { inner_->linear_backward_fp8(dx, dw, dy, dyt, xt, wt, M, N, K, accumulate_dx); });
}

}  // namespace fsdp
