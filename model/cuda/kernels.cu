// Row-structured kernels of the model: embedding, RMSNorm and RoPE, forward
// and backward. bf16 in and out, fp32 arithmetic. Every reduction here has a
// fixed order (no float atomics), so results are bitwise reproducible.
#include <cub/device/device_radix_sort.cuh>
#include <type_traits>

#include "model/cuda/device_utils.cuh"
#include "model/cuda/kernels.h"

namespace fsdp::cuda {
namespace {

constexpr int kThreads = 256;

size_t round_up(size_t x, size_t a) {
  return (x + a - 1) / a * a;
}

// ---- embedding -----------------------------------------------------------------

template <int VEC>
__global__ void embedding_forward_kernel(bf16* out, const int32_t* tokens, const bf16* wte, int n,
                                         int C, int64_t vocab, int* err) {
  const int per_row = C / VEC;
  const int64_t total = int64_t(n) * per_row;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = i / per_row;
    const int c = int(i % per_row) * VEC;
    const int t = tokens[row];
    bf16* o = out + row * C + c;
    if (t < 0 || t >= vocab) {
      // The host throws at its next synchronisation; NaN makes any use of the
      // row before then visible too.
      atomicCAS(err, 0, kTokenOutOfRange);
      for (int k = 0; k < VEC; ++k) o[k] = __float2bfloat16(__int_as_float(0x7fc00000));
      continue;
    }
    const bf16* w = wte + int64_t(t) * C + c;
    if constexpr (VEC == 8) {
      *reinterpret_cast<Vec8*>(o) = *reinterpret_cast<const Vec8*>(w);
    } else {
      for (int k = 0; k < VEC; ++k) o[k] = w[k];
    }
  }
}

__global__ void iota_kernel(int32_t* v, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) v[i] = i;
}

// After a stable sort of (token, position) by token, each run of equal tokens
// is one vocabulary row's contributions in position order. One block per
// sorted index; only the block at the start of a run works, summing the run
// in order, so no two threads ever add into the same dwte element. Frequent
// tokens make long runs (a space or "the" can be a few percent of a batch),
// so the run's end is found 32 keys a step with a ballot, and kUnroll rows are
// loaded before they are added (still in order): the loads overlap instead of
// waiting one after another.
template <typename W, int VEC>
__global__ void embedding_backward_kernel(W* dwte, const bf16* dout, const int32_t* keys,
                                          const int32_t* positions, int n, int C, int64_t vocab) {
  constexpr int kUnroll = 8;
  const int s = blockIdx.x;
  const int key = keys[s];
  if ((s > 0 && keys[s - 1] == key) || key < 0 || key >= vocab) return;
  const int lane = threadIdx.x % 32;
  int e = s;  // one past the run's end; every warp finds it (blockDim is a multiple of 32)
  for (;;) {
    const int j = e + lane;
    const unsigned same = __ballot_sync(0xffffffffu, j < n && keys[j] == key);
    if (same != 0xffffffffu) {
      e += __ffs(~same) - 1;
      break;
    }
    e += 32;
  }
  for (int c = threadIdx.x * VEC; c < C; c += blockDim.x * VEC) {
    float acc[VEC] = {};
    int j = s;
    for (; j + kUnroll <= e; j += kUnroll) {
      float d[kUnroll][VEC];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
        load_vec<VEC>(dout + int64_t(positions[j + u]) * C + c, d[u]);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
#pragma unroll
        for (int k = 0; k < VEC; ++k) acc[k] += d[u][k];
    }
    for (; j < e; ++j) {
      float d[VEC];
      load_vec<VEC>(dout + int64_t(positions[j]) * C + c, d);
#pragma unroll
      for (int k = 0; k < VEC; ++k) acc[k] += d[k];
    }
    W* row = dwte + int64_t(key) * C + c;
#pragma unroll
    for (int k = 0; k < VEC; ++k) row[k] = from_f<W>(to_f(row[k]) + acc[k]);
  }
}

// ---- RMSNorm -------------------------------------------------------------------
//
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

