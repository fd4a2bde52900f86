// The optimizer step's kernels over an f32 shard: the sum of squares behind
// the global gradient norm (computed apart from the update, so a bad step can
// be refused before anything changes) and the multi-span AdamW update.
#include <algorithm>

#include "model/cuda/cuda_ops_impl.h"
#include "model/cuda/device_utils.cuh"

namespace fsdp::cuda {
namespace {

constexpr int kThreads = 256;

struct AdamWStep {
  float lr, beta1, beta2, eps, grad_scale;
  float inv_bc1;       // 1 / (1 - beta1^step)
  float inv_sqrt_bc2;  // 1 / sqrt(1 - beta2^step)
};
// Sorted, disjoint [begin, end) runs of a shard, each with its decay factor
// 1 - lr * weight_decay; passed by value, so a unit's parameters fit one launch.
struct AdamWSpans {
  static constexpr int kMax = 32;
  int n = 0;
  int64_t begin[kMax], end[kMax];
  float decay[kMax];
};

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

namespace {

// AdamW over the spans; then, over all n, send = bf16(param) unless send is
// null and grad = 0 when clear_grad.
void adamw(float* param, float* grad, float* exp_avg, float* exp_avg_sq, bf16* send,
           bool clear_grad, int64_t n, const AdamWStep& s, const AdamWSpans& spans,
           cudaStream_t stream) {
  if (n == 0) return;
  adamw_kernel<<<grid_stride_blocks(n, kThreads), kThreads, 0, stream>>>(
      param, grad, exp_avg, exp_avg_sq, send, clear_grad, n, s, spans);
  FSDP_LAUNCH_CHECK("adamw_kernel");
}

}  // namespace
}  // namespace fsdp::cuda

// ---- CudaOps: this family's ops -------------------------------------------------
// The front door (model/op_checks.h) has checked every argument; these give
// the pointers their types and enqueue the launchers above on the stream.
namespace fsdp {

using namespace cuda_args;

double CudaOps::do_sum_squares(Tensor x) {
  const float* p = x.f32();
  if (x.numel == 0) return 0.0;
  cuda::sum_squares(impl_->ss, p, x.numel, impl_->dev, *impl_, impl_->stream);
  auto* host = reinterpret_cast<double*>(static_cast<char*>(impl_->host_words) + sizeof(double));
  FSDP_CUDA_CHECK(
      cudaMemcpyAsync(host, impl_->ss, sizeof(double), cudaMemcpyDeviceToHost, impl_->stream));
  impl_->sync("sum_squares");
  return *host;
}

void CudaOps::do_sum_squares_each(Tensor out, const std::vector<Tensor>& xs) {
  float* o = f32(out);
  for (size_t i = 0; i < xs.size(); ++i) {
    if (xs[i].numel == 0) {
      FSDP_CUDA_CHECK(cudaMemsetAsync(o + i, 0, sizeof(float), impl_->stream));
      continue;
    }
    cuda::sum_squares(o + i, xs[i].f32(), xs[i].numel, impl_->dev, *impl_, impl_->stream);
  }
  after("sum_squares_each");
}

void CudaOps::do_adamw(Tensor param, Tensor grad_t, Tensor exp_avg, Tensor exp_avg_sq, Tensor send,
                       const std::vector<AdamWSpan>& spans, const AdamWHyper& h, bool clear_grad) {
  const int64_t n = param.numel;
  float* p = param.f32();
  float* g = f32(grad_t);
  float* m = f32(exp_avg);
  float* v = f32(exp_avg_sq);
  bf16* s16 = nullptr;
  if (send.numel > 0 && send.data != param.data) {
    // The all-gather's copy is bf16 here; an f32 one is the parameter itself.
    FSDP_CHECK(send.dtype == DType::bf16, "adamw send is ", dtype_name(send.dtype),
               ", the cuda backend writes the all-gather's copy in bf16");
    s16 = bf(send);
  }
  // Step constants in double on the host, as the CPU reference computes them.
  const double bc1 = 1.0 - std::pow(double(h.beta1), h.step);
  const double bc2 = 1.0 - std::pow(double(h.beta2), h.step);
  const cuda::AdamWStep s{
      h.lr, h.beta1, h.beta2, h.eps, h.grad_scale, float(1.0 / bc1), float(1.0 / std::sqrt(bc2))};
  // Spans in launches of AdamWSpans::kMax (one for every unit of the model);
  // only the last writes the copy and clears, after every span has moved.
  size_t next = 0;
  do {
    cuda::AdamWSpans chunk;
    for (; next < spans.size() && chunk.n < cuda::AdamWSpans::kMax; ++next) {
      const AdamWSpan& sp = spans[next];
      chunk.begin[chunk.n] = sp.begin;
      chunk.end[chunk.n] = sp.begin + sp.count;
      chunk.decay[chunk.n] = float(1.0 - double(h.lr) * sp.weight_decay);
      ++chunk.n;
    }
    const bool last = next == spans.size();
    cuda::adamw(p, g, m, v, last ? s16 : nullptr, last && clear_grad, n, s, chunk, impl_->stream);
  } while (next < spans.size());
  after("adamw");
}

}  // namespace fsdp
