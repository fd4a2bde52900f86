// FP8 quantization with per-tensor current scaling (Ops::quantize_fp8): an
// amax pass, then one pass that derives the scale on the device and casts
// with the hardware's cvt.rn.satfinite, the rounding common/fp8.h emulates.
// The host never reads the scale, so nothing here synchronises.
#include <cuda_fp8.h>

#include <algorithm>
#include <cfloat>
#include <type_traits>

#include "model/cuda/device_utils.cuh"
#include "model/cuda/kernels.h"

namespace fsdp::cuda {
namespace {

constexpr int kThreads = 256;

// The casts are memory-bound: each thread moves VEC elements with one
// 16-byte load where the buffers allow it (VEC = 16 / sizeof(T)), else one
// (VEC = 1). The elements past the last whole vector go one by one.
template <typename T, int VEC>
__device__ __forceinline__ void load_as_f32(const T* p, float (&f)[VEC]) {
  if constexpr (VEC == 1) {
    f[0] = to_f(p[0]);
  } else if constexpr (sizeof(T) == 2) {
    load8(p, f);
  } else {
    const float4 v = *reinterpret_cast<const float4*>(p);
    f[0] = v.x, f[1] = v.y, f[2] = v.z, f[3] = v.w;
  }
}

template <int VEC>
__device__ __forceinline__ void store_codes(uint8_t* q, const uint8_t (&c)[VEC]) {
  if constexpr (VEC == 8) {
    uint2 v;
    v.x = c[0] | c[1] << 8 | c[2] << 16 | uint32_t(c[3]) << 24;
    v.y = c[4] | c[5] << 8 | c[6] << 16 | uint32_t(c[7]) << 24;
    *reinterpret_cast<uint2*>(q) = v;
  } else if constexpr (VEC == 4) {
    *reinterpret_cast<uint32_t*>(q) = c[0] | c[1] << 8 | c[2] << 16 | uint32_t(c[3]) << 24;
  } else {
    q[0] = c[0];
  }
}

// max |x| over n into *amax_bits (zeroed before): non-negative floats order
// like their bit patterns, so an integer atomicMax is a float max. fmaxf
// skips NaN, as the reference's std::fmax does.
template <typename T, int VEC>
__global__ void amax_kernel(unsigned* amax_bits, const T* x, int64_t n) {
  float m = 0.0f;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x,
                first = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  const int64_t nv = n / VEC;
  for (int64_t i = first; i < nv; i += stride) {
    float f[VEC];
    load_as_f32<T, VEC>(x + i * VEC, f);
#pragma unroll
    for (int j = 0; j < VEC; ++j) m = fmaxf(m, fabsf(f[j]));
  }
  for (int64_t i = nv * VEC + first; i < n; i += stride) m = fmaxf(m, fabsf(to_f(x[i])));
  block_max_into(amax_bits, m);
}

// amax_kernel over up to Fp8Each::kMax tensors: block row y reads tensor y.
template <typename T>
__global__ void amax_each_kernel(Fp8Each a) {
  const int t = blockIdx.y;
  const T* x = static_cast<const T*>(a.src[t]);
  float m = 0.0f;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < a.n[t];
       i += int64_t(gridDim.x) * blockDim.x)
    m = fmaxf(m, fabsf(to_f(x[i])));
  block_max_into(reinterpret_cast<unsigned*>(a.amax[t]), m);
}

template <typename T, int VEC>
__global__ void quantize_kernel(uint8_t* q, float* scale_inv, const T* x, int64_t n,
                                const unsigned* amax_bits, float fmt_max,
                                __nv_fp8_interpretation_t fmt) {
  // fp8_scale(), in the same f32 operations
  const float amax = __uint_as_float(*amax_bits);
  const float s = amax > 0.0f && amax <= FLT_MAX ? fmt_max / amax : 1.0f;
  if (blockIdx.x == 0 && threadIdx.x == 0) *scale_inv = 1.0f / s;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x,
                first = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  const int64_t nv = n / VEC;
  for (int64_t i = first; i < nv; i += stride) {
    float f[VEC];
    uint8_t c[VEC];
    load_as_f32<T, VEC>(x + i * VEC, f);
#pragma unroll
    for (int j = 0; j < VEC; ++j) c[j] = __nv_cvt_float_to_fp8(f[j] * s, __NV_SATFINITE, fmt);
    store_codes<VEC>(q + i * VEC, c);
  }
  for (int64_t i = nv * VEC + first; i < n; i += stride)
    q[i] = __nv_cvt_float_to_fp8(to_f(x[i]) * s, __NV_SATFINITE, fmt);
}

// quantize_kernel over up to Fp8Each::kMax tensors, each by its own amax.
template <typename T>
__global__ void quantize_each_kernel(Fp8Each a, float fmt_max, __nv_fp8_interpretation_t fmt) {
  const int t = blockIdx.y;
  const T* x = static_cast<const T*>(a.src[t]);
  const float amax = *a.amax[t];
  const float s = amax > 0.0f && amax <= FLT_MAX ? fmt_max / amax : 1.0f;
  if (blockIdx.x == 0 && threadIdx.x == 0) *a.scale_inv[t] = 1.0f / s;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < a.n[t];
       i += int64_t(gridDim.x) * blockDim.x)
    a.q[t][i] = __nv_cvt_float_to_fp8(to_f(x[i]) * s, __NV_SATFINITE, fmt);
}

