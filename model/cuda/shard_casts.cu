// The engine's kernels over f32 shards: casts between the f32 masters and
// bf16 buffers, and gradient accumulation from f32 or bf16 into f32.
#include "model/cuda/cuda_ops_impl.h"
#include "model/cuda/device_utils.cuh"

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

}  // namespace
}  // namespace fsdp::cuda

// ---- CudaOps: this family's ops -------------------------------------------------
// The front door (model/op_checks.h) has checked every argument; these give
// the pointers their types and enqueue the launchers above on the stream.
namespace fsdp {

using namespace cuda_args;

void CudaOps::do_cast(Tensor dst, Tensor src) {
  if (dst.dtype == src.dtype) {
    do_copy(dst, src);
  } else if (dst.dtype == DType::bf16) {
    cuda::cast_f32_to_bf16(static_cast<bf16*>(dst.data), src.f32(), dst.numel, impl_->stream);
  } else {
    cuda::cast_bf16_to_f32(dst.f32(), static_cast<const bf16*>(src.data), dst.numel, impl_->stream);
  }
  after("cast");
}

void CudaOps::do_accumulate(Tensor dst, Tensor src, float scale) {
  float* d = dst.f32();
  const int64_t n = dst.numel;
  if (src.dtype == DType::bf16) {
    cuda::accumulate_bf16(d, static_cast<const bf16*>(src.data), scale, n, impl_->stream);
  } else {
    cuda::accumulate_f32(d, src.f32(), scale, n, impl_->stream);
  }
  after("accumulate");
}

}  // namespace fsdp
