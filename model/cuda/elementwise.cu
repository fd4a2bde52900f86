// Elementwise kernels over bf16: SwiGLU forward and backward (reading the
// halves of the W1|W3 GEMM's output in place), ReLU²'s, the value residual's
// and a value embedding's mixes (on the v part of the q|k|v GEMM's output in
// place), the U-net skip's scaled add, and the residual add, all through one
// vectorised map kernel (the backwards of the skip and of the value
// embedding, which also sum, have their own). fp32 arithmetic.
#include <algorithm>
#include <type_traits>

#include "model/cuda/cuda_ops_impl.h"
#include "model/cuda/device_utils.cuh"

namespace fsdp::cuda {
namespace {

constexpr int kThreads = 256;

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
  // rows are ld[k] apart (inputs first, then outputs); n is a whole number of
  // rows. cols == 0: every operand packed.
  int64_t cols = 0;
  int64_t ld[NIN + NOUT] = {};
  // One amax word, the max over every output, instead of one word each.
  bool joint_amax = false;
};

// With AMAX, m[k] keeps the largest |value| stored to output k (after the
// bf16 rounding, so it is what an amax of that output would find). off[k]:
// where this access of operand k starts (inputs first, then outputs).
template <int VEC, bool AMAX, int NIN, int NOUT, typename F>
__device__ __forceinline__ void map_at(const MapArgs<NIN, NOUT>& a,
                                       const int64_t (&off)[NIN + NOUT], F f, float (&m)[NOUT]) {
  float in[NIN][VEC], out[NOUT][VEC];
#pragma unroll
  for (int k = 0; k < NIN; ++k) load_vec<VEC>(a.in[k] + off[k], in[k]);
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
  for (int k = 0; k < NOUT; ++k) store_vec<VEC>(a.out[k] + off[NIN + k], out[k]);
}

// amax (AMAX only): NOUT zeroed words that receive each output's max |value|.
template <bool AMAX, int NIN, int NOUT>
__device__ __forceinline__ void amax_out(const MapArgs<NIN, NOUT>& a, const float (&m)[NOUT],
                                         unsigned* amax) {
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

// Packed operands: a grid-stride loop over n elements, VEC at a time.
template <int VEC, bool AMAX, int NIN, int NOUT, typename F>
__global__ void map_kernel(MapArgs<NIN, NOUT> a, int64_t n, F f, unsigned* amax) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t tid = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  const int64_t nv = n / VEC;
  float m[NOUT] = {};
  int64_t off[NIN + NOUT];
  for (int64_t v = tid; v < nv; v += stride) {
    for (int64_t& o : off) o = v * VEC;
    map_at<VEC, AMAX>(a, off, f, m);
  }
  for (int64_t i = nv * VEC + tid; i < n; i += stride) {
    for (int64_t& o : off) o = i;
    map_at<1, AMAX>(a, off, f, m);
  }
  amax_out<AMAX>(a, m, amax);
}

// Row-strided operands: threads across a row's columns (x), blocks down the
// rows (y, grid-strided). Finding an element's row by dividing its index by
// cols cost a 64-bit division per access, which made the SwiGLU kernels on
// the W1|W3 halves compute-bound (2.4 TB/s against the packed 3.0 on an
// H100); here no thread divides.
template <int VEC, bool AMAX, int NIN, int NOUT, typename F>
__global__ void map_rows_kernel(MapArgs<NIN, NOUT> a, int64_t rows, F f, unsigned* amax) {
  const int64_t c = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * VEC;
  float m[NOUT] = {};
  if (c < a.cols)
    for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
      int64_t off[NIN + NOUT];
#pragma unroll
      for (int k = 0; k < NIN + NOUT; ++k) off[k] = r * a.ld[k] + c;
      map_at<VEC, AMAX>(a, off, f, m);
    }
  amax_out<AMAX>(a, m, amax);  // every thread of the block reaches it
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
  auto go = [&](auto vec_c, auto amax_c) {
    constexpr int V = decltype(vec_c)::value;
    constexpr bool A = decltype(amax_c)::value;
    if (a.cols == 0) {
      map_kernel<V, A><<<blocks_for(n / V + 1, kThreads), kThreads, 0, stream>>>(a, n, f, bits);
      return;
    }
    // Rows: one or more blocks across a row's vectors, a multiple of 32
    // threads each; at most 1024 block rows, each thread taking every
    // 1024th row (few blocks, so few amax atomics).
    const int64_t cv = a.cols / V, rows = n / a.cols;
    const int64_t xb = (cv + kThreads - 1) / kThreads;
    const int threads = int(std::min<int64_t>(kThreads, ((cv + xb - 1) / xb + 31) / 32 * 32));
    const dim3 grid(unsigned(xb), unsigned(std::min<int64_t>(rows, 1024)));
    map_rows_kernel<V, A><<<grid, threads, 0, stream>>>(a, rows, f, bits);
  };
  using V8 = std::integral_constant<int, kVec>;
  using V1 = std::integral_constant<int, 1>;
  if (vec && amax)
    go(V8{}, std::true_type{});
  else if (vec)
    go(V8{}, std::false_type{});
  else if (amax)
    go(V1{}, std::true_type{});
  else
    go(V1{}, std::false_type{});
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
struct Relu2Fwd {
  __device__ void operator()(const float (&i)[1], float (&o)[1]) const {
    const float r = fmaxf(i[0], 0.0f);
    o[0] = r * r;
  }
};
struct Relu2Bwd {  // inputs ds, a; output da
  __device__ void operator()(const float (&i)[2], float (&o)[1]) const {
    o[0] = 2.0f * fmaxf(i[1], 0.0f) * i[0];
  }
};
struct Add {
  __device__ void operator()(const float (&i)[2], float (&o)[1]) const { o[0] = i[0] + i[1]; }
};
struct Mean {
  __device__ void operator()(const float (&i)[2], float (&o)[1]) const {
    o[0] = 0.5f * (i[0] + i[1]);
  }
};
struct Copy {
  __device__ void operator()(const float (&i)[1], float (&o)[1]) const { o[0] = i[0]; }
};
struct HalveTwice {  // input dv; outputs dv / 2, dv0 = dv / 2
  __device__ void operator()(const float (&i)[1], float (&o)[2]) const {
    o[0] = o[1] = 0.5f * i[0];
  }
};
struct HalveAndAdd {  // inputs dv, dv0; outputs dv / 2, dv0 + dv / 2
  __device__ void operator()(const float (&i)[2], float (&o)[2]) const {
    o[0] = 0.5f * i[0];
    o[1] = i[1] + 0.5f * i[0];
  }
};

// SwiGLU over [rows, cols]: a, b, da and db rows ab_ld apart, s and ds
// packed. amax: null, or an f32 word that gets max |s| (forward), or the max
// of |da| and |db| over both (backward), as stored.
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

// ReLU² over n packed elements; amax: null, or an f32 word that gets max |s|
// (forward) or max |da| (backward), as stored.
void relu2_forward(bf16* s, const bf16* a, int64_t n, float* amax, cudaStream_t stream) {
  launch_map(MapArgs<1, 1>{{a}, {s}}, n, Relu2Fwd{}, stream, "relu2_forward", amax);
}

void relu2_backward(bf16* da, const bf16* ds, const bf16* a, int64_t n, float* amax,
                    cudaStream_t stream) {
  launch_map(MapArgs<2, 1>{{ds, a}, {da}}, n, Relu2Bwd{}, stream, "relu2_backward", amax);
}

// The value residual over v [rows, cols] (rows v_ld apart, inside the q|k|v
// GEMM's output) and the first block's packed v0: operand k's rows are
// ld[k] apart, v's v_ld, v0's cols.
template <int NIN, int NOUT>
MapArgs<NIN, NOUT> value_args(MapArgs<NIN, NOUT> m, int cols, int64_t v_ld,
                              std::initializer_list<bool> is_v) {
  m.cols = cols;
  int k = 0;
  for (bool v : is_v) m.ld[k++] = v ? v_ld : cols;
  return m;
}

void value_residual(bf16* v, bf16* v0, int rows, int cols, int64_t v_ld, bool first,
                    cudaStream_t stream) {
  const int64_t n = int64_t(rows) * cols;
  if (first)  // v0 = v
    launch_map(value_args(MapArgs<1, 1>{{v}, {v0}}, cols, v_ld, {true, false}), n, Copy{}, stream,
               "value_residual first");
  else  // v = (v + v0) / 2
    launch_map(value_args(MapArgs<2, 1>{{v, v0}, {v}}, cols, v_ld, {true, false, true}), n, Mean{},
               stream, "value_residual");
}

void value_residual_backward(bf16* dv, bf16* dv0, int rows, int cols, int64_t v_ld, bool first,
                             bool accumulate, cudaStream_t stream) {
  const int64_t n = int64_t(rows) * cols;
  if (first)  // dv += dv0
    launch_map(value_args(MapArgs<2, 1>{{dv, dv0}, {dv}}, cols, v_ld, {true, false, true}), n,
               Add{}, stream, "value_residual_backward first");
  else if (accumulate)  // dv0 += dv / 2, dv = dv / 2
    launch_map(
        value_args(MapArgs<2, 2>{{dv, dv0}, {dv, dv0}}, cols, v_ld, {true, false, true, false}), n,
        HalveAndAdd{}, stream, "value_residual_backward+=");
  else  // dv0 = dv = dv / 2
    launch_map(value_args(MapArgs<1, 2>{{dv}, {dv, dv0}}, cols, v_ld, {true, true, false}), n,
               HalveTwice{}, stream, "value_residual_backward");
}

void add(bf16* y, const bf16* a, const bf16* b, int64_t n, cudaStream_t stream) {
  launch_map(MapArgs<2, 1>{{a, b}, {y}}, n, Add{}, stream, "add");
}

// A U-net skip, x += w s: the learned scalar is read on the device (it is a
// gathered weight), so the host never waits for it.
struct SkipAdd {
  const bf16* w;
  __device__ void operator()(const float (&i)[2], float (&o)[1]) const {
    o[0] = i[0] + __bfloat162float(*w) * i[1];
  }
};

void skip_add(bf16* x, const bf16* s, const bf16* w, int64_t n, cudaStream_t stream) {
  launch_map(MapArgs<2, 1>{{x, s}, {x}}, n, SkipAdd{w}, stream, "skip_add");
}

// The skip's backward: ds = w dx, and each block's share of sum(dx s) into
// partial[block], which rmsnorm_dg_reduce adds in block order into dw: a
// fixed grid, so the sum is reproducible.
constexpr int kSkipBlocks = 1024;

template <int VEC>
__global__ void skip_add_backward_kernel(bf16* ds, float* partial, const bf16* dx, const bf16* s,
                                         const bf16* w, int64_t n) {
  __shared__ float warp_sums[32];
  const float wv = __bfloat162float(*w);
  const int64_t stride = int64_t(gridDim.x) * blockDim.x * VEC;
  float dot = 0.0f;
  for (int64_t i = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) * VEC; i < n; i += stride) {
    float g[VEC], x[VEC], o[VEC];
    if (VEC > 1 && i + VEC <= n) {
      load_vec<VEC>(dx + i, g);
      load_vec<VEC>(s + i, x);
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        dot += g[e] * x[e];
        o[e] = wv * g[e];
      }
      store_vec<VEC>(ds + i, o);
    } else {
      for (int64_t j = i; j < n && j < i + VEC; ++j) {
        const float gj = __bfloat162float(dx[j]);
        dot += gj * __bfloat162float(s[j]);
        ds[j] = __float2bfloat16_rn(wv * gj);
      }
    }
  }
  dot = block_sum(dot, warp_sums);
  if (threadIdx.x == 0) partial[blockIdx.x] = dot;
}