// Launches kernel<T, VEC> with VEC = 16 / sizeof(T) when x starts on 16 bytes
// and q on VEC (q may be null: amax), else with VEC = 1.
template <typename T, typename Launch>
void vectorized(const T* x, const uint8_t* q, Launch&& launch) {
  constexpr int V = 16 / sizeof(T);
  if (reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(q) % V == 0)
    launch(std::integral_constant<int, V>{});
  else
    launch(std::integral_constant<int, 1>{});
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
      if (q) q[at] = code;
      tile[i][threadIdx.x] = code;
    }
  }
  __syncthreads();
  for (int i = threadIdx.y; i < 32; i += 8) {
    const int c = c0 + i, r = r0 + threadIdx.x;  // row c, column r of qt
    if (c < cols && r < rows) qt[int64_t(c) * rows + r] = tile[threadIdx.x][i];
  }
}

// The model's shapes (cols % 8 == 0, rows % 16 == 0, 16-byte aligned
// buffers) go at HBM's rate through 64 x 64 tiles and 256 threads: each
// thread puts 8 codes of a row into the tile, then gathers 16 codes down a
// tile column into one 16-byte store of the transpose, so four threads write
// 64 consecutive bytes.
constexpr int kTile = 64, kPitch = kTile + 4;  // 4: the column reads split over banks

__device__ __forceinline__ void tile_put8(uint8_t (*tile)[kPitch], int i, int j,
                                          const uint8_t (&code)[8]) {
  auto* row = reinterpret_cast<uint32_t*>(&tile[i][j]);
  row[0] = code[0] | code[1] << 8 | code[2] << 16 | uint32_t(code[3]) << 24;
  row[1] = code[4] | code[5] << 8 | code[6] << 16 | uint32_t(code[7]) << 24;
}

__device__ __forceinline__ void store_tile_transposed(const uint8_t (*tile)[kPitch], uint8_t* qt,
                                                      int rows, int cols, int r0, int c0) {
  for (int v = threadIdx.x; v < kTile * 4; v += blockDim.x) {
    const int cc = v / 4, part = v % 4;  // tile column, and which 16 of its 64 rows
    const int c = c0 + cc, r = r0 + part * 16;
    if (c >= cols || r >= rows) continue;  // r < rows: all 16 are (rows % 16 == 0)
    uint32_t w[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int i = part * 16 + 4 * k;
      w[k] = tile[i][cc] | tile[i + 1][cc] << 8 | tile[i + 2][cc] << 16 |
             uint32_t(tile[i + 3][cc]) << 24;
    }
    *reinterpret_cast<uint4*>(qt + int64_t(c) * rows + r) = make_uint4(w[0], w[1], w[2], w[3]);
  }
}

