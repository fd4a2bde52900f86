// Muon's kernels (Ops::muon_momentum, newton_schulz, muon_update): the
// momentum and the update over a shard's spans, and the two casts around the
// bf16 Newton-Schulz iteration, whose GEMMs run through cuBLASLt
// (cuda_muon.cpp). The formulas are the CPU reference's
// (model/cpu/cpu_muon.cpp), term for term.
#include <algorithm>

#include "model/cuda/device_utils.cuh"
#include "model/cuda/kernels.h"

namespace fsdp::cuda {
namespace {

constexpr int kThreads = 256;

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

// X[m, n] (the wide orientation, row-major) = bf16(x / max(|x|_F, eps)),
// transposed when x is tall. The norm is float(sqrt(the double sum)), as the
// CPU reference rounds it. Writes are coalesced; a transposed read is
// strided, which at Muon's sizes (a few million elements) costs microseconds.
__global__ void ns_load_kernel(bf16* X, const float* x, const double* sum_sq, float eps, int rows,
                               int cols) {
  const float norm = fmaxf(float(sqrt(*sum_sq)), eps);
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

// Blocks along x: enough for the largest span to fill the GPU about as one
// grid-stride launch over all the spans would.
dim3 span_grid(const MuonSpans& spans) {
  int64_t largest = 0;
  for (int j = 0; j < spans.n; ++j) largest = std::max(largest, spans.count[j]);
  const unsigned x = std::max(1u, grid_stride_blocks(largest, kThreads) / unsigned(spans.n));
  return dim3(x, unsigned(spans.n));
}

}  // namespace

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

void ns_load(bf16* X, const float* x, const double* sum_sq, float eps, int rows, int cols,
             cudaStream_t stream) {
  const int64_t n = int64_t(rows) * cols;
  ns_load_kernel<<<grid_stride_blocks(n, kThreads), kThreads, 0, stream>>>(X, x, sum_sq, eps, rows,
                                                                           cols);
  FSDP_LAUNCH_CHECK("ns_load_kernel");
}

void ns_store(float* out, const bf16* X, int rows, int cols, cudaStream_t stream) {
  const int64_t n = int64_t(rows) * cols;
  ns_store_kernel<<<grid_stride_blocks(n, kThreads), kThreads, 0, stream>>>(out, X, rows, cols);
  FSDP_LAUNCH_CHECK("ns_store_kernel");
}

}  // namespace fsdp::cuda
