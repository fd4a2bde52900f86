// Elementwise and per-row kernels: SwiGLU, residual add, fused softmax
// cross-entropy, and the optimizer/engine kernels over f32 shards (cast,
// accumulate, sum of squares, AdamW). bf16 in and out, fp32 arithmetic;
// fixed-order reductions only.
#include <algorithm>
#include <cfloat>

#include "model/cuda/device_utils.cuh"
#include "model/cuda/kernels.h"

namespace fsdp::cuda {
namespace {

constexpr int kThreads = 256;

// ---- elementwise over bf16 ----------------------------------------------------
//
// map_kernel applies an elementwise functor to NIN inputs producing NOUT
// outputs, 8 elements (16 bytes) per access when every pointer allows it. All
// inputs of an element are read before its outputs are written, by the same
// thread, so outputs may alias inputs.

template <int NIN, int NOUT>
struct MapArgs {
  const bf16* in[NIN];
  bf16* out[NOUT];
  // Row-strided operands (SwiGLU's halves of the W1|W3 GEMM's output): with
  // cols > 0, element i is at row i / cols, column i % cols, and operand k's
  // rows are ld[k] apart (inputs first, then outputs); cols == 0: every
  // operand packed.
  int64_t cols = 0;
  int64_t ld[NIN + NOUT] = {};
  // One amax word, the max over every output, instead of one word each.
  bool joint_amax = false;
};

// Where element i of operand k lies.
template <int NIN, int NOUT>
__device__ __forceinline__ int64_t at(const MapArgs<NIN, NOUT>& a, int k, int64_t i) {
  if (a.cols == 0) return i;
  const int64_t r = i / a.cols;
  return r * a.ld[k] + (i - r * a.cols);
}

// With AMAX, m[k] keeps the largest |value| stored to output k (after the
// bf16 rounding, so it is what an amax of that output would find).
template <int VEC, bool AMAX, int NIN, int NOUT, typename F>
__device__ __forceinline__ void map_at(const MapArgs<NIN, NOUT>& a, int64_t i, F f,
                                       float (&m)[NOUT]) {
  float in[NIN][VEC], out[NOUT][VEC];
#pragma unroll
  for (int k = 0; k < NIN; ++k) load_vec<VEC>(a.in[k] + at(a, k, i), in[k]);
#pragma unroll
  for (int e = 0; e < VEC; ++e) {
    float xi[NIN], xo[NOUT];
#pragma unroll
    for (int k = 0; k < NIN; ++k) xi[k] = in[k][e];
    f(xi, xo);
#pragma unroll
    for (int k = 0; k < NOUT; ++k) out[k][e] = xo[k];
  }
  if constexpr (AMAX) {
#pragma unroll
    for (int k = 0; k < NOUT; ++k)
#pragma unroll
      for (int e = 0; e < VEC; ++e) m[k] = fmaxf(m[k], stored_abs(out[k][e]));
  }
#pragma unroll
  for (int k = 0; k < NOUT; ++k) store_vec<VEC>(a.out[k] + at(a, NIN + k, i), out[k]);
}

// amax (AMAX only): NOUT zeroed words that receive each output's max |value|.
template <int VEC, bool AMAX, int NIN, int NOUT, typename F>
__global__ void map_kernel(MapArgs<NIN, NOUT> a, int64_t n, F f, unsigned* amax) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t tid = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  const int64_t nv = n / VEC;
  float m[NOUT] = {};
  for (int64_t v = tid; v < nv; v += stride) map_at<VEC, AMAX>(a, v * VEC, f, m);
  for (int64_t i = nv * VEC + tid; i < n; i += stride) map_at<1, AMAX>(a, i, f, m);
  if constexpr (AMAX) {
    if (a.joint_amax) {
      float all = 0.0f;
#pragma unroll
      for (int k = 0; k < NOUT; ++k) all = fmaxf(all, m[k]);
      block_max_into(amax, all);
    } else {
#pragma unroll
      for (int k = 0; k < NOUT; ++k) block_max_into(amax + k, m[k]);
    }
  }
}

template <int NIN, int NOUT, typename F>
void launch_map(const MapArgs<NIN, NOUT>& a, int64_t n, F f, cudaStream_t stream, const char* what,
                float* amax = nullptr) {
  auto* bits = reinterpret_cast<unsigned*>(amax);
  const int words = a.joint_amax ? 1 : NOUT;
  if (amax) FSDP_CUDA_CHECK(cudaMemsetAsync(amax, 0, words * sizeof(float), stream));
  if (n == 0) return;
  // A vector must stay inside one row and start 16-byte aligned in each.
  bool vec = a.cols % kVec == 0;
  for (int k = 0; k < NIN + NOUT; ++k) vec = vec && a.ld[k] % kVec == 0;
  for (int k = 0; k < NIN; ++k) vec = vec && aligned16(a.in[k]);
  for (int k = 0; k < NOUT; ++k) vec = vec && aligned16(a.out[k]);
  const unsigned blocks = vec ? blocks_for(n / kVec + 1, kThreads) : blocks_for(n, kThreads);
  if (vec && amax)
    map_kernel<kVec, true><<<blocks, kThreads, 0, stream>>>(a, n, f, bits);
  else if (vec)
    map_kernel<kVec, false><<<blocks, kThreads, 0, stream>>>(a, n, f, bits);
  else if (amax)
    map_kernel<1, true><<<blocks, kThreads, 0, stream>>>(a, n, f, bits);
  else
    map_kernel<1, false><<<blocks, kThreads, 0, stream>>>(a, n, f, bits);
  FSDP_LAUNCH_CHECK(what);
}

__device__ __forceinline__ float sigmoid(float x) {
  return 1.0f / (1.0f + __expf(-x));
}

struct SwigluFwd {
  __device__ void operator()(const float (&i)[2], float (&o)[1]) const {
    o[0] = i[0] * sigmoid(i[0]) * i[1];
  }
};
struct SwigluBwd {  // inputs ds, a, b; outputs da, db
  __device__ void operator()(const float (&i)[3], float (&o)[2]) const {
    const float d = i[0], x = i[1], y = i[2], sg = sigmoid(x);
    o[0] = d * y * sg * (1.0f + x * (1.0f - sg));  // silu'(x) = sg + x sg (1 - sg)
    o[1] = d * x * sg;
  }
};
struct Add {
  __device__ void operator()(const float (&i)[2], float (&o)[1]) const { o[0] = i[0] + i[1]; }
};

// ---- cross-entropy ---------------------------------------------------------------
//
// One block per row. Pass 1 keeps a running (max, sum of exp) per thread, so
// the row is read once for the loss; pass 2 (only when a gradient is wanted)
// rereads it, mostly from L2, and overwrites it with the gradient. No fp32
// copy of the logits ever exists.

constexpr int kCeThreads = 512;

struct MaxSum {
  float m, s;
};
__device__ __forceinline__ MaxSum combine(MaxSum a, MaxSum b) {
  // -FLT_MAX (not -inf) marks "no elements", so exp() of a difference never
  // sees inf - inf.
  const float m = fmaxf(a.m, b.m);
  return {m, a.s * __expf(a.m - m) + b.s * __expf(b.m - m)};
}

// One block per row of Vp logits, of which the first V are real: the padded
// columns (vocabulary rounded up for aligned GEMMs) take no part in the
// softmax and get a zero gradient, so the padded embedding rows stay zero.
template <int VEC>
__global__ void __launch_bounds__(kCeThreads)
    cross_entropy_kernel(float* losses, bf16* logits, const int32_t* targets, int V, int Vp,
                         float grad_scale, int* err) {
  __shared__ MaxSum warp_part[kCeThreads / 32];
  __shared__ MaxSum total;
  const int64_t row = blockIdx.x;
  bf16* x = logits + row * Vp;
  const int t = targets[row];
  const bool grad = grad_scale != 0.0f;
  if (t < 0 || t >= V) {
    if (t >= V && threadIdx.x == 0) atomicCAS(err, 0, kTargetOutOfRange);
    if (threadIdx.x == 0) losses[row] = t < 0 ? 0.0f : __int_as_float(0x7fc00000);
    if (grad)
      for (int j = threadIdx.x; j < Vp; j += blockDim.x) x[j] = __float2bfloat16(0.0f);
    return;
  }
  // Read before any thread of the block overwrites the row.
  const float target_logit = __bfloat162float(x[t]);

  MaxSum ms{-FLT_MAX, 0.0f};
  for (int j = threadIdx.x * VEC; j < V; j += blockDim.x * VEC) {
    float v[VEC];
    load_vec<VEC>(x + j, v);  // in bounds: Vp is a multiple of VEC
#pragma unroll
    for (int k = 0; k < VEC; ++k)
      if (j + k >= V) v[k] = -FLT_MAX;
    float m = ms.m;
#pragma unroll
    for (int k = 0; k < VEC; ++k) m = fmaxf(m, v[k]);
    float s = ms.s * __expf(ms.m - m);
#pragma unroll
    for (int k = 0; k < VEC; ++k) s += j + k < V ? __expf(v[k] - m) : 0.0f;
    ms = {m, s};
  }
  for (int o = 16; o > 0; o /= 2) {
    const MaxSum other{__shfl_xor_sync(0xffffffffu, ms.m, o),
                       __shfl_xor_sync(0xffffffffu, ms.s, o)};
    ms = combine(ms, other);
  }
  if (threadIdx.x % 32 == 0) warp_part[threadIdx.x / 32] = ms;
  __syncthreads();
  if (threadIdx.x == 0) {
    MaxSum a = warp_part[0];
    for (int w = 1; w < int(blockDim.x / 32); ++w) a = combine(a, warp_part[w]);
    total = a;
    losses[row] = a.m + logf(a.s) - target_logit;
  }
  __syncthreads();
  if (!grad) return;
  const float m = total.m, scale = grad_scale / total.s;
  for (int j = threadIdx.x * VEC; j < Vp; j += blockDim.x * VEC) {
    float v[VEC];
    load_vec<VEC>(x + j, v);
#pragma unroll
    for (int k = 0; k < VEC; ++k)
      v[k] = j + k < V ? scale * __expf(v[k] - m) - (j + k == t ? grad_scale : 0.0f) : 0.0f;
    store_vec<VEC>(x + j, v);
  }
}

// ---- f32 shards ------------------------------------------------------------------

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

unsigned grid_for(int64_t n) {
  return blocks_for(n, kThreads, 132 * 16);
}

}  // namespace

