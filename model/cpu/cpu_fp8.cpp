// The CPU reference of FP8 quantization (Ops::quantize_fp8): the definition
// the GPU's kernels are held to bit for bit, so it is the plainest form of
// the recipe: amax, the scale from it (common/fp8.h), one rounding per element.
#include <cmath>
#include <vector>

#include "model/cpu/cpu_ops.h"

namespace fsdp {

namespace {
bool float_type(DType t) {
  return t == DType::f32 || t == DType::bf16;
}
float element(Tensor t, int64_t i) {
  return t.dtype == DType::bf16 ? bf16_to_f32(static_cast<const uint16_t*>(t.data)[i])
                                : static_cast<const float*>(t.data)[i];
}
}  // namespace

void CpuOps::amax(Tensor out, Tensor x) {
  FSDP_CHECK(float_type(x.dtype) && out.dtype == DType::f32 && out.numel >= 1,
             "amax: ", dtype_name(x.dtype), " into ", out.numel, " ", dtype_name(out.dtype));
  float m = 0.0f;
  for (int64_t i = 0; i < x.numel; ++i) m = std::fmax(m, std::fabs(element(x, i)));
  out.f32()[0] = m;
}

void CpuOps::quantize_fp8_amax(Tensor q, Tensor scale_inv, Tensor src, Tensor amax, Fp8 format) {
  FSDP_CHECK(q.dtype == DType::u8 && q.numel == src.numel && float_type(src.dtype),
             "quantize_fp8: ", src.numel, " ", dtype_name(src.dtype), " into ", q.numel, " ",
             dtype_name(q.dtype));
  FSDP_CHECK(scale_inv.dtype == DType::f32 && scale_inv.numel >= 1, "quantize_fp8 scale_inv");
  FSDP_CHECK(amax.dtype == DType::f32 && amax.numel >= 1, "quantize_fp8 amax");
  const float s = fp8_scale(amax.f32()[0], format);
  auto* out = static_cast<uint8_t*>(q.data);
  for (int64_t i = 0; i < src.numel; ++i) out[i] = f32_to_fp8(element(src, i) * s, format);
  scale_inv.f32()[0] = 1.0f / s;
}

void CpuOps::quantize_fp8(Tensor q, Tensor scale_inv, Tensor src, Fp8 format) {
  float m = 0.0f;
  amax(Tensor{&m, DType::f32, 1}, src);
  quantize_fp8_amax(q, scale_inv, src, Tensor{&m, DType::f32, 1}, format);
}

void CpuOps::transpose_fp8(Tensor qt, Tensor q, int rows, int cols) {
  FSDP_CHECK(q.dtype == DType::u8 && qt.dtype == DType::u8 && q.numel == int64_t(rows) * cols &&
                 qt.numel == q.numel,
             "transpose_fp8: [", rows, ", ", cols, "] from ", q.numel, " into ", qt.numel);
  const auto* in = static_cast<const uint8_t*>(q.data);
  auto* out = static_cast<uint8_t*>(qt.data);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) out[int64_t(c) * rows + r] = in[int64_t(r) * cols + c];
}

void CpuOps::quantize_fp8_t(Tensor q, Tensor qt, Tensor scale_inv, Tensor src, int rows, int cols,
                            Fp8 format) {
  FSDP_CHECK(src.numel == int64_t(rows) * cols, "quantize_fp8_t: [", rows, ", ", cols, "] from ",
             src.numel);
  quantize_fp8(q, scale_inv, src, format);
  transpose_fp8(qt, q, rows, cols);
}

void CpuOps::quantize_fp8_t_amax(Tensor q, Tensor qt, Tensor scale_inv, Tensor src, Tensor amax,
                                 int rows, int cols, Fp8 format) {
  FSDP_CHECK(src.numel == int64_t(rows) * cols && (q.numel == 0 || q.numel == src.numel),
             "quantize_fp8_t_amax: [", rows, ", ", cols, "] from ", src.numel, " into ", q.numel);
  Tensor codes = q.numel > 0 ? q : alloc(DType::u8, src.numel);
  quantize_fp8_amax(codes, scale_inv, src, amax, format);
  transpose_fp8(qt, codes, rows, cols);
  if (q.numel == 0) free(codes);
}

