// RMSNorm, forward and backward, and the dg reduction every RMSNorm-style
// backward ends with (the fused QK-norm in rope.cu shares it). bf16 in and
// out, fp32 arithmetic; fixed reduction order (no float atomics), so results
// are bitwise reproducible.
#include <algorithm>
#include <type_traits>

#include "model/cuda/cuda_ops_impl.h"
#include "model/cuda/device_utils.cuh"

namespace fsdp::cuda {
namespace {

constexpr int kThreads = 256;

// A row is handled by a group of G consecutive lanes (G a power of two <= 32,
// about dim/VEC), so short rows (QK-norm over a 64-wide head) still keep most
// lanes busy. Groups that run past the last row stay in the loop as inactive
// so every shuffle sees its whole warp.

struct RowGroups {
  int G;    // lanes per row
  int gpb;  // row groups per block
};

RowGroups row_groups(int dim, int vec) {
  int G = 1;
  while (G < 32 && G * 2 * vec <= dim) G *= 2;
  return {G, kThreads / G};
}

// amax: null, or a zeroed word that gets max |y| as stored.
template <int VEC>
__global__ void rmsnorm_forward_kernel(bf16* y, float* rstd, const bf16* x, const bf16* g, int rows,
                                       int dim, float eps, int G, unsigned* amax) {
  const int lane = threadIdx.x % G, group = threadIdx.x / G, gpb = blockDim.x / G;
  const int64_t row = int64_t(blockIdx.x) * gpb + group;
  const bool active = row < rows;
  const bf16* xr = x + (active ? row : 0) * dim;
  float ss = 0.0f;
  if (active)
    for (int c = lane * VEC; c < dim; c += G * VEC) {
      float v[VEC];
      load_vec<VEC>(xr + c, v);
#pragma unroll
      for (int k = 0; k < VEC; ++k) ss += v[k] * v[k];
    }
  ss = warp_sum(ss, G);
  float m = 0.0f;  // max |y| as stored, for amax
  if (active) {
    // Backward reads the stored f32 rstd; the forward uses the same value so
    // both describe one function.
    const float rs = 1.0f / sqrtf(ss / float(dim) + eps);
    if (lane == 0) rstd[row] = rs;
    bf16* yr = y + row * dim;
    for (int c = lane * VEC; c < dim; c += G * VEC) {
      float v[VEC], gv[VEC];
      load_vec<VEC>(xr + c, v);
      load_vec<VEC>(g + c, gv);
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        v[k] = v[k] * rs * gv[k];
        if (amax) m = fmaxf(m, stored_abs(v[k]));
      }
      store_vec<VEC>(yr + c, v);
    }
  }
  // Every thread of the block reaches this, active or not: it synchronises.
  if (amax) block_max_into(amax, m);
}

// VEC consecutive bf16 values as stored: one 16-byte register quad for VEC 8.
template <int VEC>
struct alignas(2 * VEC) Stored {
  bf16 h[VEC];
  __device__ __forceinline__ void load(const bf16* p) {
    *this = *reinterpret_cast<const Stored*>(p);
  }
  __device__ __forceinline__ void to_f32(float (&f)[VEC]) const {
#pragma unroll
    for (int k = 0; k < VEC; ++k) f[k] = __bfloat162float(h[k]);
  }
  // An empty asm that claims to change the words: the compiler then converts
  // them again where they are next used instead of keeping the f32 copies of
  // the first conversion live as well (twice the registers, and spills).
  __device__ __forceinline__ void keep_packed() {
    if constexpr (VEC % 2 == 0) {
      auto* w = reinterpret_cast<unsigned*>(h);
#pragma unroll
      for (int j = 0; j < VEC / 2; ++j) asm volatile("" : "+r"(w[j]));
    }
  }
};

// dx_j = r (dy_j g_j - x_j r^2 mean_i(dy_i g_i x_i)); dg_j += sum_rows dy_j x_j r.
// Each block keeps one f32 dg row per group in shared memory, folds them in
// group order and writes one partial row per block; rmsnorm_dg_reduce_kernel
// then adds the partials in block order. amax: null, or a zeroed word that
// gets max |dx| as stored.
//
// A lane always owns the same columns (lane*VEC + i*G*VEC), ITERS vectors of
// them per row. With ITERS > 0 its share of dg stays in registers across rows
// and shared memory is touched once at the end (per-row read-modify-writes
// of VEC consecutive floats by every lane are 8-way bank conflicts); with
// ITERS <= 4 the row's dy and x stay in registers too, loaded all at once
// before the dot product, so the row is read from memory once rather than
// twice. ITERS == 0: the row is too wide for registers; dg accumulates in
// shared memory. Every way each element is read before the same thread
// writes that dx element (so dx may alias dy), and the additions happen in
// the order of the columns: dx is the same bits on every path, and so is dg
// for one grid (its rows are summed per block, then block by block).
template <int VEC, int ITERS>
__global__ void __launch_bounds__(kThreads, 2)
    rmsnorm_backward_kernel(bf16* dx, float* partial, const bf16* dy, const bf16* x, const bf16* g,
                            const float* rstd, int rows, int dim, bool accumulate_dx, int G,
                            unsigned* amax) {
  extern __shared__ float dg_rows[];
  const int lane = threadIdx.x % G, group = threadIdx.x / G, gpb = blockDim.x / G;
  float* my = dg_rows + group * dim;
  constexpr int R = ITERS > 0 ? ITERS : 1;
  // The row in registers fits (without spills at two blocks of 256 per SM)
  // up to 4 vectors per lane: d_model 1024 at VEC 8.
  constexpr bool kKeepRow = ITERS > 0 && ITERS <= 4;
  float acc[R][VEC];
  if constexpr (ITERS > 0) {
#pragma unroll
    for (int i = 0; i < ITERS; ++i)
#pragma unroll
      for (int k = 0; k < VEC; ++k) acc[i][k] = 0.0f;
  } else {
    for (int c = lane; c < dim; c += G) my[c] = 0.0f;
    // Lane l clears elements l, l+G, ... but accumulates into l*VEC.. below:
    // order the clearing before any lane's first add.
    __syncthreads();
  }
  float m = 0.0f;  // max |dx| stored by this thread
  float dot;       // the row's sum of dy g x (this lane's share, then the group's)
  // Column c's share of the dot product.
  auto dot_add = [&](int c, const float(&d)[VEC], const float(&xv)[VEC]) {
    float gv[VEC];
    load_vec<VEC>(g + c, gv);
#pragma unroll
    for (int k = 0; k < VEC; ++k) dot += d[k] * gv[k] * xv[k];
  };
  // Column c of the output: dx = (accumulate_dx ? dx : 0) + r (dy g - x cc),
  // and this lane's dg share a += dy x r.
  auto output = [&](int64_t off, int c, float rs, float cc, const float(&d)[VEC],
                    const float(&xv)[VEC], float(&a)[VEC]) {
    float gv[VEC], out[VEC];
    load_vec<VEC>(g + c, gv);
    if (accumulate_dx) {
      load_vec<VEC>(dx + off + c, out);
    } else {
#pragma unroll
      for (int k = 0; k < VEC; ++k) out[k] = 0.0f;
    }
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      out[k] += rs * (d[k] * gv[k] - xv[k] * cc);
      a[k] += d[k] * xv[k] * rs;
      if (amax) m = fmaxf(m, stored_abs(out[k]));
    }
    store_vec<VEC>(dx + off + c, out);
  };
  for (int64_t base = int64_t(blockIdx.x) * gpb; base < rows; base += int64_t(gridDim.x) * gpb) {
    const int64_t row = base + group;
    const bool active = row < rows;
    const int64_t off = (active ? row : 0) * dim;
    Stored<VEC> sd[kKeepRow ? ITERS : 1], sx[kKeepRow ? ITERS : 1];  // the kept row
    dot = 0.0f;
    if (active) {
      if constexpr (kKeepRow) {
#pragma unroll
        for (int i = 0; i < ITERS; ++i) {
          const int c = (lane + i * G) * VEC;
          if (c < dim) sd[i].load(dy + off + c), sx[i].load(x + off + c);
        }
#pragma unroll
        for (int i = 0; i < ITERS; ++i) {
          const int c = (lane + i * G) * VEC;
          float d[VEC], xv[VEC];
          if (c < dim) sd[i].to_f32(d), sx[i].to_f32(xv), dot_add(c, d, xv);
        }
      } else {
        for (int c = lane * VEC; c < dim; c += G * VEC) {
          float d[VEC], xv[VEC];
          load_vec<VEC>(dy + off + c, d);
          load_vec<VEC>(x + off + c, xv);
          dot_add(c, d, xv);
        }
      }
    }
    dot = warp_sum(dot, G);
    if (!active) continue;
    const float rs = rstd[row];
    const float cc = rs * rs * dot / float(dim);
    if constexpr (kKeepRow) {
#pragma unroll
      for (int i = 0; i < ITERS; ++i) sd[i].keep_packed(), sx[i].keep_packed();
#pragma unroll
      for (int i = 0; i < ITERS; ++i) {
        const int c = (lane + i * G) * VEC;
        float d[VEC], xv[VEC];
        if (c < dim) sd[i].to_f32(d), sx[i].to_f32(xv), output(off, c, rs, cc, d, xv, acc[i]);
      }
    } else {
      // The second pass reads the row again (from cache, mostly).
      auto reread = [&](int c, float(&a)[VEC]) {
        float d[VEC], xv[VEC];
        load_vec<VEC>(dy + off + c, d);
        load_vec<VEC>(x + off + c, xv);
        output(off, c, rs, cc, d, xv, a);
      };
      if constexpr (ITERS > 0) {
#pragma unroll
        for (int i = 0; i < ITERS; ++i) {
          const int c = (lane + i * G) * VEC;
          if (c < dim) reread(c, acc[i]);
        }
      } else {
        for (int c = lane * VEC; c < dim; c += G * VEC) {
          float a[VEC];
#pragma unroll
          for (int k = 0; k < VEC; ++k) a[k] = my[c + k];
          reread(c, a);
#pragma unroll
          for (int k = 0; k < VEC; ++k) my[c + k] = a[k];
        }
      }
    }
  }
  if constexpr (ITERS > 0) {
#pragma unroll
    for (int i = 0; i < ITERS; ++i) {
      const int c = (lane + i * G) * VEC;
      if (c < dim)
#pragma unroll
        for (int k = 0; k < VEC; ++k) my[c + k] = acc[i][k];
    }
  }
  __syncthreads();
  store_block_partial(partial, dg_rows, gpb, dim);
  // dg_rows (gpb * dim >= blockDim.x floats) is free again: a float per warp.
  if (amax) block_max_into(amax, m, dg_rows);
}

