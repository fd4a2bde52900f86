// Causal grouped-query attention through cuDNN's fused SDPA (cudnn-frontend
// graph API), forward and backward, one built graph per shape, cached.
#pragma once

#include <cuda_runtime.h>

#include <memory>

#include "model/cuda/kernels.h"

namespace fsdp::cuda {

struct AttentionShape {
  int B, T, H, Hkv, hd;
};

class Attention {
 public:
  Attention(cudaStream_t stream, bool deterministic);
  ~Attention();
  Attention(const Attention&) = delete;
  Attention& operator=(const Attention&) = delete;

  // q, out: [B, T, H, hd] bf16; k, v: [B, T, Hkv, hd] bf16; lse: [B, H, T] f32.
  void forward(const AttentionShape& s, void* out, float* lse, const void* q, const void* k,
               const void* v, Scratch& scratch);
  void backward(const AttentionShape& s, void* dq, void* dk, void* dv, const void* dout,
                const void* out, const float* lse, const void* q, const void* k, const void* v,
                Scratch& scratch);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fsdp::cuda