void CpuOps::dequantize_fp8(Tensor dst, Tensor q, Tensor scale_inv, Fp8 format) {
  FSDP_CHECK(q.dtype == DType::u8 && q.numel == dst.numel && float_type(dst.dtype),
             "dequantize_fp8: ", q.numel, " ", dtype_name(q.dtype), " into ", dst.numel, " ",
             dtype_name(dst.dtype));
  FSDP_CHECK(scale_inv.dtype == DType::f32 && scale_inv.numel >= 1, "dequantize_fp8 scale_inv");
  const float si = scale_inv.f32()[0];
  const auto* in = static_cast<const uint8_t*>(q.data);
  for (int64_t i = 0; i < dst.numel; ++i) {
    const float v = fp8_to_f32(in[i], format) * si;
    if (dst.dtype == DType::bf16)
      static_cast<uint16_t*>(dst.data)[i] = f32_to_bf16(v);
    else
      static_cast<float*>(dst.data)[i] = v;
  }
}

// Dequantized into f32 temporaries, then the reference GEMMs: the exact
// products of the values the codes stand for, summed in fp32.
void CpuOps::linear_fp8(Tensor y, const Fp8Tensor& x, const Fp8Tensor& w, Tensor r, int M, int N,
                        int K) {
  FSDP_CHECK(x.codes.numel == int64_t(M) * K && w.codes.numel == int64_t(N) * K,
             "linear_fp8 sizes");
  Tensor xf = alloc(DType::f32, x.codes.numel), wf = alloc(DType::f32, w.codes.numel);
  dequantize_fp8(xf, x.codes, x.scale_inv, x.format);
  dequantize_fp8(wf, w.codes, w.scale_inv, w.format);
  if (r.numel > 0)
    linear_add(y, xf, wf, r, M, N, K);
  else
    linear(y, xf, wf, M, N, K);
  free(xf);
  free(wf);
}

namespace {
// A [cols, rows] f32 matrix back to [rows, cols].
std::vector<float> untranspose(const float* t, int rows, int cols) {
  std::vector<float> m(size_t(rows) * cols);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) m[size_t(r) * cols + c] = t[size_t(c) * rows + r];
  return m;
}
}  // namespace

// dx from dy's codes, dw from dyt's (as the GPU does), x and w from their
// transposed codes turned back: the reference linear_backward on the values.
void CpuOps::linear_backward_fp8(Tensor dx, Tensor dw, const Fp8Tensor& dy, const Fp8Tensor& dyt,
                                 const Fp8Tensor& xt, const Fp8Tensor& wt, int M, int N, int K,
                                 bool accumulate_dx) {
  FSDP_CHECK(dy.codes.numel == int64_t(M) * N && dyt.codes.numel == int64_t(M) * N &&
                 xt.codes.numel == int64_t(M) * K && wt.codes.numel == int64_t(N) * K,
             "linear_backward_fp8 sizes");
  auto values = [&](const Fp8Tensor& t) {
    Tensor f = alloc(DType::f32, t.codes.numel);
    dequantize_fp8(f, t.codes, t.scale_inv, t.format);
    std::vector<float> v(f.f32(), f.f32() + f.numel);
    free(f);
    return v;
  };
  std::vector<float> g = values(dy), gt = values(dyt);
  std::vector<float> x = untranspose(values(xt).data(), M, K);
  std::vector<float> w = untranspose(values(wt).data(), N, K);
  std::vector<float> g2 = untranspose(gt.data(), M, N);
  auto view = [](std::vector<float>& v) { return Tensor{v.data(), DType::f32, int64_t(v.size())}; };
  if (dx.numel > 0) {  // dx from dy; the dw this call also makes is dropped
    std::vector<float> unused(size_t(N) * K);
    linear_backward(dx, view(unused), view(g), view(x), view(w), M, N, K, accumulate_dx);
  }
  linear_backward(Tensor{nullptr, DType::f32, 0}, dw, view(g2), view(x), view(w), M, N, K, false);
}

}  // namespace fsdp
