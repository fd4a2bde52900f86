// Token embedding, forward (a row gather) and backward (a deterministic
// scatter-add into the table's gradient). bf16 activations, fp32 arithmetic;
// no float atomics, so the gradient is bitwise reproducible.
#include <algorithm>
#include <cub/device/device_radix_sort.cuh>

#include "model/cuda/cuda_ops_impl.h"
#include "model/cuda/device_utils.cuh"

namespace fsdp::cuda {
namespace {

constexpr int kThreads = 256;

size_t round_up(size_t x, size_t a) {
  return (x + a - 1) / a * a;
}

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

// dwte is bf16 when dwte_bf16, else f32.
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

}  // namespace
}  // namespace fsdp::cuda

// ---- CudaOps: this family's ops -------------------------------------------------
// The front door (model/op_checks.h) has checked every argument; these give
// the pointers their types and enqueue the launchers above on the stream.
namespace fsdp {

using namespace cuda_args;

void CudaOps::do_embedding(Tensor out, Tensor tokens, Tensor wte, int n, int C) {
  bf16* o = bf(out);
  const bf16* w = bf(wte);
  cuda::embedding_forward(o, i32(tokens), w, n, C, wte.numel / C, impl_->err, impl_->stream);
  after("embedding");
}

void CudaOps::do_embedding_backward(Tensor dwte, Tensor dout, Tensor tokens, int n, int C) {
  bool is_bf16 = false;
  void* dw = grad(dwte, is_bf16);
  cuda::embedding_backward(dw, is_bf16, bf(dout), i32(tokens), n, C, dwte.numel / C, *impl_,
                           impl_->stream);
  after("embedding_backward");
}

}  // namespace fsdp