void skip_add_backward(bf16* ds, void* dw, bool dw_bf16, const bf16* dx, const bf16* s,
                       const bf16* w, int64_t n, Scratch& scratch, cudaStream_t stream) {
  const bool vec = aligned16(ds) && aligned16(dx) && aligned16(s);
  const int per_thread = vec ? kVec : 1;
  const int blocks = int(blocks_for((n + per_thread - 1) / per_thread, kThreads, kSkipBlocks));
  auto* partial = static_cast<float*>(scratch.get(size_t(blocks) * sizeof(float)));
  if (vec)
    skip_add_backward_kernel<kVec><<<blocks, kThreads, 0, stream>>>(ds, partial, dx, s, w, n);
  else
    skip_add_backward_kernel<1><<<blocks, kThreads, 0, stream>>>(ds, partial, dx, s, w, n);
  FSDP_LAUNCH_CHECK("skip_add_backward_kernel");
  rmsnorm_dg_reduce(dw, dw_bf16, partial, blocks, 1, stream);
}

// A value embedding's mix, v_in = v, v = w0 v + w1 e: the pair read on the
// device (a gathered weight), v's rows v_ld apart, v_in and e packed.
struct ValueEmbedMix {
  const bf16* w;
  __device__ void operator()(const float (&i)[2], float (&o)[2]) const {
    o[0] = __bfloat162float(w[0]) * i[0] + __bfloat162float(w[1]) * i[1];
    o[1] = i[0];
  }
};

