// The CPU reference of FP8 quantization (Ops::quantize_fp8): the definition
// the GPU's kernels are held to bit for bit, so it is the plainest form of
// the recipe: amax, the scale from it (common/fp8.h), one rounding per element.
#include <cmath>

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

void CpuOps::quantize_fp8(Tensor q, Tensor scale_inv, Tensor src, Fp8 format) {
  FSDP_CHECK(q.dtype == DType::u8 && q.numel == src.numel && float_type(src.dtype),
             "quantize_fp8: ", src.numel, " ", dtype_name(src.dtype), " into ", q.numel, " ",
             dtype_name(q.dtype));
  FSDP_CHECK(scale_inv.dtype == DType::f32 && scale_inv.numel >= 1, "quantize_fp8 scale_inv");
  float amax = 0.0f;
  for (int64_t i = 0; i < src.numel; ++i) amax = std::fmax(amax, std::fabs(element(src, i)));
  const float s = fp8_scale(amax, format);
  auto* out = static_cast<uint8_t*>(q.data);
  for (int64_t i = 0; i < src.numel; ++i) out[i] = f32_to_fp8(element(src, i) * s, format);
  scale_inv.f32()[0] = 1.0f / s;
}

void CpuOps::quantize_fp8_t(Tensor q, Tensor qt, Tensor scale_inv, Tensor src, int rows, int cols,
                            Fp8 format) {
  FSDP_CHECK(src.numel == int64_t(rows) * cols && qt.dtype == DType::u8 && qt.numel == src.numel,
             "quantize_fp8_t: [", rows, ", ", cols, "] from ", src.numel, " into ", qt.numel);
  quantize_fp8(q, scale_inv, src, format);
  const auto* in = static_cast<const uint8_t*>(q.data);
  auto* out = static_cast<uint8_t*>(qt.data);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) out[int64_t(c) * rows + r] = in[int64_t(r) * cols + c];
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

// Dequantized into f32 temporaries, then the reference GEMM: the exact
// product of the values the codes stand for, summed in fp32.
void CpuOps::linear_fp8(Tensor y, Tensor xq, Tensor x_scale_inv, Fp8 x_format, Tensor wq,
                        Tensor w_scale_inv, Fp8 w_format, int M, int N, int K) {
  FSDP_CHECK(xq.numel == int64_t(M) * K && wq.numel == int64_t(N) * K, "linear_fp8 sizes");
  Tensor x = alloc(DType::f32, xq.numel), w = alloc(DType::f32, wq.numel);
  dequantize_fp8(x, xq, x_scale_inv, x_format);
  dequantize_fp8(w, wq, w_scale_inv, w_format);
  linear(y, x, w, M, N, K);
  free(x);
  free(w);
}

}  // namespace fsdp