// quantize_t_kernel for those shapes: 8 elements from one 16-byte load (two
// for f32) into one 8-byte store of codes.
template <typename T>
__global__ void quantize_t_vec_kernel(uint8_t* q, uint8_t* qt, float* scale_inv, const T* x,
                                      int rows, int cols, const unsigned* amax_bits, float fmt_max,
                                      __nv_fp8_interpretation_t fmt) {
  __shared__ uint8_t tile[kTile][kPitch];
  const float amax = __uint_as_float(*amax_bits);
  const float s = amax > 0.0f && amax <= FLT_MAX ? fmt_max / amax : 1.0f;
  if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) *scale_inv = 1.0f / s;
  const int c0 = blockIdx.x * kTile, r0 = blockIdx.y * kTile;
  for (int v = threadIdx.x; v < kTile * kTile / 8; v += blockDim.x) {
    const int i = v / (kTile / 8), j = v % (kTile / 8) * 8;
    const int r = r0 + i, c = c0 + j;
    if (r >= rows || c >= cols) continue;  // c < cols: all 8 are (cols % 8 == 0)
    const int64_t at = int64_t(r) * cols + c;
    float f[8];
    if constexpr (sizeof(T) == 2) {
      load8(x + at, f);
    } else {
      const float4 a = *reinterpret_cast<const float4*>(x + at);
      const float4 b = *reinterpret_cast<const float4*>(x + at + 4);
      f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z,
      f[7] = b.w;
    }
    uint8_t code[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) code[k] = __nv_cvt_float_to_fp8(f[k] * s, __NV_SATFINITE, fmt);
    if (q) store_codes<8>(q + at, code);
    tile_put8(tile, i, j, code);
  }
  __syncthreads();
  store_tile_transposed(tile, qt, rows, cols, r0, c0);
}

// transpose_u8_kernel for those shapes: 8 codes per 8-byte load.
__global__ void transpose_u8_vec_kernel(uint8_t* qt, const uint8_t* q, int rows, int cols) {
  __shared__ uint8_t tile[kTile][kPitch];
  const int c0 = blockIdx.x * kTile, r0 = blockIdx.y * kTile;
  for (int v = threadIdx.x; v < kTile * kTile / 8; v += blockDim.x) {
    const int i = v / (kTile / 8), j = v % (kTile / 8) * 8;
    const int r = r0 + i, c = c0 + j;
    if (r >= rows || c >= cols) continue;
    const uint2 w = *reinterpret_cast<const uint2*>(q + int64_t(r) * cols + c);
    uint8_t code[8];
#pragma unroll
    for (int k = 0; k < 4; ++k)
      code[k] = uint8_t(w.x >> (8 * k)), code[k + 4] = uint8_t(w.y >> (8 * k));
    tile_put8(tile, i, j, code);
  }
  __syncthreads();
  store_tile_transposed(tile, qt, rows, cols, r0, c0);
}

// Whether the 64 x 64 kernels apply (see above).
bool tiles_fit(const void* x, const uint8_t* q, const uint8_t* qt, int rows, int cols) {
  const auto at = [](const void* p, int b) { return reinterpret_cast<uintptr_t>(p) % b == 0; };
  return cols % 8 == 0 && rows % 16 == 0 && at(x, 8) && at(q, 8) && at(qt, 16);
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
  if (n > 0)
    vectorized(x, nullptr, [&](auto v) {
      amax_kernel<T, v>
          <<<blocks_for((n + v - 1) / v, kThreads, 4096), kThreads, 0, stream>>>(amax, x, n);
    });
  cast(amax);
}
}  // namespace

