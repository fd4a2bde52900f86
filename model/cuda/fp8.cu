// FP8 quantization with per-tensor current scaling (Ops::quantize_fp8): an
// amax pass, then one pass that derives the scale on the device and casts
// with the hardware's cvt.rn.satfinite, the rounding common/fp8.h emulates.
// The host never reads the scale, so nothing here synchronises.
#include <cuda_fp8.h>

#include <cfloat>

#include "model/cuda/device_utils.cuh"
#include "model/cuda/kernels.h"

namespace fsdp::cuda {
namespace {

constexpr int kThreads = 256;

// max |x| over n into *amax_bits (zeroed before): non-negative floats order
// like their bit patterns, so an integer atomicMax is a float max. fmaxf
// skips NaN, as the reference's std::fmax does.
template <typename T>
__global__ void amax_kernel(unsigned* amax_bits, const T* x, int64_t n) {
  float m = 0.0f;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    m = fmaxf(m, fabsf(to_f(x[i])));
  for (int o = 16; o > 0; o /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  if (threadIdx.x % 32 == 0) atomicMax(amax_bits, __float_as_uint(m));
}

template <typename T>
__global__ void quantize_kernel(uint8_t* q, float* scale_inv, const T* x, int64_t n,
                                const unsigned* amax_bits, float fmt_max,
                                __nv_fp8_interpretation_t fmt) {
  // fp8_scale(), in the same f32 operations
  const float amax = __uint_as_float(*amax_bits);
  const float s = amax > 0.0f && amax <= FLT_MAX ? fmt_max / amax : 1.0f;
  if (blockIdx.x == 0 && threadIdx.x == 0) *scale_inv = 1.0f / s;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    q[i] = __nv_cvt_float_to_fp8(to_f(x[i]) * s, __NV_SATFINITE, fmt);
}

// The same codes, and their transpose: 32 x 32 tiles, 32 x 8 threads. A
// tile's codes pass through shared memory, so both the row-major store and
// the transposed one run along consecutive addresses.
template <typename T>
__global__ void quantize_t_kernel(uint8_t* q, uint8_t* qt, float* scale_inv, const T* x, int rows,
                                  int cols, const unsigned* amax_bits, float fmt_max,
                                  __nv_fp8_interpretation_t fmt) {
  __shared__ uint8_t tile[32][33];
  const float amax = __uint_as_float(*amax_bits);
  const float s = amax > 0.0f && amax <= FLT_MAX ? fmt_max / amax : 1.0f;
  if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0 && threadIdx.y == 0)
    *scale_inv = 1.0f / s;
  const int c0 = blockIdx.x * 32, r0 = blockIdx.y * 32;
  for (int i = threadIdx.y; i < 32; i += 8) {
    const int r = r0 + i, c = c0 + threadIdx.x;
    if (r < rows && c < cols) {
      const int64_t at = int64_t(r) * cols + c;
      const uint8_t code = __nv_cvt_float_to_fp8(to_f(x[at]) * s, __NV_SATFINITE, fmt);
      q[at] = code;
      tile[i][threadIdx.x] = code;
    }
  }
  __syncthreads();
  for (int i = threadIdx.y; i < 32; i += 8) {
    const int c = c0 + i, r = r0 + threadIdx.x;  // row c, column r of qt
    if (c < cols && r < rows) qt[int64_t(c) * rows + r] = tile[threadIdx.x][i];
  }
}

// Codes through 32 x 33 shared tiles (the odd width keeps the transposed
// reads off one bank), as in quantize_t_kernel.
__global__ void transpose_u8_kernel(uint8_t* qt, const uint8_t* q, int rows, int cols) {
  __shared__ uint8_t tile[32][33];
  const int c0 = blockIdx.x * 32, r0 = blockIdx.y * 32;
  for (int i = threadIdx.y; i < 32; i += 8) {
    const int r = r0 + i, c = c0 + threadIdx.x;
    if (r < rows && c < cols) tile[i][threadIdx.x] = q[int64_t(r) * cols + c];
  }
  __syncthreads();
  for (int i = threadIdx.y; i < 32; i += 8) {
    const int c = c0 + i, r = r0 + threadIdx.x;
    if (c < cols && r < rows) qt[int64_t(c) * rows + r] = tile[threadIdx.x][i];
  }
}

template <typename T>
__global__ void dequantize_kernel(T* dst, const uint8_t* q, const float* scale_inv, int64_t n,
                                  __nv_fp8_interpretation_t fmt) {
  const float si = *scale_inv;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    // Every e4m3 and e5m2 value is exact in fp16.
    dst[i] = from_f<T>(__half2float(__half(__nv_cvt_fp8_to_halfraw(q[i], fmt))) * si);
  }
}

}  // namespace

namespace {
// amax of src into a zeroed scratch word, then cast(amax) on the same stream.
template <typename T, typename Cast>
void with_amax(const T* x, int64_t n, Scratch& scratch, cudaStream_t stream, Cast&& cast) {
  auto* amax = static_cast<unsigned*>(scratch.get(sizeof(unsigned)));
  FSDP_CUDA_CHECK(cudaMemsetAsync(amax, 0, sizeof(unsigned), stream));
  if (n > 0) amax_kernel<<<blocks_for(n, kThreads, 4096), kThreads, 0, stream>>>(amax, x, n);
  cast(amax);
}
}  // namespace

