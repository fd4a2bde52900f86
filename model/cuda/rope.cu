// Rotary position embedding: the rotate-half rotation alone (rope), and fused
// with the QK-norm before it (norm_rope), one kernel each way.
//
// The fused kernels: per head vector of q or k, the RMSNorm with its gain,
// then the rotation by the token's position, so the normalised vector is
// never stored and read back, and in backward the un-rotated gradient never
// is either. A lane holds VEC element pairs (c, c + head_dim/2), exactly the
// pairs RoPE rotates, so nothing moves between lanes but the row's sum. bf16
// in and out, fp32 arithmetic, fixed reduction order (dg through the same
// per-block partial rows as RMSNorm).
#include <algorithm>

#include "model/cuda/cuda_ops_impl.h"
#include "model/cuda/device_utils.cuh"

namespace fsdp::cuda {
namespace {

constexpr int kThreads = 256;

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

// Where head vector `row` starts in a tensor whose token rows are ld apart.
__device__ __forceinline__ int64_t head_at(int64_t row, int heads, int hd, int64_t ld) {
  return row / heads * ld + row % heads * hd;
}

// G lanes per head vector (2 * G * VEC == head_dim), kThreads / G vectors a
// block. x's token rows are x_ld apart (a view into the q|k|v GEMM's output).
template <int VEC>
__global__ void norm_rope_forward_kernel(bf16* y, float* rstd, const bf16* x, const bf16* g,
                                         const float* cos_sin, int64_t rows, int T, int heads,
                                         int hd, float eps, int G, int64_t x_ld) {
  const int lane = threadIdx.x % G, group = threadIdx.x / G, gpb = blockDim.x / G;
  const int64_t row = int64_t(blockIdx.x) * gpb + group;
  const bool active = row < rows;
  const int half = hd / 2, c = lane * VEC;
  const int64_t off = (active ? row : 0) * hd, xoff = head_at(active ? row : 0, heads, hd, x_ld);
  float lo[VEC], hi[VEC], ss = 0.0f;
  load_vec<VEC>(x + xoff + c, lo);
  load_vec<VEC>(x + xoff + half + c, hi);
#pragma unroll
  for (int k = 0; k < VEC; ++k) ss += lo[k] * lo[k] + hi[k] * hi[k];
  ss = warp_sum(ss, G);
  if (!active) return;
  const float rs = 1.0f / sqrtf(ss / float(hd) + eps);
  if (lane == 0) rstd[row] = rs;
  const int t = int((row / heads) % T);
  const float* cs = cos_sin + int64_t(t) * half + c;
  const float* sn = cos_sin + (int64_t(T) + t) * half + c;
  float glo[VEC], ghi[VEC];
  load_vec<VEC>(g + c, glo);
  load_vec<VEC>(g + half + c, ghi);
#pragma unroll
  for (int k = 0; k < VEC; ++k) {
    const float a = lo[k] * rs * glo[k], b = hi[k] * rs * ghi[k];
    lo[k] = a * cs[k] - b * sn[k];
    hi[k] = b * cs[k] + a * sn[k];
  }
  store_vec<VEC>(y + off + c, lo);
  store_vec<VEC>(y + off + half + c, hi);
}

// dy is first rotated back (the transpose rotation), then RMSNorm's backward:
// dx_j = r (d_j g_j - x_j r^2 mean_i(d_i g_i x_i)), dg_j += sum_rows d_j x_j r.
// amax: null, or a zeroed word that gets max |dx| as stored. dx's and x's
// token rows are x_ld apart; dy is packed.
template <int VEC>
__global__ void norm_rope_backward_kernel(bf16* dx, float* partial, const bf16* dy, const bf16* x,
                                          const bf16* g, const float* rstd, const float* cos_sin,
                                          int64_t rows, int T, int heads, int hd, int G,
                                          unsigned* amax, int64_t x_ld) {
  extern __shared__ float dg_rows[];
  const int lane = threadIdx.x % G, group = threadIdx.x / G, gpb = blockDim.x / G;
  const int half = hd / 2, c = lane * VEC;
  float glo[VEC], ghi[VEC], alo[VEC], ahi[VEC];
  load_vec<VEC>(g + c, glo);
  load_vec<VEC>(g + half + c, ghi);
#pragma unroll
  for (int k = 0; k < VEC; ++k) alo[k] = ahi[k] = 0.0f;
  float m = 0.0f;  // max |dx| stored by this thread
  for (int64_t base = int64_t(blockIdx.x) * gpb; base < rows; base += int64_t(gridDim.x) * gpb) {
    const int64_t row = base + group;
    const bool active = row < rows;
    const int64_t off = (active ? row : 0) * hd, xoff = head_at(active ? row : 0, heads, hd, x_ld);
    const int t = int(((active ? row : 0) / heads) % T);
    const float* cs = cos_sin + int64_t(t) * half + c;
    const float* sn = cos_sin + (int64_t(T) + t) * half + c;
    float dlo[VEC], dhi[VEC], xlo[VEC], xhi[VEC], dot = 0.0f;
    load_vec<VEC>(dy + off + c, dlo);
    load_vec<VEC>(dy + off + half + c, dhi);
    load_vec<VEC>(x + xoff + c, xlo);
    load_vec<VEC>(x + xoff + half + c, xhi);
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      const float a = dlo[k], b = dhi[k];
      dlo[k] = a * cs[k] + b * sn[k];
      dhi[k] = b * cs[k] - a * sn[k];
      dot += dlo[k] * glo[k] * xlo[k] + dhi[k] * ghi[k] * xhi[k];
    }
    dot = warp_sum(dot, G);
    if (!active) continue;
    const float rs = rstd[row], cc = rs * rs * dot / float(hd);
    float olo[VEC], ohi[VEC];
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      olo[k] = rs * (dlo[k] * glo[k] - xlo[k] * cc);
      ohi[k] = rs * (dhi[k] * ghi[k] - xhi[k] * cc);
      alo[k] += dlo[k] * xlo[k] * rs;
      ahi[k] += dhi[k] * xhi[k] * rs;
      if (amax) m = fmaxf(m, fmaxf(stored_abs(olo[k]), stored_abs(ohi[k])));
    }
    store_vec<VEC>(dx + xoff + c, olo);
    store_vec<VEC>(dx + xoff + half + c, ohi);
  }
  float* my = dg_rows + group * hd;
#pragma unroll
  for (int k = 0; k < VEC; ++k) {
    my[c + k] = alo[k];
    my[half + c + k] = ahi[k];
  }
  __syncthreads();
  store_block_partial(partial, dg_rows, gpb, hd);
  // dg_rows (gpb * hd = 2 * kVec * blockDim.x floats) is free again.
  if (amax) block_max_into(amax, m, dg_rows);
}

