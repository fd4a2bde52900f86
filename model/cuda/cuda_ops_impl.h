// The state behind CudaOps and the pointer casts its op files share
// (cuda_ops.cpp and every family's .cu): private to model/cuda, plain C++
// that both the host compiler and nvcc read.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "common/cuda_lib_check.h"
#include "model/cuda/attention.h"
#include "model/cuda/cuda_ops.h"
#include "model/cuda/gemm.h"
#include "model/cuda/kernels.h"
#include "model/rope.h"

namespace fsdp {
namespace cuda_args {

using cuda::bf16;

// Ops' front door (model/op_checks.h) checked every argument's element type
// and size before a do_ method runs; these only give the pointers their types.
inline bf16* bf(Tensor t) {
  return static_cast<bf16*>(t.data);
}
inline float* f32(Tensor t) {
  return static_cast<float*>(t.data);
}
// An optional output (Ops' amax arguments): null when t is empty.
inline float* f32_or_null(Tensor t) {
  return t.numel > 0 ? f32(t) : nullptr;
}
inline const int32_t* i32(Tensor t) {
  return static_cast<const int32_t*>(t.data);
}
// Weight gradients may be bf16 (the engine's gathered gradient buffers) or f32.
inline void* grad(Tensor t, bool& is_bf16) {
  is_bf16 = t.dtype == DType::bf16;
  return t.data;
}

}  // namespace cuda_args

struct CudaOps::Impl final : cuda::Scratch {
  CudaOpsOptions opt;
  int device = 0;
  cudaStream_t stream = nullptr;
  cuda::DeviceInfo dev;
  std::unique_ptr<cuda::Gemm> gemm;
  std::unique_ptr<cuda::Attention> attention;
  int* err = nullptr;          // device error word (kernels.h ErrorCode)
  double* ss = nullptr;        // device result of sum_squares
  void* host_words = nullptr;  // pinned: error word and sum_squares result
  void* scratch = nullptr;
  size_t scratch_bytes = 0;
  // Newton-Schulz's norms and bf16 iterates (muon.cu), apart from
  // `scratch`, which the norms' sum_squares uses meanwhile.
  void* ns_work = nullptr;
  size_t ns_bytes = 0;
  // --document-mask: ragged attention's tables and statistics (attention.h's
  // DocumentRuns::work), apart from `scratch`, which cuDNN's workspace may
  // move while they are in use.
  void* doc_work = nullptr;
  size_t doc_bytes = 0;
  struct DocWork final : cuda::Scratch {
    Impl* im;
    explicit DocWork(Impl* m) : im(m) {}
    void* get(size_t bytes) override { return im->grow(im->doc_work, im->doc_bytes, bytes); }
  } doc_scratch{this};
  // (T, head_dim, theta, scaling factor, low and high frequency factors, original context)
  using RopeKey = std::tuple<int, int, float, float, float, float, int>;
  std::map<RopeKey, float*> rope_tables;
  std::vector<cudaEvent_t> marks;  // timing events; the first `marks_used` are live
  size_t marks_used = 0;
  int64_t live = 0, peak = 0;

  void* get(size_t bytes) override { return grow(scratch, scratch_bytes, bytes); }

  // A region of at least `bytes`, grown by half again at least when it must.
  void* grow(void*& region, size_t& have, size_t bytes) {
    if (bytes > have) {
      // Stream-ordered, so work still reading the old region finishes first.
      if (region) FSDP_CUDA_CHECK(cudaFreeAsync(region, stream));
      region = nullptr;
      const size_t grown = std::max(bytes, have + have / 2);
      FSDP_CUDA_CHECK(cudaMallocAsync(&region, grown, stream));
      have = grown;
    }
    return region;
  }

  const float* rope_table(int T, int head_dim, const Rope& rope) {
    const RopeScaling& s = rope.scaling;
    const RopeKey key{T,
                      head_dim,
                      rope.theta,
                      s.factor,
                      s.low_freq_factor,
                      s.high_freq_factor,
                      s.original_context};
    auto it = rope_tables.find(key);
    if (it != rope_tables.end()) return it->second;
    // Built in double with the CPU reference's formula, then rounded once.
    const int half = head_dim / 2;
    std::vector<float> host(size_t(2) * T * half);
    for (int i = 0; i < half; ++i) {
      const double inv_freq = rope_inv_freq(rope, i, head_dim);
      for (int t = 0; t < T; ++t) {
        host[size_t(t) * half + i] = float(std::cos(t * inv_freq));
        host[size_t(T) * half + size_t(t) * half + i] = float(std::sin(t * inv_freq));
      }
    }
    float* d = nullptr;
    FSDP_CUDA_CHECK(cudaMallocAsync(&d, host.size() * sizeof(float), stream));
    // A pageable source is staged before cudaMemcpyAsync returns, so `host`
    // may go out of scope.
    FSDP_CUDA_CHECK(cudaMemcpyAsync(d, host.data(), host.size() * sizeof(float),
                                    cudaMemcpyHostToDevice, stream));
    rope_tables.emplace(key, d);
    return d;
  }

  // Waits for the stream, then turns a kernel-reported error into an Error.
  void sync(const char* what) {
    auto* word = static_cast<int*>(host_words);
    FSDP_CUDA_CHECK(cudaMemcpyAsync(word, err, sizeof(int), cudaMemcpyDeviceToHost, stream));
    const cudaError_t e = cudaStreamSynchronize(stream);
    if (e != cudaSuccess) throw_error("cuda backend: ", what, " failed: ", cudaGetErrorString(e));
    if (*word != cuda::kNoError) {
      const int code = *word;
      FSDP_CUDA_CHECK(cudaMemsetAsync(err, 0, sizeof(int), stream));
      if (code == cuda::kTokenOutOfRange)
        throw_error("cuda backend: a token id is outside the vocabulary (noticed at ", what, ")");
      throw_error("cuda backend: a target id is outside the vocabulary (noticed at ", what, ")");
    }
  }
};

}  // namespace fsdp
