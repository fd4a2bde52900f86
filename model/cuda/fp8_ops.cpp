// CudaOps' FP8 ops: casts with per-tensor current scaling (fp8.cu) and the
// cuBLASLt FP8 GEMMs of a linear's forward and backward (gemm.cpp).
#include "model/cuda/cuda_ops_impl.h"

namespace fsdp {

using namespace cuda_args;

void CudaOps::do_quantize_fp8(Tensor q, Tensor scale_inv, Tensor src, Fp8 format) {
  cuda::quantize_fp8(static_cast<uint8_t*>(q.data), f32(scale_inv), src.data,
                     src.dtype == DType::bf16, src.numel, format == Fp8::e5m2, fp8_spec(format).max,
                     *impl_, impl_->stream);
  after("quantize_fp8");
}

void CudaOps::do_quantize_fp8_t(Tensor q, Tensor qt, Tensor scale_inv, Tensor src, int rows,
                                int cols, Fp8 format) {
  cuda::quantize_fp8_t(static_cast<uint8_t*>(q.data), static_cast<uint8_t*>(qt.data),
                       f32(scale_inv), src.data, src.dtype == DType::bf16, rows, cols,
                       format == Fp8::e5m2, fp8_spec(format).max, *impl_, impl_->stream);
  after("quantize_fp8_t");
}

void CudaOps::do_quantize_fp8_t_amax(Tensor q, Tensor qt, Tensor scale_inv, Tensor src, Tensor amax,
                                     int rows, int cols, Fp8 format) {
  cuda::quantize_fp8_t_amax(q.numel > 0 ? static_cast<uint8_t*>(q.data) : nullptr,
                            static_cast<uint8_t*>(qt.data), f32(scale_inv), src.data,
                            src.dtype == DType::bf16, rows, cols, f32(amax), format == Fp8::e5m2,
                            fp8_spec(format).max, impl_->stream);
  after("quantize_fp8_t_amax");
}

void CudaOps::do_amax(Tensor out, Tensor x) {
  cuda::amax(f32(out), x.data, x.dtype == DType::bf16, x.numel, impl_->stream);
  after("amax");
}

void CudaOps::do_quantize_fp8_amax(Tensor q, Tensor scale_inv, Tensor src, Tensor amax,
                                   Fp8 format) {
  cuda::quantize_fp8_amax(static_cast<uint8_t*>(q.data), f32(scale_inv), src.data,
                          src.dtype == DType::bf16, src.numel, f32(amax), format == Fp8::e5m2,
                          fp8_spec(format).max, impl_->stream);
  after("quantize_fp8_amax");
}

namespace {
// launch(a) for each run of up to cuda::Fp8Each::kMax entries, after
// fill(a, i) for every entry i of the run (each one a kernel argument).
template <typename Fill, typename Launch>
void in_launches(size_t count, Fill&& fill, Launch&& launch) {
  for (size_t first = 0; first < count; first += cuda::Fp8Each::kMax) {
    cuda::Fp8Each a;
    for (size_t i = first; i < count && a.count < cuda::Fp8Each::kMax; ++i, ++a.count) fill(a, i);
    launch(a);
  }
}
}  // namespace

// All of one dtype, f32 or bf16.
void CudaOps::do_amax_each(Tensor out, const std::vector<Tensor>& xs) {
  float* o = f32(out);
  if (xs.empty()) return;
  FSDP_CUDA_CHECK(cudaMemsetAsync(o, 0, xs.size() * sizeof(float), impl_->stream));
  const bool is_bf16 = xs[0].dtype == DType::bf16;
  in_launches(
      xs.size(),
      [&](cuda::Fp8Each& a, size_t i) {
        a.src[a.count] = xs[i].data;
        a.n[a.count] = xs[i].numel;
        a.amax[a.count] = o + i;
      },
      [&](const cuda::Fp8Each& a) { cuda::amax_each(a, is_bf16, impl_->stream); });
  after("amax_each");
}

void CudaOps::do_quantize_fp8_amax_each(const std::vector<Fp8Cast>& casts, Fp8 format) {
  if (casts.empty()) return;
  const bool is_bf16 = casts[0].src.dtype == DType::bf16;
  in_launches(
      casts.size(),
      [&](cuda::Fp8Each& a, size_t i) {
        const Fp8Cast& c = casts[i];
        a.src[a.count] = c.src.data;
        a.q[a.count] = static_cast<uint8_t*>(c.q.data);
        a.n[a.count] = c.src.numel;
        a.amax[a.count] = f32(c.amax);
        a.scale_inv[a.count] = f32(c.scale_inv);
      },
      [&](const cuda::Fp8Each& a) {
        cuda::quantize_fp8_amax_each(a, is_bf16, format == Fp8::e5m2, fp8_spec(format).max,
                                     impl_->stream);
      });
  after("quantize_fp8_amax_each");
}

void CudaOps::do_transpose_fp8(Tensor qt, Tensor q, int rows, int cols) {
  cuda::transpose_fp8(static_cast<uint8_t*>(qt.data), static_cast<const uint8_t*>(q.data), rows,
                      cols, impl_->stream);
  after("transpose_fp8");
}

void CudaOps::do_dequantize_fp8(Tensor dst, Tensor q, Tensor scale_inv, Fp8 format) {
  cuda::dequantize_fp8(dst.data, dst.dtype == DType::bf16, static_cast<const uint8_t*>(q.data),
                       f32(scale_inv), dst.numel, format == Fp8::e5m2, impl_->stream);
  after("dequantize_fp8");
}

namespace {
int fp8_code(Fp8 f) {
  return f == Fp8::e4m3 ? 1 : 2;
}
const uint8_t* codes(const Fp8Tensor& t) {
  return static_cast<const uint8_t*>(t.codes.data);
}
}  // namespace

// As linear (y^T = W x^T in cuBLASLt's column-major view), on FP8 codes:
// W is A with its scale, x is B with its; r, when given, is C with beta 1.
void CudaOps::do_linear_fp8(Tensor y, const Fp8Tensor& x, const Fp8Tensor& w, Tensor r, int M,
                            int N, int K) {
  const uint8_t* xq = codes(x);
  const uint8_t* wq = codes(w);
  bf16* yo = bf(y);
  const bf16* ro = r.numel > 0 ? bf(r) : nullptr;
  impl_->gemm->matmul_fp8(N, M, K, wq, K, fp8_code(w.format), f32(w.scale_inv), xq, K,
                          fp8_code(x.format), f32(x.scale_inv), yo, false, N, ro ? 1.0f : 0.0f, ro);
  after("linear_fp8");
}

// Both products in the "TN" form, from the transposed codes:
//   dx^T [K, M] = (wt [K, N] row-major)^T-view . dy: A = wt (lda N), B = dy (ldb N)
//   dw^T [K, N] += x^T . dy: A = xt [K, M] (lda M), B = dyt [N, M] (ldb M)
void CudaOps::do_linear_backward_fp8(Tensor dx, Tensor dw, const Fp8Tensor& dy,
                                     const Fp8Tensor& dyt, const Fp8Tensor& xt, const Fp8Tensor& wt,
                                     int M, int N, int K, bool accumulate_dx) {
  const uint8_t* g = codes(dy);
  const uint8_t* gt = codes(dyt);
  const uint8_t* xq = codes(xt);
  const uint8_t* wq = codes(wt);
  const float* gs = f32(dy.scale_inv);
  if (dx.numel > 0)
    impl_->gemm->matmul_fp8(K, M, N, wq, N, fp8_code(wt.format), f32(wt.scale_inv), g, N,
                            fp8_code(dy.format), gs, bf(dx), false, K, accumulate_dx ? 1.0f : 0.0f);
  bool dw_bf16 = false;
  void* dwo = grad(dw, dw_bf16);
  impl_->gemm->matmul_fp8(K, N, M, xq, M, fp8_code(xt.format), f32(xt.scale_inv), gt, M,
                          fp8_code(dyt.format), f32(dyt.scale_inv), dwo, !dw_bf16, K, 1.0f);
  after("linear_backward_fp8");
}

}  // namespace fsdp
