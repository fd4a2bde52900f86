// Muon's ops (Ops::muon_momentum, newton_schulz, muon_update, and NorMuon's
// row_mean_squares and normuon_scale) and their kernels: the momentum and the
// update, one launch each over a unit's spans, the two casts around the bf16
// Newton-Schulz iteration, whose GEMMs run through cuBLASLt, and NorMuon's
// row reduction, per-row factors and scaling. The formulas are the CPU reference's
// (model/cpu/cpu_muon.cpp), term for term.
//
// Newton-Schulz runs in bf16 with fp32 accumulation, as Keller Jordan's Muon
// and modded-nanogpt run it, so the GEMMs are tensor-core GEMMs. Against
// fp32 that costs about 1e-2 relative on random matrices
// (bench/optim/newton_schulz_bf16_error.py) and about 1e-1 on nearly
// low-rank ones, whose small singular directions the iteration amplifies
// along with their rounding: the published method's own approximation. A
// batch of same-shape matrices runs each of the three products of a step as
// one strided-batched cuBLASLt GEMM.
//
// Cost at gpt-350m (24 blocks; per block Wq, Wo 1024x1024, Wk, Wv 256x1024,
// W1, W3, W2 2816x1024 or its transpose): 5 steps of 4 m^2 n + 2 m^3 FLOPs
// is 6.6 TFLOP per optimizer step, ~15 ms at 450 TFLOP/s, against ~2.5 s of
// model FLOPs at 0.5M tokens per step: about 0.6%, under the issue's 5% goal.
#include <algorithm>

#include "model/cuda/cuda_ops_impl.h"
#include "model/cuda/device_utils.cuh"

namespace fsdp::cuda {
namespace {

constexpr int kThreads = 256;

// Sorted, disjoint runs [begin, begin + count) of a shard, each with its step
// lr x lr_scale (muon_update); by value, so a unit's matrices fit one launch.
struct MuonSpans {
  static constexpr int kMax = 32;
  int n = 0;
  int64_t begin[kMax], count[kMax];
  float step[kMax];
};

// torch.lerp's formula: start + w (end - start), from the nearer end.
__device__ float lerp(float start, float end, float w) {
  return w < 0.5f ? start + w * (end - start) : end - (end - start) * (1.0f - w);
}

// One launch for every span: blockIdx.y picks the span, the x blocks stride
// over its elements (spans are a unit's few matrices, of very different sizes).
__global__ void muon_momentum_kernel(float* g, float* b, MuonSpans spans, float momentum,
                                     bool nesterov, float grad_scale) {
  const int64_t begin = spans.begin[blockIdx.y], count = spans.count[blockIdx.y];
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t e = begin + i;
    const float gi = g[e] * grad_scale;
    const float bi = lerp(b[e], gi, 1.0f - momentum);
    b[e] = bi;
    g[e] = nesterov ? lerp(gi, bi, momentum) : bi;
  }
}

__global__ void muon_update_kernel(float* p, const float* u, MuonSpans spans, float decay) {
  const int64_t begin = spans.begin[blockIdx.y], count = spans.count[blockIdx.y];
  const float step = spans.step[blockIdx.y];
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t e = begin + i;
    p[e] = p[e] * decay - step * u[e];
  }
}

// X[m, n] (the wide orientation, row-major) = bf16(x / max(scale |x|_F, eps)),
// transposed when x is tall. The norm is float(sqrt(the double sum)), as the
// CPU reference rounds it. Writes are coalesced; a transposed read is
// strided, which at Muon's sizes (a few million elements) costs microseconds.
__global__ void ns_load_kernel(bf16* X, const float* x, const double* sum_sq, float scale,
                               float eps, int rows, int cols) {
  const float norm = fmaxf(float(sqrt(*sum_sq)) * scale, eps);
  const bool tall = rows > cols;
  const int n = tall ? rows : cols;
  const int64_t total = int64_t(rows) * cols;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / n, c = i % n;  // X's row and column
    X[i] = __float2bfloat16_rn(x[tall ? c * cols + r : i] / norm);
  }
}