// dx_j = r (dy_j g_j - x_j r^2 mean_i(dy_i g_i x_i)); dg_j += sum_rows dy_j x_j r.
// Each block keeps one f32 dg row per group in shared memory, folds them in
// group order and writes one partial row per block; rmsnorm_dg_reduce_kernel
// then adds the partials in block order. Each dy element is read before the
// same thread writes that dx element, so dx may alias dy. amax: null, or a
// zeroed word that gets max |dx| as stored.
template <int VEC, int ITERS>
__global__ void rmsnorm_backward_kernel(bf16* dx, float* partial, const bf16* dy, const bf16* x,
                                        const bf16* g, const float* rstd, int rows, int dim,
                                        bool accumulate_dx, int G, unsigned* amax) {
  extern __shared__ float dg_rows[];
  const int lane = threadIdx.x % G, group = threadIdx.x / G, gpb = blockDim.x / G;
  float* my = dg_rows + group * dim;
  // A lane always owns the same columns (lane*VEC + i*G*VEC), so with ITERS > 0
  // its share of dg stays in registers across rows, and shared memory is
  // touched once at the end instead of per row (the per-row read-modify-write
  // of VEC consecutive floats by every lane is an 8-way bank conflict). The
  // additions happen in the same order either way, so results do not change.
  // ITERS == 0: dim is too wide for registers; accumulate in shared memory.
  float acc[ITERS > 0 ? ITERS : 1][VEC];
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
  for (int64_t base = int64_t(blockIdx.x) * gpb; base < rows; base += int64_t(gridDim.x) * gpb) {
    const int64_t row = base + group;
    const bool active = row < rows;
    const int64_t off = (active ? row : 0) * dim;
    float dot = 0.0f;
    if (active)
      for (int c = lane * VEC; c < dim; c += G * VEC) {
        float d[VEC], xv[VEC], gv[VEC];
        load_vec<VEC>(dy + off + c, d);
        load_vec<VEC>(x + off + c, xv);
        load_vec<VEC>(g + c, gv);
#pragma unroll
        for (int k = 0; k < VEC; ++k) dot += d[k] * gv[k] * xv[k];
      }
    dot = warp_sum(dot, G);
    if (!active) continue;
    const float rs = rstd[row];
    const float cc = rs * rs * dot / float(dim);
    auto column = [&](int c, float(&a)[VEC]) {
      float d[VEC], xv[VEC], gv[VEC], o[VEC];
      load_vec<VEC>(dy + off + c, d);
      load_vec<VEC>(x + off + c, xv);
      load_vec<VEC>(g + c, gv);
      if (accumulate_dx) {
        load_vec<VEC>(dx + off + c, o);
      } else {
#pragma unroll
        for (int k = 0; k < VEC; ++k) o[k] = 0.0f;
      }
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        o[k] += rs * (d[k] * gv[k] - xv[k] * cc);
        a[k] += d[k] * xv[k] * rs;
        if (amax) m = fmaxf(m, stored_abs(o[k]));
      }
      store_vec<VEC>(dx + off + c, o);
    };
    if constexpr (ITERS > 0) {
#pragma unroll
      for (int i = 0; i < ITERS; ++i) {
        const int c = (lane + i * G) * VEC;
        if (c < dim) column(c, acc[i]);
      }
    } else {
      for (int c = lane * VEC; c < dim; c += G * VEC) {
        float a[VEC];
#pragma unroll
        for (int k = 0; k < VEC; ++k) a[k] = my[c + k];
        column(c, a);
#pragma unroll
        for (int k = 0; k < VEC; ++k) my[c + k] = a[k];
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
  for (int c = threadIdx.x; c < dim; c += blockDim.x) {
    float s = 0.0f;
    for (int k = 0; k < gpb; ++k) s += dg_rows[k * dim + c];
    partial[int64_t(blockIdx.x) * dim + c] = s;
  }
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

// ---- RoPE ----------------------------------------------------------------------

template <int VEC>
__global__ void rope_kernel(bf16* x, const float* cos_sin, int64_t rows, int T, int heads,
                            int head_dim, float sign) {
  const int half = head_dim / 2, per_row = half / VEC;
  const float* cos_t = cos_sin;
  const float* sin_t = cos_sin + int64_t(T) * half;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < rows * per_row;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = i / per_row;  // (b, t, h)
    const int c = int(i % per_row) * VEC;
    const int t = int((row / heads) % T);
    bf16* v = x + row * head_dim;
    float lo[VEC], hi[VEC];
    load_vec<VEC>(v + c, lo);
    load_vec<VEC>(v + half + c, hi);
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      const float cs = cos_t[int64_t(t) * half + c + k];
      const float sn = sign * sin_t[int64_t(t) * half + c + k];
      const float a = lo[k], b = hi[k];
      lo[k] = a * cs - b * sn;
      hi[k] = b * cs + a * sn;
    }
    store_vec<VEC>(v + c, lo);
    store_vec<VEC>(v + half + c, hi);
  }
}

}  // namespace

// ---- launchers -------------------------------------------------------------------