void quantize_fp8(uint8_t* q, float* scale_inv, const void* src, bool src_bf16, int64_t n,
                  bool e5m2, float fmt_max, Scratch& scratch, cudaStream_t stream) {
  const unsigned blocks = blocks_for(n, kThreads, 4096);
  const __nv_fp8_interpretation_t fmt = e5m2 ? __NV_E5M2 : __NV_E4M3;
  auto run = [&](const auto* x) {
    with_amax(x, n, scratch, stream, [&](const unsigned* amax) {
      quantize_kernel<<<blocks, kThreads, 0, stream>>>(q, scale_inv, x, n, amax, fmt_max, fmt);
    });
  };
  if (src_bf16)
    run(static_cast<const bf16*>(src));
  else
    run(static_cast<const float*>(src));
  FSDP_LAUNCH_CHECK("quantize_fp8");
}

void quantize_fp8_t(uint8_t* q, uint8_t* qt, float* scale_inv, const void* src, bool src_bf16,
                    int rows, int cols, bool e5m2, float fmt_max, Scratch& scratch,
                    cudaStream_t stream) {
  const int64_t n = int64_t(rows) * cols;
  const __nv_fp8_interpretation_t fmt = e5m2 ? __NV_E5M2 : __NV_E4M3;
  const dim3 grid(unsigned((cols + 31) / 32), unsigned((rows + 31) / 32)), block(32, 8);
  FSDP_CHECK(grid.y <= 65535, "quantize_fp8_t: ", rows, " rows");
  auto run = [&](const auto* x) {
    with_amax(x, n, scratch, stream, [&](const unsigned* amax) {
      if (n == 0) {  // the scale still gets written
        quantize_kernel<<<1, kThreads, 0, stream>>>(q, scale_inv, x, 0, amax, fmt_max, fmt);
        return;
      }
      quantize_t_kernel<<<grid, block, 0, stream>>>(q, qt, scale_inv, x, rows, cols, amax, fmt_max,
                                                    fmt);
    });
  };
  if (src_bf16)
    run(static_cast<const bf16*>(src));
  else
    run(static_cast<const float*>(src));
  FSDP_LAUNCH_CHECK("quantize_fp8_t");
}

// The amax word is the f32 itself: non-negative floats order like their
// bits, so amax_kernel's integer max writes a float the host or NCCL can
// reduce with max as f32.
void amax(float* out, const void* x, bool x_bf16, int64_t n, cudaStream_t stream) {
  auto* bits = reinterpret_cast<unsigned*>(out);
  FSDP_CUDA_CHECK(cudaMemsetAsync(bits, 0, sizeof(unsigned), stream));
  if (n == 0) return;
  const unsigned blocks = blocks_for(n, kThreads, 4096);
  if (x_bf16)
    amax_kernel<<<blocks, kThreads, 0, stream>>>(bits, static_cast<const bf16*>(x), n);
  else
    amax_kernel<<<blocks, kThreads, 0, stream>>>(bits, static_cast<const float*>(x), n);
  FSDP_LAUNCH_CHECK("amax");
}

void quantize_fp8_amax(uint8_t* q, float* scale_inv, const void* src, bool src_bf16, int64_t n,
                       const float* amax, bool e5m2, float fmt_max, cudaStream_t stream) {
  const unsigned blocks = blocks_for(n, kThreads, 4096);  // at least one: it writes scale_inv
  const __nv_fp8_interpretation_t fmt = e5m2 ? __NV_E5M2 : __NV_E4M3;
  const auto* bits = reinterpret_cast<const unsigned*>(amax);
  if (src_bf16)
    quantize_kernel<<<blocks, kThreads, 0, stream>>>(q, scale_inv, static_cast<const bf16*>(src), n,
                                                     bits, fmt_max, fmt);
  else
    quantize_kernel<<<blocks, kThreads, 0, stream>>>(q, scale_inv, static_cast<const float*>(src),
                                                     n, bits, fmt_max, fmt);
  FSDP_LAUNCH_CHECK("quantize_fp8_amax");
}

void transpose_fp8(uint8_t* qt, const uint8_t* q, int rows, int cols, cudaStream_t stream) {
  if (int64_t(rows) * cols == 0) return;
  const dim3 grid(unsigned((cols + 31) / 32), unsigned((rows + 31) / 32)), block(32, 8);
  FSDP_CHECK(grid.y <= 65535, "transpose_fp8: ", rows, " rows");
  transpose_u8_kernel<<<grid, block, 0, stream>>>(qt, q, rows, cols);
  FSDP_LAUNCH_CHECK("transpose_fp8");
}

void dequantize_fp8(void* dst, bool dst_bf16, const uint8_t* q, const float* scale_inv, int64_t n,
                    bool e5m2, cudaStream_t stream) {
  if (n == 0) return;
  const unsigned blocks = blocks_for(n, kThreads, 4096);
  const __nv_fp8_interpretation_t fmt = e5m2 ? __NV_E5M2 : __NV_E4M3;
  if (dst_bf16)
    dequantize_kernel<<<blocks, kThreads, 0, stream>>>(static_cast<bf16*>(dst), q, scale_inv, n,
                                                       fmt);
  else
    dequantize_kernel<<<blocks, kThreads, 0, stream>>>(static_cast<float*>(dst), q, scale_inv, n,
                                                       fmt);
  FSDP_LAUNCH_CHECK("dequantize_fp8");
}

}  // namespace fsdp::cuda