// ---- launchers -------------------------------------------------------------------

void swiglu_forward(bf16* s, const bf16* a, const bf16* b, int rows, int cols, int64_t ab_ld,
                    float* amax, cudaStream_t stream) {
  MapArgs<2, 1> m{{a, b}, {s}};
  m.cols = cols;
  for (int64_t& ld : m.ld) ld = ab_ld;
  m.ld[2] = cols;  // s is packed
  launch_map(m, int64_t(rows) * cols, SwigluFwd{}, stream, "swiglu_forward", amax);
}

void swiglu_backward(bf16* da, bf16* db, const bf16* ds, const bf16* a, const bf16* b, int rows,
                     int cols, int64_t ab_ld, float* amax, cudaStream_t stream) {
  MapArgs<3, 2> m{{ds, a, b}, {da, db}};
  m.cols = cols;
  for (int64_t& ld : m.ld) ld = ab_ld;
  m.ld[0] = cols;  // ds is packed
  m.joint_amax = true;
  launch_map(m, int64_t(rows) * cols, SwigluBwd{}, stream, "swiglu_backward", amax);
}

void add(bf16* y, const bf16* a, const bf16* b, int64_t n, cudaStream_t stream) {
  launch_map(MapArgs<2, 1>{{a, b}, {y}}, n, Add{}, stream, "add");
}

