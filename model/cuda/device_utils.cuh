// Device helpers shared by the kernel files: 16-byte vectors of bf16, warp and
// block reductions, launch checking.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "common/cuda_check.h"

namespace fsdp::cuda {

constexpr int kVec = 8;  // bf16 elements in one 16-byte access

struct alignas(16) Vec8 {
  __nv_bfloat162 h[4];
};

__device__ __forceinline__ void load8(const __nv_bfloat16* p, float (&f)[8]) {
  const Vec8 v = *reinterpret_cast<const Vec8*>(p);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 t = __bfloat1622float2(v.h[i]);
    f[2 * i] = t.x;
    f[2 * i + 1] = t.y;
  }
}

__device__ __forceinline__ void store8(__nv_bfloat16* p, const float (&f)[8]) {
  Vec8 v;
#pragma unroll
  for (int i = 0; i < 4; ++i) v.h[i] = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
  *reinterpret_cast<Vec8*>(p) = v;
}

// One element of a bf16 or f32 buffer as f32, and back (round to nearest even).
template <typename T>
__device__ __forceinline__ float to_f(T v) {
  if constexpr (sizeof(T) == 2) {
    return __bfloat162float(v);
  } else {
    return v;
  }
}
template <typename T>
__device__ __forceinline__ T from_f(float v) {
  if constexpr (sizeof(T) == 2) {
    return __float2bfloat16_rn(v);
  } else {
    return v;
  }
}

// Loads/stores of VEC consecutive elements: one 16-byte access when VEC is 8,
// single elements otherwise (for sizes or addresses that are not 16-byte
// multiples).
template <int VEC>
__device__ __forceinline__ void load_vec(const __nv_bfloat16* p, float (&f)[VEC]) {
  if constexpr (VEC == 8) {
    load8(p, f);
  } else {
#pragma unroll
    for (int i = 0; i < VEC; ++i) f[i] = __bfloat162float(p[i]);
  }
}
template <int VEC>
__device__ __forceinline__ void store_vec(__nv_bfloat16* p, const float (&f)[VEC]) {
  if constexpr (VEC == 8) {
    store8(p, f);
  } else {
#pragma unroll
    for (int i = 0; i < VEC; ++i) p[i] = __float2bfloat16_rn(f[i]);
  }
}

__device__ __forceinline__ float warp_sum(float v, int width = 32) {
  for (int o = width / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o, width);
  return v;
}

__device__ __forceinline__ double warp_sum(double v) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// The block's max of each thread's m (>= 0) into *word, an f32's bits
// (non-negative floats order like their bits), with one atomic per block:
// thousands of warps on one word serialise. `scratch`: a float per warp in
// shared memory; a kernel that has shared memory to spare passes its own, so
// the call adds none to what the launch needs.
__device__ __forceinline__ void block_max_into(unsigned* word, float m, float* scratch) {
  for (int o = 16; o > 0; o /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  __syncthreads();  // scratch may still be read by a previous call, or by the caller
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = m;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < int(blockDim.x / 32); ++w) m = fmaxf(m, scratch[w]);
    atomicMax(word, __float_as_uint(m));
  }
}
__device__ __forceinline__ void block_max_into(unsigned* word, float m) {
  __shared__ float warp_max[32];
  block_max_into(word, m, warp_max);
}

// The per-block step of the deterministic dg reduction of RMSNorm-style
// backwards: `rows` (shared memory) holds gpb rows of dim floats, one per
// row group; they are added in group order into the block's row of
// `partial`, which rmsnorm_dg_reduce then adds in block order. Call after
// the __syncthreads() that completes `rows`.
__device__ __forceinline__ void store_block_partial(float* partial, const float* rows, int gpb,
                                                    int dim) {
  for (int c = threadIdx.x; c < dim; c += blockDim.x) {
    float s = 0.0f;
    for (int k = 0; k < gpb; ++k) s += rows[k * dim + c];
    partial[int64_t(blockIdx.x) * dim + c] = s;
  }
}

// |v| as it is once stored in bf16: what an amax of the stored tensor finds.
__device__ __forceinline__ float stored_abs(float v) {
  return fabsf(__bfloat162float(__float2bfloat16_rn(v)));
}

// Sum over the block, returned to every thread. `shared` holds one slot per
// warp. The order of additions is fixed by the launch shape, so results are
// reproducible.
template <typename T>
__device__ T block_sum(T v, T* shared) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_sum(v);
  __syncthreads();  // shared may still be read by a previous call
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  T s = 0;
  for (int w = 0; w < warps; ++w) s += shared[w];
  return s;
}

inline bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

inline unsigned blocks_for(int64_t work, int per_block, int64_t cap = 1 << 20) {
  int64_t b = (work + per_block - 1) / per_block;
  if (b < 1) b = 1;
  return unsigned(b < cap ? b : cap);
}

// How many blocks of `kernel` (launched with `threads` and `smem` bytes of
// dynamic shared memory) the whole GPU holds at once, at least one per SM.
// A kernel whose blocks stride over equal work should launch at most this
// many: a grid of a few per SM regardless of the kernel's registers can end in
// a partial wave that leaves most of the GPU idle.
template <typename Kernel>
int resident_blocks(Kernel kernel, int threads, size_t smem, int sm_count) {
  int per_sm = 0;
  FSDP_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem));
  return sm_count * (per_sm > 1 ? per_sm : 1);
}

// Blocks for a grid-stride loop over n elements: at most 16 per SM of an H100
// (132 SMs); more would only add scheduling.
inline unsigned grid_stride_blocks(int64_t n, int threads) {
  return blocks_for(n, threads, 132 * 16);
}

}  // namespace fsdp::cuda