void value_embed_mix(bf16* v, bf16* v_in, const bf16* e, const bf16* w, int rows, int cols,
                     int64_t v_ld, cudaStream_t stream) {
  launch_map(value_args(MapArgs<2, 2>{{v, e}, {v, v_in}}, cols, v_ld, {true, false, true, false}),
             int64_t(rows) * cols, ValueEmbedMix{w}, stream, "value_embed_mix");
}

// Its backward: a block of threads across a row's columns, blocks striding
// down the rows; dv = w0 dv, de = (de +) w1 dv, and each block's share of
// sum(dv v_in) and sum(dv e) into partial[block, 2], which
// rmsnorm_dg_reduce adds in block order into dw: a fixed grid, so the sums
// are reproducible. A small op (rows x kv_dim), so no vectors.
constexpr int kValueMixBlocks = 1024;

__global__ void value_embed_mix_backward_kernel(bf16* dv, bf16* de, float* partial,
                                                const bf16* v_in, const bf16* e, const bf16* w,
                                                int rows, int cols, int64_t v_ld, bool accumulate) {
  __shared__ float warp_sums[32];
  const float w0 = __bfloat162float(w[0]), w1 = __bfloat162float(w[1]);
  float dot_v = 0.0f, dot_e = 0.0f;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x)
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
      const int64_t i = r * cols + c, iv = r * v_ld + c;
      const float g = __bfloat162float(dv[iv]), ei = __bfloat162float(e[i]);
      dot_v += g * __bfloat162float(v_in[i]);
      dot_e += g * ei;
      de[i] = __float2bfloat16_rn((accumulate ? __bfloat162float(de[i]) : 0.0f) + w1 * g);
      dv[iv] = __float2bfloat16_rn(w0 * g);
    }
  dot_v = block_sum(dot_v, warp_sums);
  dot_e = block_sum(dot_e, warp_sums);
  if (threadIdx.x == 0) {
    partial[2 * int64_t(blockIdx.x)] = dot_v;
    partial[2 * int64_t(blockIdx.x) + 1] = dot_e;
  }
}

