// The CPU reference of FP8 quantization (Ops::quantize_fp8): the definition
// the GPU's kernels are held to bit for bit, so it is the plainest form of
// the recipe: amax, the scale from it (common/fp8.h), one rounding per element.
#include <cmath>
#include <vector>

#include "model/cpu/cpu_ops.h"

namespace fsdp {

namespace {
float element(Tensor t, int64_t i) {
  return t.dtype == DType::bf16 ? bf16_to_f32(static_cast<const uint16_t*>(t.data)[i])
                                : static_cast<const float*>(t.data)[i];
}
}  // namespace

void CpuOps::do_amax(Tensor out, Tensor x) {
  float m = 0.0f;
  for (int64_t i = 0; i < x.numel; ++i) m = std::fmax(m, std::fabs(element(x, i)));
  out.f32()[0] = m;
}

void CpuOps::do_quantize_fp8_amax(Tensor q, Tensor scale_inv, Tensor src, Tensor amax, Fp8 format) {
  const float s = fp8_scale(amax.f32()[0], format);
  auto* out = static_cast<uint8_t*>(q.data);
  for (int64_t i = 0; i < src.numel; ++i) out[i] = f32_to_fp8(element(src, i) * s, format);
  scale_inv.f32()[0] = 1.0f / s;
}

void CpuOps::do_quantize_fp8(Tensor q, Tensor scale_inv, Tensor src, Fp8 format) {
  float m = 0.0f;
  CpuOps::do_amax(Tensor{&m, DType::f32, 1}, src);
  CpuOps::do_quantize_fp8_amax(q, scale_inv, src, Tensor{&m, DType::f32, 1}, format);
}

void CpuOps::do_transpose_fp8(Tensor qt, Tensor q, int rows, int cols) {
  const auto* in = static_cast<const uint8_t*>(q.data);
  auto* out = static_cast<uint8_t*>(qt.data);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) out[int64_t(c) * rows + r] = in[int64_t(r) * cols + c];
}

void CpuOps::do_quantize_fp8_t(Tensor q, Tensor qt, Tensor scale_inv, Tensor src, int rows,
                               int cols, Fp8 format) {
  CpuOps::do_quantize_fp8(q, scale_inv, src, format);
  CpuOps::do_transpose_fp8(qt, q, rows, cols);
}

void CpuOps::do_quantize_fp8_t_amax(Tensor q, Tensor qt, Tensor scale_inv, Tensor src, Tensor amax,
                                    int rows, int cols, Fp8 format) {
  Tensor codes = q.numel > 0 ? q : CpuOps::do_alloc(DType::u8, src.numel);
  CpuOps::do_quantize_fp8_amax(codes, scale_inv, src, amax, format);
  CpuOps::do_transpose_fp8(qt, codes, rows, cols);
  if (q.numel == 0) CpuOps::do_free(codes);
}

void CpuOps::do_dequantize_fp8(Tensor dst, Tensor q, Tensor scale_inv, Fp8 format) {
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
void CpuOps::do_linear_fp8(Tensor y, const Fp8Tensor& x, const Fp8Tensor& w, Tensor r, int M, int N,
                           int K) {
  Tensor xf = CpuOps::do_alloc(DType::f32, x.codes.numel);
  Tensor wf = CpuOps::do_alloc(DType::f32, w.codes.numel);
  CpuOps::do_dequantize_fp8(xf, x.codes, x.scale_inv, x.format);
  CpuOps::do_dequantize_fp8(wf, w.codes, w.scale_inv, w.format);
  if (r.numel > 0)
    CpuOps::do_linear_add(y, xf, wf, r, M, N, K);
  else
    CpuOps::do_linear(y, xf, wf, M, N, K);
  CpuOps::do_free(xf);
  CpuOps::do_free(wf);
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
void CpuOps::do_linear_backward_fp8(Tensor dx, Tensor dw, const Fp8Tensor& dy, const Fp8Tensor& dyt,
                                    const Fp8Tensor& xt, const Fp8Tensor& wt, int M, int N, int K,
                                    bool accumulate_dx) {
  auto values = [&](const Fp8Tensor& t) {
    Tensor f = CpuOps::do_alloc(DType::f32, t.codes.numel);
    CpuOps::do_dequantize_fp8(f, t.codes, t.scale_inv, t.format);
    std::vector<float> v(f.f32(), f.f32() + f.numel);
    CpuOps::do_free(f);
    return v;
  };
  std::vector<float> g = values(dy), gt = values(dyt);
  std::vector<float> x = untranspose(values(xt).data(), M, K);
  std::vector<float> w = untranspose(values(wt).data(), N, K);
  std::vector<float> g2 = untranspose(gt.data(), M, N);
  auto view = [](std::vector<float>& v) { return Tensor{v.data(), DType::f32, int64_t(v.size())}; };
  if (dx.numel > 0) {  // dx from dy; the dw this call also makes is dropped
    std::vector<float> unused(size_t(N) * K);
    CpuOps::do_linear_backward(dx, view(unused), view(g), view(x), view(w), M, N, K, accumulate_dx);
  }
  CpuOps::do_linear_backward(Tensor{nullptr, DType::f32, 0}, dw, view(g2), view(x), view(w), M, N,
                             K, false);
}

}  // namespace fsdp