void quantize_fp8(uint8_t* q, float* scale_inv, const void* src, bool src_bf16, int64_t n,
                  bool e5m2, float fmt_max, Scratch& scratch, cudaStream_t stream) {
  const __nv_fp8_interpretation_t fmt = e5m2 ? __NV_E5M2 : __NV_E4M3;
  auto run = [&](const auto* x) {
    using T = std::remove_cv_t<std::remove_pointer_t<decltype(x)>>;
    with_amax(x, n, scratch, stream, [&](const unsigned* amax) {
      vectorized(x, q, [&](auto v) {
        // at least one block: it writes scale_inv
        const unsigned blocks = blocks_for((n + v - 1) / v, kThreads, 4096);
        quantize_kernel<T, v>
            <<<blocks, kThreads, 0, stream>>>(q, scale_inv, x, n, amax, fmt_max, fmt);
      });
    });
  };
  if (src_bf16)
    run(static_cast<const bf16*>(src));
  else
    run(static_cast<const float*>(src));
  FSDP_LAUNCH_CHECK("quantize_fp8");
}

namespace {
// The cast-and-transpose pass of src by a device amax (q may be null).
template <typename T>
void cast_t(uint8_t* q, uint8_t* qt, float* scale_inv, const T* x, int rows, int cols,
            const unsigned* amax, float fmt_max, __nv_fp8_interpretation_t fmt,
            cudaStream_t stream) {
  if (int64_t(rows) * cols == 0) {  // the scale still gets written
    quantize_kernel<T, 1><<<1, kThreads, 0, stream>>>(q, scale_inv, x, 0, amax, fmt_max, fmt);
    return;
  }
  if (tiles_fit(x, q, qt, rows, cols) && reinterpret_cast<uintptr_t>(x) % 16 == 0) {
    const dim3 tiles(unsigned((cols + kTile - 1) / kTile), unsigned((rows + kTile - 1) / kTile));
    quantize_t_vec_kernel<<<tiles, kThreads, 0, stream>>>(q, qt, scale_inv, x, rows, cols, amax,
                                                          fmt_max, fmt);
    return;
  }
  const dim3 grid(unsigned((cols + 31) / 32), unsigned((rows + 31) / 32)), block(32, 8);
  FSDP_CHECK(grid.y <= 65535, "quantize_fp8_t: ", rows, " rows");
  quantize_t_kernel<<<grid, block, 0, stream>>>(q, qt, scale_inv, x, rows, cols, amax, fmt_max,
                                                fmt);
}
}  // namespace

void quantize_fp8_t(uint8_t* q, uint8_t* qt, float* scale_inv, const void* src, bool src_bf16,
                    int rows, int cols, bool e5m2, float fmt_max, Scratch& scratch,
                    cudaStream_t stream) {
  const int64_t n = int64_t(rows) * cols;
  const __nv_fp8_interpretation_t fmt = e5m2 ? __NV_E5M2 : __NV_E4M3;
  auto run = [&](const auto* x) {
    with_amax(x, n, scratch, stream, [&](const unsigned* amax) {
      cast_t(q, qt, scale_inv, x, rows, cols, amax, fmt_max, fmt, stream);
    });
  };
  if (src_bf16)
    run(static_cast<const bf16*>(src));
  else
    run(static_cast<const float*>(src));
  FSDP_LAUNCH_CHECK("quantize_fp8_t");
}

void quantize_fp8_t_amax(uint8_t* q, uint8_t* qt, float* scale_inv, const void* src, bool src_bf16,
                         int rows, int cols, const float* amax, bool e5m2, float fmt_max,
                         cudaStream_t stream) {
  const __nv_fp8_interpretation_t fmt = e5m2 ? __NV_E5M2 : __NV_E4M3;
  const auto* bits = reinterpret_cast<const unsigned*>(amax);
  if (src_bf16)
    cast_t(q, qt, scale_inv, static_cast<const bf16*>(src), rows, cols, bits, fmt_max, fmt, stream);
  else
    cast_t(q, qt, scale_inv, static_cast<const float*>(src), rows, cols, bits, fmt_max, fmt,
           stream);
  FSDP_LAUNCH_CHECK("quantize_fp8_t_amax");
}