// Column c of dg: the partial rows of every block added in block order. 32
// columns per block, each summed by 8 threads over a fixed stride of blocks,
// then those 8 in order: deterministic, and 8x the threads of one per column.
template <typename W>
__global__ void rmsnorm_dg_reduce_kernel(W* dg, const float* partial, int blocks, int dim) {
  __shared__ float part[8][33];
  const int c = blockIdx.x * 32 + threadIdx.x;
  float s = 0.0f;
  if (c < dim)
    for (int b = threadIdx.y; b < blocks; b += 8) s += partial[int64_t(b) * dim + c];
  part[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y != 0 || c >= dim) return;
  float t = 0.0f;
  for (int k = 0; k < 8; ++k) t += part[k][threadIdx.x];
  dg[c] = from_f<W>(to_f(dg[c]) + t);
}

}  // namespace

void rmsnorm_forward(bf16* y, float* rstd, const bf16* x, const bf16* g, int rows, int dim,
                     float eps, float* amax, cudaStream_t stream) {
  if (amax) FSDP_CUDA_CHECK(cudaMemsetAsync(amax, 0, sizeof(float), stream));
  if (rows == 0) return;
  auto* bits = reinterpret_cast<unsigned*>(amax);
  const bool vec = dim % kVec == 0 && aligned16(y) && aligned16(x) && aligned16(g);
  const RowGroups rg = row_groups(dim, vec ? kVec : 1);
  const unsigned blocks = blocks_for(rows, rg.gpb, int64_t(1) << 31);
  if (vec) {
    rmsnorm_forward_kernel<kVec>
        <<<blocks, kThreads, 0, stream>>>(y, rstd, x, g, rows, dim, eps, rg.G, bits);
  } else {
    rmsnorm_forward_kernel<1>
        <<<blocks, kThreads, 0, stream>>>(y, rstd, x, g, rows, dim, eps, rg.G, bits);
  }
  FSDP_LAUNCH_CHECK("rmsnorm_forward_kernel");
}

