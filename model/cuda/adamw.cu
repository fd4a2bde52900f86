// The optimizer step's kernels over an f32 shard: the sum of squares behind
// the global gradient norm (computed apart from the update, so a bad step can
// be refused before anything changes) and the multi-span AdamW update.
#include <algorithm>

#include "model/cuda/device_utils.cuh"
#include "model/cuda/kernels.h"

namespace fsdp::cuda {
namespace {

constexpr int kThreads = 256;

// Per-block partial sums in double over a fixed grid, then one block adds the
// partials in order: the gradient norm is reproducible run to run.
__global__ void sum_squares_kernel(double* partial, const float* x, int64_t n) {
  __shared__ double warp_sums[kThreads / 32];
  double s = 0.0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    s += double(x[i]) * double(x[i]);
  s = block_sum(s, warp_sums);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}
template <typename R>
__global__ void sum_partials_kernel(R* result, const double* partial, int blocks) {
  __shared__ double warp_sums[kThreads / 32];
  double s = 0.0;
  for (int i = threadIdx.x; i < blocks; i += blockDim.x) s += partial[i];
  s = block_sum(s, warp_sums);
  if (threadIdx.x == 0) *result = R(s);
}

// torch.optim.AdamW order: decoupled decay of the weight, then the
// bias-corrected step with eps outside the square root. Each element finds its
// span by scanning the few sorted spans; elements in none keep their values.
// The bf16 copy and the cleared gradient cover the whole shard, so this one
// pass replaces AdamW per parameter, the send-buffer cast and the memset.
__global__ void adamw_kernel(float* p, float* g, float* m, float* v, bf16* send, bool clear_grad,
                             int64_t n, AdamWStep s, AdamWSpans spans) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    float pi = p[i];
    int j = 0;
    while (j < spans.n && i >= spans.end[j]) ++j;
    if (j < spans.n && i >= spans.begin[j]) {
      const float gi = g[i] * s.grad_scale;
      const float mi = s.beta1 * m[i] + (1.0f - s.beta1) * gi;
      const float vi = s.beta2 * v[i] + (1.0f - s.beta2) * gi * gi;
      m[i] = mi;
      v[i] = vi;
      const float denom = sqrtf(vi) * s.inv_sqrt_bc2 + s.eps;
      pi = pi * spans.decay[j] - s.lr * (mi * s.inv_bc1) / denom;
      p[i] = pi;
    }
    if (send) send[i] = __float2bfloat16_rn(pi);
    if (clear_grad) g[i] = 0.0f;
  }
}

}  // namespace

template <typename R>
void sum_squares_into(R* result, const float* x, int64_t n, const DeviceInfo& dev, Scratch& scratch,
                      cudaStream_t stream) {
  const int blocks = int(std::min<int64_t>(std::max<int64_t>(1, (n + kThreads - 1) / kThreads),
                                           int64_t(dev.sm_count) * 8));
  auto* partial = static_cast<double*>(scratch.get(size_t(blocks) * sizeof(double)));
  sum_squares_kernel<<<blocks, kThreads, 0, stream>>>(partial, x, n);
  FSDP_LAUNCH_CHECK("sum_squares_kernel");
  sum_partials_kernel<R><<<1, kThreads, 0, stream>>>(result, partial, blocks);
  FSDP_LAUNCH_CHECK("sum_partials_kernel");
}

void sum_squares(double* result, const float* x, int64_t n, const DeviceInfo& dev, Scratch& scratch,
                 cudaStream_t stream) {
  sum_squares_into(result, x, n, dev, scratch, stream);
}

void sum_squares(float* result, const float* x, int64_t n, const DeviceInfo& dev, Scratch& scratch,
                 cudaStream_t stream) {
  sum_squares_into(result, x, n, dev, scratch, stream);
}

void adamw(float* param, float* grad, float* exp_avg, float* exp_avg_sq, bf16* send,
           bool clear_grad, int64_t n, const AdamWStep& s, const AdamWSpans& spans,
           cudaStream_t stream) {
  if (n == 0) return;
  adamw_kernel<<<grid_stride_blocks(n, kThreads), kThreads, 0, stream>>>(
      param, grad, exp_avg, exp_avg_sq, send, clear_grad, n, s, spans);
  FSDP_LAUNCH_CHECK("adamw_kernel");
}

}  // namespace fsdp::cuda
