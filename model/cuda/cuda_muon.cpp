// CudaOps' Muon ops. The momentum and the update are one launch each over a
// unit's spans (muon.cu). Newton-Schulz runs in bf16 with fp32 accumulation,
// as Keller Jordan's Muon and modded-nanogpt run it, so the GEMMs are
// tensor-core GEMMs. Against fp32 that costs about 1e-2 relative on random
// matrices (bench/optim/newton_schulz_bf16_error.py) and about 1e-1 on nearly
// low-rank ones, whose small singular directions the iteration amplifies
// along with their rounding: the published method's own approximation. A
// batch of same-shape matrices runs each of the three products of a step as
// one strided-batched cuBLASLt GEMM.
//
// Cost at gpt-350m (24 blocks; per block Wq, Wo 1024x1024, Wk, Wv 256x1024,
// W1, W3, W2 2816x1024 or its transpose): 5 steps of 4 m^2 n + 2 m^3 FLOPs
// is 6.6 TFLOP per optimizer step, ~15 ms at 450 TFLOP/s, against ~2.5 s of
// model FLOPs at 0.5M tokens per step: about 0.6%, under the 5% goal.
#include <algorithm>

#include "model/cuda/cuda_ops_impl.h"

namespace fsdp {

using namespace cuda_args;

namespace {
// Spans as the kernels take them, kMax a launch.
template <typename F>
void in_launches(const std::vector<MuonSpan>& spans, float lr, F launch) {
  size_t next = 0;
  while (next < spans.size()) {
    cuda::MuonSpans chunk;
    for (; next < spans.size() && chunk.n < cuda::MuonSpans::kMax; ++next) {
      const MuonSpan& sp = spans[next];
      chunk.begin[chunk.n] = sp.begin;
      chunk.count[chunk.n] = sp.count;
      chunk.step[chunk.n] = lr * sp.lr_scale;  // the CPU reference's float product
      ++chunk.n;
    }
    launch(chunk);
  }
}
size_t round_up(size_t bytes) {
  return (bytes + 255) / 256 * 256;
}
}  // namespace

void CudaOps::do_muon_momentum(Tensor grad_t, Tensor buf, const std::vector<MuonSpan>& spans,
                               float momentum, bool nesterov, float grad_scale) {
  in_launches(spans, 0.0f, [&](const cuda::MuonSpans& chunk) {
    cuda::muon_momentum(f32(grad_t), f32(buf), chunk, momentum, nesterov, grad_scale,
                        impl_->stream);
  });
  after("muon_momentum");
}

void CudaOps::do_muon_update(Tensor param, Tensor update, const std::vector<MuonSpan>& spans,
                             float lr, float weight_decay) {
  const float decay = 1.0f - lr * weight_decay;  // as the CPU reference rounds it
  in_launches(spans, lr, [&](const cuda::MuonSpans& chunk) {
    cuda::muon_update(f32(param), f32(update), chunk, decay, impl_->stream);
  });
  after("muon_update");
}

void CudaOps::do_newton_schulz(const std::vector<Tensor>& outs, const std::vector<Tensor>& xs,
                               int64_t rows, int64_t cols, const NewtonSchulz& ns) {
  Impl& im = *impl_;
  const int batch = int(xs.size());
  const int r = int(rows), c = int(cols);
  const int m = std::min(r, c), n = std::max(r, c);  // X [m, n], the wide orientation
  const int64_t mn = int64_t(m) * n, mm = int64_t(m) * m;
  // One region: the batch's norms, then X, Y (the next X), A and B.
  const size_t norms = round_up(sizeof(double) * size_t(batch));
  const size_t xb = round_up(sizeof(bf16) * size_t(mn) * size_t(batch));
  const size_t ab = round_up(sizeof(bf16) * size_t(mm) * size_t(batch));
  char* w = static_cast<char*>(im.grow(im.ns_work, im.ns_bytes, norms + 2 * xb + 2 * ab));
  auto* sum_sq = reinterpret_cast<double*>(w);
  auto* X = reinterpret_cast<bf16*>(w + norms);
  auto* Y = reinterpret_cast<bf16*>(w + norms + xb);
  auto* A = reinterpret_cast<bf16*>(w + norms + 2 * xb);
  auto* B = reinterpret_cast<bf16*>(w + norms + 2 * xb + ab);
  for (int i = 0; i < batch; ++i) {
    cuda::sum_squares(sum_sq + i, xs[size_t(i)].f32(), mn, im.dev, im, im.stream);
    cuda::ns_load(X + i * mn, xs[size_t(i)].f32(), sum_sq + i, ns.eps, r, c, im.stream);
  }
  // cuBLASLt is column-major: the buffer of row-major X [m, n] is X^T [n, m]
  // to it. With A = X X^T and B = b A + c A A (both symmetric):
  for (int s = 0; s < ns.steps; ++s) {
    // A [m, m] = (X^T)^T X^T
    im.gemm->matmul_batched(true, false, m, m, n, X, n, mn, X, n, mn, A, m, mm, batch, 1.0f, 0.0f);
    // B = c A A + b A
    im.gemm->matmul_batched(false, false, m, m, m, A, m, mm, A, m, mm, B, m, mm, batch, ns.c, ns.b,
                            A);
    // Y^T [n, m] = X^T B^T + a X^T, which is (a X + B X)^T
    im.gemm->matmul_batched(false, true, n, m, m, X, n, mn, B, m, mm, Y, n, mn, batch, 1.0f, ns.a,
                            X);
    std::swap(X, Y);
  }
  for (int i = 0; i < batch; ++i)
    cuda::ns_store(outs[size_t(i)].f32(), X + i * mn, r, c, im.stream);
  after("newton_schulz");
}

}  // namespace fsdp