void rmsnorm_backward(bf16* dx, void* dg, bool dg_bf16, const bf16* dy, const bf16* x,
                      const bf16* g, const float* rstd, int rows, int dim, bool accumulate_dx,
                      float* amax, const DeviceInfo& dev, Scratch& scratch, cudaStream_t stream) {
  if (amax) FSDP_CUDA_CHECK(cudaMemsetAsync(amax, 0, sizeof(float), stream));
  if (rows == 0) return;
  const bool vec =
      dim % kVec == 0 && aligned16(dx) && aligned16(dy) && aligned16(x) && aligned16(g);
  RowGroups rg = row_groups(dim, vec ? kVec : 1);
  // The per-group dg rows must fit the default 48 KiB of shared memory.
  int threads = kThreads;
  while (rg.gpb > 1 && size_t(rg.gpb) * dim * sizeof(float) > 48 * 1024) {
    rg.gpb /= 2;
    threads /= 2;
  }
  FSDP_CHECK(size_t(dim) * sizeof(float) <= 48 * 1024, "rmsnorm width ", dim, " is too wide");
  const size_t smem = size_t(rg.gpb) * dim * sizeof(float);
  // Column iterations per lane: a row in registers for up to 8 (d_model 2048
  // at G = 32 lanes of 8), shared memory beyond.
  const int per_lane = vec ? kVec : 1, iters = (dim + rg.G * per_lane - 1) / (rg.G * per_lane);
  auto launch = [&](auto vec_c, auto iters_c) {
    const auto kernel = rmsnorm_backward_kernel<decltype(vec_c)::value, decltype(iters_c)::value>;
    // Every block loops over rows with the same stride, so a grid of exactly
    // the blocks the GPU holds at once finishes together; more would leave a
    // partial second wave (4 per SM of a kernel resident 3 per SM ran 1.33
    // waves, two thirds of the GPU idle in the second).
    const int blocks = int(std::min<int64_t>((rows + rg.gpb - 1) / rg.gpb,
                                             resident_blocks(kernel, threads, smem, dev.sm_count)));
    auto* partial = static_cast<float*>(scratch.get(size_t(blocks) * dim * sizeof(float)));
    kernel<<<blocks, threads, smem, stream>>>(dx, partial, dy, x, g, rstd, rows, dim, accumulate_dx,
                                              rg.G, reinterpret_cast<unsigned*>(amax));
    FSDP_LAUNCH_CHECK("rmsnorm_backward_kernel");
    rmsnorm_dg_reduce(dg, dg_bf16, partial, blocks, dim, stream);
  };
  auto with_iters = [&](auto vec_c) {
    using I = std::integral_constant<int, 0>;
    if (iters <= 1) return launch(vec_c, std::integral_constant<int, 1>{});
    if (iters <= 2) return launch(vec_c, std::integral_constant<int, 2>{});
    if (iters <= 4) return launch(vec_c, std::integral_constant<int, 4>{});
    if (iters <= 8) return launch(vec_c, std::integral_constant<int, 8>{});
    return launch(vec_c, I{});
  };
  if (vec) {
    with_iters(std::integral_constant<int, kVec>{});
  } else {
    with_iters(std::integral_constant<int, 1>{});
  }
}