void embedding_forward(bf16* out, const int32_t* tokens, const bf16* wte, int n, int C,
                       int64_t vocab, int* err, cudaStream_t stream) {
  if (n == 0) return;
  if (C % kVec == 0 && aligned16(out) && aligned16(wte)) {
    embedding_forward_kernel<kVec>
        <<<blocks_for(int64_t(n) * C / kVec, kThreads), kThreads, 0, stream>>>(out, tokens, wte, n,
                                                                               C, vocab, err);
  } else {
    embedding_forward_kernel<1><<<blocks_for(int64_t(n) * C, kThreads), kThreads, 0, stream>>>(
        out, tokens, wte, n, C, vocab, err);
  }
  FSDP_LAUNCH_CHECK("embedding_forward_kernel");
}

void embedding_backward(void* dwte, bool dwte_bf16, const bf16* dout, const int32_t* tokens, int n,
                        int C, int64_t vocab, Scratch& scratch, cudaStream_t stream) {
  if (n == 0) return;
  // Only the bits a valid token can use are sorted.
  int end_bit = 1;
  while (end_bit < 31 && (int64_t(1) << end_bit) < vocab) ++end_bit;
  size_t temp_bytes = 0;
  FSDP_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
      nullptr, temp_bytes, tokens, static_cast<int32_t*>(nullptr),
      static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr), n, 0, end_bit, stream));
  const size_t vec_bytes = round_up(size_t(n) * sizeof(int32_t), 256);
  char* base = static_cast<char*>(scratch.get(3 * vec_bytes + temp_bytes));
  auto* keys = reinterpret_cast<int32_t*>(base);
  auto* pos_in = reinterpret_cast<int32_t*>(base + vec_bytes);
  auto* pos = reinterpret_cast<int32_t*>(base + 2 * vec_bytes);
  iota_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(pos_in, n);
  FSDP_LAUNCH_CHECK("iota_kernel");
  FSDP_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(base + 3 * vec_bytes, temp_bytes, tokens, keys,
                                                  pos_in, pos, n, 0, end_bit, stream));
  const bool vec = C % kVec == 0 && aligned16(dout) && aligned16(dwte);
  const int threads = std::min(kThreads, std::max(32, (vec ? C / kVec : C) / 32 * 32));
  if (dwte_bf16 && vec) {
    embedding_backward_kernel<bf16, kVec>
        <<<n, threads, 0, stream>>>(static_cast<bf16*>(dwte), dout, keys, pos, n, C, vocab);
  } else if (dwte_bf16) {
    embedding_backward_kernel<bf16, 1>
        <<<n, threads, 0, stream>>>(static_cast<bf16*>(dwte), dout, keys, pos, n, C, vocab);
  } else if (C % kVec == 0 && aligned16(dout)) {
    embedding_backward_kernel<float, kVec>
        <<<n, threads, 0, stream>>>(static_cast<float*>(dwte), dout, keys, pos, n, C, vocab);
  } else {
    embedding_backward_kernel<float, 1>
        <<<n, threads, 0, stream>>>(static_cast<float*>(dwte), dout, keys, pos, n, C, vocab);
  }
  FSDP_LAUNCH_CHECK("embedding_backward_kernel");
}

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
  const int blocks =
      int(std::min<int64_t>((rows + rg.gpb - 1) / rg.gpb, int64_t(dev.sm_count) * 4));
  auto* partial = static_cast<float*>(scratch.get(size_t(blocks) * dim * sizeof(float)));
  // Column iterations per lane: the register-resident dg for up to 8 (d_model
  // 2048 at G = 32 lanes of 8), shared memory beyond.
  const int per_lane = vec ? kVec : 1, iters = (dim + rg.G * per_lane - 1) / (rg.G * per_lane);
  auto launch = [&](auto vec_c, auto iters_c) {
    rmsnorm_backward_kernel<decltype(vec_c)::value, decltype(iters_c)::value>
        <<<blocks, threads, smem, stream>>>(dx, partial, dy, x, g, rstd, rows, dim, accumulate_dx,
                                            rg.G, reinterpret_cast<unsigned*>(amax));
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
  FSDP_LAUNCH_CHECK("rmsnorm_backward_kernel");
  rmsnorm_dg_reduce(dg, dg_bf16, partial, blocks, dim, stream);
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

void rope(bf16* x, const float* cos_sin, int B, int T, int heads, int head_dim, float sign,
          cudaStream_t stream) {
  const int64_t rows = int64_t(B) * T * heads;
  if (rows == 0) return;
  const int half = head_dim / 2;
  if (half % kVec == 0 && aligned16(x)) {
    rope_kernel<kVec><<<blocks_for(rows * half / kVec, kThreads), kThreads, 0, stream>>>(
        x, cos_sin, rows, T, heads, head_dim, sign);
  } else {
    rope_kernel<1><<<blocks_for(rows * half, kThreads), kThreads, 0, stream>>>(
        x, cos_sin, rows, T, heads, head_dim, sign);
  }
  FSDP_LAUNCH_CHECK("rope_kernel");
}

}  // namespace fsdp::cuda