// Lanes per head vector when the fused kernels apply: VEC-wide pairs need
// head_dim = 2 * G * kVec with G a power of two up to 32 (16 ... 512); 0 otherwise.
int lanes_for(int hd) {
  for (int G = 1; G <= 32; G *= 2)
    if (2 * G * kVec == hd) return G;
  return 0;
}

// cos_sin holds [T, head_dim/2] cosines followed by as many sines (f32).
// sign +1 rotates forward, -1 applies the transpose.
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

// Per head vector of x[B, T, heads, hd], y = rope(rmsnorm(x) * g) with
// rstd[B*T*heads] kept; backward rotates dy back and runs RMSNorm's backward,
// dx overwritten, dg += (bf16 when dg_bf16, else f32), max |dx| as stored
// into amax unless it is null; x's and dx's token rows are x_ld apart. Both
// return false, having enqueued nothing, when the shape or alignment is not
// one the fused kernels handle (hd must be 16 * 2^i up to 512, pointers
// 16-byte aligned, x_ld a multiple of 8); the caller then composes rmsnorm
// and rope.
bool norm_rope_forward(bf16* y, float* rstd, const bf16* x, const bf16* g, const float* cos_sin,
                       int B, int T, int heads, int hd, float eps, int64_t x_ld,
                       cudaStream_t stream) {
  const int G = lanes_for(hd);
  if (G == 0 || !aligned16(y) || !aligned16(x) || x_ld % kVec != 0 || !aligned16(g)) return false;
  const int64_t rows = int64_t(B) * T * heads;
  if (rows == 0) return true;
  const int gpb = kThreads / G;
  norm_rope_forward_kernel<kVec><<<blocks_for(rows, gpb, int64_t(1) << 31), kThreads, 0, stream>>>(
      y, rstd, x, g, cos_sin, rows, T, heads, hd, eps, G, x_ld);
  FSDP_LAUNCH_CHECK("norm_rope_forward_kernel");
  return true;
}

