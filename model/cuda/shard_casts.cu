// The engine's kernels over f32 shards: casts between the f32 masters and
// bf16 buffers, and gradient accumulation from f32 or bf16 into f32.
#include "model/cuda/device_utils.cuh"
#include "model/cuda/kernels.h"

namespace fsdp::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void cast_f32_bf16_kernel(bf16* d, const float* s, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    d[i] = __float2bfloat16_rn(s[i]);
}
__global__ void cast_bf16_f32_kernel(float* d, const bf16* s, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    d[i] = __bfloat162float(s[i]);
}
template <typename S>
__global__ void accumulate_kernel(float* d, const S* s, float scale, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    float v;
    if constexpr (sizeof(S) == 2) {
      v = __bfloat162float(s[i]);
    } else {
      v = s[i];
    }
    d[i] += scale * v;
  }
}

}  // namespace

void cast_f32_to_bf16(bf16* dst, const float* src, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  cast_f32_bf16_kernel<<<grid_stride_blocks(n, kThreads), kThreads, 0, stream>>>(dst, src, n);
  FSDP_LAUNCH_CHECK("cast_f32_bf16_kernel");
}

void cast_bf16_to_f32(float* dst, const bf16* src, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  cast_bf16_f32_kernel<<<grid_stride_blocks(n, kThreads), kThreads, 0, stream>>>(dst, src, n);
  FSDP_LAUNCH_CHECK("cast_bf16_f32_kernel");
}

void accumulate_f32(float* dst, const float* src, float scale, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  accumulate_kernel<float>
      <<<grid_stride_blocks(n, kThreads), kThreads, 0, stream>>>(dst, src, scale, n);
  FSDP_LAUNCH_CHECK("accumulate_kernel");
}

void accumulate_bf16(float* dst, const bf16* src, float scale, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  accumulate_kernel<bf16>
      <<<grid_stride_blocks(n, kThreads), kThreads, 0, stream>>>(dst, src, scale, n);
  FSDP_LAUNCH_CHECK("accumulate_kernel");
}

}  // namespace fsdp::cuda