void cross_entropy(float* losses, bf16* logits, const int32_t* targets, int n, int V, int Vp,
                   float grad_scale, int* err, cudaStream_t stream) {
  if (n == 0) return;
  if (Vp % kVec == 0 && aligned16(logits)) {
    cross_entropy_kernel<kVec>
        <<<n, kCeThreads, 0, stream>>>(losses, logits, targets, V, Vp, grad_scale, err);
  } else {
    cross_entropy_kernel<1>
        <<<n, kCeThreads, 0, stream>>>(losses, logits, targets, V, Vp, grad_scale, err);
  }
  FSDP_LAUNCH_CHECK("cross_entropy_kernel");
}

void cast_f32_to_bf16(bf16* dst, const float* src, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  cast_f32_bf16_kernel<<<grid_for(n), kThreads, 0, stream>>>(dst, src, n);
  FSDP_LAUNCH_CHECK("cast_f32_bf16_kernel");
}

void cast_bf16_to_f32(float* dst, const bf16* src, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  cast_bf16_f32_kernel<<<grid_for(n), kThreads, 0, stream>>>(dst, src, n);
  FSDP_LAUNCH_CHECK("cast_bf16_f32_kernel");
}

void accumulate_f32(float* dst, const float* src, float scale, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  accumulate_kernel<float><<<grid_for(n), kThreads, 0, stream>>>(dst, src, scale, n);
  FSDP_LAUNCH_CHECK("accumulate_kernel");
}

void accumulate_bf16(float* dst, const bf16* src, float scale, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  accumulate_kernel<bf16><<<grid_for(n), kThreads, 0, stream>>>(dst, src, scale, n);
  FSDP_LAUNCH_CHECK("accumulate_kernel");
}

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
  adamw_kernel<<<grid_for(n), kThreads, 0, stream>>>(param, grad, exp_avg, exp_avg_sq, send,
                                                     clear_grad, n, s, spans);
  FSDP_LAUNCH_CHECK("adamw_kernel");
}

}  // namespace fsdp::cuda
