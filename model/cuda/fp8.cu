// FP8 quantization with per-tensor current scaling (Ops::quantize_fp8): an
// amax pass, then one pass that derives the scale on the device and casts
// with the hardware's cvt.rn.satfinite, the rounding common/fp8.h emulates.
// The host never reads the scale, so nothing here synchronises.
#include <cuda_fp8.h>

#include <algorithm>
#include <cfloat>
#include <type_traits>

#include "model/cuda/cuda_ops_impl.h"
#include "model/cuda/device_utils.cuh"

namespace fsdp::cuda {
namespace {

// amax_each / quantize_fp8_amax_each take up to kMax tensors a launch (the
// kernel's argument; one block row per tensor). amax_each expects its
// outputs zeroed; q and scale_inv are unused there.
struct Fp8Each {
  static constexpr int kMax = 16;
  const void* src[kMax] = {};
  uint8_t* q[kMax] = {};
  float* amax[kMax] = {};
  float* scale_inv[kMax] = {};
  int64_t n[kMax] = {};
  int count = 0;
};

constexpr int kThreads = 256;

// fp8_scale() of common/fp8.h, in the same f32 operations, from an amax word
// (an f32's bits, see amax_kernel).
__device__ __forceinline__ float scale_of(const unsigned* amax_bits, float fmt_max) {
  const float amax = __uint_as_float(*amax_bits);
  return amax > 0.0f && amax <= FLT_MAX ? fmt_max / amax : 1.0f;
}

// Four codes as one little-endian word.
__device__ __forceinline__ uint32_t pack4(const uint8_t* c) {
  return c[0] | c[1] << 8 | c[2] << 16 | uint32_t(c[3]) << 24;
}

// The casts are memory-bound: each thread moves VEC elements with one
// 16-byte load where the buffers allow it (VEC = 16 / sizeof(T)), else one
// (VEC = 1). The elements past the last whole vector go one by one. (VEC 8
// of f32 is two loads: the 64 x 64-tile kernels below.)
template <typename T, int VEC>
__device__ __forceinline__ void load_as_f32(const T* p, float (&f)[VEC]) {
  if constexpr (VEC == 1) {
    f[0] = to_f(p[0]);
  } else if constexpr (sizeof(T) == 2) {
    load8(p, f);
  } else {
#pragma unroll
    for (int k = 0; k < VEC; k += 4) {
      const float4 v = *reinterpret_cast<const float4*>(p + k);
      f[k] = v.x, f[k + 1] = v.y, f[k + 2] = v.z, f[k + 3] = v.w;
    }
  }
}

template <int VEC>
__device__ __forceinline__ void store_codes(uint8_t* q, const uint8_t (&c)[VEC]) {
  if constexpr (VEC == 8) {
    *reinterpret_cast<uint2*>(q) = make_uint2(pack4(c), pack4(c + 4));
  } else if constexpr (VEC == 4) {
    *reinterpret_cast<uint32_t*>(q) = pack4(c);
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
  const float s = scale_of(amax_bits, fmt_max);
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
  const float s = scale_of(reinterpret_cast<const unsigned*>(a.amax[t]), fmt_max);
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
  const float s = scale_of(amax_bits, fmt_max);
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
  row[0] = pack4(code);
  row[1] = pack4(code + 4);
}

__device__ __forceinline__ void store_tile_transposed(const uint8_t (*tile)[kPitch], uint8_t* qt,
                                                      int rows, int cols, int r0, int c0) {
  for (int v = threadIdx.x; v < kTile * 4; v += blockDim.x) {
    const int cc = v / 4, part = v % 4;  // tile column, and which 16 of its 64 rows
    const int c = c0 + cc, r = r0 + part * 16;
    if (c >= cols || r >= rows) continue;  // r < rows: all 16 are (rows % 16 == 0)
    uint8_t col[16];
#pragma unroll
    for (int k = 0; k < 16; ++k) col[k] = tile[part * 16 + k][cc];
    *reinterpret_cast<uint4*>(qt + int64_t(c) * rows + r) =
        make_uint4(pack4(col), pack4(col + 4), pack4(col + 8), pack4(col + 12));
  }
}

// quantize_t_kernel for those shapes: 8 elements from one 16-byte load (two
// for f32) into one 8-byte store of codes.
template <typename T>
__global__ void quantize_t_vec_kernel(uint8_t* q, uint8_t* qt, float* scale_inv, const T* x,
                                      int rows, int cols, const unsigned* amax_bits, float fmt_max,
                                      __nv_fp8_interpretation_t fmt) {
  __shared__ uint8_t tile[kTile][kPitch];
  const float s = scale_of(amax_bits, fmt_max);
  if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) *scale_inv = 1.0f / s;
  const int c0 = blockIdx.x * kTile, r0 = blockIdx.y * kTile;
  for (int v = threadIdx.x; v < kTile * kTile / 8; v += blockDim.x) {
    const int i = v / (kTile / 8), j = v % (kTile / 8) * 8;
    const int r = r0 + i, c = c0 + j;
    if (r >= rows || c >= cols) continue;  // c < cols: all 8 are (cols % 8 == 0)
    const int64_t at = int64_t(r) * cols + c;
    float f[8];
    load_as_f32<T, 8>(x + at, f);
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

// f(x) with src as the bf16 or f32 pointer it is.
template <typename F>
void on_src(const void* src, bool src_bf16, F&& f) {
  if (src_bf16)
    f(static_cast<const bf16*>(src));
  else
    f(static_cast<const float*>(src));
}

// amax_kernel into a zeroed word.
template <typename T>
void launch_amax(unsigned* bits, const T* x, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  vectorized(x, nullptr, [&](auto v) {
    amax_kernel<T, v>
        <<<blocks_for((n + v - 1) / v, kThreads, 4096), kThreads, 0, stream>>>(bits, x, n);
  });
}

// quantize_kernel by an amax word; at least one block, as it writes scale_inv.
template <typename T>
void launch_quantize(uint8_t* q, float* scale_inv, const T* x, int64_t n, const unsigned* bits,
                     float fmt_max, __nv_fp8_interpretation_t fmt, cudaStream_t stream) {
  vectorized(x, q, [&](auto v) {
    quantize_kernel<T, v><<<blocks_for((n + v - 1) / v, kThreads, 4096), kThreads, 0, stream>>>(
        q, scale_inv, x, n, bits, fmt_max, fmt);
  });
}

// The cast-and-transpose pass of src by an amax word (q may be null).
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
    FSDP_CHECK(tiles.y <= 65535, "quantize_fp8_t: ", rows, " rows");
    quantize_t_vec_kernel<<<tiles, kThreads, 0, stream>>>(q, qt, scale_inv, x, rows, cols, amax,
                                                          fmt_max, fmt);
    return;
  }
  const dim3 grid(unsigned((cols + 31) / 32), unsigned((rows + 31) / 32)), block(32, 8);
  FSDP_CHECK(grid.y <= 65535, "quantize_fp8_t: ", rows, " rows");
  quantize_t_kernel<<<grid, block, 0, stream>>>(q, qt, scale_inv, x, rows, cols, amax, fmt_max,
                                                fmt);
}

// A zeroed scratch word with src's amax, for the current-scaling casts.
template <typename T>
const unsigned* amax_in_scratch(const T* x, int64_t n, Scratch& scratch, cudaStream_t stream) {
  auto* bits = static_cast<unsigned*>(scratch.get(sizeof(unsigned)));
  FSDP_CUDA_CHECK(cudaMemsetAsync(bits, 0, sizeof(unsigned), stream));
  launch_amax(bits, x, n, stream);
  return bits;
}

// Enough blocks for the largest tensor (a grid-stride loop past 1024); the
// smaller tensors' surplus blocks exit at once.
dim3 each_grid(const Fp8Each& a) {
  int64_t most = 0;
  for (int i = 0; i < a.count; ++i) most = std::max(most, a.n[i]);
  return dim3(blocks_for(most, kThreads, 1024), unsigned(a.count));
}

__nv_fp8_interpretation_t fp8_interp(bool e5m2) {
  return e5m2 ? __NV_E5M2 : __NV_E4M3;
}

// src and dst are bf16 when the flag says so, else f32. fmt_max: the
// format's largest finite value (common/fp8.h).
void quantize_fp8(uint8_t* q, float* scale_inv, const void* src, bool src_bf16, int64_t n,
                  bool e5m2, float fmt_max, Scratch& scratch, cudaStream_t stream) {
  on_src(src, src_bf16, [&](const auto* x) {
    launch_quantize(q, scale_inv, x, n, amax_in_scratch(x, n, scratch, stream), fmt_max,
                    fp8_interp(e5m2), stream);
  });
  FSDP_LAUNCH_CHECK("quantize_fp8");
}

void quantize_fp8_t(uint8_t* q, uint8_t* qt, float* scale_inv, const void* src, bool src_bf16,
                    int rows, int cols, bool e5m2, float fmt_max, Scratch& scratch,
                    cudaStream_t stream) {
  on_src(src, src_bf16, [&](const auto* x) {
    cast_t(q, qt, scale_inv, x, rows, cols,
           amax_in_scratch(x, int64_t(rows) * cols, scratch, stream), fmt_max, fp8_interp(e5m2),
           stream);
  });
  FSDP_LAUNCH_CHECK("quantize_fp8_t");
}

void quantize_fp8_t_amax(uint8_t* q, uint8_t* qt, float* scale_inv, const void* src, bool src_bf16,
                         int rows, int cols, const float* amax, bool e5m2, float fmt_max,
                         cudaStream_t stream) {
  on_src(src, src_bf16, [&](const auto* x) {
    cast_t(q, qt, scale_inv, x, rows, cols, reinterpret_cast<const unsigned*>(amax), fmt_max,
           fp8_interp(e5m2), stream);
  });
  FSDP_LAUNCH_CHECK("quantize_fp8_t_amax");
}

// The amax word is the f32 itself: non-negative floats order like their
// bits, so amax_kernel's integer max writes a float the host or NCCL can
// reduce with max as f32.
void amax(float* out, const void* x, bool x_bf16, int64_t n, cudaStream_t stream) {
  auto* bits = reinterpret_cast<unsigned*>(out);
  FSDP_CUDA_CHECK(cudaMemsetAsync(bits, 0, sizeof(unsigned), stream));
  on_src(x, x_bf16, [&](const auto* p) { launch_amax(bits, p, n, stream); });
  FSDP_LAUNCH_CHECK("amax");
}

void quantize_fp8_amax(uint8_t* q, float* scale_inv, const void* src, bool src_bf16, int64_t n,
                       const float* amax, bool e5m2, float fmt_max, cudaStream_t stream) {
  on_src(src, src_bf16, [&](const auto* x) {
    launch_quantize(q, scale_inv, x, n, reinterpret_cast<const unsigned*>(amax), fmt_max,
                    fp8_interp(e5m2), stream);
  });
  FSDP_LAUNCH_CHECK("quantize_fp8_amax");
}

void amax_each(const Fp8Each& a, bool src_bf16, cudaStream_t stream) {
  if (a.count == 0) return;
  on_src(a.src[0], src_bf16, [&](const auto* x) {
    using T = std::remove_cv_t<std::remove_pointer_t<decltype(x)>>;
    amax_each_kernel<T><<<each_grid(a), kThreads, 0, stream>>>(a);
  });
  FSDP_LAUNCH_CHECK("amax_each");
}

void quantize_fp8_amax_each(const Fp8Each& a, bool src_bf16, bool e5m2, float fmt_max,
                            cudaStream_t stream) {
  if (a.count == 0) return;
  on_src(a.src[0], src_bf16, [&](const auto* x) {
    using T = std::remove_cv_t<std::remove_pointer_t<decltype(x)>>;
    quantize_each_kernel<T><<<each_grid(a), kThreads, 0, stream>>>(a, fmt_max, fp8_interp(e5m2));
  });
  FSDP_LAUNCH_CHECK("quantize_fp8_amax_each");
}

void transpose_fp8(uint8_t* qt, const uint8_t* q, int rows, int cols, cudaStream_t stream) {
  if (int64_t(rows) * cols == 0) return;
  if (tiles_fit(q, q, qt, rows, cols)) {
    const dim3 tiles(unsigned((cols + kTile - 1) / kTile), unsigned((rows + kTile - 1) / kTile));
    FSDP_CHECK(tiles.y <= 65535, "transpose_fp8: ", rows, " rows");
    transpose_u8_vec_kernel<<<tiles, kThreads, 0, stream>>>(qt, q, rows, cols);
  } else {
    const dim3 grid(unsigned((cols + 31) / 32), unsigned((rows + 31) / 32)), block(32, 8);
    FSDP_CHECK(grid.y <= 65535, "transpose_fp8: ", rows, " rows");
    transpose_u8_kernel<<<grid, block, 0, stream>>>(qt, q, rows, cols);
  }
  FSDP_LAUNCH_CHECK("transpose_fp8");
}

void dequantize_fp8(void* dst, bool dst_bf16, const uint8_t* q, const float* scale_inv, int64_t n,
                    bool e5m2, cudaStream_t stream) {
  if (n == 0) return;
  const unsigned blocks = blocks_for(n, kThreads, 4096);
  const __nv_fp8_interpretation_t fmt = fp8_interp(e5m2);
  if (dst_bf16)
    dequantize_kernel<<<blocks, kThreads, 0, stream>>>(static_cast<bf16*>(dst), q, scale_inv, n,
                                                       fmt);
  else
    dequantize_kernel<<<blocks, kThreads, 0, stream>>>(static_cast<float*>(dst), q, scale_inv, n,
                                                       fmt);
  FSDP_LAUNCH_CHECK("dequantize_fp8");
}

}  // namespace
}  // namespace fsdp::cuda