__global__ void ns_store_kernel(float* out, const bf16* X, int rows, int cols) {
  const bool tall = rows > cols;
  const int n = tall ? rows : cols;
  const int64_t total = int64_t(rows) * cols;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = i % cols;  // out's row and column
    out[i] = __bfloat162float(X[tall ? c * n + r : i]);
  }
}

// NorMuon. out[r] = mean of x[r, :]^2: a block per row, the sum in double
// (as the CPU reference), so its order is fixed by the launch shape.
__global__ void row_mean_squares_kernel(float* out, const float* x, int64_t cols) {
  __shared__ double warp_sums[32];
  const float* row = x + int64_t(blockIdx.x) * cols;
  double sq = 0;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) sq += double(row[c]) * row[c];
  sq = block_sum(sq, warp_sums);
  if (threadIdx.x == 0) out[blockIdx.x] = float(sq / double(cols));
}

// One block over the rows of a matrix (a few thousand): v = lerp(v, m,
// 1 - beta2), s = 1 / (sqrt(v) + eps), and in place of m the rows' factors
// s sqrt(sum m / sum m s^2): 0 for an update of 0, NaN stays NaN.
__global__ void normuon_factors_kernel(float* m, float* v, int64_t rows, float beta2, float eps) {
  __shared__ double warp_sums[32];
  double sum_m = 0, sum_ms2 = 0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
    const float vr = lerp(v[r], m[r], 1.0f - beta2);
    const float sr = 1.0f / (sqrtf(vr) + eps);
    v[r] = vr;
    sum_m += m[r];
    sum_ms2 += double(m[r]) * sr * sr;
  }
  sum_m = block_sum(sum_m, warp_sums);
  sum_ms2 = block_sum(sum_ms2, warp_sums);
  const float keep = sum_ms2 == 0 ? 0.0f : float(sqrt(sum_m / sum_ms2));
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x)  // the rows this thread wrote
    m[r] = (1.0f / (sqrtf(v[r]) + eps)) * keep;
}

// x[i] *= factor[(first + i) / cols] over a rank's slice of the update.
__global__ void scale_rows_kernel(float* x, const float* factor, int64_t first, int64_t count,
                                  int64_t cols) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count;
       i += int64_t(gridDim.x) * blockDim.x)
    x[i] *= factor[(first + i) / cols];
}

// Blocks along x: enough for the largest span to fill the GPU about as one
// grid-stride launch over all the spans would.
dim3 span_grid(const MuonSpans& spans) {
  int64_t largest = 0;
  for (int j = 0; j < spans.n; ++j) largest = std::max(largest, spans.count[j]);
  const unsigned x = std::max(1u, grid_stride_blocks(largest, kThreads) / unsigned(spans.n));
  return dim3(x, unsigned(spans.n));
}

void muon_momentum(float* grad, float* buf, const MuonSpans& spans, float momentum, bool nesterov,
                   float grad_scale, cudaStream_t stream) {
  if (spans.n == 0) return;
  muon_momentum_kernel<<<span_grid(spans), kThreads, 0, stream>>>(grad, buf, spans, momentum,
                                                                  nesterov, grad_scale);
  FSDP_LAUNCH_CHECK("muon_momentum_kernel");
}

void muon_update(float* param, const float* update, const MuonSpans& spans, float decay,
                 cudaStream_t stream) {
  if (spans.n == 0) return;
  muon_update_kernel<<<span_grid(spans), kThreads, 0, stream>>>(param, update, spans, decay);
  FSDP_LAUNCH_CHECK("muon_update_kernel");
}