// The amax word is the f32 itself: non-negative floats order like their
// bits, so amax_kernel's integer max writes a float the host or NCCL can
// reduce with max as f32.
void amax(float* out, const void* x, bool x_bf16, int64_t n, cudaStream_t stream) {
  auto* bits = reinterpret_cast<unsigned*>(out);
  FSDP_CUDA_CHECK(cudaMemsetAsync(bits, 0, sizeof(unsigned), stream));
  if (n == 0) return;
  auto run = [&](const auto* p) {
    using T = std::remove_cv_t<std::remove_pointer_t<decltype(p)>>;
    vectorized(p, nullptr, [&](auto v) {
      amax_kernel<T, v>
          <<<blocks_for((n + v - 1) / v, kThreads, 4096), kThreads, 0, stream>>>(bits, p, n);
    });
  };
  if (x_bf16)
    run(static_cast<const bf16*>(x));
  else
    run(static_cast<const float*>(x));
  FSDP_LAUNCH_CHECK("amax");
}

void quantize_fp8_amax(uint8_t* q, float* scale_inv, const void* src, bool src_bf16, int64_t n,
                       const float* amax, bool e5m2, float fmt_max, cudaStream_t stream) {
  const __nv_fp8_interpretation_t fmt = e5m2 ? __NV_E5M2 : __NV_E4M3;
  const auto* bits = reinterpret_cast<const unsigned*>(amax);
  auto run = [&](const auto* x) {
    using T = std::remove_cv_t<std::remove_pointer_t<decltype(x)>>;
    vectorized(x, q, [&](auto v) {
      const unsigned blocks =
          blocks_for((n + v - 1) / v, kThreads, 4096);  // >= 1: writes scale_inv
      quantize_kernel<T, v>
          <<<blocks, kThreads, 0, stream>>>(q, scale_inv, x, n, bits, fmt_max, fmt);
    });
  };
  if (src_bf16)
    run(static_cast<const bf16*>(src));
  else
    run(static_cast<const float*>(src));
  FSDP_LAUNCH_CHECK("quantize_fp8_amax");
}

// Enough blocks for the largest tensor (a grid-stride loop past 1024); the
// smaller tensors' surplus blocks exit at once.
namespace {
dim3 each_grid(const Fp8Each& a) {
  int64_t most = 0;
  for (int i = 0; i < a.count; ++i) most = std::max(most, a.n[i]);
  return dim3(blocks_for(most, kThreads, 1024), unsigned(a.count));
}
}  // namespace

void amax_each(const Fp8Each& a, bool src_bf16, cudaStream_t stream) {
  if (a.count == 0) return;
  if (src_bf16)
    amax_each_kernel<bf16><<<each_grid(a), kThreads, 0, stream>>>(a);
  else
    amax_each_kernel<float><<<each_grid(a), kThreads, 0, stream>>>(a);
  FSDP_LAUNCH_CHECK("amax_each");
}

void quantize_fp8_amax_each(const Fp8Each& a, bool src_bf16, bool e5m2, float fmt_max,
                            cudaStream_t stream) {
  if (a.count == 0) return;
  const __nv_fp8_interpretation_t fmt = e5m2 ? __NV_E5M2 : __NV_E4M3;
  if (src_bf16)
    quantize_each_kernel<bf16><<<each_grid(a), kThreads, 0, stream>>>(a, fmt_max, fmt);
  else
    quantize_each_kernel<float><<<each_grid(a), kThreads, 0, stream>>>(a, fmt_max, fmt);
  FSDP_LAUNCH_CHECK("quantize_fp8_amax_each");
}

void transpose_fp8(uint8_t* qt, const uint8_t* q, int rows, int cols, cudaStream_t stream) {
  if (int64_t(rows) * cols == 0) return;
  const dim3 grid(unsigned((cols + 31) / 32), unsigned((rows + 31) / 32)), block(32, 8);
  FSDP_CHECK(grid.y <= 65535, "transpose_fp8: ", rows, " rows");
  if (tiles_fit(q, q, qt, rows, cols)) {
    const dim3 tiles(unsigned((cols + kTile - 1) / kTile), unsigned((rows + kTile - 1) / kTile));
    transpose_u8_vec_kernel<<<tiles, kThreads, 0, stream>>>(qt, q, rows, cols);
  } else {
    transpose_u8_kernel<<<grid, block, 0, stream>>>(qt, q, rows, cols);
  }
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