// ---- CudaOps: this family's ops -------------------------------------------------
// The front door (model/op_checks.h) has checked every argument; these give
// the pointers their types and enqueue the launchers above on the stream.
namespace fsdp {

using namespace cuda_args;

void CudaOps::do_quantize_fp8(Tensor q, Tensor scale_inv, Tensor src, Fp8 format) {
  cuda::quantize_fp8(static_cast<uint8_t*>(q.data), f32(scale_inv), src.data,
                     src.dtype == DType::bf16, src.numel, format == Fp8::e5m2, fp8_spec(format).max,
                     *impl_, impl_->stream);
  after("quantize_fp8");
}

void CudaOps::do_quantize_fp8_t(Tensor q, Tensor qt, Tensor scale_inv, Tensor src, int rows,
                                int cols, Fp8 format) {
  cuda::quantize_fp8_t(static_cast<uint8_t*>(q.data), static_cast<uint8_t*>(qt.data),
                       f32(scale_inv), src.data, src.dtype == DType::bf16, rows, cols,
                       format == Fp8::e5m2, fp8_spec(format).max, *impl_, impl_->stream);
  after("quantize_fp8_t");
}

void CudaOps::do_quantize_fp8_t_amax(Tensor q, Tensor qt, Tensor scale_inv, Tensor src, Tensor amax,
                                     int rows, int cols, Fp8 format) {
  cuda::quantize_fp8_t_amax(q.numel > 0 ? static_cast<uint8_t*>(q.data) : nullptr,
                            static_cast<uint8_t*>(qt.data), f32(scale_inv), src.data,
                            src.dtype == DType::bf16, rows, cols, f32(amax), format == Fp8::e5m2,
                            fp8_spec(format).max, impl_->stream);
  after("quantize_fp8_t_amax");
}

void CudaOps::do_amax(Tensor out, Tensor x) {
  cuda::amax(f32(out), x.data, x.dtype == DType::bf16, x.numel, impl_->stream);
  after("amax");
}

void CudaOps::do_quantize_fp8_amax(Tensor q, Tensor scale_inv, Tensor src, Tensor amax,
                                   Fp8 format) {
  cuda::quantize_fp8_amax(static_cast<uint8_t*>(q.data), f32(scale_inv), src.data,
                          src.dtype == DType::bf16, src.numel, f32(amax), format == Fp8::e5m2,
                          fp8_spec(format).max, impl_->stream);
  after("quantize_fp8_amax");
}

namespace {
// launch(a) for each run of up to cuda::Fp8Each::kMax entries, after
// fill(a, i) for every entry i of the run (each one a kernel argument).
template <typename Fill, typename Launch>
void in_launches(size_t count, Fill&& fill, Launch&& launch) {
  for (size_t first = 0; first < count; first += cuda::Fp8Each::kMax) {
    cuda::Fp8Each a;
    for (size_t i = first; i < count && a.count < cuda::Fp8Each::kMax; ++i, ++a.count) fill(a, i);
    launch(a);
  }
}
}  // namespace

// All of one dtype, f32 or bf16.
void CudaOps::do_amax_each(Tensor out, const std::vector<Tensor>& xs) {
  float* o = f32(out);
  if (xs.empty()) return;
  FSDP_CUDA_CHECK(cudaMemsetAsync(o, 0, xs.size() * sizeof(float), impl_->stream));
  const bool is_bf16 = xs[0].dtype == DType::bf16;
  in_launches(
      xs.size(),
      [&](cuda::Fp8Each& a, size_t i) {
        a.src[a.count] = xs[i].data;
        a.n[a.count] = xs[i].numel;
        a.amax[a.count] = o + i;
      },
      [&](const cuda::Fp8Each& a) { cuda::amax_each(a, is_bf16, impl_->stream); });
  after("amax_each");
}

void CudaOps::do_quantize_fp8_amax_each(const std::vector<Fp8Cast>& casts, Fp8 format) {
  if (casts.empty()) return;
  const bool is_bf16 = casts[0].src.dtype == DType::bf16;
  in_launches(
      casts.size(),
      [&](cuda::Fp8Each& a, size_t i) {
        const Fp8Cast& c = casts[i];
        a.src[a.count] = c.src.data;
        a.q[a.count] = static_cast<uint8_t*>(c.q.data);
        a.n[a.count] = c.src.numel;
        a.amax[a.count] = f32(c.amax);
        a.scale_inv[a.count] = f32(c.scale_inv);
      },
      [&](const cuda::Fp8Each& a) {
        cuda::quantize_fp8_amax_each(a, is_bf16, format == Fp8::e5m2, fp8_spec(format).max,
                                     impl_->stream);
      });
  after("quantize_fp8_amax_each");
}

void CudaOps::do_transpose_fp8(Tensor qt, Tensor q, int rows, int cols) {
  cuda::transpose_fp8(static_cast<uint8_t*>(qt.data), static_cast<const uint8_t*>(q.data), rows,
                      cols, impl_->stream);
  after("transpose_fp8");
}

void CudaOps::do_dequantize_fp8(Tensor dst, Tensor q, Tensor scale_inv, Fp8 format) {
  cuda::dequantize_fp8(dst.data, dst.dtype == DType::bf16, static_cast<const uint8_t*>(q.data),
                       f32(scale_inv), dst.numel, format == Fp8::e5m2, impl_->stream);
  after("dequantize_fp8");
}

}  // namespace fsdp
