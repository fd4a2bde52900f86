// Softmax cross-entropy fused with its gradient, one block per row of
// logits, written over the logits in place. bf16 logits, fp32 arithmetic.
// The head's extra terms (HeadLoss: a tanh cap on the logits, z-loss) ride
// along in the same two passes.
#include <cfloat>

#include "model/cuda/cuda_ops_impl.h"
#include "model/cuda/device_utils.cuh"

namespace fsdp::cuda {
namespace {

// One block per row. Pass 1 keeps a running (max, sum of exp) per thread, so
// the row is read once for the loss; pass 2 (only when a gradient is wanted)
// rereads it, mostly from L2, and overwrites it with the gradient. No fp32
// copy of the logits ever exists.

constexpr int kCeThreads = 512;

struct MaxSum {
  float m, s;
};
// The softmax's input for logit z: z, or cap tanh(z / cap) (cap > 0).
__device__ __forceinline__ float capped(float z, float cap) {
  return cap > 0.0f ? cap * tanhf(z / cap) : z;
}

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
                         float grad_scale, float cap, float z_loss, int* err) {
  __shared__ MaxSum warp_part[kCeThreads / 32];
  __shared__ MaxSum total;
  __shared__ float lse;
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
  const float target_logit = capped(__bfloat162float(x[t]), cap);

  MaxSum ms{-FLT_MAX, 0.0f};
  for (int j = threadIdx.x * VEC; j < V; j += blockDim.x * VEC) {
    float v[VEC];
    load_vec<VEC>(x + j, v);  // in bounds: Vp is a multiple of VEC
#pragma unroll
    for (int k = 0; k < VEC; ++k) v[k] = j + k < V ? capped(v[k], cap) : -FLT_MAX;
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
    lse = a.m + logf(a.s);
    // Guarded: 0 * lse^2 would be NaN where lse^2 overflows fp32.
    losses[row] = lse - target_logit + (z_loss > 0.0f ? z_loss * lse * lse : 0.0f);
  }
  __syncthreads();
  if (!grad) return;
  // d/dy_j of lse - y_t + z_loss lse^2 = (1 + 2 z_loss lse) p_j - [j = t];
  // through the cap, times dy/dz = 1 - (y / cap)^2.
  const float m = total.m,
              scale = grad_scale * (z_loss > 0.0f ? 1.0f + 2.0f * z_loss * lse : 1.0f) / total.s;
  for (int j = threadIdx.x * VEC; j < Vp; j += blockDim.x * VEC) {
    float v[VEC];
    load_vec<VEC>(x + j, v);
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      const float y = capped(v[k], cap);
      const float g = scale * __expf(y - m) - (j + k == t ? grad_scale : 0.0f);
      v[k] = j + k < V ? (cap > 0.0f ? g * (1.0f - (y / cap) * (y / cap)) : g) : 0.0f;
    }
    store_vec<VEC>(x + j, v);
  }
}

// Rows of Vp logits, the first V real (see Ops::cross_entropy).
void cross_entropy(float* losses, bf16* logits, const int32_t* targets, int n, int V, int Vp,
                   float grad_scale, HeadLoss extra, int* err, cudaStream_t stream) {
  if (n == 0) return;
  if (Vp % kVec == 0 && aligned16(logits)) {
    cross_entropy_kernel<kVec><<<n, kCeThreads, 0, stream>>>(
        losses, logits, targets, V, Vp, grad_scale, extra.softcap, extra.z_loss, err);
  } else {
    cross_entropy_kernel<1><<<n, kCeThreads, 0, stream>>>(
        losses, logits, targets, V, Vp, grad_scale, extra.softcap, extra.z_loss, err);
  }
  FSDP_LAUNCH_CHECK("cross_entropy_kernel");
}

}  // namespace
}  // namespace fsdp::cuda

// ---- CudaOps: this family's ops -------------------------------------------------
// The front door (model/op_checks.h) has checked every argument; these give
// the pointers their types and enqueue the launchers above on the stream.
namespace fsdp {

using namespace cuda_args;

void CudaOps::do_cross_entropy(Tensor losses, Tensor logits, Tensor targets, int n, int V, int Vp,
                               float grad_scale, HeadLoss extra) {
  cuda::cross_entropy(f32(losses), bf(logits), i32(targets), n, V, Vp, grad_scale, extra,
                      impl_->err, impl_->stream);
  after("cross_entropy");
}

}  // namespace fsdp