// Newton-Schulz's first and last pass: X [m, n] (m <= n, the wide
// orientation) = bf16(x / max(scale sqrt(*sum_sq), eps)) from x [rows, cols],
// transposed when rows > cols; and out [rows, cols] = f32(X), transposed back.
void ns_load(bf16* X, const float* x, const double* sum_sq, float scale, float eps, int rows,
             int cols, cudaStream_t stream) {
  const int64_t n = int64_t(rows) * cols;
  ns_load_kernel<<<grid_stride_blocks(n, kThreads), kThreads, 0, stream>>>(X, x, sum_sq, scale, eps,
                                                                           rows, cols);
  FSDP_LAUNCH_CHECK("ns_load_kernel");
}

void ns_store(float* out, const bf16* X, int rows, int cols, cudaStream_t stream) {
  const int64_t n = int64_t(rows) * cols;
  ns_store_kernel<<<grid_stride_blocks(n, kThreads), kThreads, 0, stream>>>(out, X, rows, cols);
  FSDP_LAUNCH_CHECK("ns_store_kernel");
}

void row_mean_squares(float* out, const float* x, int64_t rows, int64_t cols, cudaStream_t stream) {
  row_mean_squares_kernel<<<unsigned(rows), kThreads, 0, stream>>>(out, x, cols);
  FSDP_LAUNCH_CHECK("row_mean_squares_kernel");
}

void normuon_scale(float* x, int64_t first, int64_t count, float* stats, int64_t rows, int64_t cols,
                   float beta2, float eps, cudaStream_t stream) {
  normuon_factors_kernel<<<1, 1024, 0, stream>>>(stats, stats + rows, rows, beta2, eps);
  FSDP_LAUNCH_CHECK("normuon_factors_kernel");
  if (count == 0) return;
  scale_rows_kernel<<<grid_stride_blocks(count, kThreads), kThreads, 0, stream>>>(x, stats, first,
                                                                                  count, cols);
  FSDP_LAUNCH_CHECK("scale_rows_kernel");
}

}  // namespace
}  // namespace fsdp::cuda

// ---- CudaOps: this family's ops -------------------------------------------------
// The front door (model/op_checks.h) has checked every argument; these give
// the pointers their types and enqueue the launchers above on the stream.
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
    cuda::ns_load(X + i * mn, xs[size_t(i)].f32(), sum_sq + i, ns.norm_scale, ns.eps, r, c,
                  im.stream);
  }
  // cuBLASLt is column-major: the buffer of row-major X [m, n] is X^T [n, m]
  // to it. With A = X X^T and B = b A + c A A (both symmetric):
  for (int s = 0; s < ns.steps; ++s) {
    const NsQuintic& q = ns.quintic(s);
    // A [m, m] = (X^T)^T X^T
    im.gemm->matmul_batched(true, false, m, m, n, X, n, mn, X, n, mn, A, m, mm, batch, 1.0f, 0.0f);
    // B = c A A + b A
    im.gemm->matmul_batched(false, false, m, m, m, A, m, mm, A, m, mm, B, m, mm, batch, q.c, q.b,
                            A);
    // Y^T [n, m] = X^T B^T + a X^T, which is (a X + B X)^T
    im.gemm->matmul_batched(false, true, n, m, m, X, n, mn, B, m, mm, Y, n, mn, batch, 1.0f, q.a,
                            X);
    std::swap(X, Y);
  }
  for (int i = 0; i < batch; ++i)
    cuda::ns_store(outs[size_t(i)].f32(), X + i * mn, r, c, im.stream);
  after("newton_schulz");
}

void CudaOps::do_row_mean_squares(Tensor out, Tensor x, int64_t rows, int64_t cols) {
  cuda::row_mean_squares(f32(out), f32(x), rows, cols, impl_->stream);
  after("row_mean_squares");
}

void CudaOps::do_normuon_scale(Tensor x, int64_t first, int64_t count, Tensor stats, int64_t rows,
                               int64_t cols, float beta2, float eps) {
  cuda::normuon_scale(f32(x), first, count, f32(stats), rows, cols, beta2, eps, impl_->stream);
  after("normuon_scale");
}

}  // namespace fsdp