bool norm_rope_backward(bf16* dx, void* dg, bool dg_bf16, const bf16* dy, const bf16* x,
                        const bf16* g, const float* rstd, const float* cos_sin, int B, int T,
                        int heads, int hd, float* amax, int64_t x_ld, const DeviceInfo& dev,
                        Scratch& scratch, cudaStream_t stream) {
  const int G = lanes_for(hd);
  if (G == 0 || !aligned16(dx) || !aligned16(dy) || !aligned16(x) || x_ld % kVec != 0 ||
      !aligned16(g))
    return false;
  if (amax) FSDP_CUDA_CHECK(cudaMemsetAsync(amax, 0, sizeof(float), stream));
  const int64_t rows = int64_t(B) * T * heads;
  if (rows == 0) return true;
  const int gpb = kThreads / G;
  // One f32 dg row per group: (kThreads / G) * (2 * G * kVec) floats, 16 KiB
  // for every head_dim the kernel takes, within the default 48 KiB.
  const size_t smem = size_t(gpb) * hd * sizeof(float);
  // As many blocks as the GPU holds at once (see resident_blocks).
  const int blocks =
      int(std::min<int64_t>((rows + gpb - 1) / gpb, resident_blocks(norm_rope_backward_kernel<kVec>,
                                                                    kThreads, smem, dev.sm_count)));
  auto* partial = static_cast<float*>(scratch.get(size_t(blocks) * hd * sizeof(float)));
  norm_rope_backward_kernel<kVec>
      <<<blocks, kThreads, smem, stream>>>(dx, partial, dy, x, g, rstd, cos_sin, rows, T, heads, hd,
                                           G, reinterpret_cast<unsigned*>(amax), x_ld);
  FSDP_LAUNCH_CHECK("norm_rope_backward_kernel");
  rmsnorm_dg_reduce(dg, dg_bf16, partial, blocks, hd, stream);
  return true;
}

}  // namespace
}  // namespace fsdp::cuda

