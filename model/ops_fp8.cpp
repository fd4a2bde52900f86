// Ops' front door for the FP8 ops (per-tensor current scaling): checks,
// the hook's report, the backend's do_ method, as in ops.cpp.
#include "model/op_checks.h"

namespace fsdp {

using namespace op_checks;

namespace {
// q holds the codes of every element of src (or, where allowed, is empty).
void codes_of(Tensor q, Tensor src, const char* op) {
  FSDP_CHECK(q.dtype == DType::u8 && q.numel == src.numel && floating(src.dtype), op, ": ",
             src.numel, " ", dtype_name(src.dtype), " into ", q.numel, " ", dtype_name(q.dtype));
}
// The same for a [rows, cols] source and its transposed codes.
void codes_t_of(Tensor q, Tensor qt, Tensor src, int rows, int cols, bool q_optional,
                const char* op) {
  const int64_t n = int64_t(rows) * cols;
  FSDP_CHECK((q_optional && q.numel == 0) || (q.dtype == DType::u8 && q.numel == n), op, ": [",
             rows, ", ", cols, "] into ", q.numel, " ", dtype_name(q.dtype));
  FSDP_CHECK(qt.dtype == DType::u8 && qt.numel == n && src.numel == n && floating(src.dtype), op,
             ": [", rows, ", ", cols, "] ", dtype_name(src.dtype), " from ", src.numel, " into ",
             qt.numel, " transposed");
}
std::string fp8_key(const char* op, Fp8 format, const std::string& shape) {
  return std::string(op) + " " + fp8_name(format) + " " + shape;
}
std::string dims(int64_t a, int64_t b) {
  return std::to_string(a) + "x" + std::to_string(b);
}
}  // namespace

void Ops::quantize_fp8(Tensor q, Tensor scale_inv, Tensor src, Fp8 format) {
  codes_of(q, src, "quantize_fp8");
  f32(scale_inv, 1, "quantize_fp8 scale_inv");
  const OpScope scope(hook_, [&] {
    return OpCall{fp8_key("quantize_fp8", format, std::to_string(src.numel)), 0,
                  2.0 * double(src.bytes()) + double(q.bytes())};
  });
  do_quantize_fp8(q, scale_inv, src, format);
}

void Ops::quantize_fp8_t(Tensor q, Tensor qt, Tensor scale_inv, Tensor src, int rows, int cols,
                         Fp8 format) {
  codes_t_of(q, qt, src, rows, cols, false, "quantize_fp8_t");
  f32(scale_inv, 1, "quantize_fp8_t scale_inv");
  const OpScope scope(hook_, [&] {
    return OpCall{fp8_key("quantize_fp8_t", format, dims(rows, cols)), 0,
                  2.0 * double(src.bytes()) + 2.0 * double(q.bytes())};
  });
  do_quantize_fp8_t(q, qt, scale_inv, src, rows, cols, format);
}

void Ops::quantize_fp8_t_amax(Tensor q, Tensor qt, Tensor scale_inv, Tensor src, Tensor amax,
                              int rows, int cols, Fp8 format) {
  codes_t_of(q, qt, src, rows, cols, true, "quantize_fp8_t_amax");
  f32(scale_inv, 1, "quantize_fp8_t_amax scale_inv");
  f32(amax, 1, "quantize_fp8_t_amax amax");
  const OpScope scope(hook_, [&] {
    return OpCall{std::string("quantize_fp8_t_amax ") + fp8_name(format) +
                      (q.numel ? " " : " t-only ") + dims(rows, cols),
                  0, double(src.bytes()) + double(q.bytes()) + double(qt.bytes())};
  });
  do_quantize_fp8_t_amax(q, qt, scale_inv, src, amax, rows, cols, format);
}

void Ops::amax(Tensor out, Tensor x) {
  floating(x, "amax x");
  f32(out, 1, "amax out");
  const OpScope scope(hook_, [&] { return OpCall{key("amax", {x.numel}), 0, double(x.bytes())}; });
  do_amax(out, x);
}

void Ops::quantize_fp8_amax(Tensor q, Tensor scale_inv, Tensor src, Tensor amax, Fp8 format) {
  codes_of(q, src, "quantize_fp8_amax");
  f32(scale_inv, 1, "quantize_fp8_amax scale_inv");
  f32(amax, 1, "quantize_fp8_amax amax");
  const OpScope scope(hook_, [&] {
    return OpCall{fp8_key("quantize_fp8_amax", format, std::to_string(src.numel)), 0,
                  double(src.bytes()) + double(q.bytes())};
  });
  do_quantize_fp8_amax(q, scale_inv, src, amax, format);
}

// One launch on a device covers them all, so all share one dtype.
void Ops::amax_each(Tensor out, const std::vector<Tensor>& xs) {
  f32(out, int64_t(xs.size()), "amax_each out");
  for (size_t i = 0; i < xs.size(); ++i)
    FSDP_CHECK(xs[i].dtype == xs[0].dtype && floating(xs[i].dtype), "amax_each: tensor ", i, " is ",
               dtype_name(xs[i].dtype), ", the first ", dtype_name(xs[0].dtype),
               " (one f32 or bf16 dtype for all)");
  const OpScope scope(hook_, [&] { return each_call("amax_each", xs); });
  do_amax_each(out, xs);
}
void Ops::do_amax_each(Tensor out, const std::vector<Tensor>& xs) {
  for (size_t i = 0; i < xs.size(); ++i) do_amax(out.slice(int64_t(i), 1), xs[i]);
}

void Ops::quantize_fp8_amax_each(const std::vector<Fp8Cast>& casts, Fp8 format) {
  for (size_t i = 0; i < casts.size(); ++i) {
    const Fp8Cast& c = casts[i];
    FSDP_CHECK(c.q.dtype == DType::u8 && c.q.numel == c.src.numel &&
                   c.src.dtype == casts[0].src.dtype && floating(c.src.dtype),
               "quantize_fp8_amax_each: cast ", i, ": ", c.src.numel, " ", dtype_name(c.src.dtype),
               " into ", c.q.numel, " ", dtype_name(c.q.dtype), " (one f32 or bf16 dtype for all)");
    f32(c.amax, 1, "quantize_fp8_amax_each amax");
    f32(c.scale_inv, 1, "quantize_fp8_amax_each scale_inv");
  }
  const OpScope scope(hook_, [&] {
    double bytes = 0;
    int64_t n = 0;
    for (const Fp8Cast& c : casts) bytes += double(c.src.bytes() + c.q.bytes()), n += c.src.numel;
    return OpCall{fp8_key("quantize_fp8_amax_each", format, dims(int64_t(casts.size()), n)), 0,
                  bytes};
  });
  do_quantize_fp8_amax_each(casts, format);
}
void Ops::do_quantize_fp8_amax_each(const std::vector<Fp8Cast>& casts, Fp8 format) {
  for (const Fp8Cast& c : casts) do_quantize_fp8_amax(c.q, c.scale_inv, c.src, c.amax, format);
}

void Ops::transpose_fp8(Tensor qt, Tensor q, int rows, int cols) {
  const int64_t n = int64_t(rows) * cols;
  FSDP_CHECK(q.dtype == DType::u8 && qt.dtype == DType::u8 && q.numel == n && qt.numel == n,
             "transpose_fp8: [", rows, ", ", cols, "] from ", q.numel, " into ", qt.numel);
  const OpScope scope(hook_, [&] {
    return OpCall{key("transpose_fp8", {rows, cols}), 0, 2.0 * double(q.bytes())};
  });
  do_transpose_fp8(qt, q, rows, cols);
}

void Ops::dequantize_fp8(Tensor dst, Tensor q, Tensor scale_inv, Fp8 format) {
  FSDP_CHECK(q.dtype == DType::u8 && q.numel == dst.numel && floating(dst.dtype),
             "dequantize_fp8: ", q.numel, " ", dtype_name(q.dtype), " into ", dst.numel, " ",
             dtype_name(dst.dtype));
  f32(scale_inv, 1, "dequantize_fp8 scale_inv");
  const OpScope scope(hook_, [&] {
    return OpCall{fp8_key("dequantize_fp8", format, std::to_string(dst.numel)), 0,
                  double(q.bytes()) + double(dst.bytes())};
  });
  do_dequantize_fp8(dst, q, scale_inv, format);
}

void Ops::linear_fp8(Tensor y, const Fp8Tensor& x, const Fp8Tensor& w, Tensor r, int M, int N,
                     int K) {
  codes(x, int64_t(M) * K, "linear_fp8 x");
  codes(w, int64_t(N) * K, "linear_fp8 w");
  act(*this, y, int64_t(M) * N, "linear_fp8 y");
  if (r.numel > 0) act(*this, r, int64_t(M) * N, "linear_fp8 r");
  const OpScope scope(hook_, [&] {
    return OpCall{key(r.numel > 0 ? "linear_fp8+r" : "linear_fp8", {M, N, K}), 2.0 * M * N * K, 0};
  });
  do_linear_fp8(y, x, w, r, M, N, K);
}

void Ops::linear_backward_fp8(Tensor dx, Tensor dw, const Fp8Tensor& dy, const Fp8Tensor& dyt,
                              const Fp8Tensor& xt, const Fp8Tensor& wt, int M, int N, int K,
                              bool accumulate_dx) {
  codes(dy, int64_t(M) * N, "linear_backward_fp8 dy");
  codes(dyt, int64_t(M) * N, "linear_backward_fp8 dyt");
  codes(xt, int64_t(M) * K, "linear_backward_fp8 xt");
  codes(wt, int64_t(N) * K, "linear_backward_fp8 wt");
  if (dx.numel > 0) act(*this, dx, int64_t(M) * K, "linear_backward_fp8 dx");
  grad(*this, dw, int64_t(N) * K, "linear_backward_fp8 dw");
  const OpScope scope(hook_, [&] {
    return OpCall{key("linear_backward_fp8", {M, N, K}), (dx.numel > 0 ? 4.0 : 2.0) * M * N * K, 0};
  });
  do_linear_backward_fp8(dx, dw, dy, dyt, xt, wt, M, N, K, accumulate_dx);
}

}  // namespace fsdp