void rmsnorm_dg_reduce(void* dg, bool dg_bf16, const float* partial, int blocks, int dim,
                       cudaStream_t stream) {
  if (dim == 0) return;
  const dim3 threads(32, 8);
  const unsigned rblocks = blocks_for(dim, 32);
  if (dg_bf16) {
    rmsnorm_dg_reduce_kernel<bf16>
        <<<rblocks, threads, 0, stream>>>(static_cast<bf16*>(dg), partial, blocks, dim);
  } else {
    rmsnorm_dg_reduce_kernel<float>
        <<<rblocks, threads, 0, stream>>>(static_cast<float*>(dg), partial, blocks, dim);
  }
  FSDP_LAUNCH_CHECK("rmsnorm_dg_reduce_kernel");
}

}  // namespace fsdp::cuda

// ---- CudaOps: this family's ops -------------------------------------------------
// The front door (model/op_checks.h) has checked every argument; these give
// the pointers their types and enqueue the launchers above on the stream.
namespace fsdp {

using namespace cuda_args;

void CudaOps::do_rmsnorm(Tensor y, Tensor rstd, Tensor x, Tensor g, int rows, int dim, float eps,
                         Tensor amax) {
  cuda::rmsnorm_forward(bf(y), f32(rstd), bf(x), bf(g), rows, dim, eps, f32_or_null(amax),
                        impl_->stream);
  after("rmsnorm");
}

void CudaOps::do_rmsnorm_backward(Tensor dx, Tensor dg, Tensor dy, Tensor x, Tensor g, Tensor rstd,
                                  int rows, int dim, bool accumulate_dx, Tensor amax) {
  bool dg_bf16 = false;
  void* dgp = grad(dg, dg_bf16);
  cuda::rmsnorm_backward(bf(dx), dgp, dg_bf16, bf(dy), bf(x), bf(g), f32(rstd), rows, dim,
                         accumulate_dx, f32_or_null(amax), impl_->dev, *impl_, impl_->stream);
  after("rmsnorm_backward");
}

}  // namespace fsdp