// ---- CudaOps: this family's ops -------------------------------------------------
// The front door (model/op_checks.h) has checked every argument; these give
// the pointers their types and enqueue the launchers above on the stream.
namespace fsdp {

using namespace cuda_args;

void CudaOps::do_rope(Tensor x, int B, int T, int heads, int head_dim, const Rope& rope) {
  bf16* xp = bf(x);
  cuda::rope(xp, impl_->rope_table(T, head_dim, rope), B, T, heads, head_dim, 1.0f, impl_->stream);
  after("rope");
}

void CudaOps::do_rope_backward(Tensor dx, int B, int T, int heads, int head_dim, const Rope& rope) {
  bf16* xp = bf(dx);
  cuda::rope(xp, impl_->rope_table(T, head_dim, rope), B, T, heads, head_dim, -1.0f, impl_->stream);
  after("rope_backward");
}

namespace {
void copy_rows(void* dst, int64_t dst_ld, const void* src, int64_t src_ld, int64_t rows,
               int64_t width, cudaStream_t stream) {
  const size_t es = sizeof(cuda::bf16);
  if (rows > 0)
    FSDP_CUDA_CHECK(cudaMemcpy2DAsync(dst, size_t(dst_ld) * es, src, size_t(src_ld) * es,
                                      size_t(width) * es, size_t(rows), cudaMemcpyDeviceToDevice,
                                      stream));
}
}  // namespace

// Head sizes the fused kernels do not take (96, say) compose rmsnorm and
// rope; strided rows are then packed into a temporary first (and dx
// unpacked after): a slow path, kept simple.
void CudaOps::do_norm_rope(Tensor y, Tensor rstd, Tensor x, Tensor g, int B, int T, int heads,
                           int head_dim, float eps, const Rope& rope, int64_t x_ld) {
  const int rows = B * T * heads;
  const int64_t tokens = int64_t(B) * T;
  const int64_t width = int64_t(heads) * head_dim;
  bf16* yo = bf(y);
  float* rs = f32(rstd);
  const bf16* xi = bf(x);
  const bf16* gi = bf(g);
  const float* table = impl_->rope_table(T, head_dim, rope);
  if (g.numel == 0) {  // no QK-norm: x's rows packed into y, then rotated
    copy_rows(yo, width, xi, x_ld, tokens, width, impl_->stream);
    cuda::rope(yo, table, B, T, heads, head_dim, 1.0f, impl_->stream);
  } else if (!cuda::norm_rope_forward(yo, rs, xi, gi, table, B, T, heads, head_dim, eps, x_ld,
                                      impl_->stream)) {
    if (x_ld != width) {  // y is free until written: the packed copy goes there
      copy_rows(yo, width, xi, x_ld, tokens, width, impl_->stream);
      xi = yo;
    }
    cuda::rmsnorm_forward(yo, rs, xi, gi, rows, head_dim, eps, nullptr, impl_->stream);
    cuda::rope(yo, table, B, T, heads, head_dim, 1.0f, impl_->stream);
  }
  after("norm_rope");
}

void CudaOps::do_norm_rope_backward(Tensor dx, Tensor dg, Tensor dy, Tensor x, Tensor g,
                                    Tensor rstd, int B, int T, int heads, int head_dim,
                                    const Rope& rope, Tensor amax, int64_t x_ld) {
  const int rows = B * T * heads;
  const int64_t n = int64_t(rows) * head_dim, tokens = int64_t(B) * T;
  const int64_t width = int64_t(heads) * head_dim;
  float* am = f32_or_null(amax);
  bool dg_bf16 = false;
  void* dgp = grad(dg, dg_bf16);
  bf16* dxo = bf(dx);
  bf16* dyi = bf(dy);
  const bf16* xi = bf(x);
  const bf16* gi = bf(g);
  const float* rs = f32(rstd);
  const float* table = impl_->rope_table(T, head_dim, rope);
  if (g.numel == 0) {
    // No QK-norm: dx is dy rotated back (in place: dy's contents are
    // unspecified after the call), written into dx's rows.
    cuda::rope(dyi, table, B, T, heads, head_dim, -1.0f, impl_->stream);
    copy_rows(dxo, x_ld, dyi, width, tokens, width, impl_->stream);
  } else if (!cuda::norm_rope_backward(dxo, dgp, dg_bf16, dyi, xi, gi, rs, table, B, T, heads,
                                       head_dim, am, x_ld, impl_->dev, *impl_, impl_->stream)) {
    // dy's contents are unspecified after the call (Ops::norm_rope_backward),
    // so it is rotated back in place.
    cuda::rope(dyi, table, B, T, heads, head_dim, -1.0f, impl_->stream);
    const bool strided = x_ld != width;
    Tensor packed = strided ? do_alloc(DType::bf16, 2 * n) : Tensor{};  // x, then dx
    bf16* xp = strided ? static_cast<bf16*>(packed.data) : const_cast<bf16*>(xi);
    bf16* dxp = strided ? xp + n : dxo;
    if (strided) copy_rows(xp, width, xi, x_ld, tokens, width, impl_->stream);
    cuda::rmsnorm_backward(dxp, dgp, dg_bf16, dyi, xp, gi, rs, rows, head_dim, false, am,
                           impl_->dev, *impl_, impl_->stream);
    if (strided) {
      copy_rows(dxo, x_ld, dxp, width, tokens, width, impl_->stream);
      do_free(packed);
    }
  }
  after("norm_rope_backward");
}

}  // namespace fsdp