void value_embed_mix_backward(bf16* dv, bf16* de, void* dw, bool dw_bf16, const bf16* v_in,
                              const bf16* e, const bf16* w, int rows, int cols, int64_t v_ld,
                              bool accumulate, Scratch& scratch, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return;
  const int blocks = int(std::min<int64_t>(rows, kValueMixBlocks));
  const int threads = int(std::min<int64_t>(kThreads, (int64_t(cols) + 31) / 32 * 32));
  auto* partial = static_cast<float*>(scratch.get(size_t(blocks) * 2 * sizeof(float)));
  value_embed_mix_backward_kernel<<<blocks, threads, 0, stream>>>(dv, de, partial, v_in, e, w, rows,
                                                                  cols, v_ld, accumulate);
  FSDP_LAUNCH_CHECK("value_embed_mix_backward_kernel");
  rmsnorm_dg_reduce(dw, dw_bf16, partial, blocks, 2, stream);
}

}  // namespace
}  // namespace fsdp::cuda

// ---- CudaOps: this family's ops -------------------------------------------------
// The front door (model/op_checks.h) has checked every argument; these give
// the pointers their types and enqueue the launchers above on the stream.
namespace fsdp {

using namespace cuda_args;

void CudaOps::do_swiglu(Tensor s, Tensor a, Tensor b, int rows, int cols, int64_t ab_ld,
                        Tensor amax) {
  cuda::swiglu_forward(bf(s), bf(a), bf(b), rows, cols, ab_ld, f32_or_null(amax), impl_->stream);
  after("swiglu");
}

void CudaOps::do_swiglu_backward(Tensor da, Tensor db, Tensor ds, Tensor a, Tensor b, int rows,
                                 int cols, int64_t ab_ld, Tensor amax) {
  cuda::swiglu_backward(bf(da), bf(db), bf(ds), bf(a), bf(b), rows, cols, ab_ld, f32_or_null(amax),
                        impl_->stream);
  after("swiglu_backward");
}

void CudaOps::do_relu2(Tensor s, Tensor a, int64_t n, Tensor amax) {
  cuda::relu2_forward(bf(s), bf(a), n, f32_or_null(amax), impl_->stream);
  after("relu2");
}

void CudaOps::do_relu2_backward(Tensor da, Tensor ds, Tensor a, int64_t n, Tensor amax) {
  cuda::relu2_backward(bf(da), bf(ds), bf(a), n, f32_or_null(amax), impl_->stream);
  after("relu2_backward");
}

void CudaOps::do_value_residual(Tensor v, Tensor v0, int rows, int cols, int64_t v_ld, bool first) {
  cuda::value_residual(bf(v), bf(v0), rows, cols, v_ld, first, impl_->stream);
  after("value_residual");
}

void CudaOps::do_value_residual_backward(Tensor dv, Tensor dv0, int rows, int cols, int64_t v_ld,
                                         bool first, bool accumulate) {
  cuda::value_residual_backward(bf(dv), bf(dv0), rows, cols, v_ld, first, accumulate,
                                impl_->stream);
  after("value_residual_backward");
}

void CudaOps::do_skip_add(Tensor x, Tensor s, Tensor w, int64_t n) {
  cuda::skip_add(bf(x), bf(s), bf(w), n, impl_->stream);
  after("skip_add");
}

void CudaOps::do_skip_add_backward(Tensor ds, Tensor dw, Tensor dx, Tensor s, Tensor w, int64_t n) {
  bool dw_bf16 = false;
  void* dwp = grad(dw, dw_bf16);
  cuda::skip_add_backward(bf(ds), dwp, dw_bf16, bf(dx), bf(s), bf(w), n, *impl_, impl_->stream);
  after("skip_add_backward");
}

void CudaOps::do_value_embed_mix(Tensor v, Tensor v_in, Tensor e, Tensor w, int rows, int cols,
                                 int64_t v_ld) {
  cuda::value_embed_mix(bf(v), bf(v_in), bf(e), bf(w), rows, cols, v_ld, impl_->stream);
  after("value_embed_mix");
}

void CudaOps::do_value_embed_mix_backward(Tensor dv, Tensor de, Tensor dw, Tensor v_in, Tensor e,
                                          Tensor w, int rows, int cols, int64_t v_ld,
                                          bool accumulate) {
  bool dw_bf16 = false;
  void* dwp = grad(dw, dw_bf16);
  cuda::value_embed_mix_backward(bf(dv), bf(de), dwp, dw_bf16, bf(v_in), bf(e), bf(w), rows, cols,
                                 v_ld, accumulate, *impl_, impl_->stream);
  after("value_embed_mix_backward");
}

void CudaOps::do_add(Tensor y, Tensor a, Tensor b, int64_t n) {
  cuda::add(bf(y), bf(a), bf(b), n, impl_->stream);
  after("add");
}

}  // namespace fsdp
